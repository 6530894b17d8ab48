// Package tracing carries an OpenTelemetry trace across the places where
// taskport's work leaves the process and comes back later: an outbox row
// written in a business transaction and dispatched by another process, a
// lease-engine run claimed by another worker. The trace context is
// stored as W3C Trace Context (traceparent, tracestate), whatever
// propagator the process installs globally, so that rows written by one
// build are read by another.
//
// It also holds the slog handler that stamps log lines with the trace and
// span of their context.
package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Stored is the W3C trace context of one span as a row stores it; the zero
// value means "no trace" (the writer's context carried no valid span).
type Stored struct {
	// Parent is the traceparent header value.
	Parent string
	// State is the tracestate header value, often empty.
	State string
}

// FromContext returns the trace context of the span in ctx, zero when ctx
// carries no valid span (tracing off, or a caller outside any trace).
func FromContext(ctx context.Context) Stored {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return Stored{}
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return Stored{Parent: c["traceparent"], State: c["tracestate"]}
}

// Into returns ctx carrying s as its remote parent span context, so that
// the next span started from it continues s's trace. A zero or malformed s
// leaves ctx as it is: a row without a trace starts a new one.
func (s Stored) Into(ctx context.Context) context.Context {
	if s.Parent == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": s.Parent}
	if s.State != "" {
		c["tracestate"] = s.State
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// Tracer returns the named tracer of tp, or of the global provider when tp
// is nil: the default of every Config's TracerProvider, a no-op until cmd
// installs an SDK provider.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		return otel.GetTracerProvider().Tracer(name)
	}
	return tp.Tracer(name)
}

// LogHandler wraps next so that every record logged with a context holding
// a valid span carries trace_id and span_id, which join a log line to its
// trace in the backend. Records logged without a context (slog's non-
// Context methods) or outside a trace pass unchanged.
func LogHandler(next slog.Handler) slog.Handler { return logHandler{next: next} }

type logHandler struct{ next slog.Handler }

func (h logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{next: h.next.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{next: h.next.WithGroup(name)}
}

// WithSpan wraps next so that a record logged without a span in its own
// context (a handler's f.Logger().Info, an engine's line about a run) is
// handled in the context of span's result, the span of the run it is about,
// and so is stamped by LogHandler further down. span is called per record,
// because a run's trace can change while it runs (a signal moves it).
func WithSpan(next slog.Handler, span func() trace.SpanContext) slog.Handler {
	return spanHandler{next: next, span: span}
}

type spanHandler struct {
	next slog.Handler
	span func() trace.SpanContext
}

func (h spanHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h spanHandler) Handle(ctx context.Context, r slog.Record) error {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		if sc := h.span(); sc.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, sc)
		}
	}
	return h.next.Handle(ctx, r)
}

func (h spanHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return spanHandler{next: h.next.WithAttrs(attrs), span: h.span}
}

func (h spanHandler) WithGroup(name string) slog.Handler {
	return spanHandler{next: h.next.WithGroup(name), span: h.span}
}

// SpanContext is s as a span context, invalid for the zero Stored.
func (s Stored) SpanContext() trace.SpanContext {
	return trace.SpanContextFromContext(s.Into(context.Background()))
}
