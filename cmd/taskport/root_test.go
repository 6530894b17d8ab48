package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// The pool sizes come from the flags, else DB_POOL_SIZE and
// ENGINE_DB_POOL_SIZE (the manifests' connection budget sets them), and
// bad values are refused before anything connects.
func TestPoolSizes(t *testing.T) {
	db := pgtest.NewEmptyDatabase(t)
	t.Setenv("DB_POOL_SIZE", "3")
	t.Setenv("ENGINE_DB_POOL_SIZE", "5")
	// The flags' values are the variables the pools are opened with. The
	// engine's pool is a flag of the commands that run an engine only: the
	// admin command reads it, then stops at its unreachable database.
	sizes := func(bizArgs, engineArgs []string) (string, string) {
		root := newRootCmd()
		root.SetArgs(append([]string{"migrate", "status", "--database-url", db, "--log-level", "error"}, bizArgs...))
		require.NoError(t, root.ExecuteContext(context.Background()))
		biz := root.PersistentFlags().Lookup("db-pool-size").Value.String()
		migrate, _, err := root.Find([]string{"migrate", "status"})
		require.NoError(t, err)
		require.Nil(t, migrate.Flags().Lookup("engine-db-pool-size"), "migrate runs no engine")

		root = newRootCmd()
		root.SetArgs(append([]string{"admin", "--addr", "127.0.0.1:0", "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error"}, engineArgs...))
		require.ErrorContains(t, root.ExecuteContext(context.Background()), "nowhere.invalid")
		admin, _, err := root.Find([]string{"admin"})
		require.NoError(t, err)
		return biz, admin.Flags().Lookup("engine-db-pool-size").Value.String()
	}
	biz, engine := sizes(nil, nil)
	require.Equal(t, "3", biz)
	require.Equal(t, "5", engine)
	biz, engine = sizes([]string{"--db-pool-size", "7"}, []string{"--engine-db-pool-size", "8"})
	require.Equal(t, "7", biz, "a flag beats the environment")
	require.Equal(t, "8", engine, "a flag beats the environment")

	g := stack.Globals{DatabaseURL: db}
	pool, err := g.Pool(context.Background(), slog.New(slog.DiscardHandler), 5)
	require.NoError(t, err)
	require.EqualValues(t, 5, pool.Config().MaxConns)
	pool.Close()

	for env, want := range map[string]string{"x": `DB_POOL_SIZE (for --db-pool-size): invalid argument "x"`, "0": "--db-pool-size must lie in [1, 262143], got 0",
		// int32(4294967297) is 1: the size is refused, not wrapped round.
		"4294967297": "--db-pool-size must lie in [1, 262143], got 4294967297"} {
		t.Setenv("DB_POOL_SIZE", env)
		root := newRootCmd()
		root.SetArgs([]string{"migrate", "status", "--database-url", "postgres://nowhere.invalid/x"})
		require.ErrorContains(t, root.ExecuteContext(context.Background()), want)
	}
	t.Setenv("DB_POOL_SIZE", "3")
	for env, want := range map[string]string{"x": `ENGINE_DB_POOL_SIZE (for --engine-db-pool-size): invalid argument "x"`, "-1": "--engine-db-pool-size must lie in [1, 262143], got -1"} {
		t.Setenv("ENGINE_DB_POOL_SIZE", env)
		root := newRootCmd()
		root.SetArgs([]string{"worker", "--database-url", "postgres://nowhere.invalid/x"})
		require.ErrorContains(t, root.ExecuteContext(context.Background()), want)
	}
}

// The variables temporal-worker-controller injects reach the worker's
// flags, and a half-set pair is refused before anything connects.
func TestWorkerDeploymentFromEnv(t *testing.T) {
	t.Setenv("TEMPORAL_DEPLOYMENT_NAME", "taskport/taskport-worker")
	t.Setenv("TEMPORAL_WORKER_BUILD_ID", "5f7c9d")
	fs := newWorkerCmd(&stack.Globals{}).Flags()
	require.Equal(t, "taskport/taskport-worker", fs.Lookup("temporal-deployment-name").Value.String())
	require.Equal(t, "5f7c9d", fs.Lookup("temporal-worker-build-id").Value.String())

	t.Setenv("TEMPORAL_WORKER_BUILD_ID", "")
	g := &stack.Globals{DatabaseURL: "postgres://nowhere.invalid/x", LogLevel: "error"}
	c := stack.Config{Engine: "temporal", TemporalAddress: "127.0.0.1:7233", TemporalNamespace: "default", TaskQueue: "taskport",
		StopTimeout: time.Second, LibraryRoot: "/library", DownloadDir: "/downloads", DeploymentName: "taskport"}
	_, err := stack.Build(context.Background(), g, c, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "--temporal-deployment-name and --temporal-worker-build-id go together")
}

