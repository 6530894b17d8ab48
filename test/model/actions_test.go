package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// A seed's shape: a few plans and a short burst of actions, so that one
// seed takes seconds and hundreds fit in a soak.
const (
	maxPlans   = 4
	minActions = 12
	maxActions = 24
	// maxPause bounds the wait for a plan's next status change between two
	// actions.
	maxPause = 1500 * time.Millisecond
)

// action is one thing the model may do now; weight 0 means "not now".
type action struct {
	name   string
	weight func(w *world) int
	do     func(w *world)
}

// actions are every move of the model. Operator actions go through the
// business API (plans.Service), exactly as the CLI and /admin call it.
var actions = []action{
	{"create plan", func(w *world) int { return when(len(w.ps) < maxPlans, 6) }, (*world).createFresh},
	{"create plan on a taken target", func(w *world) int { return when(len(w.ps) > 0 && len(w.ps) < maxPlans+2, 2) }, (*world).createSameTarget},
	{"create plan on a taken info hash", func(w *world) int { return when(len(w.ps) > 0 && len(w.ps) < maxPlans+2, 2) }, (*world).createSameHash},
	{"approve", func(w *world) int { return when(len(w.ps) > 0, 6) }, (*world).approve},
	{"reject", func(w *world) int { return when(len(w.ps) > 0, 1) }, (*world).reject},
	{"cancel", func(w *world) int { return when(len(w.ps) > 0, 2) }, (*world).cancel},
	{"two calls at once", func(w *world) int { return when(len(w.ps) > 0, 2) }, (*world).together},
	{"finish a download", func(w *world) int { return when(len(w.ps) > 0, 5) }, (*world).completeDownload},
	{"webhook receiver fails", func(*world) int { return 1 }, func(w *world) { w.hooks.setFailing(true); w.note("webhook receiver answers 400") }},
	{"webhook receiver recovers", func(*world) int { return 2 }, func(w *world) { w.hooks.setFailing(false); w.note("webhook receiver answers 204") }},
	{"qbittorrent fails a few requests", func(*world) int { return 1 }, (*world).qbtFails},
	{"qbittorrent goes down", func(w *world) int { return when(!w.qbtDown, 1) }, func(w *world) { w.setQBTDown(true) }},
	{"qbittorrent comes back", func(w *world) int { return when(w.qbtDown, 1) }, func(w *world) { w.setQBTDown(false) }},
	{"resolve a decision", func(*world) int { return 3 }, (*world).resolveDecision},
	{"kill a worker", func(w *world) int { return when(len(w.workers) > 0, 2) }, (*world).killWorker},
	{"restart a worker", func(w *world) int { return when(len(w.workers) > 0, 1) }, (*world).restartWorker},
	{"freeze a worker", func(w *world) int { return when(len(w.workers) > 0 && w.frozen == nil, 1) }, (*world).freezeWorker},
	{"thaw the frozen worker", func(w *world) int { return when(w.frozen != nil, 2) }, (*world).thawWorker},
	{"start a worker", func(w *world) int {
		if len(w.workers) == 0 {
			return 4
		}
		return when(len(w.workers) < maxWorkers, 1)
	}, (*world).startWorker},
	{"wait for a plan to move", func(w *world) int { return when(len(w.ps) > 0, 8) }, (*world).pause},
}

func when(ok bool, weight int) int {
	if ok {
		return weight
	}
	return 0
}

// step picks an action by weight and does it.
func (w *world) step() {
	weights := make([]int, len(actions))
	total := 0
	for i, a := range actions {
		weights[i] = a.weight(w)
		total += weights[i]
	}
	n := w.rng.IntN(total)
	for i, a := range actions {
		if n < weights[i] {
			a.do(w)
			return
		}
		n -= weights[i]
	}
}

// pick returns a random plan.
func (w *world) pick() *modelPlan { return w.ps[w.rng.IntN(len(w.ps))] }

func (w *world) pause() {
	if len(w.ps) == 0 {
		return
	}
	p := w.pick()
	d := time.Duration(w.rng.Int64N(int64(maxPause)))
	from, to := w.waitChange(p, d)
	if from != to {
		w.note(fmt.Sprintf("%s moved %s -> %s", p.label, from, to))
	}
}

