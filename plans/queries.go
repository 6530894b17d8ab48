package plans

import (
	"github.com/google/uuid"
	"github.com/stephenafamo/bob"
	"github.com/stephenafamo/bob/dialect/psql"
	"github.com/stephenafamo/bob/dialect/psql/sm"

	"github.com/taskport/taskport/port"
)

// openRunsStmt finds the plan's runs an engine may still be driving, in the
// shared run store (read-only), leaving out the kinds in spare. Built with
// bob so that the terminal statuses come from port's constants and each
// spared kind is its own argument.
func openRunsStmt(planID uuid.UUID, spare ...port.Kind) bob.Query {
	q := psql.Select(
		sm.Columns("id"), sm.From(psql.Quote("taskport", "run")),
		sm.Where(psql.Quote("business_key").EQ(psql.Arg(planID.String()))),
		sm.Where(psql.Quote("status").NotIn(
			psql.S(string(port.StatusSucceeded)), psql.S(string(port.StatusFailed)), psql.S(string(port.StatusCanceled)))),
		sm.OrderBy("created_at"), sm.OrderBy("id"),
	)
	if len(spare) > 0 {
		kinds := make([]any, len(spare))
		for i, k := range spare {
			kinds[i] = string(k)
		}
		q.Apply(sm.Where(psql.Quote("kind").NotIn(psql.Arg(kinds...))))
	}
	return q
}
