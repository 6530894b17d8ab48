package temporaladapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/proc"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter/internal/testkinds"
)

const testWorkerPkg = "github.com/taskport/taskport/temporaladapter/internal/testworker"

// startWorker runs the test worker binary on the harness's queue and
// database and waits until it polls.
func (h *harness) startWorker(name string) *proc.Process {
	h.t.Helper()
	bin := proc.Build(h.t, testWorkerPkg)
	p := proc.Start(h.t, name, bin, []string{"-hostport", server.HostPort, "-namespace", server.Namespace, "-db", h.dbURL, "-task-queue", h.queue})
	require.NoError(h.t, p.WaitOutput("ready", time.Minute))
	return p
}

func TestKillWorkerMidStepCompletesWithoutRerunningDoneSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	client := h.engine(false) // enqueues only; the workers are child processes
	a := h.startWorker("worker-a")

	id, err := client.Enqueue(ctx, testkinds.KindSteps,
		testkinds.StepsIn{Steps: 3, Slow: 2, Step: testkinds.EffectIn{Chunks: 20, ChunkMS: 100}}, port.EnqueueOptions{IdempotencyKey: "kill-9"})
	require.NoError(t, err)
	h.waitBegun(id, "s2")
	require.NoError(t, a.Kill(ctx))
	t.Logf("killed worker-a (pid %d) during step s2 of run %s", a.Pid(), id)

	h.startWorker("worker-b")
	h.waitStatus(id, port.StatusSucceeded)

	s1, _ := h.ledger(id, "s1")
	require.Equal(t, 1, s1.Begins, "s1 completed before the kill and did not run again")
	require.Equal(t, 1, s1.Commits)
	s2, _ := h.ledger(id, "s2")
	require.Equal(t, 1, s2.Commits)
	require.Equal(t, int64(2), s2.Epoch, "the second attempt committed")
	s3, _ := h.ledger(id, "s3")
	require.Equal(t, 1, s3.Commits)
	t.Logf("s2: %d begins, committed by attempt %d", s2.Begins, s2.Epoch)
}

func TestStoppedWorkerPastHeartbeatIsFencedAfterItsRetryRanElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	client := h.engine(false)
	a := h.startWorker("worker-a")

	// A stubborn step ignores what its heartbeat says and tries to commit
	// anyway: only the ledger's fence stops its stale attempt. The frozen
	// worker's pending polls may still be handed a retry or two (the server
	// cannot tell it is frozen), hence the extra attempts.
	id, err := client.Enqueue(ctx, testkinds.KindSteps,
		testkinds.StepsIn{Steps: 2, Slow: 1, Attempts: 10, Step: testkinds.EffectIn{Chunks: 10, ChunkMS: 100, Stubborn: true}},
		port.EnqueueOptions{IdempotencyKey: "sigstop"})
	require.NoError(t, err)
	h.waitBegun(id, "s1")
	require.NoError(t, a.Stop())
	t.Logf("stopped worker-a (pid %d) during attempt 1 of s1 of run %s", a.Pid(), id)

	h.startWorker("worker-b")
	require.Eventually(t, func() bool { r, _ := h.ledger(id, "s1"); return r.Done }, 2*time.Minute, 20*time.Millisecond)
	s1, _ := h.ledger(id, "s1")
	require.Greater(t, s1.Epoch, int64(1), "a retry ran on worker-b")

	require.NoError(t, a.Cont())
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM tp_test_fenced WHERE op = $1 AND token LIKE '%#1'`, string(id)+"/s1") == 1
	}, time.Minute, 20*time.Millisecond, "the stale attempt's commit was not fenced")
	h.waitStatus(id, port.StatusSucceeded)
	s1, _ = h.ledger(id, "s1")
	require.Equal(t, 1, s1.Commits, "the side effect happened once")
	require.Equal(t, "s1", s1.Result)
	t.Logf("resumed worker-a: its attempt-1 commit was fenced (%d fenced commits in all); s1 committed once by attempt %d",
		h.count(`SELECT count(*) FROM tp_test_fenced`), s1.Epoch)
}

func TestTwoWorkersRunEachStepOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	one := h.engine(true)
	h.engine(true)
	const runs = 200

	ids := make([]port.RunID, 0, runs)
	for i := range runs {
		id, err := one.Enqueue(ctx, testkinds.KindSteps, testkinds.StepsIn{Steps: 3}, port.EnqueueOptions{IdempotencyKey: "many:" + string(rune('a'+i%26)) + time.Duration(i).String()})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM taskport.run WHERE status = 'succeeded'`) == runs
	}, 3*time.Minute, 100*time.Millisecond)
	require.Equal(t, runs*3, h.count(`SELECT count(*) FROM tp_test_ledger WHERE commits = 1`))
	require.Equal(t, 0, h.count(`SELECT count(*) FROM tp_test_ledger WHERE commits <> 1`))
	require.Equal(t, 0, h.count(`SELECT count(*) FROM tp_test_fenced`))
	require.Len(t, ids, runs)
}
