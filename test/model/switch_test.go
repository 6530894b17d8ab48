package model

// The engine-switch rehearsal (issue 27): ADR-002's reconsideration
// trigger made an operation, with the engine lost mid-way, both ways.
//
// Temporal to lease:
//  1. workers run `taskport worker --engine both` against a Temporal dev
//     server of the rehearsal's own (the CLI run as a child, so that it can
//     be SIGKILLed) and plans are put in flight on Temporal at every wait:
//     awaiting approval, waiting for their downloads, and importing (a
//     download reported just before the server dies);
//  2. `taskport engine switch --to lease`, then the Temporal server is
//     SIGKILLed while runs are open on it, and `taskport engine evacuate
//     --from temporal` moves them;
//  3. the model settles (approves, finishes downloads) and checks its
//     invariants, and a second evacuation moves nothing.
//
// Lease to Temporal: a new server, workers on both engines again, plans in
// flight on lease, `taskport engine switch --to temporal`; the workers are
// SIGKILLed mid-drain, Temporal-only workers replace them, and `taskport
// engine evacuate --from lease` moves the lease runs left.
//
// Beyond the model's invariants (check_test.go: one torrent per plan tag,
// every library file with its hash, each ledger operation at most once, no
// outbox row stuck, no plan or run left moving), the rehearsal checks that
// no compensation ran for a completed plan, that each final notification
// was delivered (the model's check) under its Idempotency-Key, so that a
// receiver dropping repeats by it handles it once (repeats are counted in
// the table), that each evacuated run has exactly one replacement,
// and that every run enqueued after a switch (and its refresh bound) went
// to the new engine.
//
// `make test` runs it once (TASKPORT_SWITCH_ROUNDS=N runs N rounds, each
// with a database and servers of its own) and logs a table (go test -v).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/testkit/proc"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/router"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// The rehearsal's shape: plans in flight at the first switch, and how many
// of them await approval or have their download reported before the kill;
// plans in flight at the way back.
const (
	switchPlans         = 40
	switchAwaiting      = 10
	switchImporting     = 10
	switchBackPlans     = 20
	switchBackAwaiting  = 5
	switchBackImporting = 5
)

func TestEngineSwitch(t *testing.T) {
	rounds := envInt(t, "TASKPORT_SWITCH_ROUNDS", 1)
	workerBinary(t)
	var rows []switchRow
	t.Cleanup(func() { t.Log("\n" + switchTable(rows)) })
	for i := range rounds {
		t.Run(fmt.Sprintf("round=%d", i+1), func(t *testing.T) {
			rows = append(rows, rehearseSwitch(t, uint64(i+1))...)
		})
	}
}

// switchRow is one direction of one round.
type switchRow struct {
	round                  uint64
	direction              string
	plans, openAtKill      int
	moved, skipped, failed int
	completed, final       int
	anomalies              int
	// repeats are final webhook events posted again after a delivery (an
	// evacuated or killed notify step that had posted): the same
	// Idempotency-Key, which the receiver checks matches the event, so a
	// receiver that drops repeats by it (the documented contract) handles
	// the event once. Counted, not an anomaly: delivery is at least once.
	repeats int
}

// switchWorld is a model world whose workers' engine flags follow the
// rehearsal: which engine mode, which Temporal server.
type switchWorld struct {
	*world
	mode     string // --engine of the next workers
	temporal string // the Temporal frontend of the next workers and commands
}

