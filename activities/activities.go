// Package activities holds the step bodies of the task kinds: every side
// effect (downloader calls, file copies, webhooks) goes through the
// operation ledger (ADR 2.3), and every hand-over to the next kind is
// enqueued in the same transaction as the business state change, by
// acquisition.HandOff, which also moves the plan through its lifecycle:
// through the engine's EnqueueTx (Config.Engine), or as an outbox row when
// the process has no such engine.
//
// A plan acts only on what is its own: torrents that carry its managed tag
// (never another torrent with the same hash), and a library file that its
// import created (never one it found there).
//
// Lock order: a transaction that changes a plan's download row and its
// status locks the plan row first (acquisition.LockPlan), then the download row,
// as compensation does; the opposite order could deadlock a step's commit
// with a concurrent compensation of the same plan.
//
// Activities are methods on Activities, which carries the dependencies; the
// downloader and the file importer are small interfaces declared here so
// that tests can use fakes and the real clients plug in unchanged.
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// Downloader is what the steps need of a qBittorrent client
// (*qbittorrent.Client satisfies it).
type Downloader interface {
	Add(ctx context.Context, req qbittorrent.AddRequest) error
	Torrents(ctx context.Context, f qbittorrent.Filter) ([]qbittorrent.Torrent, error)
	Pause(ctx context.Context, hashes ...string) error
	Delete(ctx context.Context, deleteFiles bool, hashes ...string) error
}

// ImportRequest asks Files.Import for one fenced, resumable copy.
type ImportRequest struct {
	Source, Target string
	ExpectedSize   int64
	ExpectedSHA256 string
	ChunkSize      int // 0: the importer's default
	// ShouldStop is called between chunks; a non-nil error stops the copy,
	// removes its temp file and is returned by Import.
	ShouldStop func(ctx context.Context) error
	// Progress reports bytes copied so far.
	Progress func(copied, total int64)
}

// ImportResult describes the file in place.
type ImportResult struct {
	Size       int64
	SHA256     string
	Reconciled bool // the target already held the right content
}

// Files is the file side of an import (the fileimport package, wrapped in
// app/).
type Files interface {
	Import(ctx context.Context, req ImportRequest) (ImportResult, error)
	// Verify returns nil when path has exactly size bytes hashing to sha256;
	// a missing file is an error wrapping fs.ErrNotExist, a different one
	// (or not a regular file) one wrapping fileimport.ErrMismatch or
	// fileimport.ErrInvalidRequest. It heartbeats the step of ctx as it
	// hashes, and stops when ctx ends.
	Verify(ctx context.Context, path string, size int64, sha256 string) error
	// RemoveTemps removes temp files an import of target left behind.
	RemoveTemps(target string) error
}

// Config tunes Activities. Zero values take the defaults named.
type Config struct {
	// DownloadDir is where the downloader saves; each plan gets its own
	// subdirectory DownloadDir/<plan id>. Required, absolute. A content
	// path outside it is never read.
	DownloadDir string
	// LibraryRoot is where every plan's library file lies. Required,
	// absolute. A target outside it (through a symlink) is never touched.
	LibraryRoot string
	// WebhookURL receives notify.webhook POSTs; empty disables them.
	WebhookURL string
	// HTTPClient sends webhooks. Default: a client with a 10s timeout.
	HTTPClient *http.Client
	// ChunkSize of file imports; 0 lets the importer choose.
	ChunkSize int
	// HeartbeatEvery paces the heartbeats of the steps that wait on
	// qBittorrent or a webhook. Default a fifth of
	// workflows.NetworkHeartbeatTimeout, so that a beat delayed by a loaded
	// machine (or held back by the Temporal SDK, which sends at most one per
	// 80% of the timeout) still lands in time; it must be below that
	// timeout.
	HeartbeatEvery time.Duration
	// Logger. Default: discard.
	Logger *slog.Logger
	// Engine is the engine the steps hand a plan over through, read at
	// each hand-over (it is built from the registry these steps are bound
	// in, so it exists only after them): the next kind's run is enqueued
	// in the step's own commit, by the engine's EnqueueTx (outbox.Send).
	// Nil, or returning nil: every hand-over is an outbox row, which the
	// dispatcher enqueues after the commit.
	Engine func() outbox.Enqueuer
}

// Activities carries the dependencies of the step bodies.
type Activities struct {
	pool  *pgxpool.Pool
	dl    Downloader
	files Files
	cfg   Config
}

// New returns the step bodies over pool, a downloader and the file importer.
func New(pool *pgxpool.Pool, dl Downloader, files Files, cfg Config) (*Activities, error) {
	if pool == nil || dl == nil || files == nil {
		return nil, errors.New("activities: pool, downloader and files are required")
	}
	for field, dir := range map[string]string{"download_dir": cfg.DownloadDir, "library_root": cfg.LibraryRoot} {
		if !filepath.IsAbs(dir) {
			return nil, &port.FieldError{Field: field, Reason: fmt.Sprintf("must be an absolute path, got %q", dir)}
		}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = workflows.NetworkHeartbeatTimeout / 5
	}
	if cfg.HeartbeatEvery < 0 || cfg.HeartbeatEvery >= workflows.NetworkHeartbeatTimeout {
		return nil, &port.FieldError{Field: "heartbeat_every", Reason: fmt.Sprintf("must lie in (0, %s), got %s", workflows.NetworkHeartbeatTimeout, cfg.HeartbeatEvery)}
	}
	if cfg.ChunkSize < 0 {
		return nil, &port.FieldError{Field: "chunk_size", Reason: "must not be negative"}
	}
	return &Activities{pool: pool, dl: dl, files: files, cfg: cfg}, nil
}

// enqueuer is the engine the hand-overs go through, or nil for the outbox.
func (a *Activities) enqueuer() outbox.Enqueuer {
	if a.cfg.Engine == nil {
		return nil
	}
	return a.cfg.Engine()
}

// errPlanCanceled stops a step that saw the business cancel flag; the step
// then reports Outcome.Canceled and commits nothing.
var errPlanCanceled = errors.New("plan canceled")

func parsePlanID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, port.NonRetryable(fmt.Errorf("plan id %q: %w", s, err))
	}
	return id, nil
}

// plan loads the plan a step acts on. An unknown plan cannot appear by
// retrying, so it is non-retryable.
func (a *Activities) plan(ctx context.Context, ref string) (acquisition.Plan, error) {
	id, err := parsePlanID(ref)
	if err != nil {
		return acquisition.Plan{}, err
	}
	p, err := acquisition.GetPlan(ctx, a.pool, id)
	if errors.Is(err, port.ErrNotFound) {
		return acquisition.Plan{}, port.NonRetryable(err)
	}
	return p, err
}

// active loads the plan a step acts on and reports whether its business
// cancel flag is set, in which case the step does nothing and hands nothing on.
func (a *Activities) active(ctx context.Context, ref string) (p acquisition.Plan, canceled bool, err error) {
	p, err = a.plan(ctx, ref)
	return p, err == nil && p.CancelRequested(), err
}

// saveDir is the plan's own download directory.
func (a *Activities) saveDir(planID uuid.UUID) string {
	return filepath.Join(a.cfg.DownloadDir, planID.String())
}

// removeTarget deletes a library file; a missing one is fine.
func removeTarget(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
