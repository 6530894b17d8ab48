package model

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// settleWait bounds the wait for quiescence. It covers the slowest
// recoveries the seed can cause: a lease lost with a killed worker (10s),
// an outbox claim lost with it (30s), a Temporal activity lost with it
// (its one-minute start-to-close timeout), and a few retry backoffs.
const settleWait = 3 * time.Minute

// decisionRounds bounds the rounds of the decision phase of settle.
const decisionRounds = 3

// settle ends the seed's story. First the operator approves whatever awaits
// approval and qBittorrent finishes whatever downloads, until nothing moves
// (the receiver and qBittorrent stay as the actions left them, so plans
// fail into decisions). Then, in rounds: qBittorrent comes back, the
// receiver too (in the first round only sometimes), and every open decision
// is resolved as retry or abandon, now and then with one more cancel; until
// no decision is open or the rounds run out. A plan may end waiting on an
// open decision.
func (w *world) settle() {
	if w.frozen != nil {
		w.thawWorker()
	}
	if len(w.workers) == 0 {
		w.startWorker()
	}
	w.note("settle: approve what awaits approval, finish what downloads")
	if !w.drain() {
		return
	}
	for round := 1; round <= decisionRounds; round++ {
		if w.qbtDown {
			w.setQBTDown(false)
		}
		failing := round == 1 && w.rng.IntN(3) == 0
		w.hooks.setFailing(failing)
		w.note(fmt.Sprintf("settle round %d: webhook receiver failing: %t", round, failing))
		open, err := w.plans.ListDecisions(w.ctx, acquisition.DecisionOpen, 0)
		require.NoError(w.t, err)
		if len(open) == 0 && !failing {
			return
		}
		for _, d := range open {
			w.resolve(d)
		}
		if w.rng.IntN(4) == 0 {
			w.cancel()
		}
		if !w.drain() {
			return
		}
	}
}

// drain approves and finishes downloads until nothing moves; false when
// that does not happen within settleWait (an anomaly).
func (w *world) drain() bool {
	deadline := time.Now().Add(settleWait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range shuffle(w.rng, w.ps) {
			switch w.status(p) {
			case acquisition.AwaitingApproval:
				w.run(w.decideCall(p, true))
			case acquisition.Downloading:
				if t, ok := w.torrent(p); ok && t.Progress < 1 {
					w.finishDownloadAndReport(p, t)
				}
			}
		}
		busy := w.busy()
		if len(busy) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			w.anomaly("not quiescent %s after the last action:\n      %s", settleWait, strings.Join(busy, "\n      "))
			return false
		}
		<-tick.C
	}
}

// busy lists what still moves, or waits with nobody to wake it: a plan
// neither final nor waiting on an open decision, an outbox row still
// pending, a run not terminal.
func (w *world) busy() []string {
	var out []string
	for _, p := range w.ps {
		if s := w.status(p); !s.Final() && len(w.openDecisionKinds(p)) == 0 {
			out = append(out, fmt.Sprintf("%s is %s with no open decision", p.label, s))
		}
	}
	out = append(out, w.rowsOf(`SELECT 'outbox row pending: ' || action || ' ' || kind || topic || ' ' || idempotency_key
		|| ' (attempts ' || attempts || ', last error ' || last_error || ')'
		FROM outbox_event WHERE status = 'pending' ORDER BY created_at`)...)
	out = append(out, w.rowsOf(`SELECT 'run not terminal: ' || kind || ' ' || id || ' ' || status || ' at ' || current_step
		|| ' (attempts ' || attempts || ', last error ' || last_error || ')'
		FROM taskport.run WHERE status NOT IN ('succeeded', 'failed', 'canceled') ORDER BY created_at`)...)
	return out
}

