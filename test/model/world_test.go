package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/testkit/proc"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtfake"
	"github.com/taskport/taskport/workflows"
)

// world is one seed's environment: its own migrated database, the fake
// qBittorrent, the webhook receiver, a library and a download directory,
// the business API, and the worker processes (the production binary).
type world struct {
	t    *testing.T
	ctx  context.Context
	eng  engine
	seed uint64
	rng  *rand.Rand

	dbURL string
	pool  *pgxpool.Pool
	plans *plans.Service
	qbt   *qbtfake.Server
	hooks *receiver
	lib   string
	dl    string

	bin     string          // the worker binary startWorker runs
	label   string          // prefix of the names startWorker gives
	workers []*proc.Process // live ones
	frozen  *proc.Process   // a worker stopped with SIGSTOP, if any
	qbtDown bool
	started int // workers started so far, for their names

	ps    []*modelPlan
	ops   []*op
	trace []string
	// final is the final status each plan was first seen in: no transition
	// may leave it.
	final     map[string]acquisition.Status
	anomalies []string
}

// modelPlan is a plan the seed created.
type modelPlan struct {
	label  string // p1, p2, ... in the trace
	id     string
	asset  apptest.Asset
	target string
}

// op is one action of the seed and what it returned; check, when set,
// tells after quiescence whether an acknowledged action took effect.
type op struct {
	n     int
	what  string
	ack   plans.Ack
	err   error
	check func() string
}

func (o *op) String() string {
	switch {
	case o.err != nil:
		return fmt.Sprintf("#%d %s -> refused: %v", o.n, o.what, o.err)
	case o.ack.Message != "":
		return fmt.Sprintf("#%d %s -> ack: %s", o.n, o.what, o.ack.Message)
	}
	return fmt.Sprintf("#%d %s", o.n, o.what)
}

// Pool sizes of a seed: the test's own pool, and each worker's business
// and engine pools. Four seeds at once with two workers each stay well
// inside a default max_connections of 100 shared with other test binaries.
const (
	testPoolConns   = 3
	workerBizConns  = "3"
	workerEngConns  = "4"
	maxWorkers      = 2
	workerReadyWait = time.Minute
)

func newWorld(t *testing.T, eng engine, seed uint64) *world {
	return newWorldOn(t, eng, seed, pgtest.NewDatabase(t), workerBinary(t))
}

