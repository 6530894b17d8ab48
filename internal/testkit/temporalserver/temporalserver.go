// Package temporalserver gives tests a production-shaped Temporal server:
// temporal-server v1.32.0 (not the CLI's dev server) as a child process,
// with PostgreSQL persistence and visibility, mTLS on the frontend, and
// worker_poll_complete_on_shutdown turned on through dynamic config.
//
// # What it needs
//
// `make tools` builds temporal-server and temporal-sql-tool from the Go
// module proxy (go.temporal.io/server/cmd/server and cmd/tools/sql at
// ServerVersion) into $(go env GOPATH)/bin; building them also puts the
// module's source in $(go env GOMODCACHE), where this package reads the
// schema and the base configuration (config/development-postgres12.yaml).
// Postgres is pgtest's server (TEST_DATABASE_URL) unless
// Options.DatabaseURL names another.
//
// # What a launch does
//
//  1. creates two databases with unique names (persistence, visibility) and
//     applies the module's schemas with temporal-sql-tool;
//  2. makes a CA, a server certificate for 127.0.0.1/localhost and a client
//     certificate (crypto/x509);
//  3. derives the server's configuration from the module's: those
//     databases, a free port for every listener, the frontend requiring
//     client certificates from the CA, the dynamic config;
//  4. starts the server and polls until the frontend answers over mTLS;
//  5. registers the namespace and the search attributes, and polls until a
//     workflow carrying those attributes is accepted (namespace and
//     search-attribute caches refresh every few seconds after a change).
//
// Stop kills the server, drops both databases and removes the certificates
// and configuration; the log file stays for a post-mortem.
package temporalserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/taskport/taskport/internal/gotool"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// Module and ServerVersion say which server `make tools` builds and whose
// schema and configuration the harness reads.
const (
	Module        = "go.temporal.io/server"
	ServerVersion = "v1.32.0"
)

// Binaries built by `make tools` (go install names them server and sql).
const (
	ServerBinary  = "temporal-server"
	SQLToolBinary = "temporal-sql-tool"
)

// Options tune the server.
type Options struct {
	// Namespace to register; default "default".
	Namespace string
	// SearchAttributes to register, name -> type ("Keyword", "Int", "Text",
	// "Bool", "Double", "Datetime", "KeywordList").
	SearchAttributes map[string]string
	// DatabaseURL is the Postgres server that holds the server's databases;
	// default pgtest's (TEST_DATABASE_URL).
	DatabaseURL string
	// StartTimeout bounds the launch (schemas, start-up, registrations).
	// Default 3 minutes.
	StartTimeout time.Duration
	// ServerDefaults runs the server with every dynamic-config setting at
	// its default: no dynamic config client at all (the server says "Using
	// default values"), so neither this harness's settings (dynamicConfig)
	// nor the module's development file. Four partitions per task queue,
	// one-minute long polls, a 10-minute workflow-task retry cap, and
	// worker_poll_complete_on_shutdown off: what Temporal Cloud and an
	// untuned cluster run. Default false: the tuned configuration.
	// ServerDefaultsEnv turns it on for every launch through this package.
	ServerDefaults bool
}

// ServerDefaultsEnv, set to 1, makes every server this package launches
// (Start, Shared, Main) run with Options.ServerDefaults, and so does
// internal/testkit/devserver for the dev server: how the fault soak
// measures recovery on servers nobody tuned (docs/testing.md).
const ServerDefaultsEnv = "TASKPORT_SERVER_DEFAULTS"

// fromEnv applies ServerDefaultsEnv to opts.
func fromEnv(opts Options) Options {
	if os.Getenv(ServerDefaultsEnv) == "1" {
		opts.ServerDefaults = true
	}
	return opts
}

// Server is a running server.
type Server struct {
	// HostPort of the frontend (mTLS).
	HostPort  string
	Namespace string
	// Client is connected to Namespace with ClientCert.
	Client client.Client
	// CA signed the server's certificate and every client certificate the
	// frontend accepts; ClientCert is one of those.
	CA         *CA
	ClientCert KeyPair
	// ServerName is a name the server's certificate carries.
	ServerName string
	// LogFile receives the server's output (warnings and errors).
	LogFile string
	// PersistenceDB and VisibilityDB name the server's databases on the
	// Postgres server; Stop drops them.
	PersistenceDB, VisibilityDB string

	dir    string
	dbs    *databases
	cmd    *exec.Cmd
	exited chan struct{}
}

var harness = testkit.Harness[Options, *Server]{Name: "temporalserver", Launch: func(ctx context.Context, opts Options) (*Server, error) {
	return Launch(ctx, fromEnv(opts))
}}

// Start launches a server for tb and stops it when tb ends.
func Start(tb testing.TB, opts Options) *Server { tb.Helper(); return harness.Start(tb, opts) }

// Shared is a server for a whole test binary, launched on its first Get
// and stopped by testkit.Main.
func Shared(opts Options) *testkit.Shared[*Server] { return harness.Shared(opts) }

