package admin_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/syncbuf"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
)

// The tokens of the tests' users: an operator, a viewer.
type users struct {
	operator, viewer string
}

// newServer serves the admin with token auth and returns the tokens of an
// operator (ann) and a viewer (vic).
func newServer(t *testing.T) (*apptest.World, *httptest.Server, users) {
	t.Helper()
	opTok, opLine, err := admin.NewToken("ann", admin.RoleOperator)
	require.NoError(t, err)
	viewTok, viewLine, err := admin.NewToken("vic", admin.RoleViewer)
	require.NoError(t, err)
	tokens, err := admin.ParseTokens([]byte("# the test's users\n" + opLine + "\n" + viewLine + "\n"))
	require.NoError(t, err)
	w, srv := newServerWith(t, admin.Config{Auth: admin.Auth{Tokens: tokens},
		RunURL: func(id port.RunID) string { return "https://temporal-ui.example/runs/" + string(id) }})
	return w, srv, users{operator: opTok, viewer: viewTok}
}

// newServerWith serves the admin configured as cfg, over a world of its own.
func newServerWith(t *testing.T, cfg admin.Config) (*apptest.World, *httptest.Server) {
	t.Helper()
	var lister port.Admin
	w := apptest.NewWorld(t, apptest.Options{NewEngine: func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
		e, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
		require.NoError(t, err)
		lister = e
		return e
	}})
	cfg.Pool, cfg.Plans, cfg.Runs, cfg.Registry, cfg.Metrics = w.Pool, w.Plans, lister, w.Registry, http.NotFoundHandler()
	// The test server's own address is the admin's public origin.
	srv := httptest.NewUnstartedServer(nil)
	cfg.Origins = append(cfg.Origins, "http://"+srv.Listener.Addr().String())
	h, err := admin.New(cfg)
	require.NoError(t, err)
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	return w, srv
}

// client is a browser of one user: it sends their token, keeps the CSRF
// cookie, and does not follow redirects, so a test sees each status.
type client struct {
	t     *testing.T
	base  string
	token string
	csrf  string
	http  *http.Client
	// host, when set, is the Host header of every request, as a page
	// whose name was rebound to the admin's address sends it.
	host string
}

func newClient(t *testing.T, srv *httptest.Server, token string) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: srv.URL, token: token, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// get fetches path; a page with forms gives the client its CSRF token.
func (c *client) get(path string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	status, body := c.do(req)
	if m := csrfInput.FindStringSubmatch(body); m != nil {
		c.csrf = m[1]
	}
	return status, body
}

// post submits a form as the admin's own page does: same origin, with the
// CSRF token.
func (c *client) post(path string, form url.Values) (int, string) {
	return c.postWith(path, form, func(r *http.Request) {
		r.Header.Set("Origin", c.base)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	})
}