// The retention flags fall back on the environment; a value that does not
// parse is refused before anything connects.
func TestRetentionFromEnv(t *testing.T) {
	t.Setenv("RETENTION_FAILED", "2160h")
	worker, _, err := newRootCmd().Find([]string{"worker"})
	require.NoError(t, err)
	require.NoError(t, worker.ParseFlags(nil))
	require.NoError(t, stack.ApplyEnv(worker.Flags()))
	require.Equal(t, "2160h0m0s", worker.Flags().Lookup("retention-failed").Value.String())
	require.Equal(t, "168h0m0s", worker.Flags().Lookup("retention-completed").Value.String())

	t.Setenv("RETENTION_CANCELED", "a week")
	err = run(context.Background(), []string{"worker", "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error",
		"--library-root", "/library", "--download-dir", "/downloads"})
	require.ErrorContains(t, err, `RETENTION_CANCELED (for --retention-canceled): invalid argument "a week"`)
}

// A negative count of a worker's flags is refused, by its flag's name,
// before anything connects.
func TestWorkerRefusesNegativeCounts(t *testing.T) {
	for flag, most := range map[string]string{"--concurrency": "10000", "--lease-active-runs": "40000"} {
		cmd := newWorkerCmd(&stack.Globals{DatabaseURL: "postgres://nowhere.invalid/x", LogLevel: "error"})
		cmd.SetArgs([]string{"--engine", "lease", flag, "-1"})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.ExecuteContext(context.Background()), flag+" must lie in [0, "+most+"] (0: the engine's default), got -1")
	}
}

// A worker's flag values that would misbehave later (a busy loop, a
// silent default, a dial on port 443, a client certificate without its
// key) are refused by the flag's name before anything connects: the
// database URL names no reachable host, so reaching it would fail
// differently.
func TestWorkerRefusesCarelessValues(t *testing.T) {
	for args, want := range map[string]string{
		"--retention-interval 1ns":               "--retention-interval must be 0 (the default), negative (never) or lie in [1s, 168h], got 1ns",
		"--reconcile-interval 10ms":              "--reconcile-interval must be 0 (the default), negative (never) or lie in [1s, 168h], got 10ms",
		"--temporal-address 127.0.0.1":           `--temporal-address must be host:port, got "127.0.0.1"`,
		"--temporal-address :7233":               `--temporal-address must be host:port, got ":7233"`,
		"--temporal-namespace=":                  "--temporal-namespace must not be empty",
		"--task-queue=":                          "--task-queue must not be empty",
		"--temporal-tls-cert /tls/tls.crt":       `--temporal-tls-cert and --temporal-tls-key go together, got "/tls/tls.crt" and ""`,
		"--qbittorrent-url ht!tp://::bad":        `--qbittorrent-url must be an http(s) URL, got "ht!tp://::bad"`,
		"--qbittorrent-url qbittorrent:8080":     `--qbittorrent-url must be an http(s) URL, got "qbittorrent:8080"`,
		"--lease-batch-size -1":                  "--lease-batch-size must lie in [0, 10000] (0: the engine's default), got -1",
		"--cancel-poll-interval 1ms":             "--cancel-poll-interval must be 0 (the default) or lie in [10ms, 1h], got 1ms",
		"--cancel-poll-interval -1s":             "--cancel-poll-interval must be 0 (the default) or lie in [10ms, 1h], got -1s",
		"--lease-poll-interval 1ns":              "--lease-poll-interval must be 0 (the default) or lie in [10ms, 1h], got 1ns",
		"--lease-duration 10ms":                  "--lease-duration must be 0 (the default) or lie in [100ms, 1h], got 10ms",
		"--lease-duration -10s":                  "--lease-duration must be 0 (the default) or lie in [100ms, 1h], got -10s",
		"--temporal-poll-timeout 2s":             "--temporal-poll-timeout must be 0 (the default), negative (the SDK's) or lie in [3s, 1m10s], got 2s",
		"--temporal-sticky-timeout 10ms":         "--temporal-sticky-timeout must be 0 (the default) or lie in [100ms, 1m], got 10ms",
		"--temporal-sticky-timeout -1s":          "--temporal-sticky-timeout must be 0 (the default) or lie in [100ms, 1m], got -1s",
		"--temporal-workflow-task-timeout 500ms": "--temporal-workflow-task-timeout must be 0 (the default) or lie in [1s, 2m], got 500ms",
		"--temporal-workflow-task-timeout -5s":   "--temporal-workflow-task-timeout must be 0 (the default) or lie in [1s, 2m], got -5s",
		"--temporal-workflow-task-timeout 3m":    "--temporal-workflow-task-timeout must be 0 (the default) or lie in [1s, 2m], got 3m0s",
	} {
		cmd := newWorkerCmd(&stack.Globals{DatabaseURL: "postgres://nowhere.invalid/x", LogLevel: "error"})
		cmd.SetArgs(append(strings.Fields(args), "--library-root", "/library", "--download-dir", "/downloads"))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.ExecuteContext(context.Background()), want, args)
	}
}

