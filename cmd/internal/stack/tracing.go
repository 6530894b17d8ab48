package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is a process's OpenTelemetry tracing: spans are exported over
// OTLP/gRPC when --otlp-endpoint (env OTEL_EXPORTER_OTLP_ENDPOINT) names a
// collector, and go nowhere otherwise.
type Tracing struct {
	// Provider is handed to the engine, the Temporal client and the
	// dispatcher; nil when tracing is off (they then use the global
	// provider, a no-op).
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider // nil when off
}

// StartTracing sets up the exporter when an endpoint is configured. The
// caller shuts it down (Shutdown), which exports the spans still buffered.
func (g *Globals) StartTracing(ctx context.Context, log *slog.Logger) (Tracing, error) {
	if g.OTLPEndpoint == "" {
		return Tracing{}, nil
	}
	// The exporter takes a URL it cannot use (no scheme, no host) for the
	// default localhost:4317 without a word: refuse it here instead.
	if u, err := url.Parse(g.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Tracing{}, usage(fmt.Errorf("--otlp-endpoint (env OTEL_EXPORTER_OTLP_ENDPOINT) must be an http:// or https:// URL with a host, e.g. http://collector:4317; got %q",
			g.OTLPEndpoint))
	}
	routeOTelLogs(log)
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(g.OTLPEndpoint))
	if err != nil {
		return Tracing{}, fmt.Errorf("--otlp-endpoint %s: %w", g.OTLPEndpoint, err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set, win over
	// the service name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "taskport")),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return Tracing{}, fmt.Errorf("tracing resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing to an OTLP collector", slog.String("endpoint", redact(g.OTLPEndpoint)))
	return Tracing{Provider: tp, sdk: tp}, nil
}

// routeOTelLogs sends what OpenTelemetry reports to log, so that every
// line the process writes is structured: by default a failed export (an
// unreachable collector) is printed by the standard library's log
// package, and the SDK's own messages by a logger of the same format.
// Both are process-wide; the last process logger set wins, which is the
// only one a process has outside tests.
func routeOTelLogs(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", slog.Any("err", err))
	}))
	// logr's verbosity V(n) is slog level -n: the SDK's errors stay errors,
	// its V(4) info lines show at --log-level debug, and its V(8) debug
	// lines never.
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
}

// Shutdown exports what is buffered and stops the exporter, for at most
// shutdownTimeout (an unreachable collector holds a command's exit no
// longer); a no-op when tracing is off.
func (t Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
	defer cancel()
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

const shutdownTimeout = 5 * time.Second

// HTTP wraps h so that each request runs in a server span, a child of the
// caller's span when the request carries a W3C traceparent: an approval
// through /admin starts (or continues) the trace its outbox row carries on.
// The span is named by method only; the path holds plan ids.
func (t Tracing) HTTP(h http.Handler, server string) http.Handler {
	tp := t.Provider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return otelhttp.NewHandler(h, server, otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return server + " " + r.Method }))
}

// Command starts the root span of a command line call (e.g. "plan
// approve"), so that the outbox rows it writes carry its trace.
func (t Tracing) Command(ctx context.Context, name string) (context.Context, trace.Span) {
	tp := t.Provider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer("github.com/taskport/taskport/cmd").Start(ctx, name)
}
