package temporaladapter

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// Start registers the served versions of every kind (each as its own
// workflow type) and every activity, plus the dynamic activity that fails
// the steps of an unbound one (unknownActivity), and starts polling.
// Concurrency sets both the activity and the workflow-task slot counts
// (Config.DefaultConcurrency when zero). It also starts the projection
// reconciler (see reconciler), unless Config.ReconcileInterval is negative,
// the starter of the workflows EnqueueTx recorded (see starter) and the
// watch that hands a cancel to the steps running here (see cancelWatch).
// The lifecycle rules are the port's (port.TaskEngine); a fatal worker
// error (OnFatalError) ends the serving: Done closes and Err returns it.
func (e *Engine) Start(ctx context.Context, opts port.StartOptions) error {
	opts, err := enginekit.ValidateStartOptions(opts, e.reg.Definitions())
	if err != nil {
		return err
	}
	for _, b := range engineapi.Activities(e.reg) {
		if slices.Contains(bookkeepingNames, b.Name()) {
			return &port.FieldError{Field: "activity", Reason: fmt.Sprintf(
				"%q is the name of one of the Temporal engine's own activities (%s); bind the activity under another name",
				b.Name(), strings.Join(bookkeepingNames, ", "))}
		}
	}
	if err := e.CheckSearchAttributes(ctx); err != nil {
		return err
	}
	if e.cfg.Schema != "" && e.cfg.Schema != dbtx.DefaultSchema && e.cfg.TaskQueue == DefaultTaskQueue {
		// A worker takes every workflow of its queue: one of another
		// application's schema on the same namespace and queue would fail
		// its steps, which find no run in this schema (README, Quickstart).
		e.logger.WarnContext(ctx, "the engine's schema is not the default but its task queue is: a worker of another schema on this "+
			"namespace and task queue would take this schema's runs and fail them; give each schema its own Config.TaskQueue",
			slog.String("schema", e.cfg.Schema), slog.String("task_queue", e.cfg.TaskQueue))
	}
	return startstop.Start(ctx, &e.Base, func(ctx context.Context) error {
		conc := opts.Concurrency
		if conc == 0 {
			conc = e.cfg.DefaultConcurrency
		}
		w := worker.New(e.client, e.cfg.TaskQueue, worker.Options{
			MaxConcurrentActivityExecutionSize:      conc,
			MaxConcurrentWorkflowTaskExecutionSize:  max(conc, 2), // the SDK needs 2 for sticky polling
			MaxConcurrentLocalActivityExecutionSize: conc,
			WorkerStopTimeout:                       e.cfg.WorkerStopTimeout,
			StickyScheduleToStartTimeout:            e.cfg.StickyScheduleToStartTimeout,
			WorkflowPanicPolicy:                     worker.FailWorkflow,
			OnFatalError:                            e.onFatal,
			DeploymentOptions:                       e.deploymentOptions(),
			Interceptors:                            []interceptor.WorkerInterceptor{&wakeInterceptor{}},
		})
		served := e.registerWorkflows(w, opts)
		watch := newCancelWatch(e)
		for _, b := range engineapi.Activities(e.reg) {
			w.RegisterActivityWithOptions(e.activityFunc(b, watch), activity.RegisterOptions{Name: b.Name()})
		}
		w.RegisterDynamicActivity(e.unknownActivity, activity.DynamicRegisterOptions{})
		// The SDK resolves a local activity given as a method by its name
		// in the worker's registry, where the dynamic activity would answer
		// for it: registered under that name, the bookkeeping is found as
		// itself.
		for _, la := range []any{e.books.project, e.books.addWaiter, e.books.removeWaiters, e.books.takeKept, e.books.waitReturned} {
			w.RegisterActivity(la) // under bookkeepingNames
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("start temporal worker on %s: %w", e.cfg.TaskQueue, err)
		}
		e.worker = w
		if e.cfg.ReconcileInterval > 0 {
			e.recon = e.startReconciler(ctx)
		}
		e.starter = e.startStarter(ctx)
		watch.start(ctx, e.starter.wake.poke)
		e.watch = watch
		e.logger.InfoContext(ctx, "temporal worker started",
			slog.String("task_queue", e.cfg.TaskQueue), slog.Int("concurrency", conc), slog.Any("workflow_types", served),
			slog.String("deployment", e.cfg.Deployment.Name), slog.String("build_id", e.cfg.Deployment.BuildID))
		return nil
	})
}

// bookkeepingNames are the activity types the SDK gives the engine's own
// local activities (a method value's name): histories record them, so they
// cannot change without breaking the replay of runs in flight, and a user's
// activity bound under one would collide with it in the worker's registry
// (the SDK panics). Start refuses such a binding.
var bookkeepingNames = []string{"project", "addWaiter", "removeWaiters", "takeKept", "waitReturned"}

// registerWorkflows adds the workflow types served under opts to r and
// returns their names.
func (e *Engine) registerWorkflows(r workflowRegistry, opts port.StartOptions) []string {
	var served []string
	for _, def := range e.reg.Definitions() {
		if !enginekit.Serves(opts, def.Kind, def.Version) {
			continue
		}
		name := WorkflowType(def.Kind, def.Version)
		r.RegisterWorkflowWithOptions(e.workflowFunc(def), workflow.RegisterOptions{Name: name})
		served = append(served, name)
	}
	return served
}

// deploymentOptions turns Worker Deployment Versioning on when the config
// names a version, with pinned as every kind's behaviour.
func (e *Engine) deploymentOptions() worker.DeploymentOptions {
	d := e.cfg.Deployment
	if d.Name == "" {
		return worker.DeploymentOptions{}
	}
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: d.Name, BuildID: d.BuildID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}
}

// onFatal is the SDK worker's OnFatalError: the worker has stopped polling
// for good (e.g. its namespace was deleted), so the engine no longer serves.
func (e *Engine) onFatal(err error) {
	e.logger.Error("temporal worker stopped on a fatal error", slog.String("error", err.Error()))
	startstop.Fail(&e.Base, fmt.Errorf("temporal worker on %s: %w", e.cfg.TaskQueue, err))
}

// Stop stops the projection reconciler, the starter and polling, and waits
// for in-flight activities (and then the cancel watch) up to
// Config.WorkerStopTimeout; the ones still running then are
// canceled and handed back to Temporal, which retries them elsewhere. A
// caller whose ctx ends first gets control back with an error while the SDK
// finishes draining. The lifecycle rules are the port's (port.TaskEngine).
func (e *Engine) Stop(ctx context.Context) error {
	return startstop.Stop(ctx, &e.Base, func(ctx context.Context) error {
		if e.recon != nil {
			e.recon.stop()
			e.recon = nil
		}
		e.starter.stop()
		e.starter = nil
		w, watch := e.worker, e.watch
		e.worker, e.watch = nil, nil
		// worker.Stop blocks up to WorkerStopTimeout; a caller whose context
		// ends first gets control back while the SDK finishes draining (its
		// in-flight activities are canceled when that timeout passes). The
		// cancel watch serves the draining steps to the end.
		done := make(chan struct{})
		go func() { w.Stop(); watch.stop(); close(done) }()
		select {
		case <-done:
			e.logger.InfoContext(ctx, "temporal worker stopped", slog.String("task_queue", e.cfg.TaskQueue))
			return nil
		case <-ctx.Done():
			return fmt.Errorf("stop temporal worker on %s: still draining: %w", e.cfg.TaskQueue, context.Cause(ctx))
		}
	})
}