// temporal-worker-controller names a Connection's mTLS files and server
// name in variables of its own: the worker reads them.
func TestWorkerReadsTheControllersTLSVariables(t *testing.T) {
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", "/etc/temporal/tls/tls.crt")
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", "/etc/temporal/tls/tls.key")
	t.Setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.example.com")
	fs := newWorkerCmd(&stack.Globals{}).Flags()
	require.NoError(t, stack.ApplyEnv(fs))
	require.Equal(t, "/etc/temporal/tls/tls.crt", fs.Lookup("temporal-tls-cert").Value.String())
	require.Equal(t, "/etc/temporal/tls/tls.key", fs.Lookup("temporal-tls-key").Value.String())
	require.Equal(t, "temporal.example.com", fs.Lookup("temporal-tls-server-name").Value.String())

	// The project's own names win over the controller's.
	t.Setenv("TEMPORAL_TLS_CERT", "/own/tls.crt")
	fs = newWorkerCmd(&stack.Globals{}).Flags()
	require.NoError(t, stack.ApplyEnv(fs))
	require.Equal(t, "/own/tls.crt", fs.Lookup("temporal-tls-cert").Value.String())
}

// The Postgres timeouts come from the flags, else DB_LOCK_TIMEOUT,
// DB_IDLE_IN_TRANSACTION_TIMEOUT and DB_STATEMENT_TIMEOUT, else the
// documented defaults; bad values are refused before anything connects.
func TestPoolTimeouts(t *testing.T) {
	db := pgtest.NewEmptyDatabase(t)
	values := func(env map[string]string, args ...string) map[string]string {
		for k, v := range env {
			t.Setenv(k, v)
		}
		root := newRootCmd()
		root.SetArgs(append([]string{"migrate", "status", "--database-url", db, "--log-level", "error"}, args...))
		require.NoError(t, root.ExecuteContext(context.Background()))
		out := map[string]string{}
		for _, f := range []string{"db-lock-timeout", "db-idle-in-transaction-timeout", "db-statement-timeout"} {
			out[f] = root.PersistentFlags().Lookup(f).Value.String()
		}
		return out
	}
	require.Equal(t, map[string]string{"db-lock-timeout": "10s", "db-idle-in-transaction-timeout": "1m0s", "db-statement-timeout": "2m0s"},
		values(nil))
	require.Equal(t, map[string]string{"db-lock-timeout": "3s", "db-idle-in-transaction-timeout": "4s", "db-statement-timeout": "5s"},
		values(map[string]string{"DB_LOCK_TIMEOUT": "3s", "DB_IDLE_IN_TRANSACTION_TIMEOUT": "4s", "DB_STATEMENT_TIMEOUT": "5s"}))
	require.Equal(t, "7s", values(nil, "--db-lock-timeout", "7s")["db-lock-timeout"], "a flag beats the environment")

	for env, want := range map[string]string{"x": `DB_STATEMENT_TIMEOUT (for --db-statement-timeout): invalid argument "x"`, "-1s": "--db-statement-timeout must not be negative",
		"500us": "--db-statement-timeout must be 0 (the server's setting) or at least 1ms", "1000000h": "--db-statement-timeout must be at most 596h31m23.647s"} {
		t.Setenv("DB_STATEMENT_TIMEOUT", env)
		root := newRootCmd()
		root.SetArgs([]string{"migrate", "status", "--database-url", "postgres://nowhere.invalid/x"})
		err := root.ExecuteContext(context.Background())
		require.ErrorContains(t, err, want)
		require.Equal(t, 2, exitCode(err), "a refused value is a usage error")
	}
}