func (c *client) postWith(path string, form url.Values, edit func(*http.Request)) (int, string) {
	if form == nil {
		form = url.Values{}
	}
	if c.csrf != "" && !form.Has("csrf") {
		form.Set("csrf", c.csrf)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	edit(req)
	return c.do(req)
}

func (c *client) do(req *http.Request) (int, string) {
	if c.host != "" {
		req.Host = c.host
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	body := readAll(c.t, resp)
	if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusSeeOther && loc != "" {
		_, page := c.get(loc)
		return resp.StatusCode, page
	}
	return resp.StatusCode, body
}

func TestOverviewTimelineAndActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv, u := newServer(t)
	a := apptest.NewAsset("admin.mkv", 1000)
	p := w.CreatePlan(t, a)

	// A failed run shows as a dead letter.
	dead := failedRun(t, w, "dead", p.ID.String())

	ann := newClient(t, srv, u.operator)
	status, body := ann.get("/admin")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, p.Title)
	require.Contains(t, body, "disk full")
	require.Contains(t, body, "signed in as ann (operator)")

	status, body = ann.get("/admin/api/overview")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"runs_on_old_versions":[]`, "an empty list is [], not null")
	var o admin.Overview
	require.NoError(t, json.Unmarshal([]byte(body), &o))
	require.Len(t, o.Plans, 1)
	require.Equal(t, p.ID.String(), o.Plans[0].ID)
	require.Len(t, o.Dead, 1)
	require.Equal(t, dead, o.Dead[0].ID)

	status, body = ann.post("/admin/plans/"+p.ID.String()+"/approve", url.Values{"note": {"looks right"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Contains(t, body, "approved by ann", "the plan page says who approved")
	require.Contains(t, body, "ann: looks right", "and its timeline shows it")
	require.Contains(t, body, `<p class="done">plan `+p.ID.String()+` approved by ann</p>`, "the action's result is shown")
	_, body = ann.get("/admin/plans/" + p.ID.String())
	require.NotContains(t, body, `<p class="done">`, "once")
	_, body = ann.get("/admin/plans/" + p.ID.String() + "?done=Session+expired:+sign+in+at+evil.example")
	require.NotContains(t, body, "evil.example", "a link cannot put words in the banner")
	_, body = ann.get("/admin?done=Session+expired:+sign+in+at+evil.example")
	require.NotContains(t, body, "evil.example", "a link cannot put words in the banner")
	var by string
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT decided_by FROM approval WHERE plan_id = $1`, p.ID).Scan(&by))
	require.Equal(t, "ann", by)

	// The approval's hand-off to download.submit, once dispatched, links
	// to its run in the engine's UI.
	_, err := w.Dispatcher.DispatchOnce(ctx)
	require.NoError(t, err)
	runs, err := w.Engine.(port.Admin).ListRuns(ctx, port.RunFilter{BusinessKey: p.ID.String(), Kind: "download.submit"})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	_, body = ann.get("/admin/plans/" + p.ID.String())
	require.Contains(t, body, `<a href="https://temporal-ui.example/runs/`+string(runs[0].ID)+`">`)
	require.Contains(t, body, "<td>download.submit@v1</td>", "and the plan's runs are listed")

	status, body = ann.post("/admin/plans/"+p.ID.String()+"/cancel", url.Values{"reason": {"not needed"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Contains(t, body, "cancel requested by ann: not needed")
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT cancel_requested_by FROM plan WHERE id = $1`, p.ID).Scan(&by))
	require.Equal(t, "ann", by)

	ann.requireStatuses(map[string]int{
		"/admin/plans/not-a-uuid":                           http.StatusBadRequest,
		"/admin/plans/0190a5c6-0000-7000-8000-000000000000": http.StatusNotFound,
		"/healthz": http.StatusOK,
		"/readyz":  http.StatusOK,
	})
}

// requireStatuses gets each path and checks its status; it returns the
// bodies.
func (c *client) requireStatuses(want map[string]int) map[string]string {
	bodies := map[string]string{}
	for path, status := range want {
		got, body := c.get(path)
		require.Equal(c.t, status, got, path)
		bodies[path] = body
	}
	return bodies
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
	w, srv, u := newServer(t)
	row := failedOutboxRow(t, w, "broken")
	require.Contains(t, row.LastError, "invalid input")

	ann := newClient(t, srv, u.operator)
	_, body := ann.get("/admin")
	require.Contains(t, body, "/admin/outbox/"+row.ID.String()+"/retry")

	status, body := ann.post("/admin/outbox/"+row.ID.String()+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Contains(t, body, "handed back to the dispatchers")
	var state, by string
	var attempts int
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT status, attempts, retried_by FROM outbox_event WHERE id = $1`, row.ID).Scan(&state, &attempts, &by))
	require.Equal(t, "pending", state)
	require.Zero(t, attempts)
	require.Equal(t, "ann", by)

	status, _ = ann.post("/admin/outbox/"+row.ID.String()+"/retry", nil)
	require.Equal(t, http.StatusNotFound, status, "a row that is not failed is not retried")
	status, _ = ann.post("/admin/outbox/not-a-uuid/retry", nil)
	require.Equal(t, http.StatusBadRequest, status)
}

