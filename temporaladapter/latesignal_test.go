package temporaladapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// A Signal that counts a parked run and whose send reaches the workflow
// only as the run's wait times out is received by that wait, as on the
// lease engine, and not left for a next wait the run never makes. The
// client's interceptor holds the send until the timed-out wait is marking
// itself returned (its statement waits for the lock Signal holds on the
// run's registration), so the signal lands in the workflow task that runs
// the mark, after the wait looked in its channel. The run's next move is a
// step (its gate check), not its end, so the server takes the task's
// commands with the signal still undelivered. The "after" effect records
// what the wait returned.
func TestWaitReceivesASignalSentAsItTimesOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	held := &holdFirstSignal{pool: h.pool, gate: "late"}
	c, err := client.NewClientFromExisting(temporalClient, client.Options{
		Namespace: server.Namespace, Interceptors: []interceptor.ClientInterceptor{held},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h.c = c
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()

	const topic port.Topic = "late:1"
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
}

// holdFirstSignal holds the client's first SignalWorkflow until a
// statement of its database waits for a lock to mark a wait returned, after
// opening the kind's gate, so that the run ends after its wait.
type holdFirstSignal struct {
	interceptor.ClientInterceptorBase
	pool *pgxpool.Pool
	gate string
	once sync.Once
	err  error
}

func (h *holdFirstSignal) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &holdFirstSignalOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, h: h}
}

type holdFirstSignalOut struct {
	interceptor.ClientOutboundInterceptorBase
	h *holdFirstSignal
}

func (o *holdFirstSignalOut) SignalWorkflow(ctx context.Context, in *interceptor.ClientSignalWorkflowInput) error {
	o.h.once.Do(func() { o.h.err = o.h.awaitMarkBlocked(ctx) })
	return o.Next.SignalWorkflow(ctx, in)
}

// awaitMarkBlocked opens the gate, then waits until a wait's mark waits
// for a lock, for a minute at most.
func (h *holdFirstSignal) awaitMarkBlocked(ctx context.Context) error {
	if err := kinds.OpenEffectGate(ctx, h.pool, h.gate); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return pgtest.AwaitLockWait(ctx, h.pool, "UPDATE taskport.waiter SET step")
}