// newWorldOn is newWorld on a database the caller made (dbURL), with bin
// as the worker binary.
func newWorldOn(t *testing.T, eng engine, seed uint64, dbURL, bin string) *world {
	w := &world{
		t: t, ctx: context.Background(), eng: eng, seed: seed,
		rng:   rand.New(rand.NewPCG(seed, 0x6d6f64656c)), //nolint:gosec // a reproducible workload, not security
		qbt:   qbtfake.Start(t, qbtfake.Options{}),
		hooks: startReceiver(t),
		lib:   t.TempDir(), dl: t.TempDir(),
		final: map[string]acquisition.Status{},
		dbURL: dbURL, bin: bin,
	}
	cfg, err := pgxpool.ParseConfig(w.dbURL)
	require.NoError(t, err)
	cfg.MaxConns = testPoolConns
	w.pool, err = pgxpool.NewWithConfig(w.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(w.pool.Close)
	w.plans, err = plans.New(w.pool, plans.Config{LibraryRoot: w.lib})
	require.NoError(t, err)
	return w
}

// queue is the seed's Temporal task queue: every seed has a database of
// its own, named after it.
func (w *world) queue() string { return "model-" + w.pool.Config().ConnConfig.Database }

// startWorker runs `taskport worker` (the production binary, with its
// dispatcher) against the seed's database, fake qBittorrent and receiver.
func (w *world) startWorker() {
	w.t.Helper()
	w.started++
	name := fmt.Sprintf("%sworker%d", w.label, w.started)
	args := append([]string{"worker",
		"--database-url", w.dbURL, "--db-pool-size", workerBizConns, "--engine-db-pool-size", workerEngConns,
		"--log-level", "info", "--metrics-addr", "127.0.0.1:0", "--stop-timeout", "5s",
		"--library-root", w.lib, "--download-dir", w.dl,
		"--qbittorrent-url", w.qbt.URL,
	}, w.eng.args(w)...)
	p := proc.Start(w.t, name, w.bin, args, "QBITTORRENT_PASSWORD=adminadmin", "WEBHOOK_URL="+w.hooks.URL)
	require.NoError(w.t, p.WaitOutput("worker running", workerReadyWait))
	w.workers = append(w.workers, p)
	w.note(fmt.Sprintf("start %s (pid %d)", name, p.Pid()))
}

// killWorker SIGKILLs a live worker: its leases, claimed outbox rows and
// in-flight steps are left for the others (or the next one) to recover.
func (w *world) killWorker() {
	i := w.rng.IntN(len(w.workers))
	p := w.workers[i]
	w.workers = append(w.workers[:i], w.workers[i+1:]...)
	require.NoError(w.t, p.Kill(w.ctx))
	w.note(fmt.Sprintf("kill -9 %s (pid %d)", p.Name, p.Pid()))
}

// freezeWorker stops a live worker with SIGSTOP: it keeps its leases,
// claims and connections but runs nothing, like a long GC pause or a
// stalled VM, until thawWorker; meanwhile its leases expire and other
// workers take its steps over, which the ledger's fencing must absorb.
func (w *world) freezeWorker() {
	i := w.rng.IntN(len(w.workers))
	p := w.workers[i]
	w.workers = append(w.workers[:i], w.workers[i+1:]...)
	require.NoError(w.t, p.Stop())
	w.frozen = p
	// A frozen worker may hold a row lock in an open transaction, and the
	// next operator call then waits for it: the freeze ends by itself (a
	// stall, not a hang), or the model would wait on its own fault.
	d := time.Duration(1+w.rng.IntN(maxFreezeSeconds)) * time.Second
	time.AfterFunc(d, func() { _ = p.Cont() })
	w.note(fmt.Sprintf("kill -STOP %s (pid %d) for at most %s", p.Name, p.Pid(), d))
}

// maxFreezeSeconds bounds a freeze: past the lease engine's 10s lease, so
// that other workers take the frozen one's steps over.
const maxFreezeSeconds = 15

// thawWorker resumes the frozen worker (SIGCONT).
func (w *world) thawWorker() {
	p := w.frozen
	w.frozen = nil
	require.NoError(w.t, p.Cont())
	w.workers = append(w.workers, p)
	w.note(fmt.Sprintf("kill -CONT %s (pid %d)", p.Name, p.Pid()))
}

// restartWorker stops a live worker gracefully (SIGTERM: in-flight steps
// finish or are handed back) and starts a fresh one.
func (w *world) restartWorker() {
	i := w.rng.IntN(len(w.workers))
	p := w.workers[i]
	w.workers = append(w.workers[:i], w.workers[i+1:]...)
	require.NoError(w.t, p.Signal(syscall.SIGTERM))
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	require.NoError(w.t, p.Wait(ctx))
	_, exitErr := p.Exited()
	w.note(fmt.Sprintf("stop %s (pid %d, exit: %v)", p.Name, p.Pid(), exitErr))
	if exitErr != nil {
		w.anomaly("%s exited with %v after SIGTERM", p.Name, exitErr)
	}
	w.startWorker()
}

// note adds a line to the trace that is not an operator action.
func (w *world) note(s string) {
	w.trace = append(w.trace, fmt.Sprintf("   %s", s))
}

// record adds an operator action to the trace and the checks.
func (w *world) record(o *op) *op {
	o.n = len(w.ops) + 1
	w.ops = append(w.ops, o)
	w.trace = append(w.trace, o.String())
	return o
}

func (w *world) anomaly(format string, args ...any) {
	w.anomalies = append(w.anomalies, fmt.Sprintf(format, args...))
}

// status reads a plan's status, and notes a plan that left a final status.
func (w *world) status(p *modelPlan) acquisition.Status {
	var s acquisition.Status
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT status FROM plan WHERE id = $1`, p.id).Scan(&s))
	if f, ok := w.final[p.id]; ok && f != s {
		w.anomaly("%s left its final status %s for %s", p.label, f, s)
	}
	if s.Final() {
		w.final[p.id] = s
	}
	return s
}

// torrent returns the fake's torrent of p (by the plan's managed tag).
func (w *world) torrent(p *modelPlan) (qbittorrent.Torrent, bool) {
	tag := qbittorrent.ManagedTag(p.id)
	for _, t := range w.qbt.Torrents() {
		if t.HasTag(tag) {
			return t, true
		}
	}
	return qbittorrent.Torrent{}, false
}

// finishDownload plays qBittorrent finishing p's torrent: the content
// appears where the torrent saves it, and the fake reports it complete.
func (w *world) finishDownload(p *modelPlan, t qbittorrent.Torrent) {
	dir := filepath.Dir(t.ContentPath)
	require.NoError(w.t, os.MkdirAll(dir, 0o755))
	require.NoError(w.t, os.WriteFile(t.ContentPath, p.asset.Content, 0o644))
	require.NoError(w.t, w.qbt.Complete(p.asset.Hash))
}

// waitChange polls until p's status differs from what it is now, or d
// passes: the next action lands at a random moment of p's life rather than
// at a fixed delay.
func (w *world) waitChange(p *modelPlan, d time.Duration) (from, to acquisition.Status) {
	from = w.status(p)
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for to = from; to == from && time.Now().Before(deadline); to = w.status(p) {
		<-tick.C
	}
	return from, to
}

// receiver is the webhook endpoint: it answers 204, or 400 while failing,
// which notify.webhook takes as non-retryable (it opens a decision).
type receiver struct {
	URL string

	mu        sync.Mutex
	failing   bool
	delivered map[string]int // Idempotency-Key -> 2xx answers
	refused   map[string]int // Idempotency-Key -> 400 answers
	bad       []string       // requests that were not a notification
}

func startReceiver(t *testing.T) *receiver {
	r := &receiver{delivered: map[string]int{}, refused: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var in workflows.NotifyInput
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		key := req.Header.Get(activities.IdempotencyHeader)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || key != in.IdempotencyKey() {
			r.bad = append(r.bad, fmt.Sprintf("key %q body %q (%v)", key, body, err))
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.failing {
			r.refused[key]++
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		r.delivered[key]++
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *receiver) setFailing(f bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = f
}

func (r *receiver) deliveredCount(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered[key]
}

func (r *receiver) badRequests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}

// clearRefusal tells whether err is a refusal the business API documents
// (a conflict with the plan's state, or bad input), as opposed to a failure.
func clearRefusal(err error) bool {
	return errors.Is(err, plans.ErrConflict)
}

// unreachable tells whether err is a connection to Postgres that could not
// be opened (e.g. the server's max_connections, shared with other test
// binaries, is exhausted): such a call wrote nothing.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}
