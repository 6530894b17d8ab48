package temporaladapter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
)

// Config tunes an Engine. The zero value is usable; New fills every default
// listed on the fields, then validates.
type Config struct {
	// Schema is the Postgres schema the engine's tables were migrated into
	// (migrations.UpEngine). Default "taskport".
	Schema string
	// TaskQueue the workers poll and runs are started on. Default "taskport".
	TaskQueue string
	// WorkerStopTimeout bounds Stop: in-flight activities get this long to
	// finish; after it their contexts are canceled (they see
	// port.ErrLeaseLost) and Temporal hands the attempt to another worker once
	// its heartbeat or start-to-close timeout passes. Default 30s.
	WorkerStopTimeout time.Duration
	// Logger receives the adapter's and the SDK workers' logs (bridged with
	// log.NewStructuredLogger). Default slog.Default().
	Logger *slog.Logger
	// LocalActivityTimeout bounds the adapter's own Postgres bookkeeping
	// (projection, waiter rows) run as local activities, retries included.
	// Default 1 minute.
	LocalActivityTimeout time.Duration
	// DefaultConcurrency is used when StartOptions.Concurrency is zero: the
	// number of activities (steps) and of workflow tasks the worker runs at
	// once. Default 100.
	DefaultConcurrency int
	// StickyScheduleToStartTimeout is how long a workflow task waits on the
	// queue of the worker that ran the run's previous task (whose cache holds
	// the run) before any worker may take it. A worker killed after its last
	// task leaves its runs' next tasks there for this long; the server keeps
	// sending them there for a while, not knowing it died. Expiring it is
	// never an error: the task goes to the shared queue and another worker
	// replays the run's history, which only costs CPU. Default 1s (the SDK's
	// is 5s).
	StickyScheduleToStartTimeout time.Duration
	// WorkflowTaskTimeout bounds one workflow task of the runs this engine
	// starts (Temporal's own default is 10s). A frozen worker still holds
	// long polls that the server hands tasks to; each such task is retried
	// elsewhere only after this timeout. A task that replays a long history
	// on a loaded machine must fit in it, or it times out over and over;
	// local activities do not count against it (the SDK heartbeats the task
	// past 80% of it). Default 5s.
	WorkflowTaskTimeout time.Duration
	// MemoInputBytes bounds the input summary stored in the memo shown by the
	// Temporal UI; longer inputs are cut. Default 512.
	MemoInputBytes int
	// ReconcileInterval paces the projection reconciler a started worker
	// runs (see reconciler): every interval, one worker per database checks
	// a batch of open runs against Temporal. Default 30s; negative disables
	// it in this process.
	ReconcileInterval time.Duration
	// StartPollInterval paces a started worker's check for runs EnqueueTx
	// recorded whose workflow no worker started yet: commits it did not
	// hear of (it listens for their NOTIFY). Default 1s.
	StartPollInterval time.Duration
	// CancelPollInterval paces a started worker's read of the cancel flags
	// of the runs whose steps it runs, for the cancels whose NOTIFY it did
	// not hear (see cancelWatch): a running body learns of a cancel at once
	// through its NOTIFY, or within this interval. Default 1s.
	CancelPollInterval time.Duration
	// ReconcileBatch is how many open runs one round describes at most.
	// Default 100.
	ReconcileBatch int
	// ReconcileAfter leaves alone the runs whose projection was written more
	// recently than this: their workflow is live and writing it. Default 1m.
	ReconcileAfter time.Duration
	// Deployment, when set, opts the worker into Temporal Worker Deployment
	// Versioning (what temporal-worker-controller drives): it polls as
	// version Deployment.Name:Deployment.BuildID, new runs start on the
	// deployment's current version, and every kind is pinned by default: a
	// run finishes on the build it started on, so a new build may change a
	// handler's steps freely. Kind@vN stays for changes inside one binary
	// (old runs replay on vN-1 code served next to vN). Default: unversioned.
	Deployment Deployment
}

// Deployment names a Worker Deployment Version. Both fields or neither.
type Deployment struct {
	// Name of the worker deployment (TEMPORAL_DEPLOYMENT_NAME).
	Name string
	// BuildID of this worker's code (TEMPORAL_WORKER_BUILD_ID).
	BuildID string
}

// Defaults documented on Config.
const (
	DefaultTaskQueue            = "taskport"
	DefaultWorkerStopTimeout    = 30 * time.Second
	DefaultLocalActivityTimeout = time.Minute
	DefaultConcurrency          = 100
	DefaultMemoInputBytes       = 512
	DefaultStickyTimeout        = time.Second
	DefaultWorkflowTaskTimeout  = 5 * time.Second
	DefaultReconcileInterval    = 30 * time.Second
	DefaultStartPollInterval    = time.Second
	DefaultCancelPollInterval   = time.Second
	DefaultReconcileBatch       = 100
	DefaultReconcileAfter       = time.Minute
)