// cobra's completion command keeps the CLI's rule: an unknown shell, or
// none, is refused (exit 2) naming the shells, not answered with the
// help and exit 0; a known shell prints its script.
func TestCompletionNamesTheShells(t *testing.T) {
	for _, args := range [][]string{{"completion", "bogus"}, {"completion"}} {
		_, err := execute(args)
		require.ErrorContains(t, err, "bash, fish, powershell or zsh", args)
		require.Equal(t, 2, exitCode(err), args)
	}
	// The script goes to the process's stdout, which cobra's completion
	// command took when the tree was built.
	file, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = file
	err = run(context.Background(), []string{"completion", "bash"})
	os.Stdout = stdout
	require.NoError(t, err)
	require.NoError(t, file.Close())
	script, err := os.ReadFile(file.Name())
	require.NoError(t, err)
	require.Contains(t, string(script), "bash completion")
}

// cobra's help command keeps the CLI's rule: a topic that is no command is
// refused (exit 2), not answered with the root's help and exit 0; a
// command's help is printed.
func TestHelpRefusesUnknownTopics(t *testing.T) {
	for _, args := range [][]string{{"help", "bogus"}, {"help", "runs", "bogus"}, {"help", "engine", "evacuate", "now"}} {
		out, err := execute(args)
		require.ErrorContains(t, err, "unknown help topic", args)
		require.Equal(t, 2, exitCode(err), args)
		require.Empty(t, out, args)
	}
	out, err := execute([]string{"help", "runs", "list"})
	require.NoError(t, err)
	require.Contains(t, out, "taskport runs list [flags]")
}

// The worker's numeric flags have ceilings, far above any deployment and
// said in their help: past one the flag is refused by name before anything
// connects (exit 2); at one it is accepted (the command goes on to the
// database, which leads nowhere here).
func TestWorkerFlagCeilings(t *testing.T) {
	for _, tc := range []struct{ flag, atMost, over string }{
		{"--concurrency", "10000", "100000000"},
		{"--lease-active-runs", "40000", "40001"},
		{"--lease-batch-size", "10000", "10001"},
		{"--lease-duration", "1h", "1h1m0s"},
		{"--lease-poll-interval", "1h", "1000h"},
		{"--cancel-poll-interval", "1h", "2h"},
		{"--temporal-poll-timeout", "1m10s", "2m"},
		{"--temporal-sticky-timeout", "1m", "1h"},
		{"--stop-timeout", "24h", "25h"},
		{"--reconcile-interval", "168h", "169h"},
		{"--retention-interval", "168h", "1000h"},
		{"--retention-completed", "876000h", "876001h"},
		{"--retention-canceled", "876000h", "2000000h"},
		{"--retention-failed", "876000h", "876001h"},
	} {
		run := func(value string) error {
			_, err := execute([]string{"worker", "--engine", "lease", tc.flag, value, "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error"})
			return err
		}
		err := run(tc.over)
		require.ErrorContains(t, err, tc.flag+" must", tc.flag)
		require.ErrorContains(t, err, tc.over, tc.flag)
		require.NotContains(t, err.Error(), "nowhere.invalid", "%s: refused before connecting", tc.flag)
		require.Equal(t, 2, exitCode(err), tc.flag)
		require.ErrorContains(t, run(tc.atMost), "nowhere.invalid", "%s %s is accepted", tc.flag, tc.atMost)

		// The help says the ceiling.
		worker, _, err := newRootCmd().Find([]string{"worker"})
		require.NoError(t, err)
		usage := worker.Flags().Lookup(strings.TrimPrefix(tc.flag, "--")).Usage
		require.Contains(t, usage, tc.atMost, tc.flag)
	}
}
