package router_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
)

// Stop closes Done after stopping the engines, whose stopping also wakes
// the router's watch of them: whichever comes second must leave Done as it
// is (it used to close it again and panic). Repeated, since the two race.
func TestStartStopRepeatedly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(port.Definition{Kind: "router.noop", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(port.Flow, struct{}) error { return nil })}))
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	r, err := router.New(pool, map[string]router.Engine{"lease": eng}, router.Config{})
	require.NoError(t, err)
	for range 200 {
		require.NoError(t, r.Start(ctx, port.StartOptions{}))
		require.NoError(t, r.Stop(ctx))
		select {
		case <-r.Done():
		default:
			t.Fatal("Done is open after Stop")
		}
		require.NoError(t, r.Err())
	}
}

// A switch records who switched and why as text `engine status` and /admin
// show: a reason or a by that is not valid UTF-8, holds U+0000 or a control
// character (a reason may hold line feeds and tabs), or is over its bound
// is a *port.FieldError naming it, and nothing is written. An empty reason
// is accepted (the flag documents it as optional).
func TestSwitchRefusesBadText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// newRouter is a router over a database of its own, with the lease
	// engine only: one switch (to lease) can be recorded.
	newRouter := func() (*router.Router, func() int) {
		pool := pgtest.NewPool(t)
		eng, err := leaseadapter.New(pool, port.NewRegistry(), leaseadapter.Config{})
		require.NoError(t, err)
		r, err := router.New(pool, map[string]router.Engine{"lease": eng}, router.Config{})
		require.NoError(t, err)
		return r, func() int {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.engine_switch`).Scan(&n))
			return n
		}
	}
	r, switches := newRouter()
	for _, tc := range []struct{ by, reason, field string }{
		{"ops", "bad\xff", "reason"},
		{"ops", "a\x00b", "reason"},
		{"ops", "a\x1b[31mRED", "reason"},
		{"ops", strings.Repeat("é", router.MaxSwitchReason+1), "reason"},
		{"x\xff", "why", "by"},
		{"x\x00", "why", "by"},
		{"x\x1b[31mRED", "why", "by"},
		{"a\nb", "why", "by"},
		{strings.Repeat("o", router.MaxSwitchBy+1), "why", "by"},
	} {
		_, err := r.SwitchTo(ctx, "lease", tc.by, tc.reason)
		require.ErrorIs(t, err, port.ErrInvalidInput, "%q %q", tc.by, tc.reason)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, "%q %q", tc.by, tc.reason)
		require.Equal(t, tc.field, fe.Field, "%q %q", tc.by, tc.reason)
	}
	require.Zero(t, switches(), "a refused switch writes nothing")

	longest := strings.Repeat("é", router.MaxSwitchReason-10) + "\nline\ttwo."
	s, err := r.SwitchTo(ctx, "lease", "ops", longest)
	require.NoError(t, err)
	require.Equal(t, longest, s.Reason)
	st, err := r.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, longest, st.Active.Reason, "the longest reason is recorded whole")
	require.Equal(t, 1, switches())

	r, switches = newRouter()
	_, err = r.SwitchTo(ctx, "lease", "ops", "")
	require.NoError(t, err, "a reason is optional")
	require.Equal(t, 1, switches())
}

// A run whose cancel someone requested before an evacuation, without a
// reason, is ended canceled and not moved, and stays so: its row keeps the
// requester's empty reason, so neither the next evacuation nor status takes
// the cancel for an interrupted evacuation's.
func TestEvacuateKeepsACancelRequestedWithoutAReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, pool := leaseOnly(t)
	run := canceledTemporalRun(t, pool, "k", "", port.StatusRunning)
	_, err := r.SwitchTo(ctx, "lease", "ops", "")
	require.NoError(t, err)

	rep, err := r.Evacuate(ctx, "temporal", "ops")
	require.NoError(t, err)
	require.Equal(t, []router.Skipped{{ID: run, Kind: "router.k", Reason: "its cancel was requested before: ended canceled, not moved"}}, rep.Skipped)
	st, err := r.Status(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Unmoved, "nothing was left to move")
	again, err := r.Evacuate(ctx, "temporal", "ops")
	require.NoError(t, err)
	require.Equal(t, router.Report{From: "temporal", To: "lease"}, again, "nothing to move or skip")
	var status, reason string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, cancel_reason FROM taskport.run WHERE id = $1`, run).Scan(&status, &reason))
	require.Equal(t, []string{"canceled", ""}, []string{status, reason})
}

// A cancel someone requested with a reason that reads as an evacuation's is
// still theirs: the evacuation ends the open run canceled and does not move
// it, and status does not count the run its engine already ended as left
// to move. Only the mark an evacuation writes before its cancel makes a
// cancel its own.
func TestEvacuateKeepsACancelWhoseReasonReadsAsAnEvacuations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, pool := leaseOnly(t)
	forged := runstore.EvacuationReason(runstore.EngineTemporal, runstore.EngineLease, "ops")
	open := canceledTemporalRun(t, pool, "open", forged, port.StatusRunning)
	ended := canceledTemporalRun(t, pool, "ended", forged, port.StatusCanceled)
	_, err := r.SwitchTo(ctx, "lease", "ops", "")
	require.NoError(t, err)

	st, err := r.Status(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Unmoved, "the run its engine ended on a user's cancel is not left to move")
	rep, err := r.Evacuate(ctx, "temporal", "ops")
	require.NoError(t, err)
	require.Equal(t, router.Report{From: "temporal", To: "lease",
		Skipped: []router.Skipped{{ID: open, Kind: "router.k", Reason: "its cancel was requested before: ended canceled, not moved"}}}, rep)
	var moved int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run WHERE engine = 'lease' OR evacuated_at IS NOT NULL`).Scan(&moved))
	require.Zero(t, moved, "no run was moved")
	for _, id := range []port.RunID{open, ended} {
		var status, reason string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, cancel_reason FROM taskport.run WHERE id = $1`, id).Scan(&status, &reason))
		require.Equal(t, []string{"canceled", forged}, []string{status, reason}, "run %s", id)
	}
}

// leaseOnly is a router whose Temporal engine is gone: it has the lease
// engine only.
func leaseOnly(t *testing.T) (*router.Router, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewPool(t)
	eng, err := leaseadapter.New(pool, port.NewRegistry(), leaseadapter.Config{})
	require.NoError(t, err)
	r, err := router.New(pool, map[string]router.Engine{"lease": eng}, router.Config{})
	require.NoError(t, err)
	return r, pool
}

// canceledTemporalRun is a Temporal run under key whose cancel was
// requested with reason, left in status (running: not yet ended).
func canceledTemporalRun(t *testing.T, pool *pgxpool.Pool, key, reason string, status port.Status) port.RunID {
	t.Helper()
	ctx := context.Background()
	run, _, err := runstore.Insert(ctx, pool, runstore.NewRun{Engine: runstore.EngineTemporal, Kind: "router.k", Version: 1,
		Key: key, Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, runstore.Project(ctx, pool, run.ID, runstore.Projection{Status: port.StatusRunning}))
	flagged, err := runstore.RequestCancel(ctx, pool, runstore.EngineTemporal, run.ID, reason)
	require.NoError(t, err)
	require.True(t, flagged)
	if status != port.StatusRunning {
		require.NoError(t, runstore.Project(ctx, pool, run.ID, runstore.Projection{Status: status}))
	}
	return run.ID
}
