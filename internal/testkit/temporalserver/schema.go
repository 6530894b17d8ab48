package temporalserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// Schema directories in the module, applied by the SQL tool of the same
// version as the server.
const (
	persistenceSchema = "schema/postgresql/v12/temporal/versioned"
	visibilitySchema  = "schema/postgresql/v12/visibility/versioned"
)

// databases are the server's persistence and visibility databases, made
// fresh for one server and dropped with it.
type databases struct {
	base                    string // URL of the Postgres server
	target                  dbTarget
	persistence, visibility string
}

// createDatabases creates two empty databases with unique names on the
// server at base.
func createDatabases(ctx context.Context, base string) (*databases, error) {
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	suffix := strings.ToLower(rand.Text()[:10])
	d := &databases{
		base:        base,
		target:      dbTarget{host: cfg.Host, port: cfg.Port, user: cfg.User, password: cfg.Password},
		persistence: "tp_temporal_" + suffix,
		visibility:  "tp_temporal_vis_" + suffix,
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("connect to create the server's databases: %w", err)
	}
	defer conn.Close(ctx)
	for _, name := range []string{d.persistence, d.visibility} {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return nil, errors.Join(fmt.Errorf("create database %s: %w", name, err), d.drop(ctx))
		}
	}
	return d, nil
}

// drop drops both databases, closing the connections a killed server left.
func (d *databases) drop(ctx context.Context) error {
	return errors.Join(pgtest.DropDatabase(ctx, d.base, d.persistence), pgtest.DropDatabase(ctx, d.base, d.visibility))
}

// setupSchemas applies the module's persistence and visibility schemas
// with the SQL tool, the way an operator sets up a cluster: setup-schema
// -v 0.0 creates the version table, update-schema applies every versioned
// step. The two databases are set up at once.
func (d *databases) setupSchemas(ctx context.Context, sqlTool, moduleDir string) error {
	errs := make(chan error, 2)
	for db, dir := range map[string]string{d.persistence: persistenceSchema, d.visibility: visibilitySchema} {
		go func() {
			err := d.sqlTool(ctx, sqlTool, db, "setup-schema", "-v", "0.0")
			if err == nil {
				err = d.sqlTool(ctx, sqlTool, db, "update-schema", "-d", filepath.Join(moduleDir, dir))
			}
			errs <- err
		}()
	}
	return errors.Join(<-errs, <-errs)
}

// sqlTool runs temporal-sql-tool on db; the connection goes through its
// environment variables, so the password is not on a command line.
func (d *databases) sqlTool(ctx context.Context, tool, db string, args ...string) error {
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(),
		"SQL_PLUGIN=postgres12", "SQL_HOST="+d.target.host, "SQL_PORT="+strconv.Itoa(int(d.target.port)),
		"SQL_USER="+d.target.user, "SQL_PASSWORD="+d.target.password, "SQL_DATABASE="+db)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("temporal-sql-tool %s on %s: %w\n%s", strings.Join(args, " "), db, err, out.String())
	}
	return nil
}
