// Package pgcluster runs a private Postgres cluster for fault tests that
// must restart, stop or kill the database. It uses initdb and pg_ctl from
// the server packages on a free port with its own data directory and socket
// directory, so it never touches the shared server. When the tests run as
// root, the cluster runs as the postgres user (Postgres refuses root).
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a private Postgres server.
type Cluster struct {
	Port    int
	dir     string // owned by the cluster's user
	binDir  string
	cred    *syscall.Credential
	logFile string
	server  *exec.Cmd     // the postmaster while running
	exited  chan struct{} // closed when server has been reaped
}

// binDir finds the directory holding initdb and pg_ctl: $PG_BINDIR, the
// newest /usr/lib/postgresql/*/bin, then $PATH.
func binDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	best, bestVer := "", 0
	for _, m := range matches {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(m))))
		if err == nil && v > bestVer {
			best, bestVer = filepath.Dir(m), v
		}
	}
	if best != "" {
		return best, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb/pg_ctl not found: install the postgresql server package or set PG_BINDIR")
}

// New initialises and starts a cluster for tb; it is stopped and removed
// when tb ends.
func New(tb testing.TB) *Cluster {
	tb.Helper()
	bin, err := binDir()
	if err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	c := &Cluster{binDir: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("pgcluster: running as root needs a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "taskport-pgcluster-")
	if err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			tb.Fatalf("pgcluster: chown: %v", err)
		}
	}
	c.dir = dir
	c.logFile = filepath.Join(dir, "postgres.log")
	if c.Port, err = freePort(); err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	if out, err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		tb.Fatalf("pgcluster: initdb: %v\n%s", err, out)
	}
	if err := c.Start(); err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	tb.Cleanup(func() {
		if c.server != nil {
			if err := c.Kill(); err != nil {
				tb.Logf("pgcluster: kill at cleanup: %v", err)
			}
		}
	})
	return c
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// URL is the connection string of the cluster's postgres database.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
}

// Addr is host:port, for a proxy in front of the cluster.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)) }

// Start starts the server as a child process of the test (not daemonized
// by pg_ctl, so a killed postmaster is reaped here rather than left as a
// zombie holding postmaster.pid) and waits until it accepts connections.
func (c *Cluster) Start() error {
	if c.server != nil {
		return errors.New("pgcluster: already running")
	}
	logf, err := os.OpenFile(c.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), "-D", c.dataDir(), "-p", strconv.Itoa(c.Port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	c.setCredential(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.server, c.exited = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for !c.accepting() {
		select {
		case <-done:
			c.server = nil
			return fmt.Errorf("postgres exited during start-up:\n%s", c.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not accepting connections after 60s:\n%s", c.Log())
		}
		time.Sleep(20 * time.Millisecond) // readiness poll with a deadline
	}
	return nil
}

// Stop shuts the server down in fast mode (SIGINT: clients are
// disconnected, a checkpoint is written) and waits for it to exit.
func (c *Cluster) Stop() error { return c.signal(syscall.SIGINT) }

// Kill SIGKILLs the postmaster, as a crash would; Start recovers from WAL.
func (c *Cluster) Kill() error { return c.signal(syscall.SIGKILL) }

// Restart stops and starts the server; every client connection breaks.
func (c *Cluster) Restart() error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.Start()
}

func (c *Cluster) signal(sig syscall.Signal) error {
	if c.server == nil {
		return errors.New("pgcluster: not running")
	}
	if err := c.server.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal postgres: %w", err)
	}
	select {
	case <-c.exited:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("postgres did not exit within 60s of %s", sig)
	}
	c.server = nil
	// After SIGKILL, orphaned backends exit once they notice the postmaster
	// is gone; Start refuses while they still hold shared memory.
	deadline := time.Now().Add(30 * time.Second)
	for c.backendsAlive() {
		if time.Now().After(deadline) {
			return errors.New("postgres backends still alive 30s after the postmaster exited")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline; no event announces another process's death
	}
	return nil
}

// backendsAlive reports whether any process still has the data directory
// as its working directory (every backend chdirs there).
func (c *Cluster) backendsAlive() bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == c.dataDir() {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i >= 0 {
				if f := strings.Fields(s[i+1:]); len(f) > 0 && f[0] != "Z" {
					return true
				}
			}
		}
	}
	return false
}

// Log returns the server log so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(c.logFile)
	return string(b)
}

func (c *Cluster) accepting() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

func (c *Cluster) run(tool string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(c.binDir, tool), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	c.setCredential(cmd)
	err := cmd.Run()
	return out.String(), err
}

func (c *Cluster) setCredential(cmd *exec.Cmd) {
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(os.Environ(), "HOME="+c.dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
