package app_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/syncbuf"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// tracedEngines build each engine with a tracer provider, and name the
// span in which an engine runs one attempt of an activity.
var tracedEngines = []struct {
	name     string
	new      func(t *testing.T, reg *port.Registry, pool *pgxpool.Pool, tp trace.TracerProvider, log *slog.Logger) port.TaskEngine
	stepSpan func(activity string) string
}{
	{"lease", func(t *testing.T, reg *port.Registry, pool *pgxpool.Pool, tp trace.TracerProvider, log *slog.Logger) port.TaskEngine {
		e, err := leaseadapter.New(pool, reg, leaseadapter.Config{PollInterval: 200 * time.Millisecond,
			Logger: log, TracerProvider: tp})
		require.NoError(t, err)
		return e
	}, func(activity string) string { return leaseadapter.SpanStepPrefix + activity }},
	{"temporal", func(t *testing.T, reg *port.Registry, pool *pgxpool.Pool, tp trace.TracerProvider, log *slog.Logger) port.TaskEngine {
		c, err := temporaladapter.Dial(context.Background(), temporaladapter.ClientConfig{
			HostPort: temporalServer.HostPort, Namespace: temporalServer.Namespace,
			Logger: slog.New(slog.DiscardHandler), TracerProvider: tp})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		e, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{
			TaskQueue: "trace-" + rand.Text()[:12], WorkerStopTimeout: 5 * time.Second, Logger: log})
		require.NoError(t, err)
		return e
	}, func(activity string) string { return "RunActivity:" + activity }},
}

// A trace from the plans API call that approves a plan to the first check
// of its download, and one from the call that reports the download complete
// to the import of its file, on each engine. The API's transaction writes
// an outbox row in its span (the enqueue of download.submit; the wake-up of
// download.await); the dispatcher carries it out in a span of that trace;
// the run (or the woken run) continues it; and each hand-over after, which
// a step enqueues in its own commit (EnqueueTx), continues it into the next
// kind's steps: the run keeps the enqueue's trace context, which the lease
// engine's claim and the Temporal engine's starter (after the commit)
// continue.
func TestOneTraceFromApproveToImport(t *testing.T) {
	for _, e := range tracedEngines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			var eng port.TaskEngine
			w := apptest.NewWorld(t, apptest.Options{TracerProvider: tp, NewEngine: func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
				eng = e.new(t, reg, pool, tp, slog.New(slog.DiscardHandler))
				return eng
			}})
			require.NoError(t, eng.Start(context.Background(), port.StartOptions{}))
			t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })
			plan, approved, reported := approveToImport(t, w, tp.Tracer("test"))

			step := e.stepSpan
			for _, c := range []struct {
				name     string
				root     trace.SpanContext
				chain    []string // dispatches and steps, in order, up to the next kind's step
				nextStep string   // the step of the kind the chain's last step hands over to
			}{
				{"approve", approved, []string{outbox.SpanDispatch + " " + string(workflows.KindDownloadSubmit),
					step(workflows.SubmitDownload.Name())}, step(workflows.CheckDownload.Name())},
				{"report", reported, []string{outbox.SpanDispatch + " signal " + string(workflows.DownloadTopic(plan)),
					step(workflows.CheckDownload.Name())}, step(workflows.ImportAsset.Name())},
			} {
				want := append(slices.Clone(c.chain), c.nextStep)
				leaf := want[len(want)-1]
				var chain []tracetest.SpanStub
				// A step's span ends after its commit, which the test waited
				// for.
				require.Eventually(t, func() bool {
					chain = parentChain(spans.GetSpans(), leaf, c.root)
					return chain != nil
				}, 30*time.Second, 20*time.Millisecond, "%s: no span chain from %s up to the API call: %s",
					c.name, leaf, spanNames(spans.GetSpans()))
				var got []string
				for _, s := range chain {
					require.Equal(t, c.root.TraceID(), s.SpanContext.TraceID(), s.Name)
					switch {
					case s.Name == outbox.SpanDispatch:
						got = append(got, s.Name+" "+dispatchTarget(s))
					case slices.Contains(want, s.Name):
						got = append(got, s.Name)
					}
				}
				require.Equal(t, want, got, "%s: dispatch and step spans from the API call on, in order", c.name)
				t.Logf("%s trace %s: %d spans; dispatches and steps: %s", c.name, c.root.TraceID(), len(chain), strings.Join(got, " -> "))
			}
		})
	}
}

