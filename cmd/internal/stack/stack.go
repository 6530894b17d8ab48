// Package stack is the wiring both binaries share: cmd/taskport (migrate,
// worker, admin, plan, decision) and the development harness
// cmd/taskport-dev. It holds the flags of a worker or admin process (with
// their environment fallbacks: it is part of cmd, the one place that reads
// the environment), the two pools, the registry with the task kinds, the
// engine, the outbox dispatcher, the business API, the admin handler, and
// the worker's run loop with its health and metrics.
package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/app"
	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/internal/httpserve"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/retention"
	"github.com/taskport/taskport/temporaladapter"
)

// Config is everything a worker or admin process is configured with;
// every field has a flag with an environment fallback.
type Config struct {
	Engine string
	// TemporalOptional lets --engine both go on without Temporal when its
	// frontend cannot be reached (no flag: the engine command sets it).
	TemporalOptional bool
	// EnginePoolSize bounds the engine's own pool (ADR 2.8).
	EnginePoolSize    int
	TemporalAddress   string
	TemporalNamespace string
	TaskQueue         string
	TemporalAPIKey    string
	TemporalCA        string
	TemporalCert      string
	TemporalKey       string
	TemporalTLS       bool
	// TemporalServerName is the name checked in the frontend's
	// certificate, when it is not the address's host.
	TemporalServerName string
	// TemporalWorkflowTaskTimeout is temporaladapter.Config's
	// WorkflowTaskTimeout for the runs this process starts (0: its default).
	TemporalWorkflowTaskTimeout time.Duration
	// TemporalPollTimeout and TemporalStickyTimeout are a worker's
	// temporaladapter.ClientConfig.PollTimeout and
	// Config.StickyScheduleToStartTimeout (0: their defaults).
	TemporalPollTimeout   time.Duration
	TemporalStickyTimeout time.Duration
	// DeploymentName and BuildID opt the Temporal worker into Worker
	// Deployment Versioning (temporal-worker-controller injects both).
	DeploymentName  string
	BuildID         string
	Concurrency     int
	LeaseActiveRuns int // the lease worker's leaseadapter.Config.ActiveRuns
	LeaseBatchSize  int // the lease worker's leaseadapter.Config.BatchSize
	// LeaseDuration and LeasePollInterval are the lease worker's
	// leaseadapter.Config.LeaseDuration and PollInterval.
	LeaseDuration     time.Duration
	LeasePollInterval time.Duration
	// CancelPollInterval is the Temporal worker's
	// temporaladapter.Config.CancelPollInterval.
	CancelPollInterval time.Duration
	StopTimeout        time.Duration
	ReconcileInterval  time.Duration
	// Retention is the cleaner's policy (package retention; zero fields
	// take its defaults); a negative Interval runs no cleaner in this
	// process.
	Retention       retention.Policy
	LibraryRoot     string
	DownloadDir     string
	QBittorrentURL  string
	QBittorrentUser string
	QBittorrentPass string
	WebhookURL      string

	// The files the secrets are read from (SecretsFromEnv).
	temporalAPIKeyFile, qbittorrentPassFile, webhookURLFile string
}

// A worker's defaults for what its flags leave unset: the qBittorrent WebUI
// it reaches and its graceful stop bound.
const (
	defaultQBittorrentURL  = "http://127.0.0.1:8080"
	defaultQBittorrentUser = "admin"
	defaultStopTimeout     = 30 * time.Second
)

// minInterval is the shortest --reconcile-interval or --retention-interval.
const minInterval = time.Second

// The bounds of the Temporal timeouts' flags. A workflow task timeout over
// two minutes is cut to two minutes by the server
// (maxWorkflowTaskStartToCloseTimeout), so a longer one would be a value the
// flag does not deliver; under a second a replay on a loaded machine times
// out over and over. A long poll is bounded by the server's own minute
// (70 s is the SDK's default); temporaladapter.MinPollTimeout is its floor.
// A sticky queue wait over a minute only delays a dead worker's runs.
const (
	minWorkflowTaskTimeout = time.Second
	maxWorkflowTaskTimeout = 2 * time.Minute
	maxPollTimeout         = 70 * time.Second
	minStickyTimeout       = 100 * time.Millisecond
	maxStickyTimeout       = time.Minute
)

