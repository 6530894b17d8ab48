package contract

import (
	"maps"
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// A decision retry takes an operation over while the old run's attempt is
// still stuck in it: the old attempt's commit is fenced, and its next
// attempt's Begin is refused too (the old run is an older generation), so
// the superseded run cannot take the operation back from the live one. The
// kinds are the ledger kinds: every step is a real ledger operation of the plan.
func supersededRunCannotTakeOver(w *world) {
	w.faultTables()
	reg := port.NewRegistry()
	require.NoError(w.t, kinds.RegisterLedger(reg, w.pool))
	e := w.start(reg, port.StartOptions{})
	plan := w.newPlan()
	old := w.enqueue(e, kinds.Steps, kinds.StepsIn{Plan: plan, HoldAt: "s1", Gate: "old"}, "old")
	require.Truef(w.t, poll(waitFor, func() bool { return len(w.attempts(old)["s1"]) > 0 }), "run %s never began s1", old)
	stale := w.attempts(old)["s1"][0]

	// The retry of the same request (a decision retry re-enqueues the kind
	// with the failed run's input under a new key): the same plan, so the
	// same ledger operations.
	retry := w.enqueue(e, kinds.Steps, kinds.StepsIn{Plan: plan, HoldAt: "s1", Gate: "new"}, "retry")
	require.Truef(w.t, poll(waitFor, func() bool { return len(w.attempts(retry)["s1"]) > 0 }), "run %s never began s1", retry)
	live := w.attempts(retry)["s1"][0]
	tok, _ := w.ledgerToken(plan, "s1")
	require.Equal(w.t, live.Token, tok, "the retry took s1 over")
	w.t.Logf("injected: run %s holds s1 (attempt %s) while its retry %s took it over (attempt %s)", old, stale.Token, retry, live.Token)

	// The old attempt finishes: its commit is fenced, and every later
	// attempt of the old run must be refused at Begin.
	w.openFaultGate("old")
	oldView := w.waitStatus(e, old, port.StatusFailed, port.StatusSucceeded)
	tok, done := w.ledgerToken(plan, "s1")
	w.expect(oldView.Status == port.StatusFailed && strings.Contains(oldView.LastError, "fenced"),
		"old run %s ended %s (%q), want failed: every attempt of it is fenced", old, oldView.Status, oldView.LastError)
	w.expect(len(w.attempts(old)["s1"]) == 1, "old run executed s1 %d times; a refused Begin must not execute it again", len(w.attempts(old)["s1"]))
	w.expect(tok == live.Token && !done, "ledger s1: token %s done %v; want the live retry's %s, still open", tok, done, live.Token)
	w.expect(len(w.commits(old)) == 0, "the old run committed %v", commitCounts(w.commits(old)))
	staleFenced := w.count(`SELECT count(*) FROM fault_fenced WHERE run_id = $1 AND step = 's1' AND token = $2`, string(old), stale.Token)
	w.expect(staleFenced == 1, "the old attempt's commit was fenced %d times, want 1", staleFenced)

	w.openFaultGate("new")
	w.waitStatus(e, retry, port.StatusSucceeded)
	commits := w.commits(retry)
	tok, done = w.ledgerToken(plan, "s1")
	w.expect(maps.Equal(commitCounts(commits), onceEach()), "retry commits %v, want each step once", commitCounts(commits))
	w.expect(done && tok == live.Token && commits["s1"].Token == live.Token, "ledger s1: token %s done %v; want the retry's %s", tok, done, live.Token)
	w.t.Logf("checked: old run %s: %s (%q), s1 executed %d time(s); retry %s: commits %v, ledger s1 %s",
		old, oldView.Status, oldView.LastError, len(w.attempts(old)["s1"]), retry, commitCounts(commits), tok)
}
