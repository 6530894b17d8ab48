package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
)

func newServer(t *testing.T) (*apptest.World, *httptest.Server) {
	t.Helper()
	var lister port.Admin
	w := apptest.NewWorld(t, apptest.Options{NewEngine: func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
		e, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
		require.NoError(t, err)
		lister = e
		return e
	}})
	h, err := admin.New(w.Pool, w.Plans, lister, w.Registry, nil, http.NotFoundHandler())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return w, srv
}

func TestOverviewTimelineAndActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv := newServer(t)
	a := apptest.NewAsset("admin.mkv", 1000)
	p := w.CreatePlan(t, a)

	// A failed run shows as a dead letter.
	dead, _, err := runstore.Insert(ctx, w.Pool, runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1,
		Key: "dead", BusinessKey: p.ID.String(), Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, runstore.Project(ctx, w.Pool, dead.ID, runstore.Projection{Status: port.StatusFailed, LastError: "disk full"}))

	resp, err := http.Get(srv.URL + "/admin")
	require.NoError(t, err)
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, p.Title)
	require.Contains(t, body, "disk full")

	resp, err = http.Get(srv.URL + "/admin/api/overview")
	require.NoError(t, err)
	var o admin.Overview
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&o))
	resp.Body.Close()
	require.Len(t, o.Plans, 1)
	require.Equal(t, p.ID.String(), o.Plans[0].ID)
	require.Len(t, o.Dead, 1)
	require.Equal(t, dead.ID, o.Dead[0].ID)

	// A cross-site form post is refused and changes nothing.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/admin/plans/"+p.ID.String()+"/approve", strings.NewReader(url.Values{"note": {"x"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	var approvals int
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM approval`).Scan(&approvals))
	require.Zero(t, approvals)

	// The same post from the admin page itself approves.
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Body = http.NoBody
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body = readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "redirected to the plan page")
	require.Contains(t, body, "approved")
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM approval WHERE plan_id = $1`, p.ID).Scan(&approvals))
	require.Equal(t, 1, approvals)

	for path, want := range map[string]int{
		"/admin/plans/not-a-uuid":                           http.StatusBadRequest,
		"/admin/plans/0190a5c6-0000-7000-8000-000000000000": http.StatusNotFound,
		"/healthz": http.StatusOK,
		"/readyz":  http.StatusOK,
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// A failed outbox row shows on /admin (page and JSON) with a retry action;
// retrying it hands it back to the dispatchers, records who did it, and the
// page says what happened.
func TestFailedOutboxRowsAndRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv := newServer(t)
	// A hand-off whose input the kind refuses under every version: the
	// dispatcher gives it up as failed.
	_, err := outbox.Write(ctx, w.Pool, outbox.Event{Kind: "asset.import", IdempotencyKey: "broken", BusinessKey: "plan-x",
		Payload: map[string]string{"not_a_field": "x"}})
	require.NoError(t, err)
	_, err = w.Dispatcher.DispatchOnce(ctx)
	require.NoError(t, err)

	resp, err := http.Get(srv.URL + "/admin/api/overview")
	require.NoError(t, err)
	var o admin.Overview
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&o))
	resp.Body.Close()
	require.Len(t, o.FailedOutbox, 1)
	row := o.FailedOutbox[0]
	require.Equal(t, "broken", row.IdempotencyKey)
	require.Contains(t, row.LastError, "invalid input")
	resp, err = http.Get(srv.URL + "/admin")
	require.NoError(t, err)
	body := readAll(t, resp)
	require.Contains(t, body, "/admin/outbox/"+row.ID.String()+"/retry")

	post := func(path string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, http.NoBody)
		require.NoError(t, err)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp = post("/admin/outbox/" + row.ID.String() + "/retry")
	body = readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "redirected to the overview")
	require.Contains(t, body, "handed back to the dispatchers")
	var status, by string
	var attempts int
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT status, attempts, retried_by FROM outbox_event WHERE id = $1`, row.ID).Scan(&status, &attempts, &by))
	require.Equal(t, "pending", status)
	require.Zero(t, attempts)
	require.Equal(t, "admin", by)

	resp = post("/admin/outbox/" + row.ID.String() + "/retry")
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a row that is not failed is not retried")
	resp = post("/admin/outbox/not-a-uuid/retry")
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
