package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// updateReference rewrites docs/configuration.md from the command tree:
// go test ./cmd/taskport/ -run TestConfigurationReference -update
var updateReference = flag.Bool("update", false, "rewrite docs/configuration.md from the command tree")

// walk calls fn for every command of the tree below root, root included.
func walk(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, sub := range cmd.Commands() {
		walk(sub, fn)
	}
}

// settingsCommands are the long-running commands: every flag they take is
// a setting (an operator configures it once, in a manifest), so each has
// an environment fallback. The other commands' own flags are the
// arguments of one invocation (a plan's title, a cancel's reason).
var settingsCommands = []string{"taskport worker", "taskport admin", "taskport migrate up"}

// settings returns the flags of the settings commands, by name, as the
// parsed command sees them (its own and the inherited ones).
func settings(t *testing.T, root *cobra.Command) map[string]*pflag.Flag {
	t.Helper()
	out := map[string]*pflag.Flag{}
	for _, path := range settingsCommands {
		cmd, _, err := root.Find(strings.Fields(path)[1:])
		require.NoError(t, err, path)
		require.NoError(t, cmd.ParseFlags(nil))
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && f.Name != jsonFlag {
				out[f.Name] = f
			}
		})
	}
	return out
}

// valueOfType is a valid value for a flag of that type, different from
// every default the tree has.
func valueOfType(t *testing.T, f *pflag.Flag) string {
	switch f.Value.Type() {
	case "string":
		return "/from-env/" + f.Name
	case "int", "int64":
		return "7"
	case "duration":
		return "7s"
	case "bool":
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case "stringSlice":
		return "a.example,b.example"
	}
	t.Fatalf("--%s: no test value for flag type %s", f.Name, f.Value.Type())
	return ""
}

// Every setting has an environment fallback, named in its help, and
// setting that variable sets the flag when the command line does not.
func TestEveryFlagHasAnEnvironmentFallback(t *testing.T) {
	flags := settings(t, newRootCmd())
	require.NotEmpty(t, flags)
	for name, f := range flags {
		key := stack.EnvName(f)
		require.NotEmpty(t, key, "--%s names no environment variable in its help (%q)", name, f.Usage)
		want := valueOfType(t, f)
		t.Run(name, func(t *testing.T) {
			t.Setenv(key, want)
			got := settings(t, newRootCmd())[name]
			fs := pflag.NewFlagSet("one", pflag.ContinueOnError)
			fs.AddFlag(got)
			require.NoError(t, stack.ApplyEnv(fs))
			if got.Value.Type() == "stringSlice" {
				want = "[" + want + "]"
			}
			require.Equal(t, want, got.Value.String(), "--%s from %s", name, key)
		})
	}
	// The command line wins over the environment.
	t.Setenv("CONCURRENCY", "9")
	root := newRootCmd()
	worker, _, err := root.Find([]string{"worker"})
	require.NoError(t, err)
	require.NoError(t, worker.ParseFlags([]string{"--concurrency", "3"}))
	require.NoError(t, stack.ApplyEnv(worker.Flags()))
	require.Equal(t, "3", worker.Flags().Lookup("concurrency").Value.String())
	// A variable that does not parse is refused by its name.
	t.Setenv("STOP_TIMEOUT", "soon")
	require.NoError(t, worker.ParseFlags(nil))
	require.ErrorContains(t, stack.ApplyEnv(worker.Flags()), "STOP_TIMEOUT (for --stop-timeout)")
}