// approveToImport runs a plan from its approval, in a span standing for the
// caller of the plans API, to its import committed in the ledger: the
// approval's outbox row is dispatched by hand; the download completes while
// download.await waits, and is reported in a second span, whose wake-up is
// dispatched by hand too.
func approveToImport(t *testing.T, w *apptest.World, tracer trace.Tracer) (plan string, approve, report trace.SpanContext) {
	ctx := context.Background()
	a := apptest.NewAsset("traced.mkv", 200_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	dispatch := func() {
		t.Helper()
		_, err := w.Dispatcher.DispatchOnce(ctx)
		require.NoError(t, err)
	}
	actx, span := tracer.Start(ctx, "plan approve")
	apptest.Acked(t)(w.Plans.Approve(actx, id, "ann", ""))
	span.End()
	dispatch() // download.submit
	// The report's wake-up must find download.await waiting, so that it is
	// what wakes the run.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM taskport.waiter WHERE topic = $1`,
			string(workflows.DownloadTopic(id))).Scan(&n))
		return n == 1
	}, 30*time.Second, 20*time.Millisecond)
	w.FinishDownload(t, p, a)
	rctx, rspan := tracer.Start(ctx, "plan complete")
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(rctx, id, ""))
	rspan.End()
	dispatch() // the wake-up
	require.Eventually(t, func() bool { return w.Operations(t, id)[ledger.OpImport] }, 60*time.Second, 20*time.Millisecond)
	require.Equal(t, a.SHA256, apptest.FileSHA256(t, w.Target(a)))
	return id, span.SpanContext(), rspan.SpanContext()
}

// parentChain returns the spans from root down to the span named leaf,
// following parent ids, or nil when the leaf is missing or a parent on the
// way was not exported.
func parentChain(spans tracetest.SpanStubs, leaf string, root trace.SpanContext) []tracetest.SpanStub {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var cur tracetest.SpanStub
	found := false
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		if s.Name == leaf && s.SpanContext.TraceID() == root.TraceID() {
			cur, found = s, true
		}
	}
	if !found {
		return nil
	}
	chain := []tracetest.SpanStub{cur}
	for cur.SpanContext.SpanID() != root.SpanID() {
		parent, ok := byID[cur.Parent.SpanID()]
		if !ok {
			return nil
		}
		chain = append(chain, parent)
		cur = parent
	}
	slices.Reverse(chain)
	return chain[1:]
}

// dispatchTarget is what a dispatch span carried out: "<kind>" or
// "signal <topic>".
func dispatchTarget(s tracetest.SpanStub) string {
	for _, a := range s.Attributes {
		if a.Key == "taskport.outbox.row" {
			row, _, _ := strings.Cut(a.Value.AsString(), "/")
			return row
		}
	}
	return ""
}

func spanNames(spans tracetest.SpanStubs) string {
	var names []string
	for _, s := range spans {
		names = append(names, fmt.Sprintf("%s(%s<-%s)", s.Name, s.SpanContext.SpanID(), s.Parent.SpanID()))
	}
	return strings.Join(names, " ")
}

var (
	logTouch = port.DeclareActivity[int, int]("trace.touch")
	logBlock = port.DeclareActivity[int, int]("trace.block")
)