// Main runs a test binary's tests against one server shared by them all: use
// receives it before the first test. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options, use func(*Server)) int { return harness.Main(m, opts, use) }

// Launch starts a server. Call Stop when done. A failed launch cleans up
// after itself and its error ends with the tail of the server's log.
func Launch(ctx context.Context, opts Options) (_ *Server, err error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	serverBin, sqlTool, moduleDir, err := tools()
	if err != nil {
		return nil, err
	}
	if opts.DatabaseURL == "" {
		if opts.DatabaseURL, err = pgtest.Server(); err != nil {
			return nil, err
		}
	}
	s := &Server{Namespace: opts.Namespace, ServerName: "localhost", exited: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
			if s.LogFile != "" {
				err = fmt.Errorf("%w\nend of the server log %s:\n%s", err, s.LogFile, testkit.LogTail(s.LogFile))
			}
		}
	}()
	if s.dir, err = os.MkdirTemp("", "temporal-server-*"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	if s.dbs, err = createDatabases(ctx, opts.DatabaseURL); err != nil {
		return nil, err
	}
	s.PersistenceDB, s.VisibilityDB = s.dbs.persistence, s.dbs.visibility
	if err := s.dbs.setupSchemas(ctx, sqlTool, moduleDir); err != nil {
		return nil, err
	}
	if s.CA, err = NewCA(s.dir, "ca"); err != nil {
		return nil, err
	}
	serverCert, err := s.CA.IssueServer("server")
	if err != nil {
		return nil, err
	}
	if s.ClientCert, err = s.CA.IssueClient("client"); err != nil {
		return nil, err
	}
	ports, err := freePorts(portCount)
	if err != nil {
		return nil, err
	}
	cfgFile, frontend, err := writeConfig(moduleDir, s.dir, configParams{
		db: s.dbs.target, persistenceDB: s.dbs.persistence, visibility: s.dbs.visibility,
		ports: ports, ca: s.CA.CertFile, server: serverCert, serverDefaults: opts.ServerDefaults,
	})
	if err != nil {
		return nil, err
	}
	s.HostPort = frontend
	if err := s.start(serverBin, cfgFile); err != nil {
		return nil, err
	}
	// A server that exits ends every wait below at once, with its log.
	ctx, stopWaiting := context.WithCancelCause(ctx)
	defer stopWaiting(nil)
	go func() {
		select {
		case <-s.exited:
			stopWaiting(fmt.Errorf("temporal-server exited: %v", s.cmd.ProcessState))
		case <-ctx.Done():
		}
	}()
	tlsCfg, err := s.clientTLS()
	if err != nil {
		return nil, err
	}
	if s.Client, err = dialWhenUp(ctx, frontend, opts.Namespace, tlsCfg); err != nil {
		return nil, err
	}
	if err := s.register(ctx, opts.SearchAttributes); err != nil {
		return nil, err
	}
	return s, nil
}

// tools finds the two binaries and the module source.
func tools() (serverBin, sqlTool, moduleDir string, err error) {
	hint := fmt.Sprintf("run `make tools` (builds %s and %s from %s@%s)", ServerBinary, SQLToolBinary, Module, ServerVersion)
	if serverBin, err = gotool.Binary(ServerBinary); err != nil {
		return "", "", "", fmt.Errorf("%w: %s", err, hint)
	}
	if sqlTool, err = gotool.Binary(SQLToolBinary); err != nil {
		return "", "", "", fmt.Errorf("%w: %s", err, hint)
	}
	if moduleDir, err = gotool.ModuleDir(Module, ServerVersion); err != nil {
		return "", "", "", fmt.Errorf("%w: %s", err, hint)
	}
	return serverBin, sqlTool, moduleDir, nil
}

// start runs the server with its output in a log file.
func (s *Server) start(bin, cfgFile string) error {
	log, err := os.CreateTemp("", "temporal-server-*.log")
	if err != nil {
		return fmt.Errorf("server log: %w", err)
	}
	defer log.Close() // the child keeps its own descriptor
	s.LogFile = log.Name()
	s.cmd = exec.Command(bin, "--config-file", cfgFile, "--allow-no-auth", "start")
	s.cmd.Stdout = log
	s.cmd.Stderr = log
	// Its own process group, so a Ctrl-C to the tests reaches it only
	// through Stop; and killed if the test binary dies without stopping it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait() // the exit status is read from ProcessState
		close(s.exited)
	}()
	return nil
}

// clientTLS is the harness's own client side of the mTLS handshake.
func (s *Server) clientTLS() (*tls.Config, error) {
	caPEM, err := os.ReadFile(s.CA.CertFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(s.ClientCert.CertFile, s.ClientCert.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: s.ServerName}, nil
}

// pollEvery paces the readiness polls; each poll is one RPC.
const pollEvery = 100 * time.Millisecond

// poll calls try until it succeeds or ctx ends; the error then names what
// was waited for and the last failure.
func poll(ctx context.Context, what string, try func(ctx context.Context) error) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %w)", what, context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