// newAsset is a file of 64 to 320 KiB; its name is unique in the seed.
func (w *world) newAsset() apptest.Asset {
	return apptest.NewAsset(fmt.Sprintf("s%d-a%d.mkv", w.seed, len(w.ops)), 64<<10+w.rng.IntN(256<<10))
}

func (w *world) createFresh() {
	a := w.newAsset()
	w.create(a, filepath.Join(w.lib, a.Name), nil, "")
}

// createSameTarget asks for another file at a target another plan has (or
// had): refused with a TakenError naming the holder while that plan holds
// it, accepted once it ended without a file.
func (w *world) createSameTarget() {
	src := w.pick()
	w.create(w.newAsset(), src.target, src, "target_path")
}

// createSameHash asks for the same torrent into another target: refused
// while another plan is active on that info hash.
func (w *world) createSameHash() {
	src := w.pick()
	a := src.asset
	w.create(a, filepath.Join(w.lib, fmt.Sprintf("again%d-%s", len(w.ops), a.Name)), src, "info_hash")
}

func (w *world) create(a apptest.Asset, target string, like *modelPlan, field string) {
	before := w.countPlans()
	p, err := w.plans.CreatePlan(w.ctx, plans.NewPlan{
		Title: a.Name, Magnet: a.Magnet(), InfoHash: a.Hash, TargetPath: target,
		ExpectedSize: int64(len(a.Content)), ExpectedSHA256: a.SHA256,
	})
	what := "create plan " + a.Name
	if like != nil {
		what = fmt.Sprintf("create plan %s with the %s of %s", a.Name, field, like.label)
	}
	o := w.record(&op{what: what, err: err})
	if err != nil {
		var taken *acquisition.TakenError
		switch {
		case like == nil:
			w.anomaly("%s: a fresh plan was refused: %v", o, err)
		case !errors.As(err, &taken) || taken.Field != field:
			w.anomaly("%s: not a TakenError on %s: %v", o, field, err)
		case !w.holds(taken.PlanID.String(), field, target, a.Hash):
			w.anomaly("%s: the TakenError names %s, which does not hold that %s", o, taken.PlanID, field)
		}
		if after := w.countPlans(); after != before {
			w.anomaly("%s: refused, yet the plan count went from %d to %d", o, before, after)
		}
		return
	}
	mp := &modelPlan{label: fmt.Sprintf("p%d", len(w.ps)+1), id: p.ID.String(), asset: a, target: target}
	w.ps = append(w.ps, mp)
	w.note(fmt.Sprintf("%s is plan %s", mp.label, mp.id))
	if like != nil {
		// Accepted although it shares a target or hash: every other plan
		// with it must have let it go already (statuses only move on, so
		// what they are now is at least as far as they were).
		for _, q := range w.ps[:len(w.ps)-1] {
			s := w.status(q)
			if field == "target_path" && q.target == target && s.HoldsTarget() ||
				field == "info_hash" && q.asset.Hash == a.Hash && s.HoldsInfoHash() {
				w.anomaly("%s: accepted while %s (%s) holds the %s", o, q.label, s, field)
			}
		}
	}
}

// holds reports whether the plan id is one of the seed's with that target
// or hash.
func (w *world) holds(id, field, target, hash string) bool {
	for _, p := range w.ps {
		if p.id == id {
			return field == "target_path" && p.target == target || field == "info_hash" && p.asset.Hash == hash
		}
	}
	return false
}

