package temporaladapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// These tests hold the Flow mapping to Temporal with the SDK's testsuite:
// activities and the adapter's Postgres bookkeeping are mocked, timers are
// skipped, and signals are sent with delays on the test clock.

const testRunID = "01a22945-0000-7000-8000-000000000001"

var testActivity = port.DeclareActivity[string, string]("unit.echo")

type unitEnv struct {
	*testsuite.TestWorkflowEnvironment
	books *bookkeeping
	// waitReturned, when set, runs inside the mocked waitReturned local
	// activity, while a wait is being marked returned, and answers whether
	// a Signal sent to the wait.
	waitReturned *func(port.Topic) bool
}

// newUnitEnv registers one kind whose handler is fn and mocks the
// bookkeeping local activities.
func newUnitEnv(t *testing.T, def port.Definition) unitEnv {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(def))
	require.NoError(t, reg.RegisterActivity(port.Bind(testActivity, func(context.Context, string) (string, error) {
		return "", errors.New("the real body must not run in unit tests")
	})))
	logger := slog.New(slog.DiscardHandler)
	e := &Engine{reg: reg, cfg: Config{Logger: logger}.withDefaults(), logger: logger, books: &bookkeeping{logger: logger}}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(tlog.NewStructuredLogger(logger))
	env := s.NewTestWorkflowEnvironment()
	e.registerWorkflows(env, port.StartOptions{})
	for _, b := range engineapi.Activities(reg) {
		env.RegisterActivityWithOptions(e.activityFunc(b, newCancelWatch(e)), activity.RegisterOptions{Name: b.Name()})
	}
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: WorkflowID(testRunID)})
	env.OnActivity(e.books.project, mock.Anything, mock.Anything, mock.Anything).Return(port.Status(""), nil)
	env.OnActivity(e.books.addWaiter, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(e.books.removeWaiters, mock.Anything, mock.Anything, mock.Anything).Return(nil)
	var waitReturned func(port.Topic) bool
	env.OnActivity(e.books.waitReturned, mock.Anything, mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ port.RunID, topic port.Topic) (bool, error) {
			return waitReturned != nil && waitReturned(topic), nil
		})
	env.OnActivity(e.books.takeKept, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(keptSignal{}, nil)
	return unitEnv{TestWorkflowEnvironment: env, books: e.books, waitReturned: &waitReturned}
}

func (u unitEnv) run(def port.Definition, input any) {
	raw, err := json.Marshal(input)
	if err != nil {
		panic(err)
	}
	u.ExecuteWorkflow(WorkflowType(def.Kind, def.Version), runInput{Input: raw})
}

func TestStepMapsToAnActivityWithTheStepNameAndTheKindsPolicy(t *testing.T) {
	def := port.Definition{
		Kind: "unit.steps", Version: 1, Retry: port.NetworkRetry(), StepTimeout: 7 * time.Second, HeartbeatTimeout: 3 * time.Second,
		Handler: port.Handle(func(f port.Flow, in string) error {
			out, err := testActivity.Run(f, "greet", in)
			if err != nil {
				return err
			}
			_, err = testActivity.Run(f, "again", out, port.WithTimeout(time.Second))
			return err
		}),
	}
	env := newUnitEnv(t, def)
	// The options the workflow scheduled each activity with, as the
	// workflow's outbound interceptor sees them: the timeouts exactly, not
	// a deadline measured from the test machine's clock.
	var scheduled []workflow.ActivityOptions
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&optionsRecorder{got: &scheduled}}})
	var seen []activity.Info
	env.OnActivity(testActivity.Name(), mock.Anything, mock.Anything).Return(
		func(ctx context.Context, call stepCall) (stepResult, error) {
			seen = append(seen, activity.GetInfo(ctx))
			require.Equal(t, len(seen) == 1, call.Project, "only the first step moves the projection to running")
			var s string
			require.NoError(t, json.Unmarshal(call.Input, &s))
			out, err := json.Marshal(s + "!")
			return stepResult{Output: out, Attempt: 1}, err
		})
	env.run(def, "hi")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, seen, 2)
	require.Equal(t, "greet", seen[0].ActivityID)
	require.Equal(t, "again", seen[1].ActivityID)
	require.Equal(t, 3*time.Second, seen[0].HeartbeatTimeout)
	require.Len(t, scheduled, 2)
	require.Equal(t, 7*time.Second, scheduled[0].StartToCloseTimeout)
	require.Equal(t, 3*time.Second, scheduled[0].HeartbeatTimeout)
	require.Equal(t, time.Second, scheduled[1].StartToCloseTimeout)
	require.Equal(t, int32(5), scheduled[0].RetryPolicy.MaximumAttempts, "the kind's policy: NetworkRetry")
}

// optionsRecorder records the options of every activity a workflow
// schedules.
type optionsRecorder struct {
	interceptor.WorkerInterceptorBase
	got *[]workflow.ActivityOptions
}

func (r *optionsRecorder) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &recordingInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, got: r.got}
}

type recordingInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	got *[]workflow.ActivityOptions
}

func (i *recordingInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&recordingOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, got: i.got})
}

type recordingOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	got *[]workflow.ActivityOptions
}