// An empty variable counts as unset, but for DATABASE_URL: an empty URL is
// refused whether the flag or the variable gives it, rather than the
// built-in default's database being used.
func TestEmptyDatabaseURLVariableIsRefused(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("LOG_LEVEL", "")
	err := run(context.Background(), []string{"runs", "list", "--engine", "lease"})
	require.ErrorContains(t, err, "--database-url (env DATABASE_URL) is empty")
	require.Equal(t, 2, exitCode(err))

	// The flag beats the variable, empty or not; LOG_LEVEL's emptiness
	// leaves its default.
	root := newRootCmd()
	root.SetArgs([]string{"migrate", "status", "--database-url", pgtest.NewEmptyDatabase(t)})
	root.SetOut(io.Discard)
	require.NoError(t, root.ExecuteContext(context.Background()))
	require.Equal(t, "info", root.PersistentFlags().Lookup("log-level").Value.String())
}

// No flag takes a secret's value: secrets come from the environment or a
// file, so that `ps` never shows them.
func TestSecretsAreNeverFlagValues(t *testing.T) {
	var files []string
	walk(newRootCmd(), func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			for _, secret := range []string{"api-key", "password", "webhook-url", "token"} {
				if strings.Contains(f.Name, secret) && f.Name != "auth-tokens-file" {
					require.True(t, strings.HasSuffix(f.Name, "-file"), "%s --%s takes a secret as a value", cmd.CommandPath(), f.Name)
					files = append(files, f.Name)
				}
			}
		})
	})
	require.Subset(t, files, []string{"temporal-api-key-file", "qbittorrent-password-file", "webhook-url-file"})

	err := run(context.Background(), []string{"worker", "--temporal-api-key", "k"})
	require.ErrorContains(t, err, "unknown flag: --temporal-api-key")
	require.Equal(t, 2, exitCode(err))

	// From a file (its trailing newline dropped), or from the variable;
	// both at once is refused rather than one silently winning.
	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte("from-file\n"), 0o600))
	var c stack.Config
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	c.Bind(fs)
	require.NoError(t, fs.Parse([]string{"--temporal-api-key-file", file}))
	require.NoError(t, c.SecretsFromEnv())
	require.Equal(t, "from-file", c.TemporalAPIKey)
	t.Setenv("TEMPORAL_API_KEY", "from-env")
	require.ErrorContains(t, c.SecretsFromEnv(), "TEMPORAL_API_KEY and its file")
	require.NoError(t, fs.Set("temporal-api-key-file", ""))
	require.NoError(t, c.SecretsFromEnv())
	require.Equal(t, "from-env", c.TemporalAPIKey)
}