func (c Config) withDefaults() Config {
	if c.TaskQueue == "" {
		c.TaskQueue = DefaultTaskQueue
	}
	if c.WorkerStopTimeout == 0 {
		c.WorkerStopTimeout = DefaultWorkerStopTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LocalActivityTimeout == 0 {
		c.LocalActivityTimeout = DefaultLocalActivityTimeout
	}
	if c.DefaultConcurrency == 0 {
		c.DefaultConcurrency = DefaultConcurrency
	}
	if c.MemoInputBytes == 0 {
		c.MemoInputBytes = DefaultMemoInputBytes
	}
	if c.StickyScheduleToStartTimeout == 0 {
		c.StickyScheduleToStartTimeout = DefaultStickyTimeout
	}
	if c.WorkflowTaskTimeout == 0 {
		c.WorkflowTaskTimeout = DefaultWorkflowTaskTimeout
	}
	if c.StartPollInterval <= 0 {
		c.StartPollInterval = DefaultStartPollInterval
	}
	if c.CancelPollInterval == 0 {
		c.CancelPollInterval = DefaultCancelPollInterval
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.ReconcileBatch == 0 {
		c.ReconcileBatch = DefaultReconcileBatch
	}
	if c.ReconcileAfter == 0 {
		c.ReconcileAfter = DefaultReconcileAfter
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.WorkerStopTimeout < 0:
		return fmt.Errorf("temporaladapter config: worker stop timeout %s is negative", c.WorkerStopTimeout)
	case c.LocalActivityTimeout < 0:
		return fmt.Errorf("temporaladapter config: local activity timeout %s is negative", c.LocalActivityTimeout)
	case c.DefaultConcurrency < 0:
		return fmt.Errorf("temporaladapter config: default concurrency %d is negative", c.DefaultConcurrency)
	case c.StickyScheduleToStartTimeout < 0:
		return fmt.Errorf("temporaladapter config: sticky schedule-to-start timeout %s is negative", c.StickyScheduleToStartTimeout)
	case c.WorkflowTaskTimeout < 0:
		return fmt.Errorf("temporaladapter config: workflow task timeout %s is negative", c.WorkflowTaskTimeout)
	case c.MemoInputBytes < 0:
		return fmt.Errorf("temporaladapter config: memo input bytes %d is negative", c.MemoInputBytes)
	case c.CancelPollInterval < 0:
		return fmt.Errorf("temporaladapter config: cancel poll interval %s is negative", c.CancelPollInterval)
	case c.ReconcileBatch < 0:
		return fmt.Errorf("temporaladapter config: reconcile batch %d is negative", c.ReconcileBatch)
	case c.ReconcileAfter < 0:
		return fmt.Errorf("temporaladapter config: reconcile after %s is negative", c.ReconcileAfter)
	case (c.Deployment.Name == "") != (c.Deployment.BuildID == ""):
		return fmt.Errorf("temporaladapter config: deployment needs both a name and a build id, got %q and %q", c.Deployment.Name, c.Deployment.BuildID)
	}
	return nil
}

// ClientConfig says how to reach a Temporal frontend.
type ClientConfig struct {
	// HostPort of the frontend. Default client.DefaultHostPort (localhost:7233).
	HostPort string
	// Namespace. Default "default".
	Namespace string
	// TLS, when set, is used as is (mTLS: include the client certificate).
	TLS *tls.Config
	// CAFile, CertFile and KeyFile build a TLS config when TLS is nil: CAFile
	// alone verifies the server; CertFile+KeyFile add a client certificate
	// (mTLS). Any of them turns TLS on.
	CAFile, CertFile, KeyFile string
	// ServerName overrides the name checked in the server certificate.
	ServerName string
	// APIKey authenticates with an API key (Temporal Cloud). It implies TLS
	// with the system roots when no TLS setting is given.
	APIKey string
	// Logger receives the SDK client's logs. Default slog.Default().
	Logger *slog.Logger
	// MetricsHandler receives the SDK's metrics (see PrometheusMetricsHandler).
	// Default none.
	MetricsHandler client.MetricsHandler
	// PayloadCodecs encode every payload the client and its workers send to
	// Temporal (inputs, step results, heartbeat details, memos, signals), in
	// order, and decode in reverse: encryption or compression, so the server
	// and its UI hold no plain business data. Failure messages and stack
	// traces are encoded too, since an error can quote an input. The UI
	// shows encoded payloads unless it is pointed at a codec server. Search
	// attributes (kind, version, business key) stay readable. Default none.
	PayloadCodecs []converter.PayloadCodec
	// PollTimeout bounds each long poll that the workers on this client send
	// (PollWorkflowTaskQueue, PollActivityTaskQueue, PollNexusTaskQueue) by
	// its gRPC deadline; the server answers one that found no task a second
	// before that deadline, and the worker polls again. The SDK's own bound
	// is 70 s, a server's default long poll a minute. A frozen worker
	// (SIGSTOP, a stalled VM) keeps its open polls, the server hands them
	// tasks first (waiting polls are matched oldest first), and each such
	// task is lost until its heartbeat or workflow task timeout: on servers
	// with default settings two retries of a step, then the run's next
	// workflow task; the run finished 14.1 s (dev server) and 14.9 s
	// (temporal-pg) after the freeze, median of 5. With this bound the
	// server stops handing a frozen worker tasks PollTimeout-1s after it
	// froze, whatever its matching.longPollExpirationInterval (the shorter
	// applies): 3.3 s and 3.9 s, median of 10, nothing swallowed
	// (docs/engines.md, "Throughput and recovery time differ"). The costs:
	// an idle worker polls about 1.7 times a second instead of 4 times a
	// minute (measured: 51 polls in 30 s); the frontend logs "Context
	// timeout is lower than critical value for long poll API" at warn for
	// every poll under 10 s (rate-limited by frontend.throttledLogRPS); and
	// a task matched in the poll's last instant whose start the server
	// records and answers in more than its 1 s budget reaches the worker
	// after the deadline and is lost until its timeout (as with any poll
	// that ends on its deadline; the SDK's 70 s against the server's minute
	// leaves 10 s). The server refuses a poll with less than 2 s left
	// (InvalidArgument, which in the end stops a worker), hence
	// MinPollTimeout. Default 4s; negative leaves the SDK's. A client dialed
	// some other way gets the bound with LongPollTimeout.
	PollTimeout time.Duration
	// TracerProvider traces the client and its workers through the SDK's
	// OpenTelemetry interceptor: Enqueue and Signal carry the caller's span
	// to the workflow, whose activities continue that trace (see tracing.go
	// for the signal's part). Default: the global provider
	// (otel.GetTracerProvider, a no-op until the process installs one; a
	// caller's span is still propagated).
	TracerProvider trace.TracerProvider
}

// Dial connects to Temporal.
func Dial(ctx context.Context, cfg ClientConfig) (client.Client, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	var notes handshakeNotes
	if tlsCfg != nil && cfg.TLS == nil {
		tlsCfg = notes.watch(tlsCfg)
	}
	tracer, err := newTracingInterceptor(cfg.TracerProvider)
	if err != nil {
		return nil, fmt.Errorf("dial temporal: tracing: %w", err)
	}
	poll := cfg.PollTimeout
	switch {
	case poll == 0:
		poll = DefaultPollTimeout
	case poll > 0 && poll < MinPollTimeout:
		return nil, fmt.Errorf("dial temporal: poll timeout %s is under %s: the server refuses a long poll with less than 2 s left", poll, MinPollTimeout)
	}
	var dialOpts []grpc.DialOption
	if poll > 0 {
		dialOpts = append(dialOpts, grpc.WithChainUnaryInterceptor(LongPollTimeout(poll)))
	}
	opts := client.Options{
		Interceptors:      []interceptor.ClientInterceptor{tracer},
		HostPort:          cfg.HostPort,
		Namespace:         cfg.Namespace,
		Logger:            tlog.NewStructuredLogger(logger),
		MetricsHandler:    cfg.MetricsHandler,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg, DialOptions: dialOpts},
	}
	if cfg.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.APIKey)
	}
	if len(cfg.PayloadCodecs) > 0 {
		opts.DataConverter = converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), cfg.PayloadCodecs...)
		opts.FailureConverter = temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
			DataConverter: opts.DataConverter, EncodeCommonAttributes: true,
		})
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		if why := cfg.explainDialError(err, tlsCfg != nil, &notes); why != "" {
			return nil, fmt.Errorf("dial temporal %s: %s: %w", cfg.HostPort, why, err)
		}
		return nil, fmt.Errorf("dial temporal %s: %w", cfg.HostPort, err)
	}
	return c, nil
}

