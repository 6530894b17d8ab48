package temporaladapter

import (
	"github.com/taskport/taskport/internal/runretention"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/retention"
)

// Pruner is the Temporal engine's retention (package retention): the run
// projection rows in taskport.run follow the Policy's ages, and waiters whose
// run ended (a workflow terminated or reset while waiting) and early signals
// taken or expired go. The
// histories themselves follow the namespace's retention, which stays
// Temporal's.
func (e *Engine) Pruner() retention.Pruner {
	return runretention.Pruner(e.pool, runstore.EngineTemporal)
}