func rehearseSwitch(t *testing.T, round uint64) []switchRow {
	sw := &switchWorld{mode: "both"}
	eng := engine{name: "both", args: func(w *world) []string {
		return []string{"--engine", sw.mode, "--temporal-address", sw.temporal, "--temporal-namespace", "default", "--task-queue", w.queue()}
	}}
	sw.world = newWorldOn(t, eng, round, pgtest.NewDatabase(t), workerBinary(t))
	w := sw.world
	var rows []switchRow

	// Temporal to lease.
	srv := startTemporal(t, "temporal1")
	sw.temporal = srv.hostPort
	w.startWorker()
	w.startWorker()
	first := sw.putInFlight(switchPlans, switchAwaiting)
	switched := sw.engineCmd("switch", "--to", "lease", "--as", "rehearsal", "--reason", "temporal lost")
	require.Contains(t, switched, "active engine: lease")
	after := time.Now().Add(router.DefaultRefresh)
	sw.reportDownloads(first[switchAwaiting : switchAwaiting+switchImporting])
	open := sw.openRuns("temporal")
	require.NoError(t, srv.proc.Kill(w.ctx))
	w.note(fmt.Sprintf("kill -9 the Temporal server with %d runs open on it", open))
	rep := sw.evacuate("temporal")
	w.note(fmt.Sprintf("evacuated temporal: %d moved, %d skipped, %d failed", rep.count("moved"), rep.count("skipped"), rep.count("failed")))
	for range 4 { // more plans, on lease from now on
		w.createFresh()
	}
	w.settle()
	sw.check("temporal", after)
	again := sw.evacuate("temporal")
	w.expectNothingMoved(again, "temporal")
	rows = append(rows, sw.row(round, "temporal -> lease", len(first), open, rep))
	if len(w.anomalies) > 0 {
		return sw.fail(rows)
	}

	// Lease to Temporal.
	for _, p := range w.workers {
		require.NoError(t, p.Kill(w.ctx))
	}
	w.workers = nil
	srv2 := startTemporal(t, "temporal2")
	sw.temporal = srv2.hostPort
	w.startWorker()
	w.startWorker()
	before := len(w.ps)
	back := sw.putInFlight(switchBackPlans, switchBackAwaiting)
	sw.engineCmd("switch", "--to", "temporal", "--as", "rehearsal", "--reason", "temporal is back")
	after = time.Now().Add(router.DefaultRefresh)
	sw.reportDownloads(back[switchBackAwaiting : switchBackAwaiting+switchBackImporting])
	open = sw.openRuns("lease")
	for _, p := range w.workers {
		require.NoError(t, p.Kill(w.ctx))
	}
	w.workers = nil
	w.note(fmt.Sprintf("kill -9 every worker with %d runs open on lease", open))
	sw.mode = "temporal"
	w.startWorker()
	w.startWorker()
	rep = sw.evacuate("lease")
	w.note(fmt.Sprintf("evacuated lease: %d moved, %d skipped, %d failed", rep.count("moved"), rep.count("skipped"), rep.count("failed")))
	w.settle()
	sw.check("lease", after)
	w.expectNothingMoved(sw.evacuate("lease"), "lease")
	rows = append(rows, sw.row(round, "lease -> temporal", len(w.ps)-before, open, rep))
	if len(w.anomalies) > 0 {
		return sw.fail(rows)
	}
	t.Logf("round %d: action trace:\n%s", round, strings.Join(w.trace, "\n"))
	return rows
}

// fail reports the anomalies with the trace and returns the rows so far.
func (sw *switchWorld) fail(rows []switchRow) []switchRow {
	rows[len(rows)-1].anomalies = len(sw.anomalies)
	sw.t.Errorf("%d anomalies:\n  - %s\naction trace:\n%s", len(sw.anomalies), strings.Join(sw.anomalies, "\n  - "), strings.Join(sw.trace, "\n"))
	return rows
}

// putInFlight creates n plans, approves all but the first awaiting, and
// waits until a worker has added each approved plan's torrent: runs are
// then parked on the approval or on the download, on the active engine.
func (sw *switchWorld) putInFlight(n, awaiting int) []*modelPlan {
	w := sw.world
	start := len(w.ps)
	for range n {
		w.createFresh()
	}
	ps := w.ps[start:]
	for _, p := range ps[awaiting:] {
		w.run(w.decideCall(p, true))
	}
	for _, p := range ps[awaiting:] {
		w.waitTorrent(p)
	}
	return ps
}

// reportDownloads finishes and reports the downloads of ps, without
// waiting for what follows (their imports are in flight when the engine
// goes).
func (sw *switchWorld) reportDownloads(ps []*modelPlan) {
	for _, p := range ps {
		tor, ok := sw.torrent(p)
		require.True(sw.t, ok, "%s has no torrent", p.label)
		sw.finishDownloadAndReport(p, tor)
	}
}

// openRuns counts the open runs of engine.
func (sw *switchWorld) openRuns(engine string) int {
	var n int
	require.NoError(sw.t, sw.pool.QueryRow(sw.ctx, `SELECT count(*) FROM taskport.run WHERE engine = $1
		AND status IN ('pending', 'running', 'waiting')`, engine).Scan(&n))
	return n
}

// engineCmd runs `taskport engine ...` of the current binary.
func (sw *switchWorld) engineCmd(args ...string) string {
	args = append([]string{"engine"}, args...)
	args = append(args, "--database-url", sw.dbURL, "--log-level", "warn", "--temporal-address", sw.temporal, "--task-queue", sw.queue())
	out, err := exec.Command(workerBinary(sw.t), args...).CombinedOutput()
	require.NoError(sw.t, err, "taskport %s:\n%s", strings.Join(args, " "), out)
	sw.note(fmt.Sprintf("taskport %s", strings.Join(args[:3], " ")))
	return string(out)
}

// evacuation is `taskport engine evacuate --json`'s output.
type evacuation struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Results []struct {
		Result string `json:"result"`
		RunID  string `json:"run_id"`
		NewRun string `json:"new_run_id"`
		Detail string `json:"detail"`
	} `json:"results"`
}

