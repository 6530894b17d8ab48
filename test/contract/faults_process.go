package contract

// Process faults (issue 6): workers run as child processes
// (test/contract/worker) that a scenario kills (SIGKILL), freezes past their
// lease or heartbeat timeout (SIGSTOP, then SIGCONT), or replaces with a
// worker serving more versions. The kinds are the ledger kinds: every step is a
// side effect through the real operation ledger, so the scenarios assert on
// fault_attempt (physical executions, with the pid that ran them),
// fault_commit (committed effects), fault_fenced (commits the fence refused)
// and asset_operation.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/proc"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

var processFaults = []scenario{
	{"kill_worker_mid_step", killMidStep},
	{"two_workers_race_200_runs", twoWorkersRace},
	{"sigstop_past_lease_commit_fenced", stoppedPastLease},
	{"worker_upgraded_mid_run", upgradedMidRun},
	{"worker_dies_on_every_attempt", diesOnEveryAttempt},
}

const workerPkg = "github.com/taskport/taskport/test/contract/worker"

// expect records a business-truth check (duplicate effect, lost run,
// unfenced stale commit). A false one is an anomaly: the test fails, the
// rest of the checks still run, and soak mode counts it.
func (w *world) expect(ok bool, format string, args ...any) {
	w.t.Helper()
	if !ok {
		msg := fmt.Sprintf(format, args...)
		w.anomalies = append(w.anomalies, msg)
		w.t.Errorf("anomaly: %s", msg)
	}
}

// faultTables creates the fault side tables.
func (w *world) faultTables() {
	w.t.Helper()
	_, err := w.pool.Exec(bg, kinds.LedgerSchema)
	require.NoError(w.t, err)
}

// faultClient returns an engine that is never started: it only enqueues,
// signals and reads, and knows the given versions of kinds.LedgerVersioned
// (all when none).
func (w *world) faultClient(versions ...int) port.TaskEngine {
	w.t.Helper()
	reg := port.NewRegistry()
	require.NoError(w.t, kinds.RegisterLedger(reg, w.pool, versions...))
	return w.factory(w.t, reg)
}

// spawn starts a worker subprocess serving this engine for the scenario and
// waits until it serves. It is killed and reaped when the test ends.
func (w *world) spawn(name string, extra ...string) *proc.Process {
	w.t.Helper()
	require.NotNil(w.t, w.engine.WorkerArgs, "engine %s has no WorkerArgs: no subprocess worker", w.engine.Name)
	bin := proc.Build(w.t, workerPkg)
	args := append(w.engine.WorkerArgs(w.t, w.pool), extra...)
	p := proc.Start(w.t, name, bin, args)
	require.NoError(w.t, p.WaitOutput("ready pid=", 2*time.Minute))
	return p
}

func (w *world) newPlan() uuid.UUID {
	w.t.Helper()
	id, err := uuid.NewV7()
	require.NoError(w.t, err)
	require.NoError(w.t, kinds.NewPlan(bg, w.pool, id))
	return id
}

func (w *world) openFaultGate(key string) {
	w.t.Helper()
	require.NoError(w.t, kinds.OpenGate(bg, w.pool, key))
}

type attempt struct {
	Token string
	Pid   int
}

// attempts returns the physical executions of each step of run id.
func (w *world) attempts(id port.RunID) map[string][]attempt {
	w.t.Helper()
	rows, err := w.pool.Query(bg, `SELECT step, token, pid FROM fault_attempt WHERE run_id = $1 ORDER BY id`, string(id))
	require.NoError(w.t, err)
	out := map[string][]attempt{}
	var step string
	var a attempt
	_, err = pgx.ForEachRow(rows, []any{&step, &a.Token, &a.Pid}, func() error { out[step] = append(out[step], a); return nil })
	require.NoError(w.t, err)
	return out
}

type commit struct {
	Commits int
	Token   string
	Pid     int
}

// commits returns the committed effect of each step of run id.
func (w *world) commits(id port.RunID) map[string]commit {
	w.t.Helper()
	rows, err := w.pool.Query(bg, `SELECT step, commits, token, pid FROM fault_commit WHERE run_id = $1`, string(id))
	require.NoError(w.t, err)
	out := map[string]commit{}
	var step string
	var c commit
	_, err = pgx.ForEachRow(rows, []any{&step, &c.Commits, &c.Token, &c.Pid}, func() error { out[step] = c; return nil })
	require.NoError(w.t, err)
	return out
}

