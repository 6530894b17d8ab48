package main

import (
	"context"
	"encoding/hex"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/plans"
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
			`SELECT traceparent FROM outbox_event WHERE business_key = $1 AND kind = 'download.submit'`, id).Scan(&tp))
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

	// An endpoint the exporter cannot use is refused before anything is
	// written.
	refused := create("2123456789abcdef0123456789abcdef01234567", "refused.mkv")
	_, err = execute([]string{"plan", "approve", refused, "--by", "ann", "--otlp-endpoint", "collector:4317"},
		"--database-url", db, "--log-level", "error", "--library-root", lib)
	require.ErrorContains(t, err, "--otlp-endpoint")
	var rows int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_event WHERE business_key = $1`,
		refused).Scan(&rows))
	require.Zero(t, rows, "a refused command writes nothing")
}

// An approval through /admin runs in the admin server's span, a child of
// the caller's span when the request carries a traceparent, and the outbox
// row it writes carries that span on.
func TestAdminApproveIsTraced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	receiver, endpoint := startOTLPReceiver(t)
	g := &stack.Globals{DatabaseURL: pgtest.NewDatabase(t), LogLevel: "error", OTLPEndpoint: endpoint}
	lib := t.TempDir()
	c := stack.Config{Engine: "lease", StopTimeout: 5 * time.Second, LibraryRoot: lib, DownloadDir: t.TempDir(),
		QBittorrentURL: "http://127.0.0.1:1"}
	s, err := stack.Build(ctx, g, c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	const hash = "2123456789abcdef0123456789abcdef01234567"
	p, err := s.Plans().CreatePlan(ctx, plans.NewPlan{Title: "admin.mkv", Magnet: "magnet:?xt=urn:btih:" + hash, InfoHash: hash,
		TargetPath: lib + "/admin.mkv", ExpectedSize: 10, ExpectedSHA256: strings.Repeat("a", 64)})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	access, err := stack.AdminAuth{}.Resolve("127.0.0.1:0") // loopback: the local user, an operator
	require.NoError(t, err)
	addr, _, err := s.Serve(sctx, "127.0.0.1:0", access)
	require.NoError(t, err)

	// As the admin's page does: the plan page gives the CSRF cookie and
	// token, the form posts them back from the same origin.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + addr
	page, err := client.Get(base + "/admin/plans/" + p.ID.String())
	require.NoError(t, err)
	body, err := io.ReadAll(page.Body)
	require.NoError(t, err)
	require.NoError(t, page.Body.Close())
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	require.NotNil(t, csrf, "the plan page carries the CSRF token")

	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/admin/plans/"+p.ID.String()+"/approve",
		strings.NewReader(url.Values{"csrf": {string(csrf[1])}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Less(t, resp.StatusCode, 400, resp.Status)
	stop()
	s.Close() // exports the spans
	closed = true

	span, service := receiver.span("admin POST")
	require.NotNil(t, span, "the request's span reached the collector")
	require.Equal(t, "taskport", service)
	require.Equal(t, callerTrace, hex.EncodeToString(span.GetTraceId()))
	require.Equal(t, callerSpan, hex.EncodeToString(span.GetParentSpanId()))
	pool, err := pgxpool.New(ctx, g.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	var tp string
	require.NoError(t, pool.QueryRow(ctx, `SELECT traceparent FROM outbox_event WHERE business_key = $1 AND kind = 'download.submit'`,
		p.ID.String()).Scan(&tp))
	require.Equal(t, "00-"+callerTrace+"-"+hex.EncodeToString(span.GetSpanId())+"-01", tp)
}

// A collector that cannot be reached is reported in the CLI's structured
// log, like everything else the command says: OpenTelemetry's own report
// of the failed export is not a line of the standard library's log format.
func TestUnreachableCollectorIsLoggedStructured(t *testing.T) {
	db := pgtest.NewDatabase(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	// The exporter gives up on an export after 200ms rather than 10s; the
	// general timeout it cannot parse, which the SDK reports through its
	// own logger.
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "200")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")

	// The CLI's logger writes to os.Stderr; the standard library's log
	// package to its own output: both to one file, as to a terminal.
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	stderr := os.Stderr
	os.Stderr = file
	log.SetOutput(file)
	defer func() {
		os.Stderr = stderr
		log.SetOutput(stderr)
	}()
	// The command's span is exported as the command ends, and that export
	// fails before run returns.
	require.NoError(t, run(context.Background(), []string{"decision", "list", "--database-url", db, "--otlp-endpoint", endpoint}))
	require.NoError(t, file.Close())
	logged, err := os.ReadFile(file.Name())
	require.NoError(t, err)
	require.Contains(t, string(logged), `level=WARN msg=opentelemetry err=`, "the failed export is logged:\n%s", logged)
	require.Contains(t, string(logged), `level=ERROR msg="parse duration" err=`, "the SDK's own error is logged:\n%s", logged)
	for _, line := range strings.Split(strings.TrimSpace(string(logged)), "\n") {
		require.True(t, strings.HasPrefix(line, "time="), "a line not of the CLI's log format:\n%s", line)
	}
}
