// Package temporaladapter runs port.Definition handlers on Temporal, behind
// port.TaskEngine. Postgres (the shared runstore) stays the authority for
// idempotency, the waiter map of topic-addressed signals, and the run
// projection that outlives Temporal's retention.
//
// Mapping: one run = one workflow with ID "taskport/<run id>" and type
// "<kind>@v<version>"; one step = one activity whose ActivityID is the step
// name; a wait = a signal channel named by the topic. A step whose activity
// no worker binds fails at once, for good (a dynamic activity,
// unknownActivity). A Cancel that finds no workflow starts it with a
// canceled mark, so a start still in flight cannot run the handler.
//
// RunView (port.RunView's rules): Get reads the step in flight from
// Temporal's pending activity, counting only attempts whose body started and
// reading pending during a retry backoff; the Postgres projection (ListRuns)
// is written at a run's first step, after each wait, on an attempt's failure,
// on a retried step's success and at the end.
package temporaladapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

var (
	_ port.TaskEngine = (*Engine)(nil)
	_ port.Admin      = (*Engine)(nil)
)

// Search attribute names set on every run, so that the Temporal UI finds runs
// by kind, version and business key (plan id).
const (
	AttrKind        = "TaskportKind"
	AttrVersion     = "TaskportVersion"
	AttrBusinessKey = "TaskportBusinessKey"
)

var (
	attrKind        = temporal.NewSearchAttributeKeyKeyword(AttrKind)
	attrVersion     = temporal.NewSearchAttributeKeyInt64(AttrVersion)
	attrBusinessKey = temporal.NewSearchAttributeKeyKeyword(AttrBusinessKey)
)

// SearchAttributes returns the search attributes the adapter sets, name ->
// type, for registering them with a namespace (`temporal operator
// search-attribute create`, or `temporal server start-dev --search-attribute
// Name=Type`). Starting a run fails on a namespace that lacks them.
func SearchAttributes() map[string]string {
	return map[string]string{AttrKind: "Keyword", AttrVersion: "Int", AttrBusinessKey: "Keyword"}
}

// workflowIDPrefix marks the workflows this adapter owns.
const workflowIDPrefix = "taskport/"

// WorkflowID is the Temporal workflow ID of a run.
func WorkflowID(id port.RunID) string { return workflowIDPrefix + string(id) }

func runIDFromWorkflowID(wid string) port.RunID {
	return port.RunID(strings.TrimPrefix(wid, workflowIDPrefix))
}

// WorkflowType is the Temporal workflow type of one version of a kind.
func WorkflowType(kind port.Kind, version int) string {
	return string(kind) + "@v" + strconv.Itoa(version)
}

func parseWorkflowType(t string) (port.Kind, int) {
	i := strings.LastIndex(t, "@v")
	if i < 0 {
		return port.Kind(t), 0
	}
	v, err := strconv.Atoi(t[i+2:])
	if err != nil {
		return port.Kind(t), 0
	}
	return port.Kind(t[:i]), v
}

// Engine is the Temporal implementation of port.TaskEngine. Its lifecycle
// (Start, Stop, Done, Err) follows the port's rules through
// internal/startstop.
type Engine struct {
	startstop.Base

	client client.Client
	pool   *dbtx.Pool // statements name cfg.Schema
	reg    *port.Registry
	cfg    Config
	logger *slog.Logger
	books  *bookkeeping
	// parents: see flow.continueTrace.
	parents interceptor.Tracer

	// Set by Start and cleared by Stop, which startstop serializes.
	worker worker.Worker
	recon  *reconciler // nil unless started with ReconcileInterval > 0
	// starter starts EnqueueTx's workflows; nil unless serving.
	starter *starter
	// watch hands cancels to the steps running here; nil unless serving.
	watch *cancelWatch
}

