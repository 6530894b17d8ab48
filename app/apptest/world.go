// Package apptest builds a realistic world for tests of the business layer:
// a migrated Postgres database, a fake qBittorrent Web API (qbtfake, the real
// protocol) behind the real client, temporary library and download
// directories, a webhook receiver, the registry wired by app.Register, the
// plans API and the outbox dispatcher. Engine tests pass their engine;
// without one, a RecordingEngine records enqueues and Drive runs them
// through flowtest, which exercises every hand-over without an engine.
package apptest

import (
	"cmp"
	"context"
	"crypto/sha1" //nolint:gosec // a made-up info hash, not security
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtfake"
	"github.com/taskport/taskport/workflows"
	"github.com/taskport/taskport/workflows/flowtest"
)

// Options tune NewWorld.
type Options struct {
	// Pool is the database; default pgtest.NewPool(t).
	Pool *pgxpool.Pool
	// Engine behind the plans API and the dispatcher; default a
	// RecordingEngine over Pool and the world's registry. An engine under
	// test is built from the registry: pass NewEngine instead.
	NewEngine func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine
	// Files; default activities.LocalFiles{} (the fileimport package).
	Files activities.Files
	// ChunkSize of imports; default 64 KiB so small test files take
	// several chunks.
	ChunkSize int
	// TracerProvider of the dispatcher; default the global one.
	TracerProvider trace.TracerProvider
	// HeartbeatEvery paces the heartbeats of the steps that wait on the
	// network; default activities' own.
	HeartbeatEvery time.Duration
	// WebhookURL of notify.webhook; default the world's receiver.
	WebhookURL string
	// Logger of the activities; default discard.
	Logger *slog.Logger
}

// World is everything a business test touches.
type World struct {
	Pool        *pgxpool.Pool
	Registry    *port.Registry
	Engine      port.TaskEngine
	Recorder    *RecordingEngine // nil when Options.NewEngine was given
	Plans       *plans.Service
	Dispatcher  *outbox.Dispatcher
	QBT         *qbtfake.Server
	Client      *qbittorrent.Client
	LibraryDir  string
	DownloadDir string
	Webhooks    *WebhookReceiver

	mu     sync.Mutex
	runs   map[port.RunID]*flowtest.Run
	done   map[port.RunID]bool
	seenSg int
}

// NewWorld builds a world; everything is released when t ends.
func NewWorld(t testing.TB, opts Options) *World {
	t.Helper()
	if opts.Pool == nil {
		opts.Pool = pgtest.NewPool(t)
	}
	if opts.Files == nil {
		opts.Files = activities.LocalFiles{}
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = 64 << 10
	}
	w := &World{
		Pool: opts.Pool, Registry: port.NewRegistry(), QBT: qbtfake.Start(t, qbtfake.Options{}),
		LibraryDir: t.TempDir(), DownloadDir: t.TempDir(), Webhooks: startWebhookReceiver(t),
		runs: map[port.RunID]*flowtest.Run{}, done: map[port.RunID]bool{},
	}
	var err error
	w.Client, err = qbittorrent.New(qbittorrent.Config{BaseURL: w.QBT.URL, Username: "admin", Password: "adminadmin"})
	require.NoError(t, err)
	err = app.Register(w.Registry, app.Deps{
		Pool: w.Pool, Downloader: w.Client, Files: opts.Files,
		Config: activities.Config{DownloadDir: w.DownloadDir, LibraryRoot: w.LibraryDir, WebhookURL: cmp.Or(opts.WebhookURL, w.Webhooks.URL),
			ChunkSize: opts.ChunkSize, HeartbeatEvery: opts.HeartbeatEvery, Logger: opts.Logger},
		Engine: func() port.TaskEngine { return w.Engine },
	})
	require.NoError(t, err)
	if opts.NewEngine != nil {
		w.Engine = opts.NewEngine(w.Registry, w.Pool)
	} else {
		w.Recorder = NewRecordingEngine(w.Pool, w.Registry)
		w.Engine = w.Recorder
	}
	w.Plans, err = plans.New(w.Pool, plans.Config{LibraryRoot: w.LibraryDir, DownloadDir: w.DownloadDir})
	require.NoError(t, err)
	runs, ok := w.Engine.(port.Admin)
	require.True(t, ok, "the engine %T does not list runs (port.Admin)", w.Engine)
	w.Dispatcher, err = outbox.NewDispatcher(w.Pool, w.Engine, runs, outbox.Config{TracerProvider: opts.TracerProvider})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, w.Dispatcher.Stop(ctx))
	})
	return w
}