func (e evacuation) count(result string) int {
	n := 0
	for _, r := range e.Results {
		if r.Result == result {
			n++
		}
	}
	return n
}

func (sw *switchWorld) evacuate(from string) evacuation {
	args := []string{"engine", "evacuate", "--from", from, "--as", "rehearsal", "--json",
		"--database-url", sw.dbURL, "--log-level", "error", "--temporal-address", sw.temporal, "--task-queue", sw.queue()}
	out, err := exec.Command(workerBinary(sw.t), args...).Output()
	require.NoError(sw.t, err, "taskport engine evacuate --from %s:\n%s", from, out)
	var e evacuation
	require.NoError(sw.t, json.Unmarshal(out, &e), "%s", out)
	for _, r := range e.Results {
		if r.Result == "failed" {
			sw.anomaly("evacuate %s: run %s failed to move: %s", from, r.RunID, r.Detail)
		}
	}
	return e
}

func (w *world) expectNothingMoved(e evacuation, from string) {
	if n := e.count("moved"); n > 0 {
		w.anomaly("a second evacuation of %s moved %d runs", from, n)
	}
}

// check is the model's invariants and the switch's own: no compensation
// of a completed plan, each evacuated run replaced once, every run enqueued after the switch's bound
// on the new engine (from is the engine switched away from).
func (sw *switchWorld) check(from string, after time.Time) {
	w := sw.world
	w.check()
	for _, r := range w.rowsOf(`SELECT 'plan ' || p.id || ' completed, yet compensated' FROM plan p
		JOIN asset_operation o ON o.plan_id = p.id AND o.op = $1 AND o.result_at IS NOT NULL
		WHERE p.status = $2`, ledger.OpCompensate, acquisition.Completed) {
		w.anomaly("%s", r)
	}
	for _, r := range w.rowsOf(`SELECT 'evacuated run ' || r.id || ' has ' || count(n.id) || ' replacements'
		FROM taskport.run r LEFT JOIN taskport.run n ON n.idempotency_key = 'evacuated:' || r.id::text AND n.kind = r.kind
		WHERE r.evacuated_at IS NOT NULL GROUP BY r.id HAVING count(n.id) <> 1`) {
		w.anomaly("%s", r)
	}
	for _, r := range w.rowsOf(`SELECT 'run ' || kind || ' ' || id || ' enqueued after the switch on ' || engine
		FROM taskport.run WHERE engine = $1 AND created_at > $2`, from, after) {
		w.anomaly("%s", r)
	}
}

func (sw *switchWorld) row(round uint64, direction string, plans, open int, rep evacuation) switchRow {
	r := switchRow{round: round, direction: direction, plans: plans, openAtKill: open,
		moved: rep.count("moved"), skipped: rep.count("skipped"), failed: rep.count("failed"), anomalies: len(sw.anomalies)}
	for _, p := range sw.ps {
		s := sw.status(p)
		switch {
		case s == acquisition.Completed:
			r.completed++
			r.final++
		case s.Final():
			r.final++
		}
		if s == acquisition.Completed || s == acquisition.Canceled || s == acquisition.Abandoned {
			key := workflows.NotifyInput{PlanID: p.id, Event: "plan." + string(s)}.IdempotencyKey()
			r.repeats += max(sw.hooks.deliveredCount(key)-1, 0)
		}
	}
	return r
}

func switchTable(rows []switchRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %-18s %6s %13s %6s %8s %7s %10s %12s %15s %10s\n", "round", "direction", "plans", "open at kill",
		"moved", "skipped", "failed", "completed", "final (all)", "webhook repeats", "anomalies")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-5d %-18s %6d %13d %6d %8d %7d %10d %12d %15d %10d\n", r.round, r.direction, r.plans, r.openAtKill,
			r.moved, r.skipped, r.failed, r.completed, r.final, r.repeats, r.anomalies)
	}
	return b.String()
}

// temporalProc is a dev server run as the rehearsal's child process.
type temporalProc struct {
	proc     *proc.Process
	hostPort string
}

// startTemporal runs `temporal server start-dev` (in memory, headless, the
// adapter's search attributes) and waits until it answers.
func startTemporal(t *testing.T, name string) temporalProc {
	cli, err := devserver.CLIPath()
	require.NoError(t, err)
	hostPort := testkit.FreeAddr(t)
	host, port, err := net.SplitHostPort(hostPort)
	require.NoError(t, err)
	args := append([]string{"server", "start-dev", "--headless", "--ip", host, "--port", port, "--namespace", "default",
		"--log-level", "warn"},
		devserver.ExtraArgs(devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})...)
	p := proc.Start(t, name, cli, args)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: "default"})
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err == nil
	}, 2*time.Minute, 200*time.Millisecond, "%s never answered on %s:\n%s", name, hostPort, p.Output())
	return temporalProc{proc: p, hostPort: hostPort}
}