// New builds an engine over a connected client (see Dial), the Postgres pool
// holding the taskport schema, and the registry of kinds and activities.
func New(c client.Client, pool *pgxpool.Pool, reg *port.Registry, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if c == nil || pool == nil || reg == nil {
		return nil, errors.New("temporaladapter: client, pool and registry are required")
	}
	if err := dbtx.CheckPool(pool); err != nil {
		return nil, err
	}
	schema, err := dbtx.ParseSchema(cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("temporaladapter: %w", err)
	}
	db := dbtx.NewPool(pool, schema)
	parents, err := newParentTracer()
	if err != nil {
		return nil, fmt.Errorf("temporaladapter: tracer: %w", err)
	}
	return &Engine{
		parents: parents,
		client:  c,
		pool:    db,
		reg:     reg,
		cfg:     cfg,
		logger:  cfg.Logger,
		books:   &bookkeeping{pool: db, client: c, logger: cfg.Logger},
	}, nil
}

// runInput is the workflow argument. Across a continue-as-new, Pending
// carries the signals drained from the old run's channels, per topic in
// arrival order, which the next run's waits consume before its own channel;
// Topics carries the waiter registrations, so the last run removes them.
//
// Generation is the run's seq in the run store, the Generation of its
// fencing tokens. It rides in the input (and on to every step call) because
// that costs nothing per step, and the input is exactly what a reset or a
// continue-as-new keeps: every Temporal run of one taskport run has the same
// generation. A workflow started before generations existed has none (0),
// which the ledger orders before every run, as its start was.
//
// Canceled marks a workflow that Cancel started itself, because it found
// none (see Engine.Cancel): the workflow ends canceled at once, without
// running the handler. Reason is the cancel's, kept in the history.
//
// Step and Attempts carry, across a continue-as-new, the step, wait or
// sleep the run was last in and its attempts: an execution that ends before
// its first step ends in them, as the specification has it (a ContinueAsNew
// does not change CurrentStep). Before they were carried, such a run ended
// in the step its earlier execution had last projected. An execution
// continued by an earlier release has neither, and ends as it did.
type runInput struct {
	Input      json.RawMessage                  `json:"input"`
	Pending    map[port.Topic][]json.RawMessage `json:"pending,omitempty"`
	Topics     []port.Topic                     `json:"topics,omitempty"`
	Generation int64                            `json:"generation,omitempty"`
	Canceled   bool                             `json:"canceled,omitempty"`
	Reason     string                           `json:"reason,omitempty"`
	Step       string                           `json:"step,omitempty"`
	Attempts   int                              `json:"attempts,omitempty"`
}

// Enqueue records the run in Postgres (the idempotency authority), then
// starts its workflow. A run already recorded and finished is returned as is
// without touching Temporal, which is what keeps Enqueue idempotent past
// Temporal's retention; one recorded but not finished is (re)started with the
// same ID and policies, which covers a crash between the insert and the start.
// A start that fails after the insert returns its error and leaves the run
// recorded: enqueuing the key again starts it, and otherwise a worker's
// reconciler does once the run's row is Config.ReconcileAfter old
// (startUnstarted), so a caller that gives up loses no run.
func (e *Engine) Enqueue(ctx context.Context, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	prep, err := enginekit.PrepareEnqueue(e.reg, kind, input, opts)
	if err != nil {
		return "", err
	}
	return e.insertAndStart(ctx, newRun(kind, prep, opts))
}

// insertAndStart records the run r, or finds the one of its key, and
// starts its workflow unless it has one (needsStart).
func (e *Engine) insertAndStart(ctx context.Context, r runstore.NewRun) (port.RunID, error) {
	run, created, err := runstore.Insert(ctx, e.pool, r)
	if err != nil {
		return "", err
	}
	if !needsStart(run, created) {
		return run.ID, nil
	}
	if err := e.start(ctx, run, runInput{}); err != nil {
		return "", err
	}
	return run.ID, nil
}

