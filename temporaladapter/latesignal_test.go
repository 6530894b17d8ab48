package temporaladapter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// A Signal that counts a parked run and whose send reaches the workflow
// only after the run's wait timed out and looked in its channel is
// received by that wait, as on the lease engine, and not left for a next
// wait the run never makes. The client's interceptor holds the send until
// the wait has marked itself returned (its registration reads past its
// wait), so the signal lands after the wait's workflow task read the mark.
// The run's next move is a step (its gate check), not its end, so the
// server takes the task's commands with the signal still undelivered. The
// "after" effect records what the wait returned.
func TestWaitReceivesASignalSentAsItTimesOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const topic port.Topic = "late:1"
	held := &holdFirstSignal{pool: h.pool, gate: "late", topic: topic}
	c, err := client.NewClientFromExisting(temporalClient, client.Options{
		Namespace: server.Namespace, Interceptors: []interceptor.ClientInterceptor{held},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h.c = c
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()

	id := h.enqueue(eng, kinds.Wait, kinds.WaitIn{Gate: "late", Topic: topic, Timeout: kinds.Duration(2 * time.Second)},
		port.EnqueueOptions{IdempotencyKey: "late"})
	h.waitStatus(id, port.StatusWaiting)
	n, err := eng.Signal(ctx, topic, "late")
	require.NoError(t, err)
	require.Equal(t, 1, n, "the run was parked when Signal read it")
	require.NoError(t, held.err)

	h.waitStatus(id, port.StatusSucceeded)
	notes, err := kinds.Notes(ctx, h.pool, id)
	require.NoError(t, err)
	require.Equal(t, `signal:"late"`, notes["after"], "the wait that timed out took the signal counted for it")
	require.Equal(t, map[string]int{"after": 1}, h.effects(id))
	require.Equal(t, []string{"wait-0", "wait-0: a counted signal on its way"}, h.timerSummaries(id),
		"the UI names both timers: the wait's own and its wait for the counted signal")
}

// timerSummaries returns the summary of each timer the run started, in
// order, as the Temporal UI shows them.
func (h *harness) timerSummaries(id port.RunID) []string {
	h.t.Helper()
	var got []string
	for _, ev := range h.history(id) {
		if ev.GetEventType() != enumspb.EVENT_TYPE_TIMER_STARTED {
			continue
		}
		var summary string
		if p := ev.GetUserMetadata().GetSummary(); p != nil {
			require.NoError(h.t, converter.GetDefaultDataConverter().FromPayload(p, &summary))
		}
		got = append(got, summary)
	}
	return got
}

// holdFirstSignal holds the client's first SignalWorkflow until the run's
// wait on topic has marked itself returned, after opening the kind's gate,
// so that the run ends after its wait.
type holdFirstSignal struct {
	interceptor.ClientInterceptorBase
	pool  *pgxpool.Pool
	gate  string
	topic port.Topic
	once  sync.Once
	err   error
}

func (h *holdFirstSignal) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &holdFirstSignalOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, h: h}
}

type holdFirstSignalOut struct {
	interceptor.ClientOutboundInterceptorBase
	h *holdFirstSignal
}

func (o *holdFirstSignalOut) SignalWorkflow(ctx context.Context, in *interceptor.ClientSignalWorkflowInput) error {
	o.h.once.Do(func() { o.h.err = o.h.awaitWaitReturned(ctx) })
	return o.Next.SignalWorkflow(ctx, in)
}

// awaitWaitReturned opens the gate, then polls until the wait on the topic
// has marked itself returned, for a minute at most.
func (h *holdFirstSignal) awaitWaitReturned(ctx context.Context) error {
	if err := kinds.OpenEffectGate(ctx, h.pool, h.gate); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var returned bool
		err := h.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM taskport.waiter WHERE topic = $1 AND step = '')`, h.topic).Scan(&returned)
		if err != nil || returned {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the wait on %s never marked itself returned: %w", h.topic, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}