// A command line the CLI refuses exits 2, a flag's or a variable's value it
// refuses without a query included; a command that ran and failed exits 1.
func TestUsageErrorsExit2(t *testing.T) {
	// A database is reached only by the refusal that is the engine's (a
	// cursor's format): the others are refused before anything connects.
	db := pgtest.NewEmptyDatabase(t)
	nowhere := []string{"--database-url", "postgres://nowhere.invalid/x"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		db   bool // reaches the database: the refusal is the engine's
	}{
		{args: []string{"bogus"}},
		{args: []string{"runs", "bogus"}},
		{args: []string{"runs"}},
		{args: []string{"plan"}},
		{args: []string{"migrate"}},
		{args: []string{"runs", "get"}},
		{args: []string{"runs", "get", "a", "b"}},
		{args: []string{"runs", "get", "nope", "--engine", "lease", "--json"}},
		{args: []string{"runs", "cancel", "0190A5C6-0000-7000-8000-000000000000", "--engine", "lease"}},
		{args: []string{"worker", "--concurrency", "many"}},
		{args: []string{"worker", "--no-such-flag"}},
		{args: []string{"plan", "approve"}},
		{args: []string{"engine", "switch", "--to", "bogus"}},
		{args: []string{"engine", "evacuate", "--from", ""}},
		{args: []string{"engine", "evacuate", "--from", "lease", "--temporal-address", "1.2.3.4"}},
		{args: []string{"engine", "switch", "--to", "lease", "--temporal-address", "1.2.3.4"}},
		{args: []string{"engine", "switch", "--to", "lease", "--as", ""}},
		{args: []string{"migrate", "down", "--set", "bogus", "--to", "0"}},
		{args: []string{"migrate", "down"}}, // --to is required: a bare down dropped the media set
		{args: []string{"migrate", "down", "--to", "99999999999"}},
		{args: []string{"migrate", "down", "--set", "engine", "--to", "1000"}},
		{args: []string{"runs", "list", "--engine", "bogus"}},
		{args: []string{"completion", "bogus"}},
		{args: []string{"completion"}},
		{args: []string{"worker", "--engine", "bogus"}},
		{args: []string{"admin", "--auth", "bogus"}},
		{args: []string{"admin", "token", "--user", "ann", "--role", "bogus"}},
		{args: []string{"admin", "token"}}, // --user is required
		{args: []string{"admin", "token", "--user", ""}},
		{args: []string{"admin", "token", "--user", "ann:x"}}, // Basic auth could not send it
		{args: []string{"decision", "list", "--status", "bogus"}},
		{args: []string{"runs", "list", "--engine", "lease", "--status", "bogus"}},
		{args: []string{"runs", "list", "--engine", "lease", "--limit", "1001"}},
		{args: []string{"runs", "list", "--engine", "lease", "--after", "garbage"}, db: true},
		{args: []string{"runs", "list", "--engine", "lease", "--log-level", "bogus"}},
		{args: []string{"runs", "cancel", "x", "--engine", "lease", "--as", ""}},
		{args: []string{"runs", "retry", "x", "--engine", "lease", "--as", ""}},
		{args: []string{"runs", "cancel", "x", "--engine", "lease", "--as", " "}},
		{args: []string{"runs", "cancel", "x", "--engine", "lease", "--reason", "\x1b[2J"}},
		{args: []string{"runs", "cancel", "x", "--engine", "lease", "--reason", strings.Repeat("a", 5000)}},
		{args: []string{"engine", "evacuate", "--from", "lease", "--as", " \t"}},
		{args: []string{"engine", "switch", "--to", "lease", "--as", "ann\x1b[2J"}},
		{args: []string{"engine", "switch", "--to", "lease", "--reason", "\x1b[2J"}},
		{args: []string{"engine", "switch", "--to", "lease", "--reason", strings.Repeat("a", 1001)}},
		{args: []string{"runs", "cancel", "x", "--engine", "lease", "--as", strings.Repeat("a", 201)}},
		{args: []string{"plan", "approve", "x", "--as", ""}},
		{args: []string{"plan", "reject", "x", "--as", "  "}},
		{args: []string{"plan", "cancel", "x", "--by", ""}},
		{args: []string{"plan", "timeline", "x"}},
		{args: []string{"plan", "timeline", "", "--json"}},
		{args: []string{"plan", "complete", "x"}, db: true},
		{args: []string{"plan", "complete", "0123456789abcdef0123456789abcdef01234567", "--content-path", "film.mkv"}, db: true},
		{args: []string{"plan", "complete", "0123456789abcdef0123456789abcdef01234567", "--content-path", "/elsewhere/film.mkv"}, db: true},
		{args: []string{"decision", "resolve", "x", "retry", "--as", ""}},
		{args: []string{"runs", "signal", "", "--engine", "lease"}},
		{args: []string{"runs", "signal", "approval:x", "--engine", "lease", "--payload", "not json"}},
		{args: []string{"runs", "signal", "approval:x", "--engine", "lease", "--payload", ""}},
		{args: []string{"plan", "create", "--library-root", "relative"}},
		{args: []string{"plan", "complete", "x", "--download-dir", "downloads"}},
		{args: []string{"migrate", "up", "--db-statement-timeout", "500us"}},
		{args: []string{"migrate", "up", "--db-lock-timeout", "1000000h"}},
		{args: []string{"migrate", "up", "--database-url", ""}},
		{args: []string{"migrate", "up"}, env: map[string]string{"DB_POOL_SIZE": "abc"}},
		{args: []string{"worker", "--engine", "lease"}, env: map[string]string{"STOP_TIMEOUT": "soon"}},
		{args: []string{"runs", "list", "--engine", "lease"}, env: map[string]string{"DATABASE_URL": ""}},
	} {
		name := strings.Join(tc.args, "_")
		for k, v := range tc.env {
			name = k + "=" + v + "_" + name
		}
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := tc.args
			if tc.db {
				args = append(slices.Clip(args), "--database-url", db)
			} else if _, env := tc.env["DATABASE_URL"]; !env && !slices.Contains(args, "--database-url") {
				args = append(slices.Clip(args), nowhere...)
			}
			err := run(context.Background(), args)
			require.Error(t, err)
			var u usageError
			require.True(t, errors.As(err, &u), "taskport %v: %v is not a usage error", args, err)
			require.Equal(t, 2, exitCode(err))
			require.NotContains(t, err.Error(), "nowhere.invalid", "refused before connecting")
		})
	}
	// A database without taskport's tables: the command ran, and failed.
	err := run(context.Background(), []string{"runs", "list", "--engine", "lease", "--database-url", db, "--log-level", "error"})
	require.ErrorContains(t, err, "run `taskport migrate up`")
	require.Equal(t, 1, exitCode(err))
}