// needsStart reports whether an enqueue that found or created run must
// start its workflow. A run found past pending has one (only its workflow
// projects it running or waiting, or ends it), and the enqueue answers from
// Postgres, as the lease engine's does, whether or not Temporal is
// reachable. A pending one may be a run whose start failed: starting it
// again is the idempotent USE_EXISTING start.
func needsStart(run runstore.Run, created bool) bool {
	return created || run.Status == port.StatusPending
}

// enqueueStored is a retry's new run when this process does not register
// the failed run's kind (a client that only administers runs): the failed
// run's kind, version, input, business key and priority, under key. Its
// workflow type is the failed run's (kind@version); the start needs no
// definition.
func (e *Engine) enqueueStored(ctx context.Context, failed runstore.Run, key string) (port.RunID, error) {
	return e.insertAndStart(ctx, runstore.NewRun{Engine: runstore.EngineTemporal, Kind: failed.Kind, Version: failed.Version,
		Key: key, BusinessKey: failed.BusinessKey, Priority: failed.Priority, Input: failed.Input})
}

// newRun is the row Enqueue and EnqueueTx record for a prepared enqueue.
func newRun(kind port.Kind, prep enginekit.PreparedEnqueue, opts port.EnqueueOptions) runstore.NewRun {
	return runstore.NewRun{
		Engine:      runstore.EngineTemporal,
		Kind:        kind,
		Version:     prep.Definition.Version,
		Key:         opts.IdempotencyKey,
		BusinessKey: opts.BusinessKey,
		Priority:    opts.Priority,
		Input:       prep.Input,
		AvailableAt: opts.AvailableAt,
	}
}

// startParallelism bounds the workflow starts one EnqueueMany has in flight:
// enough to hide a round trip to the frontend, few enough that a large batch
// neither floods it nor exhausts its rate limits.
const startParallelism = 16

// EnqueueMany enqueues a batch (port.TaskEngine): the runs are recorded in
// one statement (runstore.InsertMany), then their workflows are started, at
// most startParallelism at once. As Enqueue does, it also starts the
// workflow of an existing open run of this engine, in case the call that
// recorded it failed before the start; a started workflow is left alone. An
// error after the insert leaves the runs recorded: calling again with the
// same items starts what is missing, and so does the reconciler otherwise
// (startUnstarted).
func (e *Engine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	prep, err := enginekit.PrepareBatch(e.reg, items)
	if err != nil || len(prep) == 0 {
		return nil, err
	}
	runs, created, err := runstore.InsertMany(ctx, e.pool, runstore.NewRuns(runstore.EngineTemporal, prep))
	// A key another engine holds comes with the batch's other runs, which
	// the insert recorded: they are started before the item is refused, as
	// the lease engine's workers take theirs.
	var foreign *port.ItemError
	if err != nil && (runs == nil || !errors.As(err, &foreign)) {
		return nil, fmt.Errorf("enqueue %d runs: %w", len(items), err)
	}
	out := make([]port.EnqueueResult, len(runs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(startParallelism)
	started := make(map[port.RunID]bool, len(runs))
	for i, run := range runs {
		out[i] = port.EnqueueResult{ID: run.ID, Created: created[i]}
		if started[run.ID] || run.Engine != runstore.EngineTemporal || !needsStart(run, created[i]) {
			continue
		}
		started[run.ID] = true
		g.Go(func() error { return e.start(gctx, run, runInput{}) })
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("enqueue %d runs: %w", len(items), err)
	}
	if foreign != nil {
		return nil, fmt.Errorf("enqueue %d runs: %w", len(items), foreign)
	}
	return out, nil
}

// start starts the workflow of run with in (its Input and Generation are
// the run's), or leaves the one already there alone (USE_EXISTING, and
// REJECT_DUPLICATE once it closed).
func (e *Engine) start(ctx context.Context, run runstore.Run, in runInput) error {
	in.Input, in.Generation = run.Input, run.Seq
	m := memo{Kind: run.Kind, Version: run.Version, IdempotencyKey: run.IdempotencyKey, BusinessKey: run.BusinessKey}
	if def, err := engineapi.Lookup(e.reg, run.Kind, run.Version); err == nil && def.ShowInput {
		m.Input = summarize(run.Input, e.cfg.MemoInputBytes)
	}
	opts := client.StartWorkflowOptions{
		ID:                       WorkflowID(run.ID),
		TaskQueue:                e.cfg.TaskQueue,
		WorkflowTaskTimeout:      e.cfg.WorkflowTaskTimeout,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			attrKind.ValueSet(string(run.Kind)),
			attrVersion.ValueSet(int64(run.Version)),
			attrBusinessKey.ValueSet(run.BusinessKey),
		),
		Memo:          map[string]any{"taskport": m},
		StaticSummary: fmt.Sprintf("%s %s", WorkflowType(run.Kind, run.Version), run.BusinessKey),
	}
	// A canceled run ends now, whenever it was due.
	if d := time.Until(run.AvailableAt); d > 0 && !in.Canceled {
		opts.StartDelay = d
	}
	_, err := e.client.ExecuteWorkflow(ctx, opts, WorkflowType(run.Kind, run.Version), in)
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) && strings.Contains(err.Error(), "search attribute") {
		// The run's row stays pending; the reconciler starts it once the
		// namespace has them.
		return fmt.Errorf("start workflow of run %s: %w", run.ID, missingSearchAttributes(err))
	}
	if err = interpretError(err); err != nil && !errors.Is(err, errWorkflowExists) {
		return fmt.Errorf("start workflow of run %s: %w", run.ID, err)
	}
	return nil
}