// The ceilings of a worker's numeric flags. Each lies far above what a
// deployment sets (the benchmarks run at most 512 steps at once,
// docs/benchmarks.md), so that only a slip (digits too many, a unit
// mistaken) is refused, naming its flag, before the engine sizes its
// slots, its claims or its timers by it.
const (
	maxConcurrency = 10_000
	// maxActiveRuns is four times maxConcurrency: the most the lease
	// worker itself takes by default (four times the concurrency).
	maxActiveRuns = 4 * maxConcurrency
	// maxBatchSize: one claim statement, and one group commit, of this
	// many runs is already a long statement holding row locks.
	maxBatchSize = 10_000
	// maxLeaseDuration: a killed worker's runs wait this long to be taken
	// over; leases are renewed, so a long step needs no long lease.
	maxLeaseDuration = time.Hour
	// maxPollInterval bounds the lease and cancel polls: the latest a
	// missed notification (a ready run, a cancel) is seen.
	maxPollInterval = time.Hour
	// maxStopTimeout: no orchestrator waits a day for a process to stop.
	maxStopTimeout = 24 * time.Hour
	// maxInterval bounds --reconcile-interval and --retention-interval:
	// a loop paced slower than weekly does not serve its purpose (a
	// negative value turns it off).
	maxInterval = 7 * 24 * time.Hour
	// maxRetention bounds the retention ages: a negative one keeps rows
	// forever, so a longer age is a slip.
	maxRetention = 100 * 365 * 24 * time.Hour
)

// short is d as a flag's help says it: 1h, not 1h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// maxRetentionText is maxRetention as its help and its refusal say it:
// 876000h0m0s would not read as a hundred years.
const maxRetentionText = "100 years (876000h)"