// failedOutboxRow writes a hand-off whose input the kind refuses under
// every version: the dispatcher gives it up as failed.
func failedOutboxRow(t *testing.T, w *apptest.World, key string) outbox.FailedRow {
	t.Helper()
	ctx := context.Background()
	_, err := outbox.Write(ctx, w.Pool, outbox.Event{Kind: "asset.import", IdempotencyKey: key, BusinessKey: "plan-x",
		Payload: map[string]string{"not_a_field": "x"}})
	require.NoError(t, err)
	_, err = w.Dispatcher.DispatchOnce(ctx)
	require.NoError(t, err)
	rows, err := outbox.Failed(ctx, w.Pool, 100)
	require.NoError(t, err)
	for _, r := range rows {
		if r.IdempotencyKey == key {
			return r
		}
	}
	t.Fatalf("outbox row %s did not fail", key)
	return outbox.FailedRow{}
}

// With Postgres gone, /readyz and the pages say so without its error: no
// address, no driver message. The log has the details.
func TestErrorsCarryNoInternals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/gone?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reg := port.NewRegistry()
	svc, err := plans.New(pool, plans.Config{})
	require.NoError(t, err)
	runs, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	var logs syncbuf.Buffer
	h, err := admin.New(admin.Config{Pool: pool, Plans: svc, Runs: runs, Registry: reg, Auth: admin.Auth{Local: "ann"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	bodies := newClient(t, srv, "").requireStatuses(map[string]int{
		"/readyz":             http.StatusServiceUnavailable,
		"/admin":              http.StatusInternalServerError,
		"/admin/api/overview": http.StatusInternalServerError,
		"/admin/plans/0190a5c6-0000-7000-8000-000000000000": http.StatusInternalServerError,
	})
	for path, body := range bodies {
		for _, internal := range []string{"127.0.0.1", "dial", "connect", "gone"} {
			require.NotContains(t, body, internal, path)
		}
	}
	require.Contains(t, logs.String(), "127.0.0.1:1", "the log has what the client is not told")
}

// The overview's plans filter: by status and by search, in the page and
// the JSON; a bad filter is a 400 naming it.
func TestOverviewFiltersPlans(t *testing.T) {
	t.Parallel()
	w, srv, u := newServer(t)
	w.CreatePlan(t, apptest.NewAsset("kept-in-view.mkv", 10))
	w.CreatePlan(t, apptest.NewAsset("filtered-out.mkv", 10))
	vic := newClient(t, srv, u.viewer)

	status, body := vic.get("/admin?q=kept&status=awaiting_approval")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "kept-in-view.mkv")
	require.NotContains(t, body, "filtered-out.mkv")
	require.Contains(t, body, `value="kept"`, "the form shows the filter")

	_, body = vic.get("/admin/api/overview?q=filtered")
	var o admin.Overview
	require.NoError(t, json.Unmarshal([]byte(body), &o))
	require.Len(t, o.Plans, 1)
	require.Equal(t, "filtered-out.mkv", o.Plans[0].Title)
	require.Empty(t, o.NextPlans)

	status, body = vic.get("/admin?status=lost")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "status")
}

