package test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract"
	"github.com/taskport/taskport/test/portdiff"
)

// The port-level differential test's knobs: TASKPORT_PORTDIFF_SEED replays
// one seed; TASKPORT_PORTDIFF_SEEDS=200 runs seeds 1..200 as a soak and
// prints its table.
const (
	portdiffSeedEnv  = "TASKPORT_PORTDIFF_SEED"
	portdiffSeedsEnv = "TASKPORT_PORTDIFF_SEEDS"
	// portdiffAtOnce bounds the seeds in flight: 3 keeps the 3-seed run at
	// one seed's duration on 2 cores.
	portdiffAtOnce = 3
)

// TestPortDifferential runs seeded random programs on the lease engine and
// on Temporal (dev server and temporal-pg) and requires the same
// normalized RunView trace from each: 3 seeds, or the soak's.
func TestPortDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv(portdiffSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s must be an unsigned integer", portdiffSeedEnv)
		seeds = []uint64{v}
	}
	if s := os.Getenv(portdiffSeedsEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%s must be a number of seeds", portdiffSeedsEnv)
		seeds = seeds[:0]
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	var (
		mu      sync.Mutex
		results []portdiff.Result
	)
	t.Run("seeds", func(t *testing.T) {
		// portdiffAtOnce seeds at a time, each in concurrent t.Run calls
		// (see portdiff.Run): the work waits on servers, not on the CPU.
		var wg sync.WaitGroup
		slots := make(chan struct{}, portdiffAtOnce)
		for _, seed := range seeds {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
					r := portdiff.Run(t, seed, engines()...)
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				})
			}()
		}
		wg.Wait()
	})
	t.Logf("port differential, %d seed(s):\n%s", len(seeds), portdiff.Table(results))
}

// TestPortDifferentialSeesAMisnormalizingEngine: an engine whose views say
// one more attempt than it made must be reported, on that field.
func TestPortDifferentialSeesAMisnormalizingEngine(t *testing.T) {
	lease := leaseEngine()
	off := contract.Engine{Name: "lease-attempts-off-by-one", Open: func(t *testing.T, pool *pgxpool.Pool) contract.Factory {
		inner := lease.Open(t, pool)
		return func(t *testing.T, reg *port.Registry) port.TaskEngine {
			e := inner(t, reg)
			return offByOne{TaskEngine: e, Admin: e.(port.Admin)}
		}
	}}
	plan := portdiff.NewPlan(1)
	var a, b portdiff.Trace
	t.Run("engines", func(t *testing.T) {
		t.Run(lease.Name, func(t *testing.T) { t.Parallel(); a = portdiff.Record(t, plan, lease) })
		t.Run(off.Name, func(t *testing.T) { t.Parallel(); b = portdiff.Record(t, plan, off) })
	})
	if t.Failed() {
		return
	}
	divs := portdiff.Compare(a, b)
	// Only the altered field is required: the lease engine itself may
	// diverge from another lease run where it is not deterministic (a run
	// canceled in a held step sometimes ends naming the step before).
	seen := 0
	for _, d := range divs {
		if d.Field != "attempts" {
			t.Logf("besides the altered field: %s", d)
			continue
		}
		seen++
		n, err := strconv.Atoi(d.A)
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(n+1), d.B, "the altered value is reported: %s", d)
	}
	require.NotZero(t, seen, "the comparison must see the altered field: %v", divs)
	t.Logf("%d divergence(s) on the altered field, first: %s", seen, divs[0])
}

// offByOne reports one attempt more than the engine it wraps.
type offByOne struct {
	port.TaskEngine
	port.Admin
}

func (o offByOne) Get(ctx context.Context, id port.RunID) (port.RunView, error) {
	v, err := o.TaskEngine.Get(ctx, id)
	v.Attempts++
	return v, err
}

func (o offByOne) ListRuns(ctx context.Context, f port.RunFilter) ([]port.RunView, error) {
	vs, err := o.Admin.ListRuns(ctx, f)
	for i := range vs {
		vs[i].Attempts++
	}
	return vs, err
}