// Bind adds the flags to fs: a worker's, all of them.
func (c *Config) Bind(fs *pflag.FlagSet) {
	c.bindShared(fs)
	fs.StringVar(&c.DeploymentName, "temporal-deployment-name", EnvOr("TEMPORAL_DEPLOYMENT_NAME", ""),
		"Worker Deployment Versioning: the deployment this worker belongs to (env TEMPORAL_DEPLOYMENT_NAME); needs a build id")
	fs.StringVar(&c.BuildID, "temporal-worker-build-id", EnvOr("TEMPORAL_WORKER_BUILD_ID", ""),
		"Worker Deployment Versioning: this worker's build id; runs stay pinned to the build they started on (env TEMPORAL_WORKER_BUILD_ID)")
	fs.IntVar(&c.Concurrency, "concurrency", 0, fmt.Sprintf("steps run at once by this worker, at most %d; 0: the engine's default (env CONCURRENCY)", maxConcurrency))
	fs.IntVar(&c.LeaseActiveRuns, "lease-active-runs", 0,
		fmt.Sprintf("lease: claimed runs this worker executes at once (replaying, committing or in a step), at most %d; 0: twice the concurrency, "+
			"up to four times while runs leave step slots idle; below the concurrency: raised to it (env LEASE_ACTIVE_RUNS)", maxActiveRuns))
	fs.IntVar(&c.LeaseBatchSize, "lease-batch-size", 0,
		fmt.Sprintf("lease: most runs one claim statement takes, and one group commit carries, at most %d; 0: the engine's default (64); raise it with a "+
			"concurrency in the hundreds (docs/benchmarks.md, \"Configured for a drain\") (env LEASE_BATCH_SIZE)", maxBatchSize))
	fs.DurationVar(&c.LeaseDuration, "lease-duration", 0,
		fmt.Sprintf("lease: how long a claim lives without renewal: a killed worker's runs are taken over within it plus the poll interval; "+
			"renewed every third of it; 100ms to %s; 0: the engine's default (10s) (env LEASE_DURATION)", short(maxLeaseDuration)))
	fs.DurationVar(&c.LeasePollInterval, "lease-poll-interval", 0,
		fmt.Sprintf("lease: how often a worker looks for ready runs and expired leases when no notification came; 10ms to %s; "+
			"0: the engine's default (1s) (env LEASE_POLL_INTERVAL)", short(maxPollInterval)))
	fs.DurationVar(&c.CancelPollInterval, "cancel-poll-interval", 0,
		fmt.Sprintf("temporal: how often a worker reads the cancel flags of the runs whose steps it runs, for a cancel whose notification it missed; "+
			"10ms to %s; 0: the engine's default (1s) (env CANCEL_POLL_INTERVAL)", short(maxPollInterval)))
	fs.DurationVar(&c.TemporalPollTimeout, "temporal-poll-timeout", 0,
		fmt.Sprintf("temporal: bound on each long poll of this worker: a frozen worker is handed tasks for at most this long less 1s after it froze "+
			"(docs/engines.md, recovery); %s to %s; 0: the engine's default (%s); negative: the SDK's own (70s) (env TEMPORAL_POLL_TIMEOUT)",
			short(temporaladapter.MinPollTimeout), short(maxPollTimeout), short(temporaladapter.DefaultPollTimeout)))
	fs.DurationVar(&c.TemporalStickyTimeout, "temporal-sticky-timeout", 0,
		fmt.Sprintf("temporal: how long a run's next workflow task waits for the worker that ran its last one before any worker may take it; "+
			"%s to %s; 0: the engine's default (%s; the SDK's is 5s) (env TEMPORAL_STICKY_TIMEOUT)",
			short(minStickyTimeout), short(maxStickyTimeout), short(temporaladapter.DefaultStickyTimeout)))
	fs.DurationVar(&c.StopTimeout, "stop-timeout", defaultStopTimeout,
		fmt.Sprintf("graceful stop bound: in-flight steps finish or are handed back; at most %s (env STOP_TIMEOUT)", short(maxStopTimeout)))
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", temporaladapter.DefaultReconcileInterval,
		fmt.Sprintf("temporal: how often a worker checks open runs' projections against Temporal; %s to %s; 0: the default; negative: never in this process "+
			"(env RECONCILE_INTERVAL)", short(minInterval), short(maxInterval)))
	fs.DurationVar(&c.Retention.Interval, "retention-interval", retention.DefaultInterval,
		fmt.Sprintf("worker: how often the retention cleaner runs (one worker at a time, by advisory lock); %s to %s; 0: the default; "+
			"negative: never in this process (env RETENTION_INTERVAL)", short(minInterval), short(maxInterval)))
	fs.StringVar(&c.QBittorrentURL, "qbittorrent-url", EnvOr("QBITTORRENT_URL", defaultQBittorrentURL), "qBittorrent WebUI (env QBITTORRENT_URL)")
	fs.StringVar(&c.QBittorrentUser, "qbittorrent-user", EnvOr("QBITTORRENT_USER", defaultQBittorrentUser), "qBittorrent WebUI user (env QBITTORRENT_USER)")
	fs.StringVar(&c.qbittorrentPassFile, "qbittorrent-password-file", "",
		"file holding the qBittorrent WebUI password (env QBITTORRENT_PASSWORD_FILE); or the password itself in env QBITTORRENT_PASSWORD; never logged")
	fs.StringVar(&c.webhookURLFile, "webhook-url-file", "",
		"file holding the receiver URL of notify.webhook (env WEBHOOK_URL_FILE); or the URL itself in env WEBHOOK_URL; never logged")
}

// BindAdmin adds the flags the admin needs, a subset of a worker's: the
// engine, where plans live (library root, download directory), and the
// retention ages its pages show. What only a worker does (execute steps,
// reach qBittorrent and the webhook, prune, reconcile) is left out, so
// that `taskport admin --help` lists what the admin reads.
func (c *Config) BindAdmin(fs *pflag.FlagSet) {
	c.bindShared(fs)
	// What the worker-only flags would have set, for the admin's wiring
	// (Build): the admin starts no engine and runs no step, so the
	// downloader it is wired with is never called, and it prunes nothing.
	c.StopTimeout = defaultStopTimeout
	c.Retention.Interval = -1
	c.QBittorrentURL, c.QBittorrentUser = defaultQBittorrentURL, defaultQBittorrentUser
}

// bindShared adds the flags a worker and the admin both read.
func (c *Config) bindShared(fs *pflag.FlagSet) {
	c.BindEngine(fs)
	fs.DurationVar(&c.Retention.Completed, "retention-completed", retention.DefaultCompleted,
		"delete succeeded runs (and dispatched outbox rows, consumed or expired signals, waiters of ended runs) this long after they "+
			"finished; an idempotency key is free again once its run is deleted; at most "+maxRetentionText+"; 0: the default; negative: keep forever "+
			"(env RETENTION_COMPLETED)")
	fs.DurationVar(&c.Retention.Canceled, "retention-canceled", retention.DefaultCanceled,
		"delete canceled runs this long after they finished; at most "+maxRetentionText+"; 0: the default; negative: keep forever (env RETENTION_CANCELED)")
	fs.DurationVar(&c.Retention.Failed, "retention-failed", retention.DefaultFailed,
		"delete failed runs (dead letters) this long after they finished; at most "+maxRetentionText+"; 0: the default; negative: keep forever "+
			"(env RETENTION_FAILED)")
	BindLibraryRoot(fs, &c.LibraryRoot)
	fs.StringVar(&c.DownloadDir, "download-dir", EnvOr("DOWNLOAD_DIR", "/downloads"), "absolute directory qBittorrent saves into (env DOWNLOAD_DIR)")
}

// BindEngine adds to fs only the flags that choose and reach the engine:
// what a client of the engine (taskport runs) needs, without a worker's.
func (c *Config) BindEngine(fs *pflag.FlagSet) {
	fs.StringVar(&c.Engine, "engine", EnvOr("ENGINE", "temporal"),
		"temporal, lease, or both: the two behind the router, new runs on the active one (taskport engine switch) and each run on its own (env ENGINE)")
	c.BindEngineConnection(fs)
}

// BindEngineConnection adds BindEngine's flags but --engine: what reaches
// the engines, for a command that always opens both (taskport engine).
func (c *Config) BindEngineConnection(fs *pflag.FlagSet) {
	fs.IntVar(&c.EnginePoolSize, "engine-db-pool-size", defaultPoolSize,
		"connections of the engine's own pool (env ENGINE_DB_POOL_SIZE; pool_max_conns in the URL wins)")
	fs.StringVar(&c.TemporalAddress, "temporal-address", EnvOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	fs.StringVar(&c.TemporalNamespace, "temporal-namespace", EnvOr("TEMPORAL_NAMESPACE", "default"), "Temporal namespace (env TEMPORAL_NAMESPACE)")
	fs.StringVar(&c.TaskQueue, "task-queue", EnvOr("TEMPORAL_TASK_QUEUE", temporaladapter.DefaultTaskQueue), "Temporal task queue (env TEMPORAL_TASK_QUEUE)")
	fs.StringVar(&c.temporalAPIKeyFile, "temporal-api-key-file", "",
		"file holding the Temporal Cloud API key (env TEMPORAL_API_KEY_FILE); or the key itself in env TEMPORAL_API_KEY; never logged")
	fs.StringVar(&c.TemporalCA, "temporal-tls-ca", EnvOr("TEMPORAL_TLS_CA", ""), "CA file to verify the frontend (env TEMPORAL_TLS_CA)")
	// temporal-worker-controller mounts a Connection's mTLS secret and
	// names its files in TEMPORAL_TLS_CLIENT_CERT_PATH and _KEY_PATH: those
	// are the flags' defaults when TEMPORAL_TLS_CERT and _KEY are unset.
	fs.StringVar(&c.TemporalCert, "temporal-tls-cert", EnvOr("TEMPORAL_TLS_CERT", EnvOr("TEMPORAL_TLS_CLIENT_CERT_PATH", "")),
		"client certificate for mTLS (env TEMPORAL_TLS_CERT, or TEMPORAL_TLS_CLIENT_CERT_PATH as temporal-worker-controller sets it)")
	fs.StringVar(&c.TemporalKey, "temporal-tls-key", EnvOr("TEMPORAL_TLS_KEY", EnvOr("TEMPORAL_TLS_CLIENT_KEY_PATH", "")),
		"client key for mTLS (env TEMPORAL_TLS_KEY, or TEMPORAL_TLS_CLIENT_KEY_PATH as temporal-worker-controller sets it)")
	fs.StringVar(&c.TemporalServerName, "temporal-tls-server-name", EnvOr("TEMPORAL_TLS_SERVER_NAME", ""),
		"name to verify in the frontend's certificate; empty: the address's host (env TEMPORAL_TLS_SERVER_NAME)")
	fs.BoolVar(&c.TemporalTLS, "temporal-tls", EnvOr("TEMPORAL_TLS", "") == "true", "TLS with the system roots (env TEMPORAL_TLS=true)")
	fs.DurationVar(&c.TemporalWorkflowTaskTimeout, "temporal-workflow-task-timeout", 0,
		fmt.Sprintf("temporal: bound on one workflow task of the runs this process starts; a frozen worker's task is retried elsewhere after it, "+
			"and a replay of a long history must fit in it; set it alike on every process that enqueues; %s to %s; 0: the engine's default (%s) "+
			"(env TEMPORAL_WORKFLOW_TASK_TIMEOUT)",
			short(minWorkflowTaskTimeout), short(maxWorkflowTaskTimeout), short(temporaladapter.DefaultWorkflowTaskTimeout)))
}

// SecretsFromEnv fills the secret fields from their environment variables
// or the files their --…-file flags name. No flag takes a secret's value, so
// neither `ps` nor `--help` can show one.
func (c *Config) SecretsFromEnv() error {
	var errs [3]error
	c.TemporalAPIKey, errs[0] = secret("TEMPORAL_API_KEY", c.temporalAPIKeyFile)
	c.QBittorrentPass, errs[1] = secret("QBITTORRENT_PASSWORD", c.qbittorrentPassFile)
	c.WebhookURL, errs[2] = secret("WEBHOOK_URL", c.webhookURLFile)
	return errors.Join(errs[:]...)
}

// validate checks the flags' values, before anything connects; its
// callers make a refusal a usage error.
func (c *Config) validate() error {
	if err := c.validateEngine(); err != nil {
		return err
	}
	for _, n := range []struct {
		name        string
		value, most int
	}{{"--concurrency", c.Concurrency, maxConcurrency}, {"--lease-active-runs", c.LeaseActiveRuns, maxActiveRuns}, {"--lease-batch-size", c.LeaseBatchSize, maxBatchSize}} {
		if n.value < 0 || n.value > n.most {
			return fmt.Errorf("%s must lie in [0, %d] (0: the engine's default), got %d", n.name, n.most, n.value)
		}
	}
	// The floors: the engine's own for the lease (leaseadapter.Config), a
	// shorter one is renewed in a busy loop and lost at any pause; for a
	// poll of a statement or two per interval, under 10ms it is a busy loop
	// of reads.
	for _, d := range []struct {
		name          string
		value, lo, hi time.Duration
	}{
		{"--lease-duration", c.LeaseDuration, 100 * time.Millisecond, maxLeaseDuration},
		{"--lease-poll-interval", c.LeasePollInterval, 10 * time.Millisecond, maxPollInterval},
		{"--cancel-poll-interval", c.CancelPollInterval, 10 * time.Millisecond, maxPollInterval},
		{"--temporal-sticky-timeout", c.TemporalStickyTimeout, minStickyTimeout, maxStickyTimeout},
	} {
		if d.value < 0 || (d.value > 0 && (d.value < d.lo || d.value > d.hi)) {
			return fmt.Errorf("%s must be 0 (the default) or lie in [%s, %s], got %s", d.name, short(d.lo), short(d.hi), d.value)
		}
	}
	// Negative is the SDK's own bound, as temporaladapter.ClientConfig reads it.
	if p := c.TemporalPollTimeout; p > 0 && (p < temporaladapter.MinPollTimeout || p > maxPollTimeout) {
		return fmt.Errorf("--temporal-poll-timeout must be 0 (the default), negative (the SDK's) or lie in [%s, %s], got %s",
			short(temporaladapter.MinPollTimeout), short(maxPollTimeout), p)
	}
	if (c.DeploymentName == "") != (c.BuildID == "") {
		return fmt.Errorf("--temporal-deployment-name and --temporal-worker-build-id go together, got %q and %q", c.DeploymentName, c.BuildID)
	}
	if c.StopTimeout <= 0 || c.StopTimeout > maxStopTimeout {
		return fmt.Errorf("--stop-timeout must be positive and at most %s, got %s", short(maxStopTimeout), c.StopTimeout)
	}
	// Each interval paces a loop of statements (or of calls to Temporal):
	// a positive one under a second is a typo for a busy loop.
	for name, d := range map[string]time.Duration{"--reconcile-interval": c.ReconcileInterval, "--retention-interval": c.Retention.Interval} {
		if d > 0 && (d < minInterval || d > maxInterval) {
			return fmt.Errorf("%s must be 0 (the default), negative (never) or lie in [%s, %s], got %s", name, short(minInterval), short(maxInterval), d)
		}
	}
	for name, d := range map[string]time.Duration{"--retention-completed": c.Retention.Completed, "--retention-canceled": c.Retention.Canceled,
		"--retention-failed": c.Retention.Failed} {
		if d > maxRetention {
			return fmt.Errorf("%s must be at most %s (negative: keep forever), got %s", name, maxRetentionText, d)
		}
	}
	if u, err := url.Parse(c.QBittorrentURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--qbittorrent-url must be an http(s) URL, got %q", c.QBittorrentURL)
	}
	for name, dir := range map[string]string{"--library-root": c.LibraryRoot, "--download-dir": c.DownloadDir} {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("%s must be an absolute path, got %q", name, dir)
		}
	}
	return nil
}

// validateEngine checks the flags BindEngine adds.
func (c *Config) validateEngine() error {
	if c.Engine != "temporal" && c.Engine != "lease" && c.Engine != "both" {
		return fmt.Errorf("--engine must be temporal, lease or both, got %q", c.Engine)
	}
	if c.Engine == "lease" {
		return nil // the Temporal flags are not read
	}
	// The SDK would dial a host without a port on 443, and an empty
	// namespace or task queue would silently become the default one.
	if host, port, err := net.SplitHostPort(c.TemporalAddress); err != nil || host == "" || port == "" {
		return fmt.Errorf("--temporal-address must be host:port, got %q", c.TemporalAddress)
	}
	if strings.TrimSpace(c.TemporalNamespace) == "" {
		return errors.New("--temporal-namespace must not be empty")
	}
	if strings.TrimSpace(c.TaskQueue) == "" {
		return errors.New("--task-queue must not be empty")
	}
	if (c.TemporalCert == "") != (c.TemporalKey == "") {
		return fmt.Errorf("--temporal-tls-cert and --temporal-tls-key go together, got %q and %q", c.TemporalCert, c.TemporalKey)
	}
	if d := c.TemporalWorkflowTaskTimeout; d < 0 || (d > 0 && (d < minWorkflowTaskTimeout || d > maxWorkflowTaskTimeout)) {
		return fmt.Errorf("--temporal-workflow-task-timeout must be 0 (the default) or lie in [%s, %s], got %s",
			short(minWorkflowTaskTimeout), short(maxWorkflowTaskTimeout), d)
	}
	return nil
}

// Stack is one process's wiring: two pools (the engine has its own, ADR
// 2.8), the registry with the nine kinds, the engine, the dispatcher, the
// business API and the admin handler.
type Stack struct {
	log        *slog.Logger
	bizPool    *pgxpool.Pool
	enginePool *pgxpool.Pool
	temporal   client.Client
	registry   *port.Registry
	engine     port.TaskEngine
	dispatcher *outbox.Dispatcher
	// dispatchWatch is the engine as the dispatcher sees it: it records
	// the dispatcher's hand-overs for readiness.
	dispatchWatch *dispatchWatch
	host          *host.Host // set by RunWorker
	plans         *plans.Service
	metrics       *prometheus.Registry
	tracing       Tracing
	runs          port.Admin
	namespace     string // the Temporal namespace, for the UI's links
	// cleaner prunes finished runs; nil when --retention-interval is negative.
	cleaner *retention.Cleaner
	// retention is the retention setting the admin's footer shows.
	retention string
}

// With builds the wiring from the flags (secrets from the environment),
// runs fn and closes the wiring.
func With(cmd *cobra.Command, g *Globals, c *Config, fn func(*Stack) error) error {
	if err := c.SecretsFromEnv(); err != nil {
		return err
	}
	log, err := g.Logger()
	if err != nil {
		return err
	}
	s, err := Build(cmd.Context(), g, *c, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// Build wires a process from c. Close it when done.
func Build(ctx context.Context, g *Globals, c Config, log *slog.Logger) (_ *Stack, err error) {
	if err := c.validate(); err != nil {
		return nil, usage(err)
	}
	s := &Stack{log: log, registry: port.NewRegistry(), metrics: newMetricsRegistry(), namespace: c.TemporalNamespace}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.tracing, err = g.StartTracing(ctx, log); err != nil {
		return nil, err
	}
	tp := s.tracing.Provider
	if s.bizPool, err = g.Pool(ctx, log, g.PoolSize); err != nil {
		return nil, err
	}
	// On a schema behind the binary every statement that needs the missing
	// migration would fail at run time; refuse to start instead.
	if err := migrations.CheckSchema(ctx, s.bizPool); err != nil {
		return nil, fmt.Errorf("schema check: %w", err)
	}
	if s.enginePool, err = g.Pool(ctx, log, c.EnginePoolSize); err != nil {
		return nil, err
	}
	qbt, err := qbittorrent.New(qbittorrent.Config{BaseURL: c.QBittorrentURL, Username: c.QBittorrentUser, Password: c.QBittorrentPass, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("qbittorrent client: %w", err)
	}
	err = app.Register(s.registry, app.Deps{
		Pool: s.bizPool, Downloader: qbt, Files: activities.LocalFiles{},
		Config: activities.Config{DownloadDir: c.DownloadDir, LibraryRoot: c.LibraryRoot, WebhookURL: c.WebhookURL, Logger: log},
		// The steps hand over through the engine's EnqueueTx, in their
		// own commits; set below, before any step runs.
		Engine: func() port.TaskEngine { return s.engine },
	})
	if err != nil {
		return nil, err
	}
	lease := func() (port.TaskEngine, error) {
		return leaseadapter.New(s.enginePool, s.registry, leaseadapter.Config{
			StopTimeout: c.StopTimeout, ActiveRuns: c.LeaseActiveRuns, BatchSize: c.LeaseBatchSize,
			LeaseDuration: c.LeaseDuration, PollInterval: c.LeasePollInterval,
			Logger: log, Metrics: newLeaseMetrics(s.metrics), TracerProvider: tp})
	}
	temporal := func() (port.TaskEngine, error) {
		if s.temporal, err = dialTemporal(ctx, c, log, s.metrics, tp); err != nil {
			return nil, err
		}
		return temporaladapter.New(s.temporal, s.enginePool, s.registry, temporaladapter.Config{
			TaskQueue: c.TaskQueue, WorkerStopTimeout: c.StopTimeout, ReconcileInterval: c.ReconcileInterval,
			CancelPollInterval: c.CancelPollInterval, WorkflowTaskTimeout: c.TemporalWorkflowTaskTimeout,
			StickyScheduleToStartTimeout: c.TemporalStickyTimeout, Logger: log,
			Deployment: temporaladapter.Deployment{Name: c.DeploymentName, BuildID: c.BuildID}})
	}
	if s.engine, err = openEngine(c.Engine, s.enginePool, log, lease, temporal, false); err != nil {
		return nil, fmt.Errorf("%s engine: %w", c.Engine, err)
	}
	lister, ok := s.engine.(port.Admin)
	if !ok {
		return nil, errors.New("engine does not implement port.Admin")
	}
	s.dispatchWatch = &dispatchWatch{TaskEngine: s.engine}
	if s.dispatcher, err = outbox.NewDispatcher(s.bizPool, s.dispatchWatch, lister, outbox.Config{
		Logger: log, Metrics: newOutboxMetrics(s.metrics), TracerProvider: tp}); err != nil {
		return nil, err
	}
	if s.plans, err = plans.New(s.bizPool, plans.Config{LibraryRoot: c.LibraryRoot, DownloadDir: c.DownloadDir, Logger: log}); err != nil {
		return nil, err
	}
	s.runs = lister
	policy := c.Retention.WithDefaults()
	s.retention = policy.String()
	if policy.Interval > 0 {
		pruners, err := host.EnginePruners(s.engine)
		if err != nil {
			return nil, err
		}
		if s.cleaner, err = retention.New(s.bizPool, append(pruners, outbox.Pruner(s.bizPool)), retention.Config{
			Policy: policy, Logger: log, Metrics: newRetentionMetrics(s.metrics)}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// dialTemporal connects to the Temporal frontend c names, tracing through tp
// (nil: the global provider); its SDK metrics
// go to metrics.
func dialTemporal(ctx context.Context, c Config, log *slog.Logger, metrics *prometheus.Registry, tp trace.TracerProvider) (client.Client, error) {
	return temporaladapter.Dial(ctx, temporaladapter.ClientConfig{
		HostPort: c.TemporalAddress, Namespace: c.TemporalNamespace, APIKey: c.TemporalAPIKey,
		CAFile: c.TemporalCA, CertFile: c.TemporalCert, KeyFile: c.TemporalKey, ServerName: c.TemporalServerName, TLS: systemTLS(c),
		PollTimeout: c.TemporalPollTimeout, Logger: log, MetricsHandler: temporaladapter.PrometheusMetricsHandler(metrics, func(err error) {
			log.Warn("temporal metric", slog.Any("err", err))
		}),
		TracerProvider: tp,
	})
}

// systemTLS turns TLS on with the system roots when --temporal-tls is set
// and no CA or client certificate is given (those build their own config).
func systemTLS(c Config) *tls.Config {
	if !c.TemporalTLS || c.TemporalCA != "" || c.TemporalCert != "" {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TemporalServerName}
}

// Close closes the Temporal client and both pools, and exports the spans
// still buffered.
func (s *Stack) Close() {
	if s.temporal != nil {
		s.temporal.Close()
	}
	if s.enginePool != nil {
		s.enginePool.Close()
	}
	if s.bizPool != nil {
		s.bizPool.Close()
	}
	if err := s.tracing.Shutdown(context.Background()); err != nil {
		s.log.Warn("tracing shutdown", slog.String("error", err.Error()))
	}
}

// Plans is the business API.
func (s *Stack) Plans() *plans.Service { return s.plans }

// Engine is the process's engine (not started: Start is RunWorker's).
func (s *Stack) Engine() port.TaskEngine { return s.engine }

// Runs is the engine's operator surface.
func (s *Stack) Runs() port.Admin { return s.runs }

// Serve runs the admin handler on addr, authenticated as access says (see
// AdminAuth.Resolve), until ctx ends and returns the bound address and a
// channel that reports why serving stopped.
func (s *Stack) Serve(ctx context.Context, addr string, access AdminAccess) (string, <-chan error, error) {
	cfg := admin.Config{Pool: s.bizPool, Plans: s.plans, Runs: s.runs, Registry: s.registry, Logger: s.log,
		Metrics: promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}), Auth: access.Auth, Origins: access.Origins,
		Retention: s.retention}
	if s.temporal != nil && access.TemporalUI != "" {
		base, ns := strings.TrimRight(access.TemporalUI, "/"), s.namespace
		cfg.RunURL = func(id port.RunID) string {
			return base + "/namespaces/" + url.PathEscape(ns) + "/workflows/" + url.PathEscape(temporaladapter.WorkflowID(id))
		}
	}
	h, err := admin.New(cfg)
	if err != nil {
		return "", nil, err
	}
	return httpserve.ListenAndServe(ctx, addr, s.tracing.HTTP(h, "admin"))
}

// RunAdmin serves the admin handler on addr until ctx ends.
func (s *Stack) RunAdmin(ctx context.Context, addr string, access AdminAccess) error {
	bound, served, err := s.Serve(ctx, addr, access)
	if err != nil {
		return err
	}
	s.log.Info("admin serving", slog.String("url", "http://"+bound+"/admin"), slog.String("auth", access.Mode))
	select {
	case <-ctx.Done():
		return nil
	case err := <-served:
		return err
	}
}