// memo is what the Temporal UI shows under the run's memo. It holds the
// input only for kinds that opt in (port.Definition.ShowInput).
type memo struct {
	Kind           port.Kind `json:"kind"`
	Version        int       `json:"version"`
	IdempotencyKey string    `json:"idempotency_key"`
	BusinessKey    string    `json:"business_key,omitempty"`
	Input          string    `json:"input,omitempty"`
}

func summarize(raw []byte, limit int) string {
	if len(raw) <= limit {
		return string(raw)
	}
	return string(raw[:limit]) + "…"
}

// Signal signals the runs parked in a wait on topic, which it reads in
// Postgres, counting those it reached; one that finished meanwhile is
// skipped, not an error. With no run parked there, the signal is kept,
// with the sender's trace, for the next wait on the topic
// (runstore.SignalParked; addWaiter hands it over), as the lease engine
// keeps one: a wake-up sent between a run's check and its wait is not
// lost, and one sent while a run is between two waits on the topic is not
// buffered in that run, which may end without waiting again. Each parked
// run's registration records that it was counted before the sends start,
// so a wait that times out meanwhile learns, as it marks itself returned,
// that a signal counted for it is on its way, and takes it
// (flow.WaitSignal).
func (e *Engine) Signal(ctx context.Context, topic port.Topic, payload any) (int, error) {
	raw, err := enginekit.PrepareSignal(topic, payload)
	if err != nil {
		return 0, err
	}
	return runstore.SignalParked(ctx, e.pool, topic, raw, tracing.FromContext(ctx), func(id port.RunID) (bool, error) {
		err := interpretError(e.client.SignalWorkflow(ctx, WorkflowID(id), "", string(topic), raw))
		switch {
		case errors.Is(err, port.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("signal run %s on %s: %w", id, topic, err)
		}
		return true, nil
	})
}

// Cancel writes the business cancel flag first (ADR 2.4), then cancels the
// workflow with the reason, then notifies the serving workers. The running
// step is not interrupted: its context ends with port.ErrCanceled when its
// worker's cancel watch reads the flag (see cancelWatch); later steps never
// start. Canceling a finished run writes nothing and returns nil; a run of
// the lease engine is refused with port.ErrOtherEngine, nothing written.
//
// A run no step body is in (projected pending or waiting, or, as Temporal
// describes it after the flag committed, with no activity attempt started:
// in a step's retry backoff, or between steps) ends canceled in Postgres at
// once (runstore.EndCanceledIfIdle), as on the lease engine:
// Get, Wait and ListRuns read it canceled whether or not a worker serves
// it (a retired version, every worker down). Its workflow stays open in
// Temporal until a worker takes it; it can then run no step (each step's
// start reads the flag) and ends canceled, and its own terminal projection
// writes nothing over the row. A run in a step is left to its workflow,
// which ends it with that step's attempts.
//
// A run whose workflow is not there yet (Enqueue's start still in flight,
// or a crash between the insert and the start) is started here, under the
// same ID and options, with the canceled mark (runInput.Canceled): the
// workflow ends canceled at once, and whichever start comes second finds it
// (USE_EXISTING). The workflow is then canceled anyway, in case Enqueue's
// start won: that workflow may have begun, and the cancel keeps it from
// starting any step.
func (e *Engine) Cancel(ctx context.Context, id port.RunID, reason string) error {
	flagged, err := runstore.RequestCancel(ctx, e.pool, runstore.EngineTemporal, id, reason)
	if err != nil || !flagged {
		return err
	}
	ended, err := runstore.EndCanceledIfIdle(ctx, e.pool, id, false, "", 0)
	if err != nil {
		return err
	}
	if !ended {
		if idle, step, attempts := e.noStepBody(ctx, id); idle {
			if _, err := runstore.EndCanceledIfIdle(ctx, e.pool, id, true, step, attempts); err != nil {
				return err
			}
		}
	}
	err = e.cancelWorkflow(ctx, id, reason)
	if err == nil {
		e.notifyCancel(ctx, id)
	}
	if errors.Is(err, port.ErrNotFound) {
		if err := e.startCanceled(ctx, id, reason); err != nil {
			return err
		}
		err = e.cancelWorkflow(ctx, id, reason)
	}
	if errors.Is(err, port.ErrNotFound) {
		// Closed already: the canceled start ended, or the workflow ended
		// before the cancel; its projection (or Get, or the reconciler)
		// records how.
		return nil
	}
	return err
}

// noStepBody reports whether Temporal says no step body is in run id's open
// workflow: none of its activities has an attempt started (one in its retry
// backoff, or scheduled and not yet taken, has not). Read after Cancel's
// flag committed, it stays true: every attempt's start reads the flag and
// runs no body (activityFunc). An error, or a workflow Temporal does not
// know or that closed, reads false: the workflow's own end decides.
//
// When true, step and attempts are the step the run was last in, as the
// lease engine's view has it (the last step whose body started), which
// the projection may not name: it records a run's first step and its steps
// after a wait, not every step. "" when Temporal does not tell (no step of
// this execution started: the projection's is right).
func (e *Engine) noStepBody(ctx context.Context, id port.RunID) (idle bool, step string, attempts int) {
	desc, err := e.client.DescribeWorkflow(ctx, WorkflowID(id), "")
	if err != nil || desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return false, "", 0
	}
	for _, pa := range desc.RawResponse.GetPendingActivities() {
		if pa.GetState() != enumspb.PENDING_ACTIVITY_STATE_SCHEDULED {
			return false, "", 0
		}
		if pa.GetAttempt() > 1 {
			// In its retry backoff: the run is in this step, with the
			// attempts whose body started (overlay reads the same).
			return true, pa.GetActivityId(), int(pa.GetAttempt()) - 1
		}
	}
	step, attempts = e.lastStartedStep(ctx, desc.RawResponse.GetWorkflowExecutionInfo().GetExecution())
	return true, step, attempts
}

