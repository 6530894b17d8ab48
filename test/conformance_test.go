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
	cells := []struct {
		eng   contract.Engine
		other contract.Engine
	}{
		{lease, temporalEngine(devTarget())},
		{temporalEngine(devTarget()), lease},
		{temporalEngine(pgTarget()), lease},
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