// commitCounts reduces commits to step -> number of commits.
func commitCounts(c map[string]commit) map[string]int {
	out := make(map[string]int, len(c))
	for step, v := range c {
		out[step] = v.Commits
	}
	return out
}

// onceEach is the commit count of a finished kinds.Steps run: every
// step once.
func onceEach() map[string]int {
	out := make(map[string]int, len(kinds.StepNames))
	for _, s := range kinds.StepNames {
		out[s] = 1
	}
	return out
}

// ledgerToken returns the attempt token the ledger recorded for a step of
// plan, and whether the operation has a result.
func (w *world) ledgerToken(plan uuid.UUID, step string) (string, bool) {
	w.t.Helper()
	var tok string
	var done bool
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT attempt_token, result IS NOT NULL FROM asset_operation WHERE plan_id = $1 AND op = $2`,
		plan, step).Scan(&tok, &done))
	return tok, done
}

func (w *world) count(sql string, args ...any) int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.pool.QueryRow(bg, sql, args...).Scan(&n))
	return n
}

// poll reports whether cond held before the suite's wait bound; unlike
// require.Eventually it lets the caller count a miss as an anomaly.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-time.After(pollEvery)
	}
}

// attemptBy returns the attempt of step of run id that process pid began,
// if any.
func (w *world) attemptBy(id port.RunID, step string, pid int) (attempt, bool) {
	w.t.Helper()
	for _, a := range w.attempts(id)[step] {
		if a.Pid == pid {
			return a, true
		}
	}
	return attempt{}, false
}

// waitAttemptBy waits until the process pid has begun step of run id and
// returns that attempt.
func (w *world) waitAttemptBy(id port.RunID, step string, pid int) attempt {
	w.t.Helper()
	var got attempt
	// poll, not require.Eventually: the condition queries with require,
	// which must run on the test's goroutine.
	begun := poll(waitFor, func() bool {
		var ok bool
		got, ok = w.attemptBy(id, step, pid)
		return ok
	})
	require.Truef(w.t, begun, "pid %d never began step %s of run %s", pid, step, id)
	return got
}

// waitFrozen waits until every thread of pid is stopped, so that nothing of
// it runs once the scenario goes on.
func (w *world) waitFrozen(pid int) {
	w.t.Helper()
	require.Eventuallyf(w.t, func() bool {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				return false
			}
			s := string(b)
			if st := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(st) == 0 || st[0] != "T" {
				return false
			}
		}
		return true
	}, waitFor, 5*time.Millisecond, "pid %d did not stop", pid)
}

// waitCommitted waits until the last step of run id has committed, the
// business sign that the run finished; false if it never did (a lost run).
func (w *world) waitCommitted(id port.RunID, step string) bool {
	w.t.Helper()
	return poll(waitFor, func() bool { _, ok := w.commits(id)[step]; return ok })
}

// Kill -9 a worker while the second step runs: the first step does not
// rerun, the killed step reruns on another worker and commits once, the
// third runs once. Worker-b serves before the kill, as the rest of a fleet
// would, so the recovery measured is the engine's, not a process start.
func killMidStep(w *world) {
	w.faultTables()
	client := w.faultClient()
	a := w.spawn("worker-a")
	plan := w.newPlan()
	id := w.enqueue(client, kinds.Steps, kinds.StepsIn{Plan: plan, HoldAt: "s2", Gate: "kill"}, "kill")
	killed := w.waitAttemptBy(id, "s2", a.Pid())
	require.Equal(w.t, 1, w.commits(id)["s1"].Commits, "s1 committed before the kill")
	b := w.spawn("worker-b")

	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	killedAt := w.dbNow()
	require.NoError(w.t, a.Kill(ctx))
	w.t.Logf("injected: SIGKILL worker-a pid %d during step s2 (attempt %s) of run %s", a.Pid(), killed.Token, id)
	w.openFaultGate("kill")

	finished := w.waitCommitted(id, "s3")
	w.expect(finished, "run %s lost: s3 never committed after the kill", id)
	if finished {
		w.waitStatus(client, id, port.StatusSucceeded)
	}
	att := w.attempts(id)
	commits := w.commits(id)
	w.expect(len(att["s1"]) == 1, "s1 ran %d times; a completed step must not rerun", len(att["s1"]))
	w.expect(len(att["s2"]) >= 2, "s2 ran %d times; the killed step must run again", len(att["s2"]))
	w.expect(len(att["s3"]) == 1, "s3 ran %d times, want 1", len(att["s3"]))
	w.expect(maps.Equal(commitCounts(commits), onceEach()), "commits %v, want each step committed exactly once", commitCounts(commits))
	w.expect(commits["s2"].Pid == b.Pid(), "s2 committed by pid %d, want worker-b pid %d", commits["s2"].Pid, b.Pid())
	tok, done := w.ledgerToken(plan, "s2")
	w.expect(done && tok == commits["s2"].Token && tok != killed.Token,
		"ledger s2: token %s done %v; want the rerun's token %s, not the killed %s", tok, done, commits["s2"].Token, killed.Token)
	w.t.Logf("checked: s1 executions %d, s2 executions %d (killed + %d rerun), s3 executions %d; commits %v",
		len(att["s1"]), len(att["s2"]), len(att["s2"])-1, len(att["s3"]), commitCounts(commits))
	if finished && commits["s2"].Pid == b.Pid() {
		w.measureRecovery(id, killedAt)
	}
}

// dbNow is Postgres's clock: a fault's instant is read on the clock that
// stamps the commits it is compared with (fault_commit.committed_at).
func (w *world) dbNow() time.Time {
	w.t.Helper()
	var now time.Time
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// Recovery measures, from a fault on the worker running s2 of a Steps run
// to a commit by the worker that took over, on Postgres's clock.
const (
	// measureTakeover: to s2's commit, the step taken over.
	measureTakeover = "takeover s2"
	// measureFinish: to s3's commit, the run finished.
	measureFinish = "finish s3"
)

// measureRecovery records how long after the fault at s2 and s3 of run
// id committed (the commits' own timestamps; nothing is asserted on them).
func (w *world) measureRecovery(id port.RunID, at time.Time) {
	w.t.Helper()
	var s2, s3 time.Time
	require.NoError(w.t, w.pool.QueryRow(bg, `
SELECT (SELECT committed_at FROM fault_commit WHERE run_id = $1 AND step = 's2'),
       (SELECT committed_at FROM fault_commit WHERE run_id = $1 AND step = 's3')`, string(id)).Scan(&s2, &s3))
	w.measure(measureTakeover, s2.Sub(at))
	w.measure(measureFinish, s3.Sub(at))
	w.logTimeline(id, at)
}

// logTimeline logs when each attempt of s2 and s3 of run id began after
// the fault, by which process and with which epoch of its fencing token:
// on Temporal the epoch is the activity's attempt, so a takeover at epoch
// 4 says two attempts were handed to the frozen worker's open polls and
// never began; a gap between s2's commit and s3's first attempt is the
// workflow task's part.
func (w *world) logTimeline(id port.RunID, at time.Time) {
	w.t.Helper()
	rows, err := w.pool.Query(bg, `
SELECT a.step, a.token, a.pid, a.begun_at, c.committed_at
FROM fault_attempt a LEFT JOIN fault_commit c ON c.run_id = a.run_id AND c.step = a.step AND c.token = a.token
WHERE a.run_id = $1 AND a.step IN ('s2', 's3') ORDER BY a.id`, string(id))
	require.NoError(w.t, err)
	var (
		events      []string
		step, token string
		pid         int
		begun       time.Time
		committed   *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&step, &token, &pid, &begun, &committed}, func() error {
		e := fmt.Sprintf("%s epoch %s pid %d began %+.1fs", step, tokenEpoch(token, step), pid, begun.Sub(at).Seconds())
		if committed != nil {
			e += fmt.Sprintf(", committed %+.1fs", committed.Sub(at).Seconds())
		}
		events = append(events, e)
		return nil
	})
	require.NoError(w.t, err)
	w.t.Logf("timeline from the fault: %s", strings.Join(events, "; "))
}

// tokenEpoch reads the epoch of a fencing token of step as written
// (port.FencingToken.String: scope#epoch[#nonce], the scope ending in the
// step); "?" if it is not there.
func tokenEpoch(token, step string) string {
	_, rest, ok := strings.Cut(token, "/"+step+"#")
	if !ok {
		return "?"
	}
	epoch, _, _ := strings.Cut(rest, "#")
	return epoch
}

// measure records a duration the scenario measured; soak mode tabulates
// them per scenario and engine. No test fails on one.
func (w *world) measure(name string, d time.Duration) {
	w.t.Helper()
	if w.durations == nil {
		w.durations = map[string]time.Duration{}
	}
	w.durations[name] = d
	w.t.Logf("measured: %s %s", name, d.Round(time.Millisecond))
}

// Two workers race on 200 runs of a 3-step kind: each step's side effect
// happens exactly once and no run is lost.
func twoWorkersRace(w *world) {
	const runs = 200
	w.faultTables()
	client := w.faultClient()
	a := w.spawn("worker-a")
	b := w.spawn("worker-b")
	ids := make([]port.RunID, 0, runs)
	started := time.Now()
	for i := range runs {
		ids = append(ids, w.enqueue(client, kinds.Steps, kinds.StepsIn{Plan: w.newPlan()}, "race-"+strconv.Itoa(i)))
	}
	last := kinds.StepNames[len(kinds.StepNames)-1]
	poll(3*waitFor, func() bool {
		return w.count(`SELECT count(*) FROM fault_commit WHERE step = $1`, last) == runs
	})
	elapsed := time.Since(started)

	steps := runs * len(kinds.StepNames)
	lost := runs - w.count(`SELECT count(*) FROM fault_commit WHERE step = $1`, last)
	effects := w.count(`SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM fault_attempt) e`)
	dupEffects := w.count(`SELECT count(*) FROM (SELECT 1 FROM fault_attempt GROUP BY run_id, step HAVING count(*) > 1) d`)
	commitRows := w.count(`SELECT count(*) FROM fault_commit WHERE commits = 1`)
	dupCommits := w.count(`SELECT count(*) FROM fault_commit WHERE commits > 1`)
	results := w.count(`SELECT count(*) FROM asset_operation WHERE result IS NOT NULL`)
	fenced := w.count(`SELECT count(*) FROM fault_fenced`)
	w.expect(lost == 0, "%d of %d runs lost (no committed %s)", lost, runs, last)
	w.expect(effects == steps && dupEffects == 0, "%d effect rows (want %d), %d executed more than once", effects, steps, dupEffects)
	w.expect(commitRows == steps && dupCommits == 0, "%d steps committed once (want %d), %d committed more than once", commitRows, steps, dupCommits)
	w.expect(results == steps, "ledger holds %d results, want %d", results, steps)
	if lost == 0 {
		for _, id := range ids {
			w.waitStatus(client, id, port.StatusSucceeded)
		}
	}
	byA := w.count(`SELECT count(*) FROM fault_attempt WHERE pid = $1`, a.Pid())
	byB := w.count(`SELECT count(*) FROM fault_attempt WHERE pid = $1`, b.Pid())
	w.t.Logf("injected: %d runs x %d steps on worker-a pid %d and worker-b pid %d (steps executed: %d by a, %d by b) in %s",
		runs, len(kinds.StepNames), a.Pid(), b.Pid(), byA, byB, elapsed.Round(time.Millisecond))
	w.t.Logf("checked: effect rows %d (duplicates %d), committed once %d (duplicates %d), ledger results %d, fenced %d, lost runs %d",
		effects, dupEffects, commitRows, dupCommits, results, fenced, lost)
}

// Freeze a worker (SIGSTOP) in a stubborn step that has begun its ledger
// attempt, past its lease or heartbeat timeout; another worker, serving
// since before the freeze, takes the step over with a newer token and
// commits; after SIGCONT the frozen attempt tries to commit and the
// ledger's fence refuses it.
func stoppedPastLease(w *world) {
	w.faultTables()
	client := w.faultClient()
	a := w.spawn("worker-a")
	plan := w.newPlan()
	id := w.enqueue(client, kinds.Steps, kinds.StepsIn{Plan: plan, HoldAt: "s2", Gate: "stop", Stubborn: true}, "stop")
	stale := w.waitAttemptBy(id, "s2", a.Pid())
	tok, done := w.ledgerToken(plan, "s2")
	require.Equal(w.t, stale.Token, tok, "worker-a's attempt is the one the ledger recorded")
	require.False(w.t, done)
	b := w.spawn("worker-b")

	stoppedAt := w.dbNow()
	require.NoError(w.t, a.Stop())
	w.waitFrozen(a.Pid())
	// The gate opens only once worker-a is frozen: its attempt cannot
	// finish before the takeover.
	w.openFaultGate("stop")
	finished := w.waitCommitted(id, "s3")
	w.expect(finished, "run %s lost: s3 never committed while worker-a was stopped", id)
	if finished {
		w.waitStatus(client, id, port.StatusSucceeded)
	}
	stopped := w.dbNow().Sub(stoppedAt)
	require.NoError(w.t, a.Cont())
	w.t.Logf("injected: SIGSTOP worker-a pid %d during step s2 (attempt %s) of run %s for %s, then SIGCONT",
		a.Pid(), stale.Token, id, stopped.Round(time.Millisecond))

	staleFenced := poll(waitFor, func() bool {
		return w.count(`SELECT count(*) FROM fault_fenced WHERE run_id = $1 AND step = 's2' AND token = $2`, string(id), stale.Token) > 0
	})
	w.expect(staleFenced, "worker-a's stale commit of s2 (%s) was never refused by the fence", stale.Token)
	commits := w.commits(id)
	att := w.attempts(id)
	fencedAll := w.count(`SELECT count(*) FROM fault_fenced WHERE run_id = $1`, string(id))
	w.expect(maps.Equal(commitCounts(commits), onceEach()), "commits %v, want each step committed exactly once", commitCounts(commits))
	w.expect(commits["s2"].Token != stale.Token && commits["s2"].Pid != a.Pid(),
		"s2 was committed by the stale attempt %s (pid %d)", commits["s2"].Token, commits["s2"].Pid)
	tok, done = w.ledgerToken(plan, "s2")
	w.expect(done && tok == commits["s2"].Token, "ledger s2: token %s done %v, want the takeover's %s", tok, done, commits["s2"].Token)
	w.expect(len(att["s1"]) == 1 && len(att["s3"]) == 1, "s1 ran %d times, s3 %d times; want once each", len(att["s1"]), len(att["s3"]))
	w.t.Logf("checked: s2 executions %d (stale + takeover on worker-b pid %d with %s); fenced commits %d (stale attempt fenced: %v); commits %v",
		len(att["s2"]), b.Pid(), commits["s2"].Token, fencedAll, staleFenced, commitCounts(commits))
	if finished && commits["s2"].Pid == b.Pid() {
		w.measureRecovery(id, stoppedAt)
	}
}

// A v1 run parked in a wait on a v1 worker; the worker is killed and
// replaced by one serving v1 and v2: the old run finishes on v1 code, new
// runs use v2.
func upgradedMidRun(w *world) {
	w.faultTables()
	clientV1 := w.faultClient(1)
	a := w.spawn("worker-a", "-versions", "1")
	in := kinds.VersionedIn{Plan: w.newPlan(), Topic: "ft:upgrade", TimeoutMS: (10 * time.Minute).Milliseconds()}
	old := w.enqueue(clientV1, kinds.LedgerVersioned, in, "old")
	w.waitStatus(clientV1, old, port.StatusWaiting)
	require.Equal(w.t, map[string]int{"v1-a": 1}, commitCounts(w.commits(old)))

	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	require.NoError(w.t, a.Kill(ctx))
	w.t.Logf("injected: SIGKILL worker-a pid %d (serving v1) while run %s waits on %s", a.Pid(), old, in.Topic)
	b := w.spawn("worker-b", "-versions", "1,2")

	clientV2 := w.faultClient(1, 2)
	fresh := w.enqueue(clientV2, kinds.LedgerVersioned, kinds.VersionedIn{Plan: w.newPlan(), Topic: "ft:fresh", TimeoutMS: 1000}, "new")
	w.waitStatus(clientV2, fresh, port.StatusSucceeded)
	w.signalUntilDelivered(clientV2, in.Topic)
	v := w.waitStatus(clientV2, old, port.StatusSucceeded)
	require.Equal(w.t, 1, v.Version)
	vf, err := clientV2.Get(bg, fresh)
	require.NoError(w.t, err)
	require.Equal(w.t, 2, vf.Version)

	oldCommits, freshCommits := w.commits(old), w.commits(fresh)
	oldAtt := w.attempts(old)
	w.expect(maps.Equal(commitCounts(oldCommits), map[string]int{"v1-a": 1, "v1-b": 1}), "old run commits %v, want v1 steps once", commitCounts(oldCommits))
	w.expect(maps.Equal(commitCounts(freshCommits), map[string]int{"v2-a": 1, "v2-b": 1}), "new run commits %v, want v2 steps once", commitCounts(freshCommits))
	w.expect(len(oldAtt["v1-a"]) == 1, "v1-a ran %d times; it completed before the upgrade", len(oldAtt["v1-a"]))
	w.expect(oldCommits["v1-b"].Pid == b.Pid(), "v1-b ran on pid %d, want the upgraded worker-b pid %d", oldCommits["v1-b"].Pid, b.Pid())
	w.t.Logf("checked: old run %s (v%d) commits %v, v1-b on worker-b pid %d; new run %s (v%d) commits %v",
		old, v.Version, commitCounts(oldCommits), oldCommits["v1-b"].Pid, fresh, vf.Version, commitCounts(freshCommits))
}

// decision is the row Poison's handler opened for a step that failed for
// good.
type decision struct {
	Step         string
	Attempts     int
	NonRetryable bool
	Reason       string
}

func (w *world) decision(id port.RunID) (decision, bool) {
	w.t.Helper()
	var d decision
	err := w.pool.QueryRow(bg, `SELECT step, attempts, non_retryable, reason FROM fault_decision WHERE run_id = $1`, string(id)).
		Scan(&d.Step, &d.Attempts, &d.NonRetryable, &d.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return decision{}, false
	}
	require.NoError(w.t, err)
	return d, true
}

// A poison step: the worker running it is killed (SIGKILL) on every attempt.
// Once the step is out of attempts, the next worker runs the handler, whose
// Step returns *port.StepError: it opens its decision and the run fails.
// Both engines must reach exactly that business outcome (the lease engine
// used to mark the run dead without calling the handler, leaving no decision).
func diesOnEveryAttempt(w *world) {
	w.faultTables()
	client := w.faultClient()
	plan := w.newPlan()
	id := w.enqueue(client, kinds.Poison, kinds.PoisonIn{Plan: plan}, "poison")
	var killed []int
	var last int
	for i := 0; ; i++ {
		// Each attempt costs a worker; a step that keeps being retried
		// past its budget would loop here.
		require.LessOrEqualf(w.t, i, kinds.PoisonAttempts, "the poison step was attempted beyond its %d attempts", kinds.PoisonAttempts)
		wk := w.spawn(fmt.Sprintf("worker-%d", i))
		last = wk.Pid()
		// This worker either begins the next attempt of the poison step,
		// or (the step being out of attempts) runs the handler, which
		// opens the decision.
		var began bool
		settled := poll(waitFor, func() bool {
			_, began = w.attemptBy(id, "poison", wk.Pid())
			_, decided := w.decision(id)
			return began || decided
		})
		require.Truef(w.t, settled, "worker-%d pid %d neither began the poison step nor opened a decision", i, wk.Pid())
		if !began {
			break
		}
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		require.NoError(w.t, wk.Kill(ctx))
		cancel()
		killed = append(killed, wk.Pid())
		w.t.Logf("injected: SIGKILL worker-%d pid %d during attempt %d of step poison of run %s", i, wk.Pid(), len(killed), id)
	}
	view := w.waitStatus(client, id, port.StatusFailed, port.StatusSucceeded, port.StatusCanceled)

	d, decided := w.decision(id)
	att := w.attempts(id)["poison"]
	tok, done := w.ledgerToken(plan, "poison")
	w.expect(view.Status == port.StatusFailed, "run %s ended %s, want failed: the handler returns the step's error", id, view.Status)
	w.expect(decided, "no decision opened for run %s: the handler never saw the *port.StepError", id)
	w.expect(d.Step == "poison" && !d.NonRetryable && d.Attempts == kinds.PoisonAttempts,
		"decision %+v, want step poison, retryable, %d attempts", d, kinds.PoisonAttempts)
	w.expect(len(att) == len(killed) && len(att) <= kinds.PoisonAttempts,
		"the poison step began %d times for %d killed workers, budget %d", len(att), len(killed), kinds.PoisonAttempts)
	for _, a := range att {
		w.expect(slices.Contains(killed, a.Pid), "attempt %s ran on pid %d, which was not killed", a.Token, a.Pid)
	}
	w.expect(!done, "ledger poison: token %s has a result; no attempt finished", tok)
	w.t.Logf("checked: %d attempts, each on a killed worker %v; decision opened on pid %d: %q; run %s",
		len(att), killed, last, d.Reason, view.Status)
}