// Asset is a file a plan acquires.
type Asset struct {
	Name    string
	Content []byte
	Hash    string // made-up info hash
	SHA256  string
}

// NewAsset makes size deterministic bytes named name.
func NewAsset(name string, size int) Asset {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	ih := sha1.Sum(append([]byte(name+"\x00"), b...)) //nolint:gosec // see import
	sum := sha256.Sum256(b)
	return Asset{Name: name, Content: b, Hash: hex.EncodeToString(ih[:]), SHA256: hex.EncodeToString(sum[:])}
}

// Magnet is the asset's magnet link; qbtfake takes name and size from it.
func (a Asset) Magnet() string {
	return "magnet:?xt=urn:btih:" + a.Hash + "&dn=" + url.QueryEscape(a.Name) + "&xl=" + strconv.Itoa(len(a.Content))
}

// CreatePlan creates a plan for a, targeting LibraryDir/<name>.
func (w *World) CreatePlan(t testing.TB, a Asset) acquisition.Plan {
	t.Helper()
	p, err := w.Plans.CreatePlan(context.Background(), plans.NewPlan{
		Title: a.Name, Magnet: a.Magnet(), InfoHash: a.Hash, TargetPath: w.Target(a),
		ExpectedSize: int64(len(a.Content)), ExpectedSHA256: a.SHA256,
	})
	require.NoError(t, err)
	return p
}

// Target is where a plan for a puts the file.
func (w *World) Target(a Asset) string { return filepath.Join(w.LibraryDir, a.Name) }

// FinishDownload plays the downloader finishing: the content appears where
// qBittorrent would put it and the fake reports the torrent complete.
func (w *World) FinishDownload(t testing.TB, p acquisition.Plan, a Asset) {
	t.Helper()
	dir := filepath.Join(w.DownloadDir, p.ID.String())
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, a.Name), a.Content, 0o644))
	require.NoError(t, w.QBT.Complete(a.Hash))
}

// DriveResult is one execution of a recorded run by Drive.
type DriveResult struct {
	Enqueued
	Run *flowtest.Run
	Err error
}