// Every read command takes --json.
func TestEveryReadCommandTakesJSON(t *testing.T) {
	root := newRootCmd()
	for _, path := range []string{"runs list", "runs get", "plan timeline", "decision list", "migrate status", "engine status", "engine evacuate"} {
		cmd, _, err := root.Find(strings.Fields(path))
		require.NoError(t, err, path)
		require.NoError(t, cmd.ParseFlags(nil))
		require.NotNil(t, cmd.Flags().Lookup(jsonFlag), "taskport %s has no --json", path)
	}
}

// No flag's help has a backquote: pflag would show the first quoted word as
// the value's placeholder in --help (--auth-tokens-file taskport admin token).
func TestNoBackquoteInFlagHelp(t *testing.T) {
	walk(newRootCmd(), func(cmd *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				require.NotContains(t, f.Usage, "`", "%s --%s", cmd.CommandPath(), f.Name)
			})
		}
	})
}

// taskport admin lists the flags the admin reads, and none that only a
// worker acts on.
func TestAdminTakesNoWorkerFlags(t *testing.T) {
	admin, _, err := newRootCmd().Find([]string{"admin"})
	require.NoError(t, err)
	for _, name := range []string{"concurrency", "lease-active-runs", "lease-batch-size", "lease-duration", "lease-poll-interval", "cancel-poll-interval", "stop-timeout",
		"temporal-poll-timeout", "temporal-sticky-timeout", "reconcile-interval", "retention-interval",
		"temporal-deployment-name", "temporal-worker-build-id", "qbittorrent-url", "qbittorrent-user", "qbittorrent-password-file",
		"webhook-url-file"} {
		require.Nil(t, admin.Flags().Lookup(name), "taskport admin takes the worker flag --%s", name)
	}
	for _, name := range []string{"engine", "temporal-address", "library-root", "retention-completed", "public-origin"} {
		require.NotNil(t, admin.Flags().Lookup(name), "taskport admin lacks --%s", name)
	}
}

// migrate status --json is one object per migration; migrate up says what
// it applied and nothing else at the default log level (goose's statement
// log is for --log-level debug).
func TestMigrateJSONAndQuiet(t *testing.T) {
	db := pgtest.NewEmptyDatabase(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr := os.Stderr
	os.Stderr = w
	out := runCLI(t, "migrate", "up", "--database-url", db)
	os.Stderr = stderr
	require.NoError(t, w.Close())
	logged, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, out, "applied ")
	require.NotContains(t, string(logged), "OK ", "goose's per-migration lines at info:\n%s", logged)
	require.NotContains(t, string(logged), "CREATE", "SQL at info:\n%s", logged)

	status := runCLI(t, "migrate", "status", "--json", "--database-url", db)
	require.Contains(t, status, `"version": 1`)
	require.Contains(t, status, `"applied": true`)
}

