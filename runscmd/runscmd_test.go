package runscmd_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/runscmd"
	"github.com/taskport/taskport/temporaladapter"
)

// A user's own kind, nothing of the media application: an invoice is sent
// by one step, tried twice.
type Invoice struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

var (
	sendInvoice = port.DeclareActivity[Invoice, string]("shop.invoice.send")
	invoiceKind = port.Definition{
		Kind: "shop.invoice", Version: 1,
		Retry: port.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond, MaxInterval: 10 * time.Millisecond},
		Handler: port.Handle(func(f port.Flow, in Invoice) error {
			_, err := sendInvoice.Run(f, "send", in)
			return err
		}),
	}
)

// mailer is the step's side effect: it refuses while down, and records
// every invoice it sent.
type mailer struct {
	mu    sync.Mutex
	down  bool
	tries int
	sent  []Invoice
}

func (m *mailer) send(_ context.Context, in Invoice) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tries++
	if m.down {
		return "", errors.New("smtp: connection refused")
	}
	m.sent = append(m.sent, in)
	return "sent " + in.ID, nil
}

func (m *mailer) setDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
}

func (m *mailer) record() (tries int, sent []Invoice) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tries, append([]Invoice(nil), m.sent...)
}

// userEngine builds an engine of one test on a registry: the worker's,
// with the kind's activity, or the CLI's.
type userEngine func(t *testing.T, pool *pgxpool.Pool, reg *port.Registry) runscmd.Engine

var discard = slog.New(slog.DiscardHandler)

// engines are the engines the runs commands are tested on; setup runs once
// per test (the Temporal one starts a dev server).
var engines = []struct {
	name  string
	setup func(t *testing.T) userEngine
}{
	{"lease", func(*testing.T) userEngine {
		return func(t *testing.T, pool *pgxpool.Pool, reg *port.Registry) runscmd.Engine {
			e, err := leaseadapter.New(pool, reg, leaseadapter.Config{
				PollInterval: 50 * time.Millisecond, StopTimeout: 5 * time.Second, Logger: discard})
			require.NoError(t, err)
			return e
		}
	}},
	{"temporal", func(t *testing.T) userEngine {
		srv := devserver.Start(t, devserver.Options{Namespace: "runscmd", SearchAttributes: temporaladapter.SearchAttributes()})
		return func(t *testing.T, pool *pgxpool.Pool, reg *port.Registry) runscmd.Engine {
			// A task queue of the test's own: its worker serves its database only.
			queue := strings.ReplaceAll(t.Name(), "/", ".")
			e, err := temporaladapter.New(srv.Client, pool, reg, temporaladapter.Config{
				TaskQueue: queue, WorkerStopTimeout: 5 * time.Second, Logger: discard})
			require.NoError(t, err)
			return e
		}
	}},
}

// userBinary is a user's binary with the runs commands mounted: its own
// root and its own --database-url flag, which Config.Open reads to open a
// pool of its own for each command, and an engine on reg. It returns what
// the command printed and its error.
func userBinary(t *testing.T, newEngine userEngine, reg *port.Registry, log *slog.Logger, args ...string) (string, error) {
	var url string
	root := &cobra.Command{Use: "shopctl", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&url, "database-url", "", "the shop's database")
	root.AddCommand(runscmd.New(runscmd.Config{Open: func(ctx context.Context) (runscmd.Client, error) {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return runscmd.Client{}, err
		}
		return runscmd.Client{Engine: newEngine(t, pool, reg), Log: log, Close: pool.Close}, nil
	}}))
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// clients are the registries the user's binary opens its engine with: its
// kinds' definitions without their activities (it runs nothing).
var clients = []struct {
	name  string
	kinds []port.Definition
}{
	{"own_kinds", []port.Definition{invoiceKind}},
	{"admin_only", nil},
}

// A user's binary mounts the runs commands for its own kind, on each
// engine: a run whose step exhausts its retries is failed, `runs list
// --json` shows it, `runs retry` starts a new run with the failed run's
// stored input, which sends the invoice once the mailer is back, and a
// repeated retry returns the same run.
func TestRunsOfAUsersKind(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			newEngine := eng.setup(t)
			for _, cl := range clients {
				t.Run(cl.name, func(t *testing.T) {
					t.Parallel()
					testRunsOfAUsersKind(t, newEngine, cl.kinds)
				})
			}
		})
	}
}