// The overview pages its plans: the link under a full page leads to the
// older ones, keeping the filter.
func TestOverviewPagesPlans(t *testing.T) {
	t.Parallel()
	w, srv, u := newServer(t)
	_, err := w.Pool.Exec(context.Background(), `
INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256, created_at)
SELECT gen_random_uuid(), 'paged ' || i, 'magnet', 'magnet:?xt=urn:btih:' || lpad(to_hex(i), 40, '0'),
       lpad(to_hex(i), 40, '0'), '/lib/paged-' || i, 1, repeat('a', 64), now() - i * interval '1 second'
FROM generate_series(1, 51) AS i`)
	require.NoError(t, err)
	vic := newClient(t, srv, u.viewer)
	_, body := vic.get("/admin?q=paged")
	require.Contains(t, body, ">paged 50<")
	require.NotContains(t, body, ">paged 51<")
	next := regexp.MustCompile(`<a href="(/admin\?[^"]+)">older plans</a>`).FindStringSubmatch(body)
	require.NotNil(t, next, "a full page links the next one")
	status, body := vic.get(html.UnescapeString(next[1]))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, ">paged 51<")
	require.NotContains(t, body, ">paged 50<")
	require.NotContains(t, body, "older plans", "the last page")
}

// failedRun records a failed lease run of asset.import under key: a dead
// letter.
func failedRun(t *testing.T, w *apptest.World, key, businessKey string) port.RunID {
	t.Helper()
	ctx := context.Background()
	run, _, err := runstore.Insert(ctx, w.Pool, runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1,
		Key: key, BusinessKey: businessKey, Input: json.RawMessage(`{"plan_id":"` + businessKey + `"}`)})
	require.NoError(t, err)
	require.NoError(t, runstore.Project(ctx, w.Pool, run.ID, runstore.Projection{Status: port.StatusFailed, LastError: "disk full"}))
	return run.ID
}