// The log lines of a run carry its trace: the handler's (f.Logger()) and
// the step's (logged with its context) the trace of the Enqueue; after a
// wait receives a signal, the signal's trace, whether the signal woke the
// waiting run or arrived during a step and was taken by the next wait.
func TestRunLogLinesCarryTheTrace(t *testing.T) {
	for _, e := range tracedEngines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tp := sdktrace.NewTracerProvider()
			tracer := tp.Tracer("test")
			var buf syncbuf.Buffer
			log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil)))
			const kind, topic = "trace.log", port.Topic("trace-wake")
			blocked, release := make(chan struct{}, 1), make(chan struct{})
			var eng port.TaskEngine
			apptest.NewWorld(t, apptest.Options{NewEngine: func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
				require.NoError(t, reg.RegisterActivity(
					port.Bind(logTouch, func(ctx context.Context, n int) (int, error) {
						log.InfoContext(ctx, "step line")
						return n, nil
					}),
					port.Bind(logBlock, func(ctx context.Context, n int) (int, error) {
						log.InfoContext(ctx, map[int]string{1: "blocked step line", 2: "second blocked step line"}[n])
						blocked <- struct{}{}
						<-release
						return n, nil
					})))
				require.NoError(t, reg.Register(port.Definition{Kind: kind, Version: 1, Retry: port.NetworkRetry(),
					Handler: port.Handle(func(f port.Flow, n int) error {
						f.Logger().Info("before wake")
						if _, err := logTouch.Run(f, "touch", n); err != nil {
							return err
						}
						if _, err := f.WaitSignal("wait", topic, time.Minute, nil); err != nil {
							return err
						}
						f.Logger().Info("after wake")
						if _, err := logBlock.Run(f, "block", n); err != nil {
							return err
						}
						if _, err := f.WaitSignal("wait-again", topic, time.Minute, nil); err != nil {
							return err
						}
						f.Logger().Info("after the signal sent during a step")
						if _, err := logBlock.Run(f, "block-again", n+1); err != nil {
							return err
						}
						// A wait that does not park takes a signal kept
						// while the run was in the step before it.
						if got, err := f.WaitSignal("poll", topic, 0, nil); err != nil || !got {
							return fmt.Errorf("the zero wait took no kept signal (%v)", err)
						}
						f.Logger().Info("after a zero wait took a kept signal")
						return nil
					})}))
				eng = e.new(t, reg, pool, tp, log)
				return eng
			}})
			require.NoError(t, eng.Start(ctx, port.StartOptions{}))
			t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })

			ectx, enqueue := tracer.Start(ctx, "enqueue")
			id, err := eng.Enqueue(ectx, kind, 1, port.EnqueueOptions{IdempotencyKey: "log-1"})
			require.NoError(t, err)
			enqueue.End()
			require.Eventually(t, func() bool {
				v, err := eng.Get(ctx, id)
				require.NoError(t, err)
				return v.Status == port.StatusWaiting
			}, 30*time.Second, 20*time.Millisecond)
			// signal sends one signal on topic under a span of its own
			// and returns how many runs it reached and the span's trace id.
			signal := func(span string) (int, string) {
				sctx, s := tracer.Start(ctx, span)
				defer s.End()
				delivered, err := eng.Signal(sctx, topic, nil)
				require.NoError(t, err)
				return delivered, s.SpanContext().TraceID().String()
			}
			stepStarted := func(after string) {
				select {
				case <-blocked:
				case <-time.After(30 * time.Second):
					t.Fatalf("the step after %s never started", after)
				}
			}
			delivered, woken := signal("wake")
			require.Equal(t, 1, delivered)
			stepStarted("the wake")
			// Sent while the run is in a step: kept for the topic's next
			// wait, which the run's is.
			_, late := signal("late signal")
			release <- struct{}{}
			stepStarted("the second wait")
			_, polled := signal("polled signal")
			release <- struct{}{}
			require.Eventually(t, func() bool {
				v, err := eng.Get(ctx, id)
				require.NoError(t, err)
				return v.Status == port.StatusSucceeded
			}, 30*time.Second, 20*time.Millisecond)

			traces := map[string][]string{} // message -> trace ids
			dec := json.NewDecoder(strings.NewReader(buf.String()))
			for dec.More() {
				var line struct {
					Msg     string `json:"msg"`
					TraceID string `json:"trace_id"`
				}
				require.NoError(t, dec.Decode(&line))
				traces[line.Msg] = append(traces[line.Msg], line.TraceID)
			}
			enqueued := enqueue.SpanContext().TraceID().String()
			for msg, want := range map[string]string{
				"before wake": enqueued, "step line": enqueued,
				"after wake": woken, "blocked step line": woken,
				"after the signal sent during a step":  late,
				"second blocked step line":             late,
				"after a zero wait took a kept signal": polled,
			} {
				require.NotEmpty(t, traces[msg], msg)
				for _, got := range traces[msg] {
					require.Equal(t, want, got, msg)
				}
			}
		})
	}
}
