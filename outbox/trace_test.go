package outbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
)

// spanEngine records the span each enqueue was called in (the dispatcher
// enqueues through EnqueueMany).
type spanEngine struct {
	*apptest.RecordingEngine
	mu    sync.Mutex
	spans map[string]trace.SpanContext // idempotency key -> span
}

func (e *spanEngine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	e.mu.Lock()
	for _, it := range items {
		e.spans[it.Options.IdempotencyKey] = trace.SpanContextFromContext(ctx)
	}
	e.mu.Unlock()
	return e.RecordingEngine.EnqueueMany(ctx, items)
}

// A row keeps the trace of the transaction that wrote it; its dispatch is a
// span of that trace, parented on the writer's span, and the engine is
// called inside the dispatch span. A row written outside any trace is
// dispatched in a trace of its own.
func TestDispatchContinuesTheWritersTrace(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })

	tctx, business := tp.Tracer("test").Start(ctx, "plan approve")
	require.NoError(t, pgx.BeginFunc(tctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(tctx, tx, outbox.Event{Kind: "k.ind", IdempotencyKey: "traced", BusinessKey: "b", Payload: 1})
		return err
	}))
	business.End()
	write(t, pool, "k.ind", "untraced")

	var stored, none string
	require.NoError(t, pool.QueryRow(ctx, `SELECT traceparent FROM outbox_event WHERE idempotency_key = 'traced'`).Scan(&stored))
	require.Equal(t, "00-"+business.SpanContext().TraceID().String()+"-"+business.SpanContext().SpanID().String()+"-01", stored)
	require.NoError(t, pool.QueryRow(ctx, `SELECT traceparent FROM outbox_event WHERE idempotency_key = 'untraced'`).Scan(&none))
	require.Empty(t, none)

	eng := &spanEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), spans: map[string]trace.SpanContext{}}
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{TracerProvider: tp})
	require.NoError(t, err)
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	dispatches := map[string]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		if s.Name == outbox.SpanDispatch {
			for _, a := range s.Attributes {
				if a.Key == "taskport.outbox.row" {
					dispatches[a.Value.AsString()] = s
				}
			}
		}
	}
	require.Len(t, dispatches, 2, "rows of different traces are dispatched apart, each in its trace")
	traced, untraced := dispatches["k.ind/traced"], dispatches["k.ind/untraced"]
	require.Equal(t, business.SpanContext().TraceID(), traced.SpanContext.TraceID())
	require.Equal(t, business.SpanContext().SpanID(), traced.Parent.SpanID())
	require.Equal(t, traced.SpanContext, eng.spans["traced"], "the engine is called inside the dispatch span")
	require.False(t, untraced.Parent.IsValid(), "a row without a trace starts one")
	require.NotEqual(t, business.SpanContext().TraceID(), untraced.SpanContext.TraceID())
	require.Equal(t, untraced.SpanContext, eng.spans["untraced"])
}