// Retrying a dead letter starts a new run with its input under the derived
// key, and the failed run stays listed; retrying it again is the same
// retry. A run that opened a decision is retried through the decision
// (409), a run that did not fail cannot be retried (400), and neither
// writes anything.
func TestDeadLetterRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("dead.mkv", 10))
	dead := failedRun(t, w, "plan:dead", p.ID.String())
	ann := newClient(t, srv, u.operator)
	ann.get("/admin")

	status, body := ann.post("/admin/runs/"+string(dead)+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, status)
	m := regexp.MustCompile(`run ` + string(dead) + ` retried as run ([0-9a-f-]{36})`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	var key, input, state string
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT idempotency_key, input::text, status FROM taskport.run WHERE id = $1`, m[1]).Scan(&key, &input, &state))
	require.Equal(t, port.RetryKey(dead), key)
	require.JSONEq(t, `{"plan_id":"`+p.ID.String()+`"}`, input)
	require.Equal(t, "pending", state)
	require.Contains(t, body, string(dead), "the failed run stays listed")
	status, body = ann.post("/admin/runs/"+string(dead)+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Contains(t, body, "retried as run "+m[1], "the same retry")

	withDecision := failedRun(t, w, "plan:decided", p.ID.String())
	d, err := acquisition.OpenDecision(ctx, w.Pool, p.ID, "asset.import", withDecision, json.RawMessage(`{}`), "disk full")
	require.NoError(t, err)
	before := snapshot(t, w.Pool)
	status, body = ann.post("/admin/runs/"+string(withDecision)+"/retry", nil)
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, body, d.ID.String())
	status, _ = ann.post("/admin/runs/"+m[1]+"/retry", nil)
	require.Equal(t, http.StatusBadRequest, status, "a pending run is no dead letter")
	status, _ = ann.post("/admin/runs/not-a-run/retry", nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, before, snapshot(t, w.Pool))
}

// Input Postgres cannot store (U+0000, invalid UTF-8) is the request's
// fault: a 400 naming the field, not a 500 with SQLSTATE 22021 in the log,
// and nothing written. A run id is read as the plan, decision and outbox
// ids are: one that is not a uuid is a 400; a uuid spelt otherwise than
// Enqueue returns it is an unknown run (port/spec.go), a 404.
func TestBadInputIsABadRequest(t *testing.T) {
	t.Parallel()
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("bad-input.mkv", 10))
	dead := failedRun(t, w, "plan:bad-input", p.ID.String())
	ann := newClient(t, srv, u.operator)
	ann.get("/admin/plans/" + p.ID.String())
	before := snapshot(t, w.Pool)

	bodies := ann.requireStatuses(map[string]int{
		"/admin?q=%00":              http.StatusBadRequest,
		"/admin?q=%ff":              http.StatusBadRequest,
		"/admin?q=a%1b%5B2J":        http.StatusBadRequest,
		"/admin/api/overview?q=%00": http.StatusBadRequest,
		"/admin/api/overview?q=%ff": http.StatusBadRequest,
	})
	for path, body := range bodies {
		require.Contains(t, body, "search", path)
	}
	for _, tc := range []struct {
		path   string
		form   url.Values
		status int
		says   string
	}{
		{"/admin/plans/" + p.ID.String() + "/cancel", url.Values{"reason": {"a\x00b"}}, http.StatusBadRequest, "reason"},
		{"/admin/plans/" + p.ID.String() + "/cancel", url.Values{"reason": {"bad\xff"}}, http.StatusBadRequest, "reason"},
		{"/admin/plans/" + p.ID.String() + "/approve", url.Values{"note": {"a\x00b"}}, http.StatusBadRequest, "note"},
		{"/admin/plans/" + p.ID.String() + "/reject", url.Values{"note": {"bad\xff"}}, http.StatusBadRequest, "note"},
		{"/admin/runs/%00/retry", nil, http.StatusBadRequest, "not a UUID"},
		{"/admin/runs/%ff/retry", nil, http.StatusBadRequest, "not a UUID"},
		{"/admin/runs/not-a-uuid/retry", nil, http.StatusBadRequest, "not a UUID"},
		{"/admin/runs/" + strings.ToUpper(string(dead)) + "/retry", nil, http.StatusNotFound, "not found"},
	} {
		status, body := ann.post(tc.path, tc.form)
		require.Equal(t, tc.status, status, "%s %v: %s", tc.path, tc.form, body)
		require.Contains(t, body, tc.says, tc.path)
	}
	require.Equal(t, before, snapshot(t, w.Pool), "nothing written")
}

// The decision page shows the step's error and the failed run's attempts
// and step; an operator gets the resolve actions, a viewer none.
func TestDecisionPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("decided.mkv", 10))
	run, _, err := runstore.Insert(ctx, w.Pool, runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1,
		Key: "plan:decided", BusinessKey: p.ID.String(), Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, runstore.Project(ctx, w.Pool, run.ID, runstore.Projection{Status: port.StatusFailed, Attempts: 3,
		CurrentStep: "import", LastError: "disk full"}))
	d, err := acquisition.OpenDecision(ctx, w.Pool, p.ID, "asset.import", run.ID, json.RawMessage(`{}`), "step import failed after 3 attempt(s): disk full")
	require.NoError(t, err)

	ann := newClient(t, srv, u.operator)
	_, body := ann.get("/admin")
	require.Contains(t, body, `href="/admin/decisions/`+d.ID.String()+`"`)
	status, body := ann.get("/admin/decisions/" + d.ID.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "step import failed after 3 attempt(s): disk full")
	require.Regexp(t, `<td>failed</td><td>3</td><td>import</td><td>disk full</td>`, body)
	require.Contains(t, body, `action="/admin/decisions/`+d.ID.String()+`/retry"`)
	_, body = newClient(t, srv, u.viewer).get("/admin/decisions/" + d.ID.String())
	require.NotContains(t, body, `method="post"`)
	status, _ = ann.get("/admin/decisions/0190a5c6-0000-7000-8000-000000000000")
	require.Equal(t, http.StatusNotFound, status)
}

// The overview shows what `taskport engine status` shows: the active
// engine, who switched to it and why, the open runs per engine and kind,
// and the runs an interrupted evacuation left to move, on the page and in
// the JSON.
func TestOverviewShowsEngines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv, u := newServer(t)
	ann := newClient(t, srv, u.operator)
	_, body := ann.get("/admin")
	require.Contains(t, body, "New runs go to <strong>temporal</strong> (the primary: no switch recorded)")
	require.Contains(t, body, "no open runs")

	_, _, err := runstore.Insert(ctx, w.Pool, runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1,
		Key: "open", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	r, err := router.New(w.Pool, map[string]router.Engine{"lease": w.Engine.(router.Engine)}, router.Config{})
	require.NoError(t, err)
	_, err = r.SwitchTo(ctx, "lease", "ops", "temporal upgrade regressed")
	require.NoError(t, err)

	_, body = ann.get("/admin")
	require.Contains(t, body, "New runs go to <strong>lease</strong>, switched by ops at ")
	require.Contains(t, body, ": temporal upgrade regressed.")
	require.Contains(t, body, "<tr><td>lease</td><td>asset.import</td><td>1</td>")
	require.NotContains(t, body, "interrupted evacuation")

	// An evacuation of temporal that ended a run and was interrupted before
	// it enqueued the replacement.
	left, _, err := runstore.Insert(ctx, w.Pool, runstore.NewRun{Engine: runstore.EngineTemporal, Kind: "asset.import", Version: 1,
		Key: "left", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	ended, err := runstore.EndAbandoned(ctx, w.Pool, runstore.EngineTemporal, left.ID,
		runstore.EvacuationReason(runstore.EngineTemporal, runstore.EngineLease, "ops"), true)
	require.NoError(t, err)
	require.True(t, ended)
	_, body = ann.get("/admin")
	require.Contains(t, body, "temporal: 1 run left by an interrupted evacuation; run <code>taskport engine evacuate --from temporal</code> again")

	_, body = ann.get("/admin/api/overview")
	var o struct {
		Engines struct {
			Active     string `json:"active"`
			SwitchedBy string `json:"switched_by"`
			Open       []struct {
				Engine string `json:"engine"`
				Kind   string `json:"kind"`
				Count  int    `json:"count"`
			} `json:"open"`
			Unmoved []struct {
				Engine string `json:"engine"`
				Count  int    `json:"count"`
			} `json:"unmoved"`
		} `json:"engines"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &o), body)
	require.Equal(t, "lease", o.Engines.Active)
	require.Equal(t, "ops", o.Engines.SwitchedBy)
	require.Len(t, o.Engines.Open, 1)
	require.Equal(t, 1, o.Engines.Open[0].Count)
	require.Len(t, o.Engines.Unmoved, 1, body)
	require.Equal(t, "temporal", o.Engines.Unmoved[0].Engine)
	require.Equal(t, 1, o.Engines.Unmoved[0].Count)
}