// Drive stands in for an engine when the world has a RecordingEngine: it
// dispatches the outbox, then executes every new run (and every parked run
// whose topic was signalled) through flowtest, until nothing moves. Runs that
// wait with no signal stay parked. It returns the executions in order.
func (w *World) Drive(t testing.TB) []DriveResult {
	t.Helper()
	require.NotNil(t, w.Recorder, "Drive needs the RecordingEngine")
	ctx := context.Background()
	var out []DriveResult
	for {
		for {
			n, err := w.Dispatcher.DispatchOnce(ctx)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		moved := false
		signals := w.Recorder.Signals()
		fresh := signals[w.seenSg:]
		w.seenSg = len(signals)
		for _, e := range w.Recorder.Enqueued() {
			run, ok := w.pick(t, e, fresh)
			if !ok {
				continue
			}
			moved = true
			err := run.Execute(ctx)
			out = append(out, DriveResult{Enqueued: e, Run: run, Err: err})
			w.project(t, e.RunID, err)
		}
		if !moved {
			return out
		}
	}
}

// pick returns the run to execute for e: a new run, or a parked one whose
// topic was signalled since.
func (w *World) pick(t testing.TB, e Enqueued, fresh []port.Topic) (*flowtest.Run, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !e.Created || w.done[e.RunID] {
		return nil, false
	}
	view, err := w.Recorder.Get(context.Background(), e.RunID)
	require.NoError(t, err)
	if view.Status.Terminal() {
		w.done[e.RunID] = true
		return nil, false
	}
	run, ok := w.runs[e.RunID]
	if !ok {
		run, err = flowtest.New(w.Registry, e.Kind, e.RunID, e.Input)
		require.NoError(t, err)
		run.ParkWaits = true
		w.runs[e.RunID] = run
		return run, true
	}
	woken := false
	for _, topic := range fresh {
		if w.waitsOn(run, topic) {
			require.NoError(t, run.Signal(topic, nil))
			woken = true
		}
	}
	return run, woken
}

// waitsOn reports whether a parked run waits on topic: the topic names the
// run's plan.
func (w *World) waitsOn(run *flowtest.Run, topic port.Topic) bool {
	var in workflows.WaitInput
	if err := enginekit.DecodePayload(run.Input(), &in); err != nil || in.PlanID == "" {
		return false
	}
	return topic == workflows.ApprovalTopic(in.PlanID) || topic == workflows.DownloadTopic(in.PlanID)
}

func (w *World) project(t testing.TB, id port.RunID, err error) {
	status := port.StatusSucceeded
	switch {
	case errors.Is(err, flowtest.ErrParked):
		status = port.StatusWaiting
	case errors.Is(err, port.ErrCanceled):
		status = port.StatusCanceled
	case err != nil:
		status = port.StatusFailed
	}
	p := runstore.Projection{Status: status}
	if err != nil && status != port.StatusWaiting {
		p.LastError = err.Error()
	}
	require.NoError(t, runstore.Project(context.Background(), w.Pool, id, p))
	if status.Terminal() {
		w.mu.Lock()
		w.done[id] = true
		w.mu.Unlock()
	}
}

// Plan returns a plan as stored now.
func (w *World) Plan(t testing.TB, id string) acquisition.Plan {
	t.Helper()
	tl, err := w.Plans.Timeline(context.Background(), id)
	require.NoError(t, err)
	return tl.Plan
}

// Outbox returns the enqueue rows (the hand-offs) of a plan as "kind status
// key", oldest first.
func (w *World) Outbox(t testing.TB, planID string) []string {
	t.Helper()
	return w.outboxRows(t, `SELECT kind || ' ' || status || ' ' || idempotency_key FROM outbox_event
WHERE business_key = $1 AND action = 'enqueue' ORDER BY created_at, id`, planID)
}

// Actions returns the other outbox rows of a plan (signals and cancels) as
// "action topic status", oldest first; topic is empty for a cancel.
func (w *World) Actions(t testing.TB, planID string) []string {
	t.Helper()
	return w.outboxRows(t, `SELECT action || ' ' || topic || ' ' || status FROM outbox_event
WHERE business_key = $1 AND action <> 'enqueue' ORDER BY created_at, id`, planID)
}

func (w *World) outboxRows(t testing.TB, query, planID string) []string {
	t.Helper()
	rows, err := w.Pool.Query(context.Background(), query, planID)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// Operations returns the ledger rows of a plan as op -> committed.
func (w *World) Operations(t testing.TB, planID string) map[ledger.Op]bool {
	t.Helper()
	rows, err := w.Pool.Query(context.Background(),
		`SELECT op, result_at IS NOT NULL FROM asset_operation WHERE plan_id = $1`, planID)
	require.NoError(t, err)
	out := map[ledger.Op]bool{}
	for rows.Next() {
		var op string
		var done bool
		require.NoError(t, rows.Scan(&op, &done))
		out[ledger.Op(op)] = done
	}
	require.NoError(t, rows.Err())
	return out
}

// FileSHA256 returns the hex SHA-256 of a file.
func FileSHA256(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// LibraryFiles lists every file name under the library (temp files included).
func (w *World) LibraryFiles(t testing.TB) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(w.LibraryDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, filepath.Base(path))
		}
		return err
	})
	require.NoError(t, err)
	slices.Sort(out)
	return out
}

// WebhookReceiver records the webhooks it receives.
type WebhookReceiver struct {
	URL string

	mu       sync.Mutex
	keys     []string
	failWith int // answered instead of 204 when non-zero
}

func startWebhookReceiver(t testing.TB) *WebhookReceiver {
	r := &WebhookReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.keys = append(r.keys, req.Header.Get(activities.IdempotencyHeader))
		status := r.failWith
		r.mu.Unlock()
		if status == 0 {
			status = http.StatusNoContent
		}
		rw.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Keys returns the Idempotency-Key headers received, in order.
func (r *WebhookReceiver) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// FailWith makes the receiver answer status (0: back to 204).
func (r *WebhookReceiver) FailWith(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failWith = status
}

// String helps failure messages.
func (d DriveResult) String() string {
	if d.Err == nil {
		return fmt.Sprintf("%s %s: ok", d.Kind, d.RunID)
	}
	return fmt.Sprintf("%s %s: %s", d.Kind, d.RunID, d.Err.Error())
}

// Acked fails the test when a plans API call returned an error, and returns
// what the call did: apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", "")).
func Acked(t testing.TB) func(plans.Ack, error) plans.Ack {
	return func(ack plans.Ack, err error) plans.Ack {
		t.Helper()
		require.NoError(t, err)
		return ack
	}
}

// ErrOf returns the error of a plans API call, for a check on it:
// require.ErrorIs(t, apptest.ErrOf(w.Plans.Approve(...)), plans.ErrConflict).
func ErrOf(_ plans.Ack, err error) error { return err }
