// Package devserver starts a real Temporal dev server (the Temporal CLI's
// `temporal server start-dev`) as a child process: headless on free ports for
// tests (internal/testkit/devserver), or with the web UI for cmd/taskport-dev.
//
// The CLI is not a Go dependency of this module: `make tools` builds it
// from the Go module proxy (v1.5.1, through tools/temporalcli's go.mod,
// which also raises the dev server's SQLite driver) into
// $(go env GOPATH)/bin, outside the clone, and every later run reuses it.
// The in-process go.temporal.io/server/temporaltest does not compile beside
// SDK v1.51, hence the binary.
package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/taskport/taskport/internal/gotool"
)

// CLIPath finds the temporal CLI that `make tools` installed: in
// $(go env GOPATH)/bin, then on $PATH.
func CLIPath() (string, error) {
	p, err := gotool.Binary("temporal")
	if err != nil {
		return "", fmt.Errorf("temporal CLI: %w: run `make tools` (it builds the CLI from tools/temporalcli) or set Options.CLI", err)
	}
	return p, nil
}

// dynamicConfig is the server configuration the dev server runs with, as
// `--dynamic-config-value KEY=JSON` (the temporal-pg harness sets the same in
// internal/testkit/temporalserver), unless Options.ServerDefaults:
//   - matching.longPollExpirationInterval 5s (default 1 minute): bounds how
//     long a frozen worker's open polls go on swallowing tasks (the reason
//     and its measurement are written in internal/testkit/temporalserver).
//     Workers dialed with temporaladapter.Dial bound their own polls to 4 s
//     (ClientConfig.PollTimeout), which is the shorter, so for them this adds
//     nothing; it still bounds a client dialed some other way;
//   - history.workflowTaskRetryMaxInterval 10s (default 10 minutes): a
//     workflow task that keeps failing (its workflow type is a version this
//     worker does not serve) is held by the SDK until its timeout, which the
//     server stretches by 5 s x 2^(attempt-4) up to this cap. With the
//     default, a run parked behind a worker that lacks its version waits up
//     to 10 minutes after a worker that serves it appears.
var dynamicConfig = []string{
	`matching.longPollExpirationInterval="5s"`,
	`history.workflowTaskRetryMaxInterval="10s"`,
}

// Options tune the server.
type Options struct {
	// CLI is the temporal binary to run; default CLIPath's.
	CLI string
	// Namespace to register; default "default".
	Namespace string
	// SearchAttributes to register, name -> type ("Keyword", "Int", "Text",
	// "Bool", "Double", "Datetime", "KeywordList").
	SearchAttributes map[string]string
	// LogFile receives the server's output; default a file under os.TempDir.
	LogFile string
	// HostPort binds the frontend; default a free port on 127.0.0.1.
	HostPort string
	// UIPort, when set, starts the web UI on that port; default headless.
	UIPort string
	// DBFile persists the server's state across restarts; default in memory.
	DBFile string
	// ServerDefaults runs the server with every setting at its default:
	// none of this package's dynamic configuration (dynamicConfig), only
	// what the CLI's dev server sets itself (search-attribute cache and
	// persistence rates, nothing that matching or recovery reads). What a
	// cluster that nobody tuned, or Temporal Cloud, runs: four partitions
	// per task queue, one-minute long polls, a 10-minute workflow-task
	// retry cap. Default false: the tuned configuration.
	ServerDefaults bool
}

// ExtraArgs are the flags of `temporal server start-dev` that give a
// server the search attributes of opts and this package's dynamic
// configuration (none with opts.ServerDefaults): what a test that runs the
// CLI itself (to SIGKILL it) adds.
func ExtraArgs(opts Options) []string {
	names := make([]string, 0, len(opts.SearchAttributes))
	for name := range opts.SearchAttributes {
		names = append(names, name)
	}
	sort.Strings(names)
	var extra []string
	for _, name := range names {
		extra = append(extra, "--search-attribute", name+"="+opts.SearchAttributes[name])
	}
	if !opts.ServerDefaults {
		for _, kv := range dynamicConfig {
			extra = append(extra, "--dynamic-config-value", kv)
		}
	}
	return extra
}

// Server is a running dev server.
type Server struct {
	HostPort  string
	Namespace string
	Client    client.Client
	LogFile   string
	dev       *testsuite.DevServer
}

// Launch starts a server. Call Stop when done.
func Launch(ctx context.Context, opts Options) (*Server, error) {
	cli := opts.CLI
	if cli == "" {
		var err error
		if cli, err = CLIPath(); err != nil {
			return nil, err
		}
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	logFile := opts.LogFile
	if logFile == "" {
		f, err := os.CreateTemp("", "temporal-devserver-*.log")
		if err != nil {
			return nil, fmt.Errorf("dev server log: %w", err)
		}
		logFile = f.Name()
		f.Close()
	}
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dev server log: %w", err)
	}
	defer out.Close() // the child keeps its own descriptor

	extra := ExtraArgs(opts)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dev, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: cli,
		// The SDK client logs every activity at DEBUG by default; only
		// warnings are worth a test's output.
		ClientOptions: &client.Options{Namespace: opts.Namespace, HostPort: opts.HostPort,
			Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))},
		EnableUI:   opts.UIPort != "",
		UIPort:     opts.UIPort,
		DBFilename: opts.DBFile,
		LogLevel:   "warn",
		ExtraArgs:  extra,
		Stdout:     out,
		Stderr:     out,
	})
	if err != nil {
		return nil, fmt.Errorf("start temporal dev server (%s, log %s): %w", cli, logFile, err)
	}
	return &Server{HostPort: dev.FrontendHostPort(), Namespace: opts.Namespace, Client: dev.Client(), LogFile: logFile, dev: dev}, nil
}

// LogPath is the file the server writes its output to.
func (s *Server) LogPath() string { return s.LogFile }

// Stop closes the client and stops the server process.
func (s *Server) Stop() error {
	s.Client.Close()
	return s.dev.Stop()
}
