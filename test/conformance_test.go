package test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttest"
	"github.com/taskport/taskport/test/contract"
)

// TestConformance runs the port's specification (port/porttest) on the
// three cells of the contract suite, each engine built as there. The run of
// "another engine" is the other adapter's over the same database: the
// temporal dev server's for the lease cell (launched only by those rows),
// the lease engine's for the temporal cells.
func TestConformance(t *testing.T) {
	lease := leaseEngine()
	// The rows the Temporal adapter still fails (issue 24 stays open for
	// them): each is skipped saying so, not dropped.
	temporalKnown := map[string]string{
		"Cancel/running": "a run canceled in a step ends with Attempts 0, not the attempt that was running: " +
			"the workflow learns no attempt number from a step its cancel resolved",
		"Signal/waiting": "a signal between two waits counts 1, not 0: the run stays registered on its topics " +
			"until it ends (test/contract Features.KeepsSignalsForTheTopic)",
		"Cancel/leased": "seen once: a step body started after Cancel returned on a run scheduled but not started " +
			"(the activity task was already handed to the worker)",
	}
	leaseKnown := map[string]string{
		"Cancel/running": "seen once: the run canceled in its step read CurrentStep \"work\" where \"\" was expected " +
			"by the row after the end commit",
	}
	cells := []struct {
		eng   contract.Engine
		other contract.Engine
		known map[string]string
	}{
		{lease, temporalEngine(devTarget()), leaseKnown},
		{temporalEngine(devTarget()), lease, temporalKnown},
		{temporalEngine(pgTarget()), lease, temporalKnown},
	}
	for _, cell := range cells {
		t.Run(cell.eng.Name, func(t *testing.T) {
			t.Parallel()
			porttest.Run(t, func(t *testing.T) porttest.Harness {
				pool := pgtest.NewPool(t)
				return porttest.Harness{
					Pool: pool,
					New:  factory(cell.eng, pool),
					Other: func(t *testing.T, reg *port.Registry) port.TaskEngine {
						return factory(cell.other, pool)(t, reg)
					},
					Known: cell.known,
				}
			})
		})
	}
}

// factory opens eng's side of one conformance test over pool.
func factory(eng contract.Engine, pool *pgxpool.Pool) func(*testing.T, *port.Registry) port.TaskEngine {
	var open contract.Factory
	return func(t *testing.T, reg *port.Registry) port.TaskEngine {
		if open == nil {
			open = eng.Open(t, pool)
		}
		return open(t, reg)
	}
}
