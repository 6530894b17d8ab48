package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtnox"
	"github.com/taskport/taskport/temporaladapter"
)

// runConfig tunes the local all-in-one.
type runConfig struct {
	StateDir     string
	TemporalCLI  string
	UIPort       string
	AdminAddr    string
	AdminAuth    stack.AdminAuth
	Demo         bool
	DemoSize     int
	ApproveAfter time.Duration
	// ExitAfterDemo stops everything once the demo plan is final, and
	// fails unless it completed: a smoke test of the whole stack.
	ExitAfterDemo bool
}

func newRootCmd() *cobra.Command {
	var (
		g  stack.Globals
		c  stack.Config
		rc runConfig
	)
	cmd := &cobra.Command{
		Use:   "taskport-dev",
		Short: "Local all-in-one: Temporal dev server + UI, worker, dispatcher, admin, and a demo acquisition",
		Long: "Starts (or reuses) a Temporal dev server with its UI, creates and migrates the database (a local convenience: " +
			"deployed workers never migrate), starts a private qbittorrent-nox on loopback, the worker, the outbox dispatcher and " +
			"the admin UI, then runs a demo: a generated file served by a local web seed is planned, approved, " +
			"downloaded, imported into the library, verified and cleaned up. Watch it in the Temporal UI and in /admin.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.SecretsFromEnv(); err != nil {
				return err
			}
			log, err := g.Logger()
			if err != nil {
				return err
			}
			return runLocal(cmd.Context(), &g, c, rc, log)
		},
	}
	g.Bind(cmd)
	c.Bind(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&rc.StateDir, "state-dir", ".cache/run", "where the library, downloads, qBittorrent profile and Temporal state live")
	fs.StringVar(&rc.TemporalCLI, "temporal-cli", "", "temporal CLI to start the dev server with; default: the one make tools installed")
	fs.StringVar(&rc.UIPort, "ui-port", "8233", "Temporal UI port")
	fs.StringVar(&rc.AdminAddr, "admin-addr", "127.0.0.1:8080", "admin UI address; a non-loopback one needs --auth")
	rc.AdminAuth.Bind(fs)
	fs.BoolVar(&rc.Demo, "demo", true, "create and approve a demo plan")
	fs.IntVar(&rc.DemoSize, "demo-size", 32<<20, "demo file size in bytes")
	fs.DurationVar(&rc.ApproveAfter, "approve-after", 10*time.Second, "approve the demo plan after this long (it waits on approval until then)")
	fs.BoolVar(&rc.ExitAfterDemo, "exit-after-demo", false, "stop once the demo plan is final; fail unless it completed")
	return cmd
}

func runLocal(ctx context.Context, g *stack.Globals, c stack.Config, rc runConfig, log *slog.Logger) error {
	if c.Engine == "temporal" && rc.AdminAuth.TemporalUI == "" {
		rc.AdminAuth.TemporalUI = "http://127.0.0.1:" + rc.UIPort
	}
	access, err := rc.AdminAuth.Resolve(rc.AdminAddr)
	if err != nil {
		return err
	}
	state, err := filepath.Abs(rc.StateDir)
	if err != nil {
		return err
	}
	c.LibraryRoot = filepath.Join(state, "library")
	c.DownloadDir = filepath.Join(state, "downloads")
	for _, d := range []string{c.LibraryRoot, c.DownloadDir, filepath.Join(state, "seed")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}

	if c.Engine == "temporal" {
		stop, err := ensureDevServer(ctx, c, rc, state, log)
		if err != nil {
			return err
		}
		defer stop()
	}

	if err := ensureDatabase(ctx, g.DatabaseURL, log); err != nil {
		return err
	}
	pool, err := g.MigrationPool(ctx, log, g.PoolSize)
	if err != nil {
		return err
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}

	if c.QBittorrentPass == "" {
		c.QBittorrentPass = rand.Text()
	}
	c.QBittorrentUser = "taskport"
	qbt, err := qbtnox.Start(ctx, qbtnox.Options{Dir: filepath.Join(state, "qbittorrent"), Username: c.QBittorrentUser, Password: c.QBittorrentPass})
	if err != nil {
		return fmt.Errorf("%w (make tools installs qbittorrent-nox and mktorrent)", err)
	}
	defer qbt.Stop()
	c.QBittorrentURL = qbt.BaseURL
	log.Info("qbittorrent-nox running", slog.String("webui", qbt.BaseURL))

	s, err := stack.Build(ctx, g, c, log)
	if err != nil {
		return err
	}
	defer s.Close()
	adminAddr, _, err := s.Serve(ctx, rc.AdminAddr, access)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	workerDone := make(chan error, 1)
	go func() { workerDone <- s.RunWorker(ctx, c, "127.0.0.1:0", true) }()
	log.Info("taskport running", slog.String("engine", c.Engine), slog.String("admin", "http://"+adminAddr+"/admin"))
	if c.Engine == "temporal" {
		log.Info("watch the runs in the Temporal UI", slog.String("ui", "http://127.0.0.1:"+rc.UIPort+"/namespaces/"+c.TemporalNamespace+"/workflows"))
	}
	if rc.Demo {
		err := demo(ctx, s.Plans(), c, rc, state, log)
		if err != nil {
			log.Error("demo", slog.Any("err", err))
		}
		if rc.ExitAfterDemo {
			stop()
			return errors.Join(err, <-workerDone)
		}
	}
	return <-workerDone
}

// ensureDatabase creates the database of rawURL when it does not exist yet,
// connecting to the server's postgres database to do so (a local convenience).
func ensureDatabase(ctx context.Context, rawURL string, log *slog.Logger) error {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to the postgres database to check %q: %w", name, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %q: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %q: %w", name, err)
	}
	log.Info("created database", slog.String("database", name))
	return nil
}