func (o *recordingOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	*o.got = append(*o.got, workflow.GetActivityOptions(ctx))
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func TestFailedStepReachesTheHandlerAsStepError(t *testing.T) {
	var got *port.StepError
	def := port.Definition{
		Kind: "unit.fail", Version: 1, Retry: port.RetryPolicy{MaxAttempts: 4},
		Handler: port.Handle(func(f port.Flow, in string) error {
			_, err := testActivity.Run(f, "doomed", in)
			errors.As(err, &got)
			return err
		}),
	}
	env := newUnitEnv(t, def)
	env.OnActivity(testActivity.Name(), mock.Anything, mock.Anything).Return(stepResult{},
		temporal.NewApplicationErrorWithOptions("disk full", stepErrorType, temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{2}}))
	env.run(def, "x")
	require.Error(t, env.GetWorkflowError())
	require.NotNil(t, got)
	require.Equal(t, "doomed", got.Step)
	require.Equal(t, "disk full", got.Message)
	require.True(t, got.NonRetryable)
	require.Equal(t, 2, got.Attempts)
}

func TestContinueAsNewCarriesBufferedSignals(t *testing.T) {
	def := port.Definition{
		Kind: "unit.loop", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(f port.Flow, n int) error {
			if _, err := f.WaitSignal("wait", "loop:1", 24*time.Hour, nil); err != nil {
				return err
			}
			if err := f.Sleep("nap", time.Hour); err != nil {
				return err
			}
			return port.ContinueAsNew(n + 1)
		}),
	}
	env := newUnitEnv(t, def)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow("loop:1", json.RawMessage(`"one"`)) }, time.Minute)
	// Arrives while the run sleeps, after its wait: buffered, then drained.
	env.RegisterDelayedCallback(func() { env.SignalWorkflow("loop:1", json.RawMessage(`"two"`)) }, 2*time.Minute)
	env.run(def, 0)
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, "unit.loop@v1", can.WorkflowType.Name)
	var next runInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.JSONEq(t, `1`, string(next.Input))
	require.Equal(t, map[port.Topic][]json.RawMessage{"loop:1": {json.RawMessage(`"two"`)}}, next.Pending)
	require.Equal(t, []port.Topic{"loop:1"}, next.Topics)
}

// A zero timeout polls: with no signal buffered the wait returns at once,
// not received.
func TestWaitSignalWithZeroTimeoutReturnsAtOnce(t *testing.T) {
	var polled []bool
	def := port.Definition{
		Kind: "unit.poll", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(f port.Flow, in string) error {
			ok, err := f.WaitSignal("poll", "poll:1", 0, nil)
			polled = append(polled, ok)
			return err
		}),
	}
	env := newUnitEnv(t, def)
	env.run(def, "x")
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []bool{false}, polled)
}

// A signal that reaches the run after its wait's timer fired, while the
// wait is being marked returned (Signal counted the run as parked and sent
// it), is that wait's: it returns received, as the lease engine's resumed
// wait takes a signal addressed to it whatever its deadline. The run then
// ends without waiting again, so a signal left in the channel would have
// been lost.
func TestWaitTakesASignalThatArrivesAsItTimesOut(t *testing.T) {
	def, got := oneWait("unit.late", "late:1")
	env := newUnitEnv(t, def)
	marked := 0
	*env.waitReturned = func(topic port.Topic) bool {
		marked++
		env.SignalWorkflow(string(topic), json.RawMessage(`"late"`))
		return true
	}
	env.run(def, "x")
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, 1, marked, "the wait timed out and was marked returned")
	require.Equal(t, []string{"true", "late"}, *got)
}

// oneWait is a kind whose handler waits once on topic, for a minute, and
// ends; got receives what the wait returned (received, then the payload).
func oneWait(kind port.Kind, topic port.Topic) (port.Definition, *[]string) {
	got := new([]string)
	return port.Definition{
		Kind: kind, Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(f port.Flow, in string) error {
			var payload string
			ok, err := f.WaitSignal("wait", topic, time.Minute, &payload)
			*got = append(*got, fmt.Sprint(ok), payload)
			return err
		}),
	}, got
}

// A signal that a Signal counted for the wait before the wait timed out,
// but which reaches the workflow only after the wait looked in its
// channel, is that wait's too: the wait waits for it, for
// countedSignalWait at most. A wait that was not counted does not wait,
// and one whose counted signal never comes returns not received once that
// bound passes. The signal comes 10 s after the mark on the test clock.
func TestWaitAwaitsASignalCountedAsItTimedOut(t *testing.T) {
	def, got := oneWait("unit.counted", "counted:1")
	for _, c := range []struct {
		name           string
		signaled, sent bool
		want           []string
	}{
		{"counted and sent", true, true, []string{"true", "counted"}},
		{"counted, never sent", true, false, []string{"false", ""}},
		{"not counted", false, true, []string{"false", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			*got = nil
			env := newUnitEnv(t, def)
			*env.waitReturned = func(topic port.Topic) bool {
				if c.sent {
					env.RegisterDelayedCallback(func() { env.SignalWorkflow(string(topic), json.RawMessage(`"counted"`)) }, 10*time.Second)
				}
				return c.signaled
			}
			env.run(def, "x")
			require.NoError(t, env.GetWorkflowError())
			require.Equal(t, c.want, *got)
		})
	}
}
