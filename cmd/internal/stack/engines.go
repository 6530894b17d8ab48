package stack

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
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

// enginePruners are the retention pruners of the engine, or of each engine
// behind the router.
func enginePruners(e port.TaskEngine) ([]retention.Pruner, error) {
	es := []port.TaskEngine{e}
	if r, ok := e.(*router.Router); ok {
		es = es[:0]
		for _, x := range r.Engines() {
			es = append(es, x)
		}
	}
	var out []retention.Pruner
	for _, x := range es {
		p, ok := x.(interface{ Pruner() retention.Pruner })
		if !ok {
			return nil, errors.New("engine offers no retention pruner")
		}
		out = append(out, p.Pruner())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no engine to prune")
	}
	return out, nil
}