// ensureDevServer reuses a Temporal frontend already answering at the
// configured address, or starts a dev server there with the UI and the
// adapter's search attributes, persisting to the state dir.
func ensureDevServer(ctx context.Context, c stack.Config, rc runConfig, state string, log *slog.Logger) (func(), error) {
	if conn, err := net.DialTimeout("tcp", c.TemporalAddress, time.Second); err == nil {
		conn.Close()
		log.Info("reusing the Temporal server already listening", slog.String("address", c.TemporalAddress))
		return func() {}, nil
	}
	srv, err := devserver.Launch(ctx, devserver.Options{
		CLI: rc.TemporalCLI, Namespace: c.TemporalNamespace, HostPort: c.TemporalAddress, UIPort: rc.UIPort,
		DBFile: filepath.Join(state, "temporal.db"), LogFile: filepath.Join(state, "temporal.log"),
		SearchAttributes: temporaladapter.SearchAttributes(),
	})
	if err != nil {
		return nil, err
	}
	log.Info("temporal dev server started", slog.String("frontend", srv.HostPort), slog.String("log", srv.LogFile))
	return func() {
		if err := srv.Stop(); err != nil {
			log.Warn("stop temporal dev server", slog.Any("err", err))
		}
	}, nil
}

// reportCompletion plays qBittorrent's "run external program on torrent
// finished" hook, which in production calls ReportDownloadComplete (the
// business truth first, then a wake-up signal). Without it download.await
// would still finish, on its next 10-minute check.
func reportCompletion(ctx context.Context, c stack.Config, plan, hash string, svc *plans.Service, log *slog.Logger) {
	qbt, err := qbittorrent.New(qbittorrent.Config{BaseURL: c.QBittorrentURL, Username: c.QBittorrentUser, Password: c.QBittorrentPass})
	if err != nil {
		log.Error("demo completion hook", slog.Any("err", err))
		return
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ts, err := qbt.Torrents(ctx, qbittorrent.Filter{Hashes: []string{hash}})
		if err != nil || len(ts) == 0 || !ts[0].Complete() {
			continue
		}
		// The torrent can finish before download.submit has committed its
		// download row; the report is refused until then, so try again.
		if _, err := svc.ReportDownloadComplete(ctx, hash, ts[0].ContentPath); err != nil {
			log.Debug("demo completion hook: not yet", slog.Any("err", err))
			continue
		}
		log.Info("download complete reported, as qBittorrent's on-finish hook would", slog.String("plan", plan))
		return
	}
}

// demo plans one generated file served by a local web seed, approves it
// after rc.ApproveAfter and logs the plan's status as it moves.
func demo(ctx context.Context, svc *plans.Service, c stack.Config, rc runConfig, state string, log *slog.Logger) error {
	mktorrent, err := exec.LookPath("mktorrent")
	if err != nil {
		return fmt.Errorf("mktorrent not installed (make tools installs it): %w", err)
	}
	seedDir := filepath.Join(state, "seed")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// http.FileServer answers Range requests, which web seeding needs.
	seed := &http.Server{Handler: http.FileServer(http.Dir(seedDir)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = seed.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = seed.Close() })

	name := fmt.Sprintf("demo-%d.bin", time.Now().Unix())
	data := make([]byte, rc.DemoSize)
	_, _ = mrand.NewChaCha8([32]byte{}).Read(data)
	if err := os.WriteFile(filepath.Join(seedDir, name), data, 0o644); err != nil {
		return err
	}
	torrentPath := filepath.Join(seedDir, name+".torrent")
	mk := exec.CommandContext(ctx, mktorrent, "-w", "http://"+l.Addr().String()+"/"+name, "-o", torrentPath, name)
	mk.Dir = seedDir
	if out, err := mk.CombinedOutput(); err != nil {
		return fmt.Errorf("mktorrent: %w: %s", err, out)
	}
	torrent, err := os.ReadFile(torrentPath)
	if err != nil {
		return err
	}
	meta, err := qbittorrent.ParseTorrentFile(torrent)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	p, err := svc.CreatePlan(ctx, plans.NewPlan{
		Title: "Demo asset " + name, Torrent: torrent, InfoHash: meta.InfoHash,
		TargetPath: filepath.Join(c.LibraryRoot, "demo", name), ExpectedSize: meta.Size, ExpectedSHA256: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		return err
	}
	log.Info("demo plan created, awaiting approval", slog.String("plan", p.ID.String()),
		slog.Duration("auto_approve_in", rc.ApproveAfter))
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(rc.ApproveAfter):
	}
	if _, err := svc.Approve(ctx, p.ID.String(), "demo", "approved by taskport-dev"); err != nil {
		return err
	}
	log.Info("demo plan approved", slog.String("plan", p.ID.String()))
	go reportCompletion(ctx, c, p.ID.String(), meta.InfoHash, svc, log)
	last := ""
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		tl, err := svc.Timeline(ctx, p.ID.String())
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		if st := string(tl.Plan.Status); st != last {
			last = st
			log.Info("demo plan", slog.String("plan", p.ID.String()), slog.String("status", st))
			if tl.Plan.Status.Final() {
				if tl.Plan.Status != acquisition.Completed {
					return fmt.Errorf("demo plan ended %s", tl.Plan.Status)
				}
				log.Info("demo finished: the file is in the library; Ctrl-C stops everything", slog.String("file", tl.Plan.TargetPath))
				return nil
			}
		}
	}
}