// docs/configuration.md is the command tree's settings, generated: every
// flag and variable is in it, with its default and help.
func TestConfigurationReference(t *testing.T) {
	// Defaults read the environment (EnvOr): render them as they are on a
	// machine that sets none of the variables.
	for _, f := range settings(t, newRootCmd()) {
		t.Setenv(stack.EnvName(f), "")
	}
	got := configurationReference(newRootCmd())
	path := filepath.Join("..", "..", "docs", "configuration.md")
	if *updateReference {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "generate it: go test ./cmd/taskport/ -run TestConfigurationReference -update")
	require.Equal(t, string(want), got, "docs/configuration.md is stale: go test ./cmd/taskport/ -run TestConfigurationReference -update")
	for _, f := range settings(t, newRootCmd()) {
		require.Contains(t, got, "`--"+f.Name+"`")
		require.Contains(t, got, "`"+stack.EnvName(f)+"`")
	}
}

// configurationReference renders every command's settings (the flags with
// an environment variable) as one table per command.
func configurationReference(root *cobra.Command) string {
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n" +
		"Generated from the command tree of `cmd/taskport` by\n" +
		"`go test ./cmd/taskport/ -run TestConfigurationReference -update`; the test\n" +
		"fails when this page and the flags disagree. Every setting is a flag with\n" +
		"an environment fallback: the variable applies when the flag is not given;\n" +
		"one set but empty counts as unset, except `DATABASE_URL`, whose empty\n" +
		"value is refused like an empty `--database-url`.\n" +
		"Secrets are never flag values: they come from their variable or from the\n" +
		"file a `--…-file` flag names. Defaults are shown as on a machine that sets\n" +
		"none of the variables.\n")
	var paths []string
	cmds := map[string]*cobra.Command{}
	walk(root, func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" || cmd.Name() == "completion" {
			return
		}
		paths = append(paths, cmd.CommandPath())
		cmds[cmd.CommandPath()] = cmd
	})
	sort.Strings(paths)
	for _, path := range paths {
		cmd := cmds[path]
		_ = cmd.ParseFlags(nil)
		var rows []string
		own := cmd.LocalFlags()
		if cmd == root {
			own = root.PersistentFlags()
		}
		own.VisitAll(func(f *pflag.Flag) {
			key := stack.EnvName(f)
			if key == "" {
				return
			}
			def := f.DefValue
			if def == "" || def == "[]" {
				def = "(none)"
			}
			usage := strings.ReplaceAll(f.Usage, "|", `\|`)
			rows = append(rows, fmt.Sprintf("| `--%s` | `%s` | `%s` | %s |", f.Name, key, def, usage))
		})
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n\n| flag | variable | default | meaning |\n|---|---|---|---|\n%s\n", path, cmd.Short, strings.Join(rows, "\n"))
	}
	return b.String()
}

// No flag's help says its default twice: pflag adds (default "...") to
// every flag whose default is not its type's zero, so a help that also
// says it (--as's "default: the OS user") reads it twice.
func TestNoFlagHelpRepeatsItsDefault(t *testing.T) {
	var twice []string
	walk(newRootCmd(), func(cmd *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{cmd.LocalNonPersistentFlags(), cmd.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				one := pflag.NewFlagSet(f.Name, pflag.ContinueOnError)
				one.AddFlag(f)
				shown := one.FlagUsages()
				if strings.Contains(shown, f.Usage+" (default ") &&
					(strings.Contains(f.Usage, "default:") || strings.Contains(f.Usage, "(default")) {
					twice = append(twice, strings.TrimSpace(cmd.CommandPath()+": "+shown))
				}
			})
		}
	})
	require.Empty(t, twice, "flags whose help says the default pflag adds")
}
