package temporaladapter

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/taskport/taskport/port"
)

// ReplayHistoryFile replays a recorded workflow history (JSON, as written by
// WriteHistoryFile or `temporal workflow show --output json`) against every
// version registered in reg, the way a worker serving them all would. It
// fails when the handler no longer produces the recorded steps: a renamed,
// reordered or removed step within a version. Local activities (the
// adapter's Postgres bookkeeping) are not executed on replay.
func ReplayHistoryFile(reg *port.Registry, path string) error {
	logger := slog.New(slog.DiscardHandler)
	e := &Engine{reg: reg, cfg: Config{Logger: logger}.withDefaults(), logger: logger, books: &bookkeeping{logger: logger}}
	r := worker.NewWorkflowReplayer()
	e.registerWorkflows(r, port.StartOptions{})
	if err := r.ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(logger), path); err != nil {
		return fmt.Errorf("replay %s: %w", path, err)
	}
	return nil
}

// WriteHistoryFile exports the history of a run's current workflow
// execution to path as protojson, for a replay fixture.
func WriteHistoryFile(ctx context.Context, c client.Client, id port.RunID, path string) error {
	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, WorkflowID(id), "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("read history of run %s: %w", id, err)
		}
		hist.Events = append(hist.Events, ev)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(hist)
	if err != nil {
		return fmt.Errorf("encode history of run %s: %w", id, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write history of run %s: %w", id, err)
	}
	return nil
}
