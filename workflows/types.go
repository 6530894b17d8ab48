// Package workflows holds the nine task kinds of the acquisition domain,
// written once against port.Flow: no engine import, no I/O, no clocks, no
// goroutines. Every side effect is an activity declared here and bound in
// app/ to a body in activities/, and every hand-over to the next kind is
// enqueued by the last step of a kind in its own business commit (ADR 2.1:
// the engine's EnqueueTx, or an outbox row).
package workflows

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/taskport/taskport/port"
)

// The nine kinds.
const (
	KindApprovalAwait   port.Kind = "approval.await"
	KindDownloadSubmit  port.Kind = "download.submit"
	KindDownloadAwait   port.Kind = "download.await"
	KindAssetImport     port.Kind = "asset.import"
	KindAssetVerify     port.Kind = "asset.verify"
	KindDownloadCleanup port.Kind = "download.cleanup"
	KindPlanCancel      port.Kind = "plan.cancel"
	KindDecisionResolve port.Kind = "decision.resolve"
	KindNotifyWebhook   port.Kind = "notify.webhook"
)

// Wait timeouts (ADR 2.2): every loop turn costs steps, so long waits wait long.
const (
	ApprovalWait = 5 * time.Minute
	DownloadWait = 10 * time.Minute
)

// PlanKey is the idempotency key of the run of kind for a plan: derived from
// meaning, so writing it twice enqueues once.
func PlanKey(planID string, kind port.Kind) string { return "plan:" + planID + ":" + string(kind) }

// ApprovalTopic is signalled when a plan is approved, rejected or canceled.
func ApprovalTopic(planID string) port.Topic { return port.Topic("approval:" + planID) }

// DownloadTopic is signalled when a plan's download is reported complete.
func DownloadTopic(planID string) port.Topic { return port.Topic("download:" + planID) }

var errMissingID = errors.New("plan_id is required")

// PlanRef is the input of the kinds that act on one plan.
type PlanRef struct {
	PlanID string `json:"plan_id"`
}

// Validate implements port.Validator.
func (p PlanRef) Validate() error { return validID(p.PlanID) }

func validID(id string) error {
	if id == "" {
		return errMissingID
	}
	return port.ValidateName("plan_id", id)
}

// WaitInput is the input of the waiting kinds; Iteration carries the loop
// index across ContinueAsNew so step names stay unique.
type WaitInput struct {
	PlanID    string `json:"plan_id"`
	Iteration int    `json:"iteration,omitempty"`
}

// Validate implements port.Validator.
func (w WaitInput) Validate() error {
	if w.Iteration < 0 {
		return errors.New("iteration must not be negative")
	}
	return validID(w.PlanID)
}

// The outcomes of plan.cancel.
const (
	OutcomeCanceled  = "canceled"
	OutcomeAbandoned = "abandoned"
)

// CancelInput is the input of plan.cancel: compensate, then end the plan as
// Outcome.
type CancelInput struct {
	PlanID  string `json:"plan_id"`
	Outcome string `json:"outcome"`
}

// Validate implements port.Validator.
func (c CancelInput) Validate() error {
	if c.Outcome != OutcomeCanceled && c.Outcome != OutcomeAbandoned {
		return errors.New("outcome must be canceled or abandoned")
	}
	return validID(c.PlanID)
}

// DecisionRef is the input of decision.resolve.
type DecisionRef struct {
	DecisionID string `json:"decision_id"`
}

// Validate implements port.Validator.
func (d DecisionRef) Validate() error {
	if d.DecisionID == "" {
		return errors.New("decision_id is required")
	}
	return nil
}

// NotifyInput is the input of notify.webhook.
type NotifyInput struct {
	PlanID string `json:"plan_id"`
	Event  string `json:"event"` // e.g. plan.completed, plan.canceled
	Status string `json:"status"`
}

// Validate implements port.Validator.
func (n NotifyInput) Validate() error {
	if n.Event == "" {
		return errors.New("event is required")
	}
	return validID(n.PlanID)
}

// IdempotencyKey is sent as the Idempotency-Key header, so receivers can
// drop a repeated delivery.
func (n NotifyInput) IdempotencyKey() string { return "plan:" + n.PlanID + ":" + n.Event }

// Outcome is the result of a step that acts on a plan. Canceled reports that
// the step saw the business cancel flag and handed nothing on.
type Outcome struct {
	Canceled bool `json:"canceled,omitempty"`
}

// ApprovalState is what check-approval read from the business DB.
type ApprovalState struct {
	Decided  bool `json:"decided"`
	Approved bool `json:"approved"`
	Canceled bool `json:"canceled"`
}

// DownloadState is what check-download read.
type DownloadState struct {
	Done     bool    `json:"done"`
	Canceled bool    `json:"canceled"`
	Progress float64 `json:"progress"`
}

// ImportOutcome is the result of asset.import.
type ImportOutcome struct {
	Canceled   bool   `json:"canceled,omitempty"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	Reconciled bool   `json:"reconciled,omitempty"`
	// Origin says whether the plan created the library file ("created") or
	// adopted the identical file already there ("adopted").
	Origin string `json:"origin,omitempty"`
}

// DecisionRequest opens a pending decision for a failed run (ADR 2.6).
type DecisionRequest struct {
	PlanID string          `json:"plan_id"`
	Kind   port.Kind       `json:"kind"`
	RunID  port.RunID      `json:"run_id"`
	Input  json.RawMessage `json:"input"`
	Reason string          `json:"reason"`
}

// DecisionOpened names the decision opened.
type DecisionOpened struct {
	DecisionID string `json:"decision_id"`
}

func stepName(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }
