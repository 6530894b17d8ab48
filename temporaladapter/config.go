package temporaladapter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// Config tunes an Engine. The zero value is usable; New fills every default
// listed on the fields, then validates.
type Config struct {
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
	// MemoInputBytes bounds the input summary stored in the memo shown by the
	// Temporal UI; longer inputs are cut. Default 512.
	MemoInputBytes int
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
	case c.MemoInputBytes < 0:
		return fmt.Errorf("temporaladapter config: memo input bytes %d is negative", c.MemoInputBytes)
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
	opts := client.Options{
		HostPort:          cfg.HostPort,
		Namespace:         cfg.Namespace,
		Logger:            tlog.NewStructuredLogger(logger),
		MetricsHandler:    cfg.MetricsHandler,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg},
	}
	if cfg.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.APIKey)
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal %s: %w", cfg.HostPort, err)
	}
	return c, nil
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
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
