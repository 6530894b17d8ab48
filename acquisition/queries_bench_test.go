package acquisition

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stephenafamo/bob"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// BenchmarkStatements sets what building a statement with bob costs beside
// the round trip that runs it: go test -run '^$' -bench Statements ./acquisition/
func BenchmarkStatements(b *testing.B) {
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	b.Run("build/get_plan", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := bob.Build(ctx, selectPlanStmt(id, false)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("build/list_decisions", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := bob.Build(ctx, listDecisionsStmt(DecisionOpen, 100)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("build+run/list_decisions", func(b *testing.B) {
		pool := pgtest.NewPool(b)
		for b.Loop() {
			if _, err := ListDecisions(ctx, pool, DecisionOpen, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
}