// lastStartedStep reads the execution's history for the last activity
// that started a body: its ActivityID (the step) and the attempt it ended
// on. An attempt that found the cancel flag before its body
// (canceledBeforeStart) is not one. "" when there is none, or the history
// cannot be read.
func (e *Engine) lastStartedStep(ctx context.Context, ex *commonpb.WorkflowExecution) (string, int) {
	type started struct {
		scheduled int64
		attempt   int
	}
	var (
		steps = map[int64]string{} // ActivityID by Scheduled event
		order []started
		skip  = map[int64]bool{} // Scheduled events of attempts that ran no body
	)
	it := e.client.GetWorkflowHistory(ctx, ex.GetWorkflowId(), ex.GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return "", 0
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			steps[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityId()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := ev.GetActivityTaskStartedEventAttributes()
			order = append(order, started{a.GetScheduledEventId(), int(a.GetAttempt())})
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			a := ev.GetActivityTaskFailedEventAttributes()
			if a.GetFailure().GetMessage() == canceledBeforeStart {
				skip[a.GetScheduledEventId()] = true
			}
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		if s := order[i]; !skip[s.scheduled] && steps[s.scheduled] != "" {
			return steps[s.scheduled], s.attempt
		}
	}
	return "", 0
}

// notifyCancel wakes the cancel watches of the serving workers (see
// cancelWatch), after the workflow's cancel was requested: the step's
// failure then meets a workflow that knows why. Best effort: a watch that
// misses it reads the flag within Config.CancelPollInterval.
func (e *Engine) notifyCancel(ctx context.Context, id port.RunID) {
	if _, err := e.pool.Exec(ctx, `SELECT pg_notify($1, '')`, e.pool.Schema().Channel(cancelChannel)); err != nil {
		e.logger.WarnContext(ctx, "notify the workers of a cancel", slog.String("run_id", string(id)), slog.String("error", err.Error()))
	}
}

func (e *Engine) cancelWorkflow(ctx context.Context, id port.RunID, reason string) error {
	err := interpretError(e.client.CancelWorkflowWithOptions(ctx, client.CancelWorkflowOptions{WorkflowID: WorkflowID(id), Reason: temporalReason(reason)}))
	if err != nil && !errors.Is(err, port.ErrNotFound) {
		return fmt.Errorf("cancel workflow of run %s: %w", id, err)
	}
	return err
}

// startCanceled starts the workflow of run id with the canceled mark.
func (e *Engine) startCanceled(ctx context.Context, id port.RunID, reason string) error {
	run, err := runstore.Get(ctx, e.pool, id)
	if err != nil {
		return err
	}
	return e.start(ctx, run, runInput{Canceled: true, Reason: temporalReason(reason)})
}

// maxTemporalReason bounds the copy of a cancel's reason that Temporal
// records (the cancel request's event, a canceled start's input).
const maxTemporalReason = 4 << 10

// temporalReason is reason as Temporal records it: its first
// maxTemporalReason bytes, cut at a rune boundary and marked "…" when cut.
// The run's reason is the whole one, in Postgres (runstore.RequestCancel);
// Temporal's copy only shows in its UI. Whole, a reason of a few MB made
// the frontend refuse the request (gRPC's 4 MB) after the flag was written,
// and Cancel returned that error where the lease engine returns nil.
func temporalReason(reason string) string { return enginekit.Cut(reason, maxTemporalReason) }

// Get reads an open run from Temporal (DescribeWorkflow) over the Postgres
// projection, which it falls back to once Temporal has forgotten the run. A
// run whose workflow ended without its own terminal projection (terminated,
// failed in the SDK on nondeterminism, or its projection write failed) is
// recorded as Temporal reports it, as the reconciler does for runs nobody
// reads. A run the projection records as ended is read from Postgres alone:
// its end is final there, and Get, Wait and Result of a finished run do not
// depend on the Temporal server being up, as they do not on the lease
// engine.
func (e *Engine) Get(ctx context.Context, id port.RunID) (port.RunView, error) {
	run, err := runstore.GetOwned(ctx, e.pool, runstore.EngineTemporal, id)
	if err != nil {
		return port.RunView{}, err
	}
	if run.Status.Terminal() {
		return run.RunView, nil
	}
	view, _, err := e.describe(ctx, run)
	if errors.Is(err, errNoWorkflow) {
		return run.RunView, nil // not started yet (the reconciler starts it), or past Temporal's retention
	}
	return view, err
}

// viewFromDescription lays what Temporal reports over the projection v
// (overlay). When that changes a field of an open run, UpdatedAt advances
// as the spec has it, to the latest time Temporal gives for the change (the
// current activity's last start or last completed attempt, or the
// workflow's start), and at least past the projection's: the same value on
// every Get of the same state, since it is read from the description.
func viewFromDescription(v port.RunView, desc *client.WorkflowExecutionDescription) port.RunView {
	o := overlay(v, desc)
	if o.Status.Terminal() || (o.Status == v.Status && o.CurrentStep == v.CurrentStep && o.Attempts == v.Attempts && o.LastError == v.LastError) {
		return o
	}
	at := desc.RawResponse.GetWorkflowExecutionInfo().GetStartTime().AsTime()
	if pending := desc.RawResponse.GetPendingActivities(); len(pending) > 0 {
		pa := pending[0]
		// Not the activity's scheduled time: a retry's is when its backoff
		// ends, in the future, not when the run changed.
		for _, t := range []*timestamppb.Timestamp{pa.GetLastStartedTime(), pa.GetLastAttemptCompleteTime()} {
			if t != nil && t.AsTime().After(at) {
				at = t.AsTime()
			}
		}
	}
	if !at.After(v.UpdatedAt) {
		at = v.UpdatedAt.Add(time.Microsecond) // Postgres's resolution
	}
	o.UpdatedAt = at.UTC().Truncate(time.Microsecond)
	return o
}

// overlay lays what Temporal reports over the projection v. A pending
// activity one of whose attempts started is the current step: its attempts
// are those whose body started (an attempt SCHEDULED, due or in its retry
// backoff, has not), and until a worker takes the retry none holds the run,
// so it reads pending. A first attempt still SCHEDULED is not yet.
func overlay(v port.RunView, desc *client.WorkflowExecutionDescription) port.RunView {
	projected := v.Status
	switch desc.Status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		pending := desc.RawResponse.GetPendingActivities()
		if len(pending) == 0 {
			if v.Status.Terminal() {
				// The terminal projection is written just before the
				// workflow completes.
				return v
			}
			if v.Status != port.StatusWaiting && v.Status != port.StatusPending {
				v.Status = port.StatusRunning
			}
			return v
		}
		pa := pending[0]
		v.Status = port.StatusRunning
		if pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED && pa.GetAttempt() <= 1 {
			// No body of this step started: the run is not in it yet (the
			// lease engine's view enters a step when its body starts), and
			// it reads the step the projection last recorded.
			return v
		}
		v.CurrentStep = pa.GetActivityId()
		v.Attempts = int(pa.GetAttempt())
		if pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED {
			// A retry, in its backoff or due and not yet taken: no worker
			// holds the run, as none holds a lease run between two attempts
			// until a claim takes it again.
			v.Attempts--
			v.Status = port.StatusPending
		}
		v.LastError = failureMessage(pa.GetLastFailure())
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		v.Status, v.LastError = port.StatusSucceeded, ""
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		v.Status, v.LastError = port.StatusCanceled, "" // a cancel's reason is not an error
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		v.Status = port.StatusFailed
		if !projected.Terminal() {
			v.LastError = "workflow " + strings.ToLower(strings.TrimPrefix(desc.Status.String(), "WORKFLOW_EXECUTION_STATUS_"))
		}
	}
	if v.Status.Terminal() && v.FinishedAt.IsZero() && desc.WorkflowCloseTime != nil {
		v.FinishedAt = *desc.WorkflowCloseTime
	}
	return v
}