func (w *world) countPlans() int {
	var n int
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM plan`).Scan(&n))
	return n
}

// call is an operator call through the business API, prepared so that it
// can run alone or at the same moment as another one.
type call struct {
	what string
	do   func() (plans.Ack, error)
	// check tells after quiescence whether the call, if acknowledged, took
	// effect.
	check func() string
}

// run makes the call and records it.
func (w *world) run(c call) {
	ack, err := c.do()
	w.finish(c, ack, err)
}

// finish records a call that returned.
func (w *world) finish(c call, ack plans.Ack, err error) {
	if o, acked := w.act(c.what, ack, err); acked {
		o.check = c.check
	}
}

// approve and reject mostly pick a plan that awaits approval, and
// sometimes any plan, whose refusal must then be a clear one.
func (w *world) approve() { w.run(w.decideCall(w.pickAwaiting(), true)) }
func (w *world) reject()  { w.run(w.decideCall(w.pickAwaiting(), false)) }
func (w *world) cancel()  { w.run(w.cancelCall(w.pick())) }

func (w *world) pickAwaiting() *modelPlan {
	var awaiting []*modelPlan
	for _, p := range w.ps {
		if w.status(p) == acquisition.AwaitingApproval {
			awaiting = append(awaiting, p)
		}
	}
	if len(awaiting) == 0 || w.rng.IntN(4) == 0 {
		return w.pick()
	}
	return awaiting[w.rng.IntN(len(awaiting))]
}

// together makes two operator calls on one plan at the same moment, as two
// operators (or one and a retried CLI command) would.
func (w *world) together() {
	p := w.pick()
	cs := []call{w.randomCall(p), w.randomCall(p)}
	type result struct {
		ack plans.Ack
		err error
	}
	rs := make([]result, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { rs[i].ack, rs[i].err = c.do() })
	}
	wg.Wait()
	w.note(fmt.Sprintf("the next %d calls ran at the same moment", len(cs)))
	for i, c := range cs {
		w.finish(c, rs[i].ack, rs[i].err)
	}
}

// randomCall is an approve, reject, cancel, or the resolution of one of p's
// open decisions.
func (w *world) randomCall(p *modelPlan) call {
	switch w.rng.IntN(4) {
	case 0:
		return w.decideCall(p, true)
	case 1:
		return w.decideCall(p, false)
	case 2:
		open, err := w.plans.ListDecisions(w.ctx, acquisition.DecisionOpen, 0)
		require.NoError(w.t, err)
		for _, d := range open {
			if d.PlanID.String() == p.id {
				return w.resolveCall(d)
			}
		}
	}
	return w.cancelCall(p)
}

func (w *world) decideCall(p *modelPlan, approve bool) call {
	api, verb := w.plans.Reject, "reject"
	if approve {
		api, verb = w.plans.Approve, "approve"
	}
	return call{what: verb + " " + p.label, do: func() (plans.Ack, error) { return api(w.ctx, p.id, "model", "") }, check: func() string {
		var decision string
		if err := w.pool.QueryRow(w.ctx, `SELECT decision FROM approval WHERE plan_id = $1`, p.id).Scan(&decision); err != nil {
			return fmt.Sprintf("no approval row: %v", err)
		}
		s := w.status(p)
		switch {
		case approve && decision != string(acquisition.Approved):
			return "approval row says " + decision
		case approve && (s == acquisition.AwaitingApproval || s == acquisition.Approved || s == acquisition.Rejected):
			return fmt.Sprintf("approved, but the plan is %s", s)
		case !approve && s != acquisition.Rejected:
			return fmt.Sprintf("rejected, but the plan is %s", s)
		}
		return ""
	}}
}

func (w *world) cancelCall(p *modelPlan) call {
	return call{what: "cancel " + p.label, do: func() (plans.Ack, error) { return w.plans.Cancel(w.ctx, p.id, "model", "model") }, check: func() string {
		s := w.status(p)
		if s == acquisition.Canceled || s == acquisition.Abandoned {
			return ""
		}
		if s == acquisition.Canceling && slices.Contains(w.openDecisionKinds(p), workflows.KindPlanCancel) {
			return ""
		}
		return fmt.Sprintf("cancel acknowledged, but the plan is %s", s)
	}}
}

// completeDownload finishes the torrent of a plan that has one, and reports
// it through the business API (by plan id, or by info hash as qBittorrent's
// run-on-completion hook would).
func (w *world) completeDownload() {
	p := w.pick()
	t, ok := w.torrent(p)
	if !ok || t.Progress == 1 {
		w.pause()
		return
	}
	w.finishDownloadAndReport(p, t)
}

func (w *world) finishDownloadAndReport(p *modelPlan, t qbittorrent.Torrent) {
	w.finishDownload(p, t)
	ref, by := p.id, ""
	if w.rng.IntN(3) == 0 {
		ref, by = p.asset.Hash, " by info hash"
	}
	w.run(call{what: fmt.Sprintf("finish the download of %s and report it%s", p.label, by),
		do: func() (plans.Ack, error) { return w.plans.ReportDownloadComplete(w.ctx, ref, "") }, check: func() string {
			var state string
			if err := w.pool.QueryRow(w.ctx, `SELECT state FROM download_task WHERE plan_id = $1`, p.id).Scan(&state); err != nil {
				return fmt.Sprintf("no download row: %v", err)
			}
			if state != string(acquisition.DownloadCompleted) && state != string(acquisition.DownloadRemoved) {
				return "download reported complete, but it is " + state
			}
			return ""
		}})
}

// qbtFails makes the next few requests to qBittorrent answer 500.
func (w *world) qbtFails() {
	n := 1 + w.rng.IntN(6)
	w.qbt.FailNext(n, 500)
	w.note(fmt.Sprintf("qbittorrent answers 500 to the next %d requests", n))
}

// setQBTDown makes qBittorrent answer 503 to everything, long enough for
// the network kinds to exhaust their attempts and open decisions, or
// brings it back.
func (w *world) setQBTDown(down bool) {
	w.qbtDown = down
	if down {
		w.qbt.FailNext(math.MaxInt32, http.StatusServiceUnavailable)
		w.note("qbittorrent answers 503 to everything")
		return
	}
	w.qbt.FailNext(0, 0)
	w.note("qbittorrent answers again")
}

// resolveDecision resolves an open decision as retry or abandon.
func (w *world) resolveDecision() {
	open, err := w.plans.ListDecisions(w.ctx, acquisition.DecisionOpen, 0)
	require.NoError(w.t, err)
	if len(open) == 0 {
		w.pause()
		return
	}
	w.resolve(open[w.rng.IntN(len(open))])
}

// resolve resolves d as retry or abandon, at random.
func (w *world) resolve(d acquisition.Decision) { w.run(w.resolveCall(d)) }

func (w *world) resolveCall(d acquisition.Decision) call {
	action := acquisition.DecisionRetry
	if w.rng.IntN(2) == 0 {
		action = acquisition.DecisionAbandon
	}
	p := w.byID(d.PlanID)
	return call{what: fmt.Sprintf("resolve the %s decision of %s as %s", d.Kind, p.label, action),
		do: func() (plans.Ack, error) { return w.plans.ResolveDecision(w.ctx, d.ID.String(), action, "model") }, check: func() string {
			var status string
			if err := w.pool.QueryRow(w.ctx, `SELECT status FROM decision WHERE id = $1`, d.ID).Scan(&status); err != nil {
				return err.Error()
			}
			if status != string(action) {
				return "the decision is " + status
			}
			if action == acquisition.DecisionAbandon && d.Kind != workflows.KindNotifyWebhook {
				if s := w.status(p); !s.Final() && !slices.Contains(w.openDecisionKinds(p), workflows.KindPlanCancel) {
					return fmt.Sprintf("abandoned, but the plan is %s", s)
				}
			}
			return ""
		}}
}

func (w *world) byID(id uuid.UUID) *modelPlan {
	for _, p := range w.ps {
		if p.id == id.String() {
			return p
		}
	}
	w.t.Fatalf("decision on plan %s, which the seed did not create", id)
	return nil
}

// act records an operator call through the business API and whether it
// was acknowledged; a refusal must be one the API documents.
func (w *world) act(what string, ack plans.Ack, err error) (*op, bool) {
	o := w.record(&op{what: what, ack: ack, err: err})
	switch {
	case err == nil, clearRefusal(err):
	case unreachable(err):
		// The shared test server ran out of connections: the call never
		// reached the database, so it did nothing, and said so.
		w.note("the call above never reached the database: not the business API's doing")
	default:
		w.anomaly("%s: not a documented refusal", o)
	}
	return o, err == nil
}

func (w *world) openDecisionKinds(p *modelPlan) []port.Kind {
	rows, err := w.pool.Query(w.ctx, `SELECT kind FROM decision WHERE plan_id = $1 AND status = 'open'`, p.id)
	require.NoError(w.t, err)
	var out []port.Kind
	for rows.Next() {
		var k port.Kind
		require.NoError(w.t, rows.Scan(&k))
		out = append(out, k)
	}
	require.NoError(w.t, rows.Err())
	return out
}

// shuffle is a seeded permutation of the plans, for the settle phase.
func shuffle(r *rand.Rand, ps []*modelPlan) []*modelPlan {
	out := slices.Clone(ps)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