// check is the invariants of issue 10, on the business tables and the
// file system, once nothing moves.
func (w *world) check() {
	for _, b := range w.busy() {
		w.anomaly("at rest: %s", b)
	}
	w.checkLibrary()
	for _, p := range w.ps {
		w.checkPlan(p)
	}
	for _, r := range w.rowsOf(`SELECT 'plan ' || plan_id || ' op ' || op || ' has ' || count(*) || ' ledger rows'
		FROM asset_operation GROUP BY plan_id, op HAVING count(*) > 1`) {
		w.anomaly("ledger: %s", r)
	}
	for _, r := range w.rowsOf(`SELECT 'outbox row failed: ' || action || ' ' || kind || topic || ' ' || idempotency_key || ': ' || last_error
		FROM outbox_event WHERE status = 'failed'`) {
		w.anomaly("%s", r)
	}
	// Nothing was written for a refused create: every plan, and every
	// outbox row about a plan, belongs to a plan the seed created.
	ids := make([]string, len(w.ps))
	for i, p := range w.ps {
		ids[i] = p.id
	}
	for _, r := range w.rowsOf(`SELECT 'stray plan ' || id || ' ' || title FROM plan WHERE NOT (id::text = ANY($1))`, ids) {
		w.anomaly("%s", r)
	}
	for _, r := range w.rowsOf(`SELECT 'stray outbox row ' || idempotency_key FROM outbox_event
		WHERE business_key <> '' AND NOT (business_key = ANY($1))`, ids) {
		w.anomaly("%s", r)
	}
	for _, b := range w.hooks.badRequests() {
		w.anomaly("webhook receiver got a malformed notification: %s", b)
	}
	for _, o := range w.ops {
		if o.check == nil {
			continue
		}
		if msg := o.check(); msg != "" {
			w.anomaly("acknowledged action without its effect: %s: %s", o, msg)
		}
	}
}

// checkPlan: one torrent added per plan, none left once it ended, and the
// notification of its final status delivered or waiting on a decision.
func (w *world) checkPlan(p *modelPlan) {
	s := w.status(p)
	added := w.qbt.Added(qbittorrent.ManagedTag(p.id))
	var submitted bool
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT EXISTS (SELECT FROM asset_operation WHERE plan_id = $1 AND op = $2 AND result_at IS NOT NULL)`,
		p.id, ledger.OpSubmit).Scan(&submitted))
	switch {
	case added > 1:
		w.anomaly("%s (%s): %d torrents added to qBittorrent", p.label, s, added)
	case submitted && added == 0:
		w.anomaly("%s (%s): submit committed, but no torrent was added", p.label, s)
	}
	if _, ok := w.torrent(p); ok && s.Final() {
		w.anomaly("%s is %s, but qBittorrent still has its torrent", p.label, s)
	}
	if s != acquisition.Completed && s != acquisition.Canceled && s != acquisition.Abandoned {
		return
	}
	key := workflows.NotifyInput{PlanID: p.id, Event: "plan." + string(s)}.IdempotencyKey()
	if w.hooks.deliveredCount(key) > 0 {
		return
	}
	var decided bool
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT EXISTS (SELECT FROM decision WHERE plan_id = $1 AND kind = $2 AND status IN ('open', 'abandon'))`,
		p.id, workflows.KindNotifyWebhook).Scan(&decided))
	if !decided {
		w.anomaly("%s is %s, but %s was never delivered and no decision is open or abandoned on it", p.label, s, key)
	}
}

// checkLibrary: the library holds exactly the files of the completed plans,
// each as its plan expects it, and nothing else (no temp file, no file of a
// plan that ended without one).
func (w *world) checkLibrary() {
	want := map[string]*modelPlan{}
	for _, p := range w.ps {
		if w.status(p) == acquisition.Completed {
			want[p.target] = p
		}
	}
	found := map[string]bool{}
	err := filepath.WalkDir(w.lib, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		found[path] = true
		p, ok := want[path]
		if !ok {
			w.anomaly("library: unexpected file %s", filepath.Base(path))
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != p.asset.SHA256 {
			w.anomaly("library: %s of completed %s changed: %d bytes, not %s's", filepath.Base(path), p.label, len(b), p.asset.Name)
		}
		return nil
	})
	require.NoError(w.t, err)
	for path, p := range want {
		if !found[path] {
			w.anomaly("library: the file of completed %s is missing: %s", p.label, filepath.Base(path))
		}
	}
}

// rowsOf returns the single text column of a query's rows.
func (w *world) rowsOf(query string, args ...any) []string {
	rows, err := w.pool.Query(w.ctx, query, args...)
	require.NoError(w.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(w.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(w.t, rows.Err())
	slices.Sort(out)
	return out
}