// failureMessage is the message of an attempt's failure as the run's
// LastError reads it: a timeout the server recorded reads as the lease
// engine's does (enginekit.ErrAttemptTimeout, ErrHeartbeatTimeout), not as
// Temporal's "activity StartToClose timeout".
func failureMessage(f *failurepb.Failure) string {
	if msg := timeoutMessage(f.GetTimeoutFailureInfo().GetTimeoutType()); msg != "" {
		return msg
	}
	return f.GetMessage()
}

// timeoutMessage is how an attempt that timed out in Temporal reads; ""
// for a timeout that is not an attempt's.
func timeoutMessage(t enumspb.TimeoutType) string {
	switch t {
	case enumspb.TIMEOUT_TYPE_START_TO_CLOSE, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
		return enginekit.ErrAttemptTimeout.Error()
	case enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return enginekit.ErrHeartbeatTimeout.Error()
	}
	return ""
}

// ListRuns reads the Postgres projection of this engine's runs: dead
// letters (Statuses: failed) and runs on old versions stay listed after
// Temporal's retention.
func (e *Engine) ListRuns(ctx context.Context, f port.RunFilter) ([]port.RunView, error) {
	return runstore.List(ctx, e.pool, runstore.EngineTemporal, f)
}

// Retry starts a new run, with a workflow of its own, for a failed one
// (port.Admin): the shared runstore.RetryStored over this engine's Get and
// Enqueue, or enqueueStored when this process does not register the kind.
func (e *Engine) Retry(ctx context.Context, id port.RunID) (port.RunID, error) {
	return runstore.RetryStored(ctx, e.pool, e, e.enqueueStored, id)
}

