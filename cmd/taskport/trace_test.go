package main

import (
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// otlpReceiver is the receiving end of OTLP/gRPC, as a collector serves it:
// it keeps what it is sent.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// span finds the span named name and the service.name of its resource.
func (r *otlpReceiver) span(name string) (*tracepb.Span, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.spans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				if s.GetName() == name {
					return s, service
				}
			}
		}
	}
	return nil, ""
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	r := &otlpReceiver{}
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return r, "http://" + l.Addr().String()
}

// With --otlp-endpoint, `plan approve` runs in a span of its own that is
// exported to the collector when the command ends, and the outbox row it
// writes carries that span's trace context, which the dispatcher continues.
// Without it, tracing is off: the row carries none.
func TestPlanApproveIsTraced(t *testing.T) {
	t.Parallel()
	receiver, endpoint := startOTLPReceiver(t)
	db := pgtest.NewDatabase(t)
	lib := t.TempDir()
	pool, err := pgxpool.New(context.Background(), db)
	require.NoError(t, err)
	defer pool.Close()
	run := func(args ...string) string {
		t.Helper()
		out, err := execute(args, "--database-url", db, "--log-level", "error", "--library-root", lib)
		require.NoError(t, err)
		return strings.TrimSpace(out)
	}
	create := func(hash, name string) string {
		return run("plan", "create", "--title", name, "--magnet", "magnet:?xt=urn:btih:"+hash, "--info-hash", hash,
			"--target", lib+"/"+name, "--size", "10", "--sha256", strings.Repeat("a", 64))
	}
	traceparent := func(id string) string {
		var tp string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT traceparent FROM outbox_event WHERE business_key = $1 AND action = 'signal'`, id).Scan(&tp))
		return tp
	}

	traced := create("0123456789abcdef0123456789abcdef01234567", "traced.mkv")
	run("plan", "approve", traced, "--by", "ann", "--otlp-endpoint", endpoint)
	span, service := receiver.span("plan approve")
	require.NotNil(t, span, "the command's span reached the collector before the command returned")
	require.Equal(t, "taskport", service)
	require.Equal(t, "00-"+hex.EncodeToString(span.GetTraceId())+"-"+hex.EncodeToString(span.GetSpanId())+"-01", traceparent(traced))

	untraced := create("1123456789abcdef0123456789abcdef01234567", "untraced.mkv")
	run("plan", "approve", untraced, "--by", "ann")
	require.Empty(t, traceparent(untraced))
}