func testRunsOfAUsersKind(t *testing.T, newEngine userEngine, cliKinds []port.Definition) {
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, db)

	mail := &mailer{down: true}
	workerReg := port.NewRegistry()
	require.NoError(t, workerReg.Register(invoiceKind))
	require.NoError(t, workerReg.RegisterActivity(port.Bind(sendInvoice, mail.send)))
	worker := newEngine(t, pool, workerReg).(port.TaskEngine)
	require.NoError(t, worker.Start(ctx, port.StartOptions{}))
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = worker.Stop(stop) // the test asserts nothing on the stop
	})

	cliReg := port.NewRegistry()
	require.NoError(t, cliReg.Register(cliKinds...))
	var logged bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))
	runs := func(args ...string) (string, error) {
		return userBinary(t, newEngine, cliReg, log, append([]string{"runs", "--database-url", db}, args...)...)
	}
	get := func(id port.RunID) runscmd.RunJSON {
		out, err := runs("get", string(id), "--json")
		require.NoError(t, err)
		var v runscmd.RunJSON
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v
	}
	waitStatus := func(id port.RunID, want port.Status) runscmd.RunJSON {
		var last runscmd.RunJSON
		require.Eventually(t, func() bool { last = get(id); return last.Status == want },
			time.Minute, 50*time.Millisecond, "run %s never reached %s (last: %+v)", id, want, &last)
		return last
	}

	invoice := Invoice{ID: "INV-7", Amount: 42}
	id, err := worker.Enqueue(ctx, invoiceKind.Kind, invoice, port.EnqueueOptions{IdempotencyKey: "invoice:INV-7", BusinessKey: "customer-3"})
	require.NoError(t, err)
	failed := waitStatus(id, port.StatusFailed)
	require.Contains(t, failed.LastError, "connection refused")
	tries, sent := mail.record()
	require.Equal(t, 2, tries, "the kind's two attempts")
	require.Empty(t, sent)

	out, err := runs("list", "--status", "failed", "--json")
	require.NoError(t, err)
	var page runscmd.PageJSON
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Runs, 1, out)
	require.Equal(t, id, page.Runs[0].ID)
	require.Equal(t, invoiceKind.Kind, page.Runs[0].Kind)
	require.Equal(t, "customer-3", page.Runs[0].BusinessKey)
	require.Empty(t, page.Next, "a short page is the last")
	out, err = runs("list", "--kind", string(invoiceKind.Kind))
	require.NoError(t, err)
	require.Contains(t, out, "LAST ERROR", "a table with a header")
	require.Contains(t, out, string(id))

	mail.setDown(false)
	out, err = runs("retry", string(id), "--as", "ops", "--json")
	require.NoError(t, err)
	var r runscmd.RetryJSON
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.Equal(t, runscmd.RetryJSON{RunID: id, NewRunID: r.NewRunID, By: "ops"}, r)
	require.NotEqual(t, id, r.NewRunID)
	fresh := waitStatus(r.NewRunID, port.StatusSucceeded)
	require.Equal(t, invoiceKind.Kind, fresh.Kind)
	require.Equal(t, "customer-3", fresh.BusinessKey)
	_, sent = mail.record()
	require.Equal(t, []Invoice{invoice}, sent, "the retry sent the failed run's stored input, once")

	out, err = runs("retry", string(id), "--as", "bob")
	require.NoError(t, err)
	require.Equal(t, "run "+string(id)+" retried by bob as run "+string(r.NewRunID)+"\n", out, "a repeated retry returns the same run")
	require.Equal(t, port.StatusFailed, get(id).Status, "the failed run stays failed")
	out, err = runs("list", "--kind", string(invoiceKind.Kind), "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Runs, 2, "one failed run, one retry: %s", out)
	logMu.Lock()
	require.Contains(t, logged.String(), "msg=\"run retried\" run_id="+string(id)+" new_run_id="+string(r.NewRunID)+" by=ops")
	logMu.Unlock()

	// A finished run is not canceled again; a run that fails to
	// resolve is an error of the command, not of its usage.
	out, err = runs("cancel", string(r.NewRunID), "--as", "ops")
	require.NoError(t, err)
	require.Equal(t, "run "+string(r.NewRunID)+" already finished: status succeeded; nothing changed\n", out)
	_, err = runs("get", "0190a5c6-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, port.ErrNotFound)
	require.Equal(t, 1, runscmd.ExitCode(err))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A command line the runs commands refuse is a UsageError, exit 2, in a
// user's binary as in cmd/taskport; the engine is never opened for it.
// Each subcommand's help lists its own flags and the inherited ones,
// nothing of its siblings.
func TestRunsCommandLine(t *testing.T) {
	opened := 0
	binary := func(args ...string) (string, error) {
		root := &cobra.Command{Use: "shopctl", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(runscmd.New(runscmd.Config{Open: func(context.Context) (runscmd.Client, error) {
			opened++
			return runscmd.Client{}, errors.New("no engine in this test")
		}}))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	for _, args := range [][]string{
		{"runs"},
		{"runs", "bogus"},
		{"runs", "get"},
		{"runs", "get", "a", "b"},
		{"runs", "list", "extra"},
		{"runs", "list", "--limit", "many"},
		{"runs", "list", "--limit", "1001"},
		{"runs", "list", "--limit", "-1"},
		{"runs", "list", "--status", "failed,bogus"},
		{"runs", "cancel", "x", "--as", ""},
		{"runs", "retry", "x", "--as", ""},
		{"runs", "retry", "--no-such-flag", "x"},
		{"runs", "cancel", "x", "--as", " \t"},
		{"runs", "cancel", "x", "--as", "ann\x1b[2J"},
		{"runs", "retry", "x", "--as", "ann\nbob"},
		{"runs", "cancel", "x", "--as", strings.Repeat("a", 201)},
		{"runs", "signal"},
		{"runs", "signal", ""},
		{"runs", "signal", "bad topic"},
		{"runs", "signal", "approval:x", "--payload", "not json"},
		{"runs", "signal", "approval:x", "--payload", ""},
		{"runs", "cancel", "x", "--reason", "red \x1b[31malert"},
		{"runs", "cancel", "x", "--reason", "a\rb"},
		{"runs", "cancel", "x", "--reason", "a\x00b"},
		{"runs", "cancel", "x", "--reason", "\xff"},
		{"runs", "cancel", "x", "--reason", strings.Repeat("a", 5000)},
		{"runs", "cancel", "x", "--reason", strings.Repeat("é", 1001)},
		{"runs", "list", "--version", "-1"},
		{"runs", "list", "--below-version", "-1"},
		{"runs", "list", "--version", "3000000000"},
		{"runs", "list", "--kind", ""},
		{"runs", "list", "--business-key", ""},
		{"runs", "list", "--status", ""},
		{"runs", "get", "x"},
		{"runs", "get", ""},
		{"runs", "get", "0190a5c6-0000-7000-8000-00000000000"},
		{"runs", "cancel", "not-a-run"},
		{"runs", "retry", "a\x00b"},
		{"runs", "get", "0190A5C6-0000-7000-8000-000000000000"},
		{"runs", "cancel", "{0190a5c6-0000-7000-8000-000000000000}"},
		{"runs", "retry", "urn:uuid:0190a5c6-0000-7000-8000-000000000000"},
	} {
		_, err := binary(args...)
		require.Error(t, err, "%v", args)
		require.ErrorAs(t, err, new(runscmd.UsageError), "%v", args)
		require.Equal(t, 2, runscmd.ExitCode(err), "%v", args)
		require.Equal(t, 1, strings.Count(err.Error(), "(see --help)"), "%v: %v", args, err)
	}
	require.Zero(t, opened, "a refused command line opens no engine")
	// A group's refusal names the words it takes.
	for _, args := range [][]string{{"runs"}, {"runs", "bogus"}} {
		_, err := binary(args...)
		require.ErrorContains(t, err, "cancel, get, list, retry or signal", "%v", args)
	}
	_, err := binary("runs", "retry", "x", "--as", "")
	require.ErrorContains(t, err, "--as")
	_, err = binary("runs", "cancel", "x", "--as", "ann\x1b[2J")
	require.ErrorContains(t, err, "--as: must not contain control characters, got U+001B at byte 3")
	_, err = binary("runs", "cancel", "x", "--as", strings.Repeat("é", 201))
	require.ErrorContains(t, err, "--as: must be at most 200 characters, got 201")
	require.Zero(t, opened, "a refused retry opens no engine")
	_, err = binary("runs", "signal", "")
	require.ErrorContains(t, err, "TOPIC: invalid topic: must not be empty")
	_, err = binary("runs", "signal", "approval:x", "--payload", "{not json")
	require.ErrorContains(t, err, "--payload is not valid JSON")
	require.Zero(t, opened, "a refused signal opens no engine")
	_, err = binary("runs", "cancel", "x", "--reason", "red \x1b[31malert")
	require.ErrorContains(t, err, "--reason: must not contain control characters, got U+001B at byte 4")
	_, err = binary("runs", "cancel", "x", "--reason", strings.Repeat("a", 5000))
	require.ErrorContains(t, err, "--reason: must be at most 1000 characters, got 5000")
	require.Zero(t, opened, "a refused cancel opens no engine")
	// A filter given empty (an unset shell variable) is refused, rather
	// than taken for no filter: the page would hold every run.
	_, err = binary("runs", "list", "--business-key", "")
	require.ErrorContains(t, err, "--business-key is empty: leave it out to list the runs of every business key")
	// A RUN no run can have is refused too, rather than reported as a run
	// not found; another spelling of a run's UUID, with the one to type.
	_, err = binary("runs", "get", "nope")
	require.ErrorContains(t, err, `RUN: not a run id (a UUID, as runs list prints it), got "nope"`)
	_, err = binary("runs", "cancel", "0190A5C6-0000-7000-8000-000000000000")
	require.ErrorContains(t, err, `RUN: write the run id as runs list prints it, 0190a5c6-0000-7000-8000-000000000000, got "0190A5C6-0000-7000-8000-000000000000"`)
	require.Zero(t, opened, "a refused RUN opens no engine")
	// Line feeds and tabs are text a reason may hold, and the bound counts
	// characters, not bytes.
	const run = "0190a5c6-0000-7000-8000-000000000000"
	_, err = binary("runs", "cancel", run, "--reason", "two\n\tlines "+strings.Repeat("é", 980))
	require.ErrorContains(t, err, "no engine in this test")
	require.Equal(t, 1, opened)
	opened = 0
	_, err = binary("runs", "signal", "approval:x", "--payload", `{"ok":true}`)
	require.ErrorContains(t, err, "no engine in this test", "a good topic and payload reach the engine")
	require.Equal(t, 1, opened)
	_, err = binary("runs", "get", run)
	require.ErrorContains(t, err, "no engine in this test")
	require.Equal(t, 1, runscmd.ExitCode(err), "a command that ran and failed")
	require.Zero(t, runscmd.ExitCode(nil))

	own := map[string][]string{
		"list":   {"--kind", "--status", "--business-key", "--version", "--below-version", "--after", "--limit"},
		"get":    nil,
		"cancel": {"--as", "--reason"},
		"retry":  {"--as"},
		"signal": {"--payload"},
	}
	// Each --as says what its own command records.
	help, err := binary("runs", "retry", "--help")
	require.NoError(t, err)
	require.NotContains(t, help, "cancel reason", "runs retry --help")
	help, err = binary("runs", "cancel", "--help")
	require.NoError(t, err)
	require.Contains(t, help, "cancel reason", "runs cancel --help")

	for sub, flags := range own {
		help, err := binary("runs", sub, "--help")
		require.NoError(t, err)
		require.Contains(t, help, "--json", sub)
		for other, theirs := range own {
			for _, f := range theirs {
				if slices.Contains(flags, f) {
					require.Contains(t, help, f+" ", "runs %s --help", sub)
				} else if other != sub {
					require.NotContains(t, help, f+" ", "runs %s --help lists runs %s's %s", sub, other, f)
				}
			}
		}
	}
}

// A required flag left out is a usage error too, in any command of a tree
// RefuseUsage was applied to, before the command's own PreRun.
func TestRefuseUsageRequiredFlag(t *testing.T) {
	ran := false
	root := &cobra.Command{Use: "shopctl", SilenceUsage: true, SilenceErrors: true}
	sub := &cobra.Command{Use: "send", Args: cobra.NoArgs,
		PreRun: func(*cobra.Command, []string) { ran = true },
		RunE:   func(*cobra.Command, []string) error { return nil }}
	sub.Flags().String("to", "", "who")
	require.NoError(t, sub.MarkFlagRequired("to"))
	root.AddCommand(sub)
	runscmd.RefuseUsage(root)

	root.SetArgs([]string{"send"})
	err := root.ExecuteContext(context.Background())
	require.ErrorContains(t, err, `required flag(s) "to" not set`)
	require.Equal(t, 2, runscmd.ExitCode(err))
	require.False(t, ran)
	root.SetArgs([]string{"send", "--to", "ann"})
	require.NoError(t, root.ExecuteContext(context.Background()))
	require.True(t, ran, "the command's own PreRun still runs")
}

// runscmd is for any binary: it imports the task layer, never the media
// application nor cmd's internal wiring.
func TestImportsNoMediaApplication(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	require.NoError(t, err)
	const mod = "github.com/taskport/taskport/"
	for _, dep := range strings.Fields(string(out)) {
		for _, media := range []string{"workflows", "activities", "acquisition", "ledger", "outbox", "plans", "qbittorrent",
			"fileimport", "admin", "app", "cmd"} {
			require.False(t, dep == mod+media || strings.HasPrefix(dep, mod+media+"/"), "runscmd imports %s", dep)
		}
	}
}

// listed is an engine holding n runs, newest first, that only lists them:
// enough for the paging of runs list. It refuses a page larger than
// port.MaxRunsPerPage, as the engines do.
type listed struct {
	runscmd.Engine // nil: any other call panics
	runs           []port.RunView
}

func newListed(n int) *listed {
	l := &listed{}
	for i := range n {
		id := fmt.Sprintf("run-%04d", n-i)
		l.runs = append(l.runs, port.RunView{ID: port.RunID(id), Kind: "shop.invoice", Status: port.StatusSucceeded, Cursor: "c-" + id})
	}
	return l
}

func (l *listed) ListRuns(_ context.Context, f port.RunFilter) ([]port.RunView, error) {
	if f.Limit < 0 || f.Limit > port.MaxRunsPerPage {
		return nil, fmt.Errorf("limit %d: %w", f.Limit, port.ErrInvalidInput)
	}
	rest := l.runs
	if f.After != "" {
		i := slices.IndexFunc(rest, func(v port.RunView) bool { return v.Cursor == f.After })
		rest = rest[i+1:]
	}
	return rest[:min(len(rest), cmp.Or(f.Limit, port.DefaultRunsPerPage))], nil
}

// runs list prints the next page's cursor, in the table and in --json,
// only when a run follows the page: a page exactly full (at any size, the
// largest included) is the last when nothing follows it.
func TestRunsListCursorOnlyWhenMoreRuns(t *testing.T) {
	list := func(e *listed, args ...string) (table, next string) {
		binary := func(args ...string) string {
			root := &cobra.Command{Use: "shopctl", SilenceUsage: true, SilenceErrors: true}
			root.AddCommand(runscmd.New(runscmd.Config{Open: func(context.Context) (runscmd.Client, error) {
				return runscmd.Client{Engine: e}, nil
			}}))
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetArgs(append([]string{"runs", "list"}, args...))
			require.NoError(t, root.ExecuteContext(context.Background()), "%v", args)
			return out.String()
		}
		var page runscmd.PageJSON
		out := binary(append(slices.Clone(args), "--json")...)
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		table = binary(args...)
		if page.Next == "" {
			require.NotContains(t, table, "next page", "%v", args)
		} else {
			require.Contains(t, table, "next page: --after "+page.Next+"\n", "%v", args)
		}
		return table, page.Next
	}
	for _, tc := range []struct {
		runs, limit int
		next        string
	}{
		{runs: 3, limit: 3},
		{runs: 4, limit: 3, next: "c-run-0002"},
		{runs: 2, limit: 3},
		{runs: port.DefaultRunsPerPage},
		{runs: port.DefaultRunsPerPage + 1, next: "c-run-0002"},
		{runs: port.MaxRunsPerPage, limit: port.MaxRunsPerPage},
		{runs: port.MaxRunsPerPage + 1, limit: port.MaxRunsPerPage, next: "c-run-0002"},
	} {
		e := newListed(tc.runs)
		_, next := list(e, "--limit", strconv.Itoa(tc.limit))
		require.Equal(t, tc.next, next, "%d runs, --limit %d", tc.runs, tc.limit)
		if next != "" {
			_, next = list(e, "--limit", strconv.Itoa(tc.limit), "--after", next)
			require.Empty(t, next, "%d runs, --limit %d: the second page is the last", tc.runs, tc.limit)
		}
	}
}
