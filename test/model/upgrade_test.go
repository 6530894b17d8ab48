package model

// The rolling-upgrade rehearsal (issue 26). A deployment upgrades by
// migrating the database while the previous release's workers run, then
// replacing them one by one: for a while both binaries serve the same
// runs. The rehearsal plays that on both engines, with the model's plans in
// flight:
//
//  1. the previous release is the commit before the newest migration was
//     added; its binary (built from this checkout's history) migrates an
//     empty database to its own schema and runs two workers;
//  2. the model acts (creates, approves, cancels, finishes downloads, kills
//     and restarts workers) while those old workers carry the plans;
//  3. the current binary migrates the database under them, and the model
//     goes on acting, now starting current workers beside the old ones;
//  4. each old worker still alive gets SIGTERM, as a rollout sends it;
//  5. the model settles and checks its invariants (check_test.go): one
//     torrent added per plan tag, every imported file with its hash, each
//     ledger operation at most once, no outbox row stuck, no plan left
//     unfinished, no run left moving.
//
// An old worker must keep working and stop cleanly: one that exits on its
// own, exits non-zero on SIGTERM, or has a statement refused for naming
// what the new schema lacks (SQLSTATE class 42, e.g. a dropped table) is an
// anomaly. Commits after a lost lease are what the ledger's fencing refuses;
// the ledger check above is what would see one that got through.
//
// `make test` runs one seed per engine; TASKPORT_UPGRADE_SEEDS=N runs N
// seeds from TASKPORT_MODEL_FIRST_SEED, and TASKPORT_UPGRADE_FROM=<commit>
// rehearses an upgrade from that commit instead. The test logs a table per
// engine and seed (go test -v).

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/testkit/proc"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/qbittorrent"
)

// Actions per phase of a rehearsal seed: before the migration (old workers
// only) and after it (old and current workers side by side).
const (
	upgradePlans         = 3
	upgradeActionsBefore = 10
	upgradeActionsAfter  = 12
)

func TestRollingUpgrade(t *testing.T) {
	prev := envOr("TASKPORT_UPGRADE_FROM", "")
	if prev == "" {
		prev = previousRelease(t)
	} else {
		out, err := exec.Command("git", "rev-parse", "--verify", prev+"^{commit}").Output()
		require.NoError(t, err, "TASKPORT_UPGRADE_FROM=%s is not a commit of this checkout", prev)
		prev = strings.TrimSpace(string(out))
	}
	oldBin := proc.BuildAt(t, prev, "github.com/taskport/taskport/cmd/taskport")
	newBin := workerBinary(t)
	t.Logf("upgrading from %s to this checkout (engine set %d, media set %d)", prev[:12], migrations.Latest(migrations.SetEngine), migrations.Latest(migrations.SetMedia))

	n := envInt(t, "TASKPORT_UPGRADE_SEEDS", 1)
	first := envInt(t, "TASKPORT_MODEL_FIRST_SEED", 1)
	var (
		mu   sync.Mutex
		rows []upgradeRow
	)
	t.Cleanup(func() { t.Log("\n" + upgradeTable(rows)) })
	for _, eng := range []engine{leaseEngine(t), temporalEngine(t)} {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			for i := range n {
				seed := uint64(first + i)
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					r := rehearseUpgrade(t, eng, seed, oldBin, newBin)
					mu.Lock()
					defer mu.Unlock()
					rows = append(rows, r)
				})
			}
		})
	}
}

// previousRelease is the parent of the commit that added the newest
// migration file of any set (or the sets' baselines): the last commit
// whose binary needs the schema before it.
func previousRelease(t *testing.T) string {
	const files = ":(glob)migrations/*/*.sql"
	out, err := exec.Command("git", "-C", filepath.Join("..", ".."), "log", "-1", "--format=%H", "--diff-filter=A", "--", files).Output()
	require.NoError(t, err, "git log of %s", files)
	added := strings.TrimSpace(string(out))
	require.NotEmpty(t, added, "no commit adds a migration in this checkout's history (a shallow clone? git fetch --unshallow)")
	out, err = exec.Command("git", "rev-parse", added+"^").Output()
	require.NoError(t, err, "git rev-parse %s^", added)
	return strings.TrimSpace(string(out))
}

// upgradeRow is one rehearsal's outcome.
type upgradeRow struct {
	engine                 string
	seed                   uint64
	plans, finalPlans      int
	inFlight               int // plans not final when the migration began
	oldWorkers, oldStopped int
	oldErrors              int
	oldSchemaErrors        int // statements of old workers the new schema refused
	anomalies              int
}

