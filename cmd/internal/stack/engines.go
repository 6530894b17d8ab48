package stack

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
)

// openEngine opens the engine --engine names: one adapter, or both behind
// a router (--engine both). temporalOptional lets the router go on without
// the Temporal engine when its frontend cannot be reached, for what an
// operator does when it is gone (taskport engine evacuate --from temporal).
func openEngine(name string, pool *pgxpool.Pool, log *slog.Logger, lease, temporal func() (port.TaskEngine, error), temporalOptional bool) (port.TaskEngine, error) {
	switch name {
	case "lease":
		return lease()
	case "temporal":
		return temporal()
	}
	l, err := lease()
	if err != nil {
		return nil, err
	}
	engines := map[string]router.Engine{"lease": l.(router.Engine)}
	t, err := temporal()
	switch {
	case err == nil:
		engines["temporal"] = t.(router.Engine)
	case temporalOptional:
		log.Warn("the Temporal frontend cannot be reached: going on with the lease engine alone; the temporal engine's runs are read from the database",
			slog.String("error", err.Error()))
	default:
		return nil, err
	}
	return router.New(pool, engines, router.Config{Logger: log})
}
