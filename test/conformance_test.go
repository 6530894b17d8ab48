package test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttest"
	"github.com/taskport/taskport/router"
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

// TestConformanceInANamedSchema runs the specification on both adapters as
// a library user has them: a database holding only the engine set, in a
// schema the user named (migrations.UpEngine). No taskport schema exists
// there, so a statement of either engine that still names the default
// layout fails its row.
func TestConformanceInANamedSchema(t *testing.T) {
	const schema = "jobs"
	lease, temporal := leaseEngineIn(schema), temporalEngineIn(devTarget(), schema)
	for _, cell := range []struct{ eng, other contract.Engine }{{lease, temporal}, {temporal, lease}} {
		t.Run(cell.eng.Name, func(t *testing.T) {
			t.Parallel()
			porttest.Run(t, func(t *testing.T) porttest.Harness {
				pool := pgtest.NewEnginePool(t, schema)
				return porttest.Harness{
					Pool:      pool,
					RunSchema: schema,
					New:       factory(cell.eng, pool),
					Other: func(t *testing.T, reg *port.Registry) port.TaskEngine {
						return factory(cell.other, pool)(t, reg)
					},
				}
			})
		})
	}
}

// TestConformanceOfTheRouter runs the specification on the router over both
// adapters (package router, --engine both), once with each engine active:
// new runs go to the active one, and everything else is routed by the
// run's owner, so the router must answer every row as an engine does. The
// rows of "a run of another engine" do not apply (Harness.Other is nil):
// the router serves both engines' runs, which test/router_test.go covers.
func TestConformanceOfTheRouter(t *testing.T) {
	for _, active := range []string{"temporal", "lease"} {
		t.Run(active+"-active", func(t *testing.T) {
			t.Parallel()
			lease, temporal := leaseEngine(), temporalEngine(devTarget())
			porttest.Run(t, func(t *testing.T) porttest.Harness {
				pool := pgtest.NewPool(t)
				openLease, openTemporal := factory(lease, pool), factory(temporal, pool)
				var switched bool
				return porttest.Harness{
					Pool: pool,
					New: func(t *testing.T, reg *port.Registry) port.TaskEngine {
						r, err := router.New(pool, map[string]router.Engine{
							"lease":    openLease(t, reg).(router.Engine),
							"temporal": openTemporal(t, reg).(router.Engine),
						}, router.Config{Logger: quiet()})
						require.NoError(t, err)
						if active != "temporal" && !switched { // temporal is the primary, active with no switch recorded
							_, err := r.SwitchTo(context.Background(), active, "conformance", "")
							require.NoError(t, err)
							switched = true
						}
						return r
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

// TestAnUnmigratedSchemaSaysToMigrate: an engine whose Config.Schema holds
// no engine set (a typo, or a deploy whose migration step has not run yet)
// answers each call with Postgres's error and what to do about it. Before,
// it was `relation "elsewhere.run" does not exist` alone. Start is not
// refused: a worker started before the migration step serves once it ran
// (host's /readyz reports the schema meanwhile).
func TestAnUnmigratedSchemaSaysToMigrate(t *testing.T) {
	for _, eng := range []contract.Engine{leaseEngineIn("elsewhere"), temporalEngineIn(devTarget(), "elsewhere")} {
		t.Run(eng.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			reg := port.NewRegistry()
			require.NoError(t, reg.Register(port.Definition{Kind: "schema.check", Version: 1, Retry: port.NetworkRetry(),
				Handler: port.Handle(func(port.Flow, struct{}) error { return nil })}))
			e := factory(eng, pgtest.NewEnginePool(t, "jobs"))(t, reg)
			_, err := e.Enqueue(ctx, "schema.check", struct{}{}, port.EnqueueOptions{IdempotencyKey: "k"})
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe, "%v", err)
			require.Equal(t, "42P01", pe.Code)
			require.ErrorContains(t, err, "migrations.UpEngine")
			_, err = e.Get(ctx, port.RunID(uuid.NewString()))
			require.ErrorContains(t, err, "migrations.UpEngine")
			require.NotErrorIs(t, err, port.ErrNotFound)
		})
	}
}
