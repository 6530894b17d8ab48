// Package acquisition is the life of an acquisition plan, in one place: its
// statuses, the transitions allowed between them, the kind that runs while a
// plan is in each status, which plans may share a target path or an info
// hash, and what resolving a pending decision does to a plan. This file is
// the whole lifecycle; the other files apply it to the rows.
//
// The package owns the business rows (plan, approval, download_task,
// decision): no other package names those tables in SQL (internal/archtest
// checks it). Every statement is in queries.go, and every driver error
// passes through one map, interpretError (errors.go). The operation ledger
// (asset_operation) is package ledger's, the outbox (outbox_event) package
// outbox's.
//
// Every status change goes through Move (RequestCancel for CancelRequest,
// which also sets the business cancel flag), a guarded
//
//	UPDATE plan SET status = $to WHERE id = $1 AND status = ANY($from)
//
// so a transition that is not allowed is refused with a *TransitionError
// naming the plan and its actual status, never a silent overwrite. No
// transition leaves a final status.
//
// # The lifecycle
//
// The transitions, by the names of the variables below:
//
//	awaiting_approval -Approve-> approved -Submit-> downloading -FinishDownload-> downloaded
//	  -Import-> imported -Verify-> verified -Complete-> completed
//	awaiting_approval -Reject-> rejected
//	any main-chain status but completed -Fail-> failed -Retry(kind)-> the status kind runs in
//	any status not final, not canceling -CancelRequest-> canceling -EndCanceled-> canceled
//	                                                               -EndAbandoned-> abandoned
//
// Each main-chain status after awaiting_approval has one kind that runs
// while the plan is in it and moves it on (Next); a plan awaiting approval
// is moved on by the operator's decision itself (Decide); canceling runs
// plan.cancel; the final statuses completed, canceled and abandoned are
// notified through notify.webhook.
// Repeating a transition that already happened (a step retried after its
// commit) is not an error: Move changes nothing when the plan is already in
// the target status, or further along the main chain.
package acquisition

