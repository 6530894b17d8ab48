package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/internal/tracing"
)

// A log line written in a span's context carries its trace and span ids;
// one written outside a trace carries neither.
func TestLogHandlerStampsTheTrace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With(slog.String("run_id", "r1"))
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "step")
	log.InfoContext(ctx, "in a span")
	span.End()
	log.InfoContext(context.Background(), "outside")

	dec := json.NewDecoder(&buf)
	var in, out map[string]any
	require.NoError(t, dec.Decode(&in))
	require.NoError(t, dec.Decode(&out))
	require.Equal(t, span.SpanContext().TraceID().String(), in["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), in["span_id"])
	require.Equal(t, "r1", in["run_id"])
	require.NotContains(t, out, "trace_id")
	require.NotContains(t, out, "span_id")
}

// The stored form round-trips a span context; the zero value is no trace.
func TestStoredRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "tx")
	defer span.End()
	s := tracing.FromContext(ctx)
	require.NotEmpty(t, s.Parent)
	_, child := tp.Tracer("test").Start(s.Into(context.Background()), "dispatch")
	require.Equal(t, span.SpanContext().TraceID(), child.SpanContext().TraceID())
	require.Equal(t, tracing.Stored{}, tracing.FromContext(context.Background()))
	require.Equal(t, context.Background(), tracing.Stored{}.Into(context.Background()))
	malformed := tracing.Stored{Parent: "not a traceparent"}
	_, root := tp.Tracer("test").Start(malformed.Into(context.Background()), "x")
	require.NotEqual(t, span.SpanContext().TraceID(), root.SpanContext().TraceID())
}

// A record without a span of its own takes the fallback's; one with its
// own span keeps it; an invalid fallback adds nothing.
func TestWithSpanFallsBack(t *testing.T) {
	var buf bytes.Buffer
	tp := sdktrace.NewTracerProvider()
	_, run := tp.Tracer("test").Start(context.Background(), "run")
	ownCtx, own := tp.Tracer("test").Start(context.Background(), "own")
	fallback := run.SpanContext()
	log := slog.New(tracing.WithSpan(tracing.LogHandler(slog.NewJSONHandler(&buf, nil)), func() trace.SpanContext { return fallback }))
	log.Info("no span")
	log.InfoContext(ownCtx, "own span")
	fallback = trace.SpanContext{}
	log.Info("no fallback")

	dec := json.NewDecoder(&buf)
	var lines [3]map[string]any
	for i := range lines {
		require.NoError(t, dec.Decode(&lines[i]))
	}
	require.Equal(t, run.SpanContext().TraceID().String(), lines[0]["trace_id"])
	require.Equal(t, own.SpanContext().SpanID().String(), lines[1]["span_id"])
	require.NotContains(t, lines[2], "trace_id")
}