// rehearseUpgrade plays one seed of the rehearsal and returns its row.
func rehearseUpgrade(t *testing.T, eng engine, seed uint64, oldBin, newBin string) upgradeRow {
	dbURL := pgtest.NewEmptyDatabase(t)
	migrate(t, oldBin, dbURL, "old")
	w := newWorldOn(t, eng, seed, dbURL, oldBin)
	w.label = "old-"
	w.startWorker()
	w.startWorker()
	var olds []*proc.Process
	olds = append(olds, w.workers...)
	// Plans the old workers have taken on: approved, their torrents added;
	// the first one's download finishes, so that its import is under way.
	for range upgradePlans {
		w.createFresh()
		w.run(w.decideCall(w.ps[len(w.ps)-1], true))
	}
	for i, p := range w.ps {
		tor := w.waitTorrent(p)
		if i == 0 {
			w.finishDownloadAndReport(p, tor)
		}
	}
	for range upgradeActionsBefore {
		w.step()
		olds = appendOld(olds, w)
	}

	row := upgradeRow{engine: eng.name, seed: seed}
	for _, p := range w.ps {
		if !w.status(p).Final() {
			row.inFlight++
		}
	}
	w.note(fmt.Sprintf("migrate to engine set %d, media set %d under %d old workers, %d plans in flight",
		migrations.Latest(migrations.SetEngine), migrations.Latest(migrations.SetMedia), len(w.workers), row.inFlight))
	migrate(t, newBin, dbURL, "current")
	w.bin, w.label = newBin, ""
	w.startWorker()
	for range upgradeActionsAfter {
		w.step()
	}

	// The rollout's end: every old worker still running gets SIGTERM.
	row.oldWorkers = len(olds)
	if w.frozen != nil {
		w.thawWorker()
	}
	for _, p := range olds {
		i := slices.Index(w.workers, p)
		if i < 0 {
			continue // the model killed or restarted it
		}
		w.workers = slices.Delete(w.workers, i, i+1)
		if done, exitErr := p.Exited(); done {
			w.anomaly("old worker %s exited by itself: %v", p.Name, exitErr)
		} else {
			require.NoError(t, p.Signal(syscall.SIGTERM))
			ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
			err := p.Wait(ctx)
			cancel()
			require.NoError(t, err)
			_, exitErr := p.Exited()
			w.note(fmt.Sprintf("rollout: stop %s (pid %d, exit: %v)", p.Name, p.Pid(), exitErr))
			if exitErr != nil {
				w.anomaly("old worker %s exited with %v after SIGTERM", p.Name, exitErr)
			} else {
				row.oldStopped++
			}
		}
	}
	for _, p := range olds {
		first := true
		for _, line := range strings.Split(p.Output(), "\n") {
			if schemaError.MatchString(line) {
				row.oldSchemaErrors++
				if first {
					w.anomaly("old worker %s cannot run on the new schema: %s", p.Name, line)
					first = false
				}
			}
			if strings.Contains(line, "level=ERROR") {
				row.oldErrors++
				t.Logf("%s logged: %s", p.Name, line)
			}
		}
	}
	if len(w.workers) == 0 {
		w.startWorker()
	}
	w.settle()
	w.check()
	row.plans = len(w.ps)
	for _, p := range w.ps {
		if w.status(p).Final() {
			row.finalPlans++
		}
	}
	row.anomalies = len(w.anomalies)
	if len(w.anomalies) > 0 {
		t.Errorf("engine %s, seed %d: %d anomalies:\n  - %s\naction trace:\n%s", eng.name, seed, len(w.anomalies),
			strings.Join(w.anomalies, "\n  - "), strings.Join(w.trace, "\n"))
	}
	t.Logf("engine %s, seed %d: action trace:\n%s", eng.name, seed, strings.Join(w.trace, "\n"))
	return row
}

// waitTorrent waits until a worker has added p's torrent to qBittorrent.
func (w *world) waitTorrent(p *modelPlan) qbittorrent.Torrent {
	var tor qbittorrent.Torrent
	require.Eventually(w.t, func() bool {
		var ok bool
		tor, ok = w.torrent(p)
		return ok
	}, workerReadyWait, 20*time.Millisecond, "%s: no worker added the torrent", p.label)
	return tor
}

// schemaError is a statement Postgres refused for naming what the schema
// lacks (class 42: undefined table, column or function, ...): what an old
// worker logs when a migration took away what it uses.
var schemaError = regexp.MustCompile(`SQLSTATE 42[0-9A-Z]{3}`)

// appendOld adds the workers started since (while the old binary is the
// one startWorker runs) to olds.
func appendOld(olds []*proc.Process, w *world) []*proc.Process {
	for _, p := range w.workers {
		if !slices.Contains(olds, p) {
			olds = append(olds, p)
		}
	}
	return olds
}

// migrate runs `taskport migrate up` of bin against dbURL.
func migrate(t *testing.T, bin, dbURL, which string) {
	out, err := exec.Command(bin, "migrate", "up", "--database-url", dbURL).CombinedOutput()
	require.NoError(t, err, "%s binary: migrate up:\n%s", which, out)
}

func upgradeTable(rows []upgradeRow) string {
	slices.SortFunc(rows, func(a, b upgradeRow) int {
		if c := strings.Compare(a.engine, b.engine); c != 0 {
			return c
		}
		return int(a.seed) - int(b.seed)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %5s %6s %10s %12s %12s %20s %16s %18s %10s\n", "engine", "seed", "plans", "in flight", "plans final",
		"old workers", "old stopped (exit 0)", "old ERROR lines", "old schema errors", "anomalies")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-9s %5d %6d %10d %12d %12d %20d %16d %18d %10d\n", r.engine, r.seed, r.plans, r.inFlight, r.finalPlans,
			r.oldWorkers, r.oldStopped, r.oldErrors, r.oldSchemaErrors, r.anomalies)
	}
	return b.String()
}
