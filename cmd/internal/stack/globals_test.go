package stack

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A URL whose query exec mode sends no parameter types is refused before
// any connection, naming the modes that work (dbtx.CheckQueryExecMode).
func TestPoolRefusesAnUntypedQueryExecMode(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, mode := range []string{"exec", "simple_protocol"} {
		g := &Globals{DatabaseURL: "postgres://127.0.0.1:1/none?default_query_exec_mode=" + mode}
		_, err := g.Pool(context.Background(), log, 2)
		require.ErrorContains(t, err, "use cache_statement", mode)
		_, err = g.MigrationPool(context.Background(), log, 2)
		require.ErrorContains(t, err, "use cache_statement", mode)
	}
}

// The database a command connects to is named in its log and its errors
// without the password, wherever the URL carries it.
func TestDatabaseNamesNoPassword(t *testing.T) {
	for _, raw := range []string{
		"postgres://ann:s3cret@127.0.0.1:5432/media?sslmode=disable",
		"postgres://ann@127.0.0.1:5432/media?sslmode=disable&password=s3cret",
		"host=127.0.0.1 port=5432 user=ann dbname=media password=s3cret sslmode=disable",
	} {
		cfg, err := pgx.ParseConfig(raw)
		require.NoError(t, err)
		require.Equal(t, "postgres://ann@127.0.0.1:5432/media", database(cfg), raw)
	}
}

// A server that accepts a connection and never answers does not hold a
// command: the connection attempt times out (defaultConnectTimeout, as the
// URL sets no connect_timeout), and the error names the database, without
// the password. Before, the command waited for ever.
func TestPoolGivesUpOnAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn // held open, never answered
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	g := &Globals{DatabaseURL: "postgres://ann:s3cret@" + ln.Addr().String() + "/media?sslmode=disable"}
	_, err = g.Pool(context.Background(), slog.New(slog.DiscardHandler), 2)
	require.ErrorContains(t, err, "connect to postgres://ann@"+ln.Addr().String()+"/media")
	require.NotContains(t, err.Error(), "s3cret")
}