import (
	"fmt"
	"slices"
	"strings"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// Status is where a plan is in its life (the CHECK constraint of
// plan.status).
type Status string

// The statuses.
const (
	AwaitingApproval Status = "awaiting_approval"
	Approved         Status = "approved"
	Rejected         Status = "rejected"
	Downloading      Status = "downloading"
	Downloaded       Status = "downloaded"
	Imported         Status = "imported"
	Verified         Status = "verified"
	Completed        Status = "completed"
	Canceling        Status = "canceling"
	Canceled         Status = "canceled"
	Failed           Status = "failed"
	Abandoned        Status = "abandoned"
)

// statuses are all the statuses, in lifecycle order.
var statuses = []Status{
	AwaitingApproval, Approved, Downloading, Downloaded, Imported, Verified, Completed,
	Failed, Canceling, Canceled, Rejected, Abandoned,
}

// Statuses returns every status, in lifecycle order.
func Statuses() []Status { return slices.Clone(statuses) }

// Final reports whether nothing more will happen to a plan in s.
func (s Status) Final() bool {
	switch s {
	case Rejected, Completed, Canceled, Abandoned:
		return true
	}
	return false
}

// HoldsTarget reports whether a plan in s keeps its target path to itself:
// from creation until it ends without a library file of its own. A completed
// plan holds its file for good. (Migration 00005's index plan_target_path_held
// is the same rule.)
func (s Status) HoldsTarget() bool { return s != Rejected && s != Canceled && s != Abandoned }

// HoldsInfoHash reports whether a plan in s keeps its info hash to itself:
// while it may still drive a torrent, i.e. until it is final. (Index
// plan_info_hash_active.)
func (s Status) HoldsInfoHash() bool { return !s.Final() }

// link is a status of the main chain and the kind that runs while a plan is
// in it.
type link struct {
	status Status
	kind   port.Kind
}

// chain is the main chain in order. Nothing runs while a plan awaits
// approval: the approval (Decide, in the plans API's transaction) moves it
// on and hands it to download.submit, so no run waits for it.
// approval.await, which did that wait, is retired: the kind stays
// registered for the runs that a release before this one started, and is
// not on the chain (its failure leaves the plan awaiting approval).
var chain = []link{
	{AwaitingApproval, ""},
	{Approved, workflows.KindDownloadSubmit},
	{Downloading, workflows.KindDownloadAwait},
	{Downloaded, workflows.KindAssetImport},
	{Imported, workflows.KindAssetVerify},
	{Verified, workflows.KindDownloadCleanup},
	{Completed, workflows.KindNotifyWebhook},
}

// chainIndex is s's position on the main chain, -1 when s is not on it.
func chainIndex(s Status) int {
	return slices.IndexFunc(chain, func(l link) bool { return l.status == s })
}

// Next is the kind that runs while a plan is in s: the main chain's next
// step, plan.cancel while canceling, and notify.webhook once the plan ended
// completed, canceled or abandoned. It is empty where nothing runs: a plan
// awaiting approval (an operator decides, and Decide hands it on), a
// rejected plan, and a failed one (its decision waits for an operator).
func Next(s Status) port.Kind {
	switch s {
	case Canceling:
		return workflows.KindPlanCancel
	case Canceled, Abandoned:
		return workflows.KindNotifyWebhook
	}
	if i := chainIndex(s); i >= 0 {
		return chain[i].kind
	}
	return ""
}

// MainChain reports whether kind runs on the plan's main chain, and the
// status the plan is in while it runs: a failure of such a kind fails the
// plan, and its retry resumes the plan in that status.
func MainChain(kind port.Kind) (Status, bool) {
	for _, c := range chain {
		if kind != "" && c.kind == kind && !c.status.Final() {
			return c.status, true
		}
	}
	return "", false
}

// SparedByCancel are the kinds a cancel leaves running: they are what a
// cancel starts (compensation and its notification) or carries out.
func SparedByCancel() []port.Kind {
	return []port.Kind{workflows.KindPlanCancel, workflows.KindNotifyWebhook, workflows.KindDecisionResolve}
}

// Transition is a named, allowed status change: from any of a set of
// statuses to one.
type Transition struct {
	name string
	from []Status
	to   Status
}

// Name is the transition as a verb, e.g. "request a cancel".
func (t Transition) Name() string { return t.name }

// To is the status the transition moves a plan to.
func (t Transition) To() Status { return t.to }

// Allows reports whether a plan in s may take the transition.
func (t Transition) Allows(s Status) bool { return slices.Contains(t.from, s) }

// repeats reports whether a plan in s already took the transition: it is in
// the target status, or further along the main chain (a step retried after
// its commit, whose hand-off a later step already carried on).
func (t Transition) repeats(s Status) bool {
	if s == t.to {
		return true
	}
	to, at := chainIndex(t.to), chainIndex(s)
	return to >= 0 && at > to
}

func (t Transition) String() string {
	from := make([]string, len(t.from))
	for i, s := range t.from {
		from[i] = string(s)
	}
	return fmt.Sprintf("%s (%s -> %s)", t.name, strings.Join(from, "|"), t.to)
}

// The transitions. The main chain's hand-offs are one step each; a failure
// can happen anywhere on the chain before completed.
var (
	Approve        = Transition{"approve", []Status{AwaitingApproval}, Approved}
	Reject         = Transition{"reject", []Status{AwaitingApproval}, Rejected}
	Submit         = Transition{"submit the download", []Status{Approved}, Downloading}
	FinishDownload = Transition{"finish the download", []Status{Downloading}, Downloaded}
	Import         = Transition{"import the asset", []Status{Downloaded}, Imported}
	Verify         = Transition{"verify the asset", []Status{Imported}, Verified}
	Complete       = Transition{"complete", []Status{Verified}, Completed}
	Fail           = Transition{"fail", []Status{AwaitingApproval, Approved, Downloading, Downloaded, Imported, Verified}, Failed}
	CancelRequest  = Transition{"request a cancel", filter(func(s Status) bool { return !s.Final() && s != Canceling }), Canceling}
	EndCanceled    = Transition{"end canceled", []Status{Canceling}, Canceled}
	EndAbandoned   = Transition{"end abandoned", []Status{Canceling}, Abandoned}
)

// Retry is the transition of a failed plan back to the status in which the
// main-chain kind runs, when a decision on that kind is resolved as retry.
func Retry(kind port.Kind) (Transition, bool) {
	s, ok := MainChain(kind)
	if kind == workflows.KindApprovalAwait {
		// A plan that a retired approval.await run failed (a release before
		// this one failed the plan with it) awaits its approval again.
		s, ok = AwaitingApproval, true
	}
	if !ok {
		return Transition{}, false
	}
	return Transition{"retry " + string(kind), []Status{Failed}, s}, true
}

// Effect is what carrying out a resolved decision does.
type Effect int

// The effects.
const (
	// Rerun enqueues the failed kind again with its original input; a failed
	// plan resumes in the status that kind runs in.
	Rerun Effect = iota + 1
	// Compensate requests the plan's cancel and runs plan.cancel with the
	// abandoned outcome, which ends the plan abandoned.
	Compensate
	// GiveUp closes the decision and runs nothing: a notification given up,
	// a plan that already ended, or one whose cancel is already under way.
	GiveUp
)

// RetryEffect is what a retry of a decision on kind does to p, or an error
// wrapping ErrConflict when the retry cannot run (and nothing may be
// written). A retry of a cancel-path kind (plan.cancel, notify.webhook) runs
// although the plan has a cancel request: that request is why it runs. A
// retry of a main-chain kind is refused once the plan has a cancel request or
// ended, and a retry of plan.cancel once the plan ended.
func RetryEffect(kind port.Kind, p Plan) (Effect, string, error) {
	switch {
	case kind == workflows.KindNotifyWebhook:
		return Rerun, string(kind) + " is sent again", nil
	case kind == workflows.KindPlanCancel && p.Status.Final():
		return 0, "", conflict("plan %s is already %s: there is nothing left to compensate; abandon the decision to close it", p.ID, p.Status)
	case kind == workflows.KindPlanCancel:
		return Rerun, "plan.cancel compensates again, then ends the plan", nil
	case p.CancelRequested() || p.Status.Final():
		return 0, "", conflict("plan %s is %s (cancel requested: %t): %s cannot run again; abandon the decision to close it",
			p.ID, p.Status, p.CancelRequested(), kind)
	}
	return Rerun, string(kind) + " runs again", nil
}

// AbandonEffect is what abandoning a decision on kind does to p. Abandoning
// a notification gives up that notification only. A plan that ended stays
// as it is; a plan being canceled is ended by its compensation, except when
// that compensation is what failed: then a fresh one runs. Any other plan is
// compensated and ends abandoned.
func AbandonEffect(kind port.Kind, p Plan) (Effect, string) {
	switch {
	case kind == workflows.KindNotifyWebhook:
		return GiveUp, fmt.Sprintf("the notification is given up; plan %s stays %s", p.ID, p.Status)
	case p.Status.Final():
		return GiveUp, fmt.Sprintf("plan %s is already %s: nothing to abandon", p.ID, p.Status)
	case p.Status == Canceling && kind != workflows.KindPlanCancel:
		return GiveUp, fmt.Sprintf("plan %s is being canceled: its compensation ends it", p.ID)
	}
	return Compensate, fmt.Sprintf("plan %s is compensated and ends abandoned", p.ID)
}
