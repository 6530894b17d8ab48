package temporaladapter

import (
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	otelinterceptor "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
)

// Tracing rides on the SDK's OpenTelemetry interceptor, which Dial installs
// on the client (ClientConfig.TracerProvider) and the client hands to every
// worker built from it: Enqueue and Signal write the caller's span into the
// start and signal headers, the workflow's spans continue the start's trace,
// and each activity runs in a span parented on the workflow's.
//
// One thing the interceptor does not do: a workflow woken by a signal keeps
// scheduling its activities in the trace it started in. taskport's runs wait
// for business decisions (an approval, a completed download) that arrive as
// signals, and what a run does after the wake-up belongs to the decision's
// trace, as on the lease engine. So the adapter reads the trace context off
// each signal's header (wakeInterceptor) and, when a wait receives that
// signal, makes it the parent of the run's next activities (flow.continueTrace).

// tracingHeader is the header key the interceptor writes spans under: the
// default of every Temporal SDK, named here because wakeInterceptor reads it.
const tracingHeader = "_tracer-data"

// spanKey is the interceptor's key for the current span on a workflow
// context; ours, so that flow.continueTrace can set it.
type spanKey struct{}

func tracerOptions(t trace.Tracer) otelinterceptor.TracerOptions {
	return otelinterceptor.TracerOptions{Tracer: t, SpanContextKey: spanKey{}, HeaderKey: tracingHeader}
}

// newTracingInterceptor is the SDK's OpenTelemetry interceptor over tp
// (nil: the global provider).
func newTracingInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	return otelinterceptor.NewTracingInterceptor(tracerOptions(tracing.Tracer(tp, "github.com/taskport/taskport/temporaladapter")))
}

// newParentTracer builds the interceptor's spans that flow.continueTrace
// puts on a workflow context: non-recording ones carrying a signal's span
// context, so that they are the same on replay as live and add no span of
// their own.
func newParentTracer() (interceptor.Tracer, error) {
	return otelinterceptor.NewTracer(tracerOptions(noop.NewTracerProvider().Tracer("")))
}

// wakeInterceptor records the trace header of every signal a workflow
// receives, in arrival order per signal name (the order its channel
// delivers them), for the flow to pick up when a wait receives the signal.
type wakeInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*wakeInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &wakeInbound{traces: &signalTraces{byTopic: map[string][]map[string]string{}}}
	i.Next = next
	return i
}

// signalTraces queues the trace carriers of the signals not yet received,
// per topic; nil entries are signals sent outside any trace. It is touched
// only by the workflow's own coroutines, one at a time.
type signalTraces struct {
	byTopic map[string][]map[string]string
}

// next takes the carrier of the oldest signal on topic not yet received.
func (s *signalTraces) next(topic port.Topic) map[string]string {
	q := s.byTopic[string(topic)]
	if len(q) == 0 {
		return nil
	}
	s.byTopic[string(topic)] = q[1:]
	return q[0]
}

type signalTracesKey struct{}

type wakeInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	traces *signalTraces
}

func (i *wakeInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(workflow.WithValue(ctx, signalTracesKey{}, i.traces), in)
}

// HandleSignal reads the header from history, so replay queues the same
// carriers as the live run did.
func (i *wakeInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	var carrier map[string]string
	if p := interceptor.WorkflowHeader(ctx)[tracingHeader]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &carrier); err != nil {
			carrier = nil // a header we cannot read only costs the trace
		}
	}
	i.traces.byTopic[in.SignalName] = append(i.traces.byTopic[in.SignalName], carrier)
	return i.Next.HandleSignal(ctx, in)
}

// continueTrace makes the trace of the signal just received on topic the
// parent of the run's next activities. A signal without a trace, or a
// worker without wakeInterceptor (the replayer), leaves the parent as is.
func (f *flow) continueTrace(topic port.Topic) {
	traces, _ := f.ctx.Value(signalTracesKey{}).(*signalTraces)
	if traces == nil {
		return
	}
	f.continueCarrier(topic, traces.next(topic))
}

// continueCarrier makes the span in carrier (a header's, in the tracing
// interceptor's format) the parent of the run's next activities.
func (f *flow) continueCarrier(topic port.Topic, carrier map[string]string) {
	if carrier == nil || f.parents == nil {
		return
	}
	ref, err := f.parents.UnmarshalSpan(carrier)
	if err != nil || ref == nil {
		return
	}
	span, err := f.parents.StartSpan(&interceptor.TracerStartSpanOptions{Parent: ref, Operation: "WaitSignal", Name: string(topic)})
	if err != nil {
		return
	}
	f.ctx = workflow.WithValue(f.ctx, spanKey{}, span)
}

// spanContext is the span the run's next activities are parented on: the
// workflow's, or the last received signal's (continueTrace). The flow's
// logger stamps its lines with it.
func (f *flow) spanContext() trace.SpanContext {
	if s, ok := f.ctx.Value(spanKey{}).(interface{ SpanContext() trace.SpanContext }); ok {
		return s.SpanContext()
	}
	return trace.SpanContext{}
}
