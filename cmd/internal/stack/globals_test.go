package stack

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// A URL whose query exec mode sends no parameter types is refused before
// any connection, naming the modes that work (dbtx.CheckQueryExecMode).
func TestPoolRefusesAnUntypedQueryExecMode(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, mode := range []string{"exec", "simple_protocol"} {
		g := &Globals{DatabaseURL: "postgres://127.0.0.1:1/none?default_query_exec_mode=" + mode}
		_, err := g.Pool(context.Background(), log, 2)
		require.ErrorContains(t, err, "use cache_statement", mode)
		_, err = g.MigrationPool(context.Background(), log, 2)
		require.ErrorContains(t, err, "use cache_statement", mode)
	}
}