// A plan's run an evacuation moved reads canceled on the plan page, with
// the run its work goes on in (RunView.MovedTo), linked as runs are; the
// replacement reads as any run. The rows are an evacuation's as the run
// store writes them (router.Evacuate's end and record, lease to lease:
// the admin lists one engine); test/router_test.go evacuates real runs.
func TestPlanPageShowsWhereAnEvacuationMovedARun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("moved.mkv", 10))
	insert := func(key string) port.RunID {
		r, _, err := runstore.Insert(ctx, w.Pool, runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1,
			Key: key, BusinessKey: p.ID.String(), Input: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return r.ID
	}
	old := insert("old")
	ended, err := runstore.EndAbandoned(ctx, w.Pool, runstore.EngineLease, old,
		runstore.EvacuationReason(runstore.EngineLease, runstore.EngineTemporal, "ops"), true)
	require.NoError(t, err)
	require.True(t, ended)
	to := insert(runstore.EvacuationKey(old))
	require.NoError(t, runstore.EvacuatedTo(ctx, w.Pool, old, to))

	_, body := newClient(t, srv, u.viewer).get("/admin/plans/" + p.ID.String())
	require.Contains(t, body, `<td>canceled, moved to <a href="https://temporal-ui.example/runs/`+string(to)+`"><code>`+string(to)+`</code></a></td>`)
	require.Equal(t, 1, strings.Count(body, "moved to"), "the replacement was not moved")
}