// OpenRunsOnVersion asks Temporal's visibility for the runs of kind@version
// still open, e.g. to know when the previous version can be dropped. It is
// eventually consistent (visibility lags by a moment); ListRuns with
// BelowVersion is the strongly consistent Postgres view.
func (e *Engine) OpenRunsOnVersion(ctx context.Context, kind port.Kind, version int) ([]port.RunID, error) {
	if err := port.ValidateName("kind", string(kind)); err != nil {
		return nil, err
	}
	// Kind names are restricted to [A-Za-z0-9._:/-], so quoting is safe.
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", WorkflowType(kind, version))
	var out []port.RunID
	var token []byte
	for {
		resp, err := e.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list open runs of %s: %w", WorkflowType(kind, version), err)
		}
		for _, ex := range resp.GetExecutions() {
			out = append(out, runIDFromWorkflowID(ex.GetExecution().GetWorkflowId()))
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

// CheckSearchAttributes asks the client's namespace, through a visibility
// query over them, whether it has the search attributes every run sets
// (SearchAttributes). Start runs it, so that a worker on a namespace that
// lacks them refuses to serve with what to create, instead of every start
// failing; a producer that never calls Start may call it after Dial. A
// namespace whose visibility cannot answer (unavailable, or a permission
// the client lacks) is not refused: only the server's InvalidArgument is.
func (e *Engine) CheckSearchAttributes(ctx context.Context) error {
	query := fmt.Sprintf("%s = '' AND %s = 0 AND %s = ''", AttrKind, AttrVersion, AttrBusinessKey)
	_, err := e.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 1})
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) {
		return missingSearchAttributes(err)
	}
	if err != nil {
		e.logger.WarnContext(ctx, "could not check the namespace's search attributes", slog.String("error", err.Error()))
	}
	return nil
}

// missingSearchAttributes says what to create when the server refused a
// query or a start for want of the search attributes.
func missingSearchAttributes(err error) error {
	names := slices.Sorted(maps.Keys(SearchAttributes()))
	var create []string
	for _, n := range names {
		create = append(create, fmt.Sprintf("temporal operator search-attribute create --namespace <namespace> --name %s --type %s", n, SearchAttributes()[n]))
	}
	return fmt.Errorf("the Temporal namespace lacks the search attributes taskport sets on every run (%s); create them with:\n  %s\n(the dev server: temporal server start-dev --search-attribute %s=Keyword ...): %w",
		strings.Join(names, ", "), strings.Join(create, "\n  "), AttrKind, err)
}