// Bounds of ClientConfig.PollTimeout.
const (
	DefaultPollTimeout = 4 * time.Second
	MinPollTimeout     = 3 * time.Second
)

// longPolls are the worker's long polls, which LongPollTimeout bounds.
var longPolls = map[string]bool{
	workflowservice.WorkflowService_PollWorkflowTaskQueue_FullMethodName: true,
	workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName: true,
	workflowservice.WorkflowService_PollNexusTaskQueue_FullMethodName:    true,
}

// LongPollTimeout is the gRPC interceptor that Dial installs for
// ClientConfig.PollTimeout: it shortens the deadline of every worker long
// poll to d (a caller's shorter deadline stands), and leaves every other
// call alone. A client dialed with client.Dial gets the same bound with
// grpc.WithChainUnaryInterceptor(LongPollTimeout(d)) in its
// ConnectionOptions.DialOptions; d should be at least MinPollTimeout.
func LongPollTimeout(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if longPolls[method] {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// handshakeNotes records what the server asked of the client during one
// Dial's TLS handshakes. With TLS 1.3 the server checks the client
// certificate after the client considers the handshake done, so a refusal
// often reaches the client as a broken pipe rather than as the server's
// alert; these notes still say what went wrong.
type handshakeNotes struct {
	mu sync.Mutex
	// asked: the server requested a client certificate.
	asked bool
	// unacceptable: why the certificate presented is not one the server
	// says it accepts (its list of acceptable CAs), nil if it is.
	unacceptable error
}

// watch returns a copy of t whose client-certificate callback takes notes.
func (n *handshakeNotes) watch(t *tls.Config) *tls.Config {
	t = t.Clone()
	get := t.GetClientCertificate
	t.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		cert := &tls.Certificate{} // none configured: send none
		if get != nil {
			c, err := get(cri)
			if err != nil {
				return nil, err
			}
			cert = c
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		n.asked = true
		if len(cert.Certificate) > 0 {
			n.unacceptable = cri.SupportsCertificate(cert)
		}
		return cert, nil
	}
	return t
}

// explainDialError names the likely cause of a failed dial in terms of the
// ClientConfig fields to fix, or returns "". Besides the handshake notes it
// reads the error text: gRPC reports handshake failures only as text inside
// an Unavailable status (the TLS alert and x509 errors are not wrapped).
func (cfg ClientConfig) explainDialError(err error, tlsOn bool, notes *handshakeNotes) string {
	notes.mu.Lock()
	asked, unacceptable := notes.asked, notes.unacceptable
	notes.mu.Unlock()
	msg := err.Error()
	has := func(s string) bool { return strings.Contains(msg, s) }
	refused := fmt.Sprintf("the server refused the client certificate %s: it is not signed by a CA the server trusts", cfg.CertFile)
	switch {
	case unacceptable != nil:
		return fmt.Sprintf("%s (%v)", refused, unacceptable)
	case has("tls: unknown certificate authority"), has("tls: bad certificate"):
		return refused
	case has("tls: certificate expired"):
		return fmt.Sprintf("the server refused the client certificate %s: it has expired", cfg.CertFile)
	case cfg.CertFile == "" && (asked || has("tls: certificate required")):
		return "the server requires a client certificate (mTLS): set the certificate and key files"
	case has("x509: certificate signed by unknown authority"):
		if cfg.CAFile != "" {
			return fmt.Sprintf("the server's certificate is not signed by the CA in %s", cfg.CAFile)
		}
		return "the server's certificate is not signed by a CA in the system roots: set the CA file"
	case has("x509: certificate is valid for"):
		return "the server's certificate does not name the host dialed: set the server name"
	// A TLS-only frontend drops a plaintext connection; which of these the
	// client sees depends on how far it had written when the server closed.
	case !tlsOn && (has("error reading server preface: EOF") || has("connection reset by peer") || has("broken pipe")):
		return "the server closed a plaintext connection: it probably requires TLS (set the CA file, or the certificate and key files)"
	case tlsOn && has("first record does not look like a TLS handshake"):
		return "the server does not speak TLS: dial it without TLS settings"
	}
	return ""
}

func (cfg ClientConfig) tlsConfig() (*tls.Config, error) {
	if cfg.TLS != nil {
		return cfg.TLS, nil
	}
	if cfg.CAFile == "" && cfg.CertFile == "" && cfg.KeyFile == "" {
		if cfg.APIKey != "" {
			return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}, nil
		}
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read temporal CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("temporal CA file %s holds no PEM certificate", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("temporal mTLS: set both the certificate and the key file")
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load temporal client certificate: %w", err)
		}
		// Always present the configured certificate. With Certificates
		// instead, Go sends none when the server's list of acceptable CAs
		// does not include its issuer, and the server can only answer
		// "certificate required"; this way it says "unknown certificate
		// authority", which names the actual mistake.
		t.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return t, nil
}