// dialWhenUp polls until the frontend accepts an mTLS connection (the SDK's
// dial calls GetSystemInfo).
func dialWhenUp(ctx context.Context, hostPort, namespace string, tlsCfg *tls.Config) (client.Client, error) {
	var c client.Client
	err := poll(ctx, "wait for the frontend", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		c, err = client.DialContext(ctx, client.Options{
			HostPort: hostPort, Namespace: namespace,
			ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg},
			// The SDK logs every activity at DEBUG by default; only
			// warnings are worth a test's output.
			Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		})
		return err
	})
	return c, err
}

// retention of the registered namespace; tests never outlive it.
const retention = 24 * time.Hour

// register creates the namespace and the search attributes, then polls
// until a workflow carrying those attributes is accepted: only then have
// the frontend's and history's namespace caches seen both.
func (s *Server) register(ctx context.Context, attrs map[string]string) error {
	err := poll(ctx, "register namespace "+s.Namespace, func(ctx context.Context) error {
		_, err := s.Client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: s.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(retention)})
		if _, exists := errors.AsType[*serviceerror.NamespaceAlreadyExists](err); exists {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	types := make(map[string]enumspb.IndexedValueType, len(attrs))
	for name, typ := range attrs {
		v, err := enumspb.IndexedValueTypeFromString(typ)
		if err != nil {
			return fmt.Errorf("search attribute %s: %w", name, err)
		}
		types[name] = v
	}
	if len(types) > 0 {
		err = poll(ctx, "add search attributes", func(ctx context.Context) error {
			_, err := s.Client.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
				Namespace: s.Namespace, SearchAttributes: types})
			return err
		})
		if err != nil {
			return err
		}
	}
	probe, err := probeAttributes(types)
	if err != nil {
		return err
	}
	return poll(ctx, "start a workflow with the search attributes", func(ctx context.Context) error {
		run, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: "taskport-harness-probe", TaskQueue: "taskport-harness-probe", TypedSearchAttributes: probe,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		}, "probe")
		if err != nil {
			return err
		}
		return s.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "readiness probe")
	})
}

// probeAttributes gives every search attribute a value of its type.
func probeAttributes(types map[string]enumspb.IndexedValueType) (temporal.SearchAttributes, error) {
	var set []temporal.SearchAttributeUpdate
	for name, typ := range types {
		switch typ {
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD:
			set = append(set, temporal.NewSearchAttributeKeyKeyword(name).ValueSet("probe"))
		case enumspb.INDEXED_VALUE_TYPE_TEXT:
			set = append(set, temporal.NewSearchAttributeKeyString(name).ValueSet("probe"))
		case enumspb.INDEXED_VALUE_TYPE_INT:
			set = append(set, temporal.NewSearchAttributeKeyInt64(name).ValueSet(1))
		case enumspb.INDEXED_VALUE_TYPE_DOUBLE:
			set = append(set, temporal.NewSearchAttributeKeyFloat64(name).ValueSet(1))
		case enumspb.INDEXED_VALUE_TYPE_BOOL:
			set = append(set, temporal.NewSearchAttributeKeyBool(name).ValueSet(true))
		case enumspb.INDEXED_VALUE_TYPE_DATETIME:
			set = append(set, temporal.NewSearchAttributeKeyTime(name).ValueSet(time.Unix(0, 0)))
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST:
			set = append(set, temporal.NewSearchAttributeKeyKeywordList(name).ValueSet([]string{"probe"}))
		default:
			return temporal.SearchAttributes{}, fmt.Errorf("search attribute %s: type %s has no probe value", name, typ)
		}
	}
	return temporal.NewSearchAttributes(set...), nil
}

// Ports are picked below maxPort: the SQL schema stores each service's
// membership port as a SMALLINT (cluster_membership.rpc_port), so a port
// from the kernel's ephemeral range (32768 and up here) makes the server
// fail its first membership heartbeat ("value out of range for type
// smallint"). minPort keeps clear of well-known services.
const (
	minPort = 10000
	maxPort = 32767
)

// freePorts reserves n distinct free ports in [minPort, maxPort] by
// listening on random candidates, all at once, then releases them for the
// server. Another process may take one in between; the server then fails
// to start and says so.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("no %d free ports in %d-%d after %d tries", n, minPort, maxPort, tries)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(minPort+mrand.IntN(maxPort-minPort+1))))
		if err != nil {
			continue // taken
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// LogPath is the file the server writes its output to.
func (s *Server) LogPath() string { return s.LogFile }

// Stop closes the client, kills the server, drops its databases and removes
// its certificates and configuration.
func (s *Server) Stop() error {
	var errs []error
	if s.Client != nil {
		s.Client.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		// Killed, not stopped gracefully: its state is thrown away.
		if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("kill temporal-server: %w", err))
		}
		<-s.exited
	}
	if s.dbs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errs = append(errs, s.dbs.drop(ctx))
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}
