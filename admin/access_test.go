package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// snapshot is the state every admin action can change: the rows of plan,
// approval, decision and outbox_event with the columns the actions write,
// and the runs.
func snapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) || ':' || coalesce(string_agg(status || '/' || cancel_requested_by || '/' || cancel_reason, ',' ORDER BY id), '') FROM plan)
    || ' | ' || (SELECT count(*) || ':' || coalesce(string_agg(decision || '/' || decided_by || '/' || note, ',' ORDER BY id), '') FROM approval)
    || ' | ' || (SELECT count(*) || ':' || coalesce(string_agg(status || '/' || resolved_by, ',' ORDER BY id), '') FROM decision)
    || ' | ' || (SELECT count(*) || ':' || coalesce(string_agg(status || '/' || retried_by, ',' ORDER BY id), '') FROM outbox_event)
    || ' | ' || (SELECT count(*) || ':' || coalesce(string_agg(status || '/' || idempotency_key, ',' ORDER BY id), '') FROM taskport.run)`).Scan(&s))
	return s
}

// Every endpoint, by every role, with every method: the status, and on a
// refusal an unchanged database; an operator's accepted action changes it.
// The endpoints are admin.Routes(), so a new one fails here until it has a
// path below.
func TestEveryEndpointByRoleAndMethod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, srv, u := newServer(t)
	toApprove := w.CreatePlan(t, apptest.NewAsset("approve.mkv", 10))
	toReject := w.CreatePlan(t, apptest.NewAsset("reject.mkv", 10))
	toCancel := w.CreatePlan(t, apptest.NewAsset("cancel.mkv", 10))
	d, err := acquisition.OpenDecision(ctx, w.Pool, toCancel.ID, workflows.KindNotifyWebhook, "run-1", json.RawMessage(`{}`), "receiver down")
	require.NoError(t, err)
	row := failedOutboxRow(t, w, "broken")
	dead := failedRun(t, w, "dead", toCancel.ID.String())
	paths := map[string]string{
		"/admin":                         "/admin",
		"/admin/api/overview":            "/admin/api/overview",
		"/admin/plans/{id}":              "/admin/plans/" + toApprove.ID.String(),
		"/admin/decisions/{id}":          "/admin/decisions/" + d.ID.String(),
		"/admin/plans/{id}/approve":      "/admin/plans/" + toApprove.ID.String() + "/approve",
		"/admin/plans/{id}/reject":       "/admin/plans/" + toReject.ID.String() + "/reject",
		"/admin/plans/{id}/cancel":       "/admin/plans/" + toCancel.ID.String() + "/cancel",
		"/admin/decisions/{id}/{action}": "/admin/decisions/" + d.ID.String() + "/abandon",
		"/admin/outbox/{id}/retry":       "/admin/outbox/" + row.ID.String() + "/retry",
		"/admin/runs/{id}/retry":         "/admin/runs/" + string(dead) + "/retry",
	}
	roles := []struct {
		name  string
		role  admin.Role
		token string
	}{{"none", admin.RoleNone, ""}, {"viewer", admin.RoleViewer, u.viewer}, {"operator", admin.RoleOperator, u.operator}}

	for _, route := range admin.Routes() {
		path, ok := paths[route.Pattern]
		require.True(t, ok, "endpoint %s %s has no path in this table", route.Method, route.Pattern)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			for _, who := range roles {
				c := newClient(t, srv, who.token)
				c.get("/admin") // a session: the CSRF cookie and token, for whoever may read
				before := snapshot(t, w.Pool)
				var status int
				var body string
				if method == http.MethodGet {
					status, body = c.get(path)
				} else {
					status, body = c.post(path, url.Values{"note": {"by the table"}, "reason": {"by the table"}})
				}
				want := http.StatusOK
				switch {
				case method != route.Method:
					want = http.StatusMethodNotAllowed
				case who.role == admin.RoleNone:
					want = http.StatusUnauthorized
				case who.role < route.Role:
					want = http.StatusForbidden
				case method == http.MethodPost:
					want = http.StatusSeeOther
				}
				name := method + " " + route.Pattern + " as " + who.name
				require.Equal(t, want, status, "%s: %s", name, body)
				after := snapshot(t, w.Pool)
				if want == http.StatusSeeOther {
					require.NotEqual(t, before, after, "%s: the accepted action wrote", name)
					if route.Pattern != "/admin/runs/{id}/retry" { // a run retry is audited in the log
						require.Contains(t, after, "ann", "%s: the action records who did it", name)
					}
				} else {
					require.Equal(t, before, after, "%s: nothing written", name)
				}
				if want == http.StatusUnauthorized {
					require.Contains(t, body, "authentication required")
				}
			}
		}
	}
}

// A viewer sees no action, and a forged post (right origin, right token)
// is still refused by role.
func TestViewerSeesNoActions(t *testing.T) {
	t.Parallel()
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("view.mkv", 10))
	vic := newClient(t, srv, u.viewer)
	for _, page := range []string{"/admin", "/admin/plans/" + p.ID.String()} {
		status, body := vic.get(page)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "signed in as vic (viewer)")
		require.NotContains(t, body, `method="post"`, page)
	}
	before := snapshot(t, w.Pool)
	status, body := vic.post("/admin/plans/"+p.ID.String()+"/approve", url.Values{"csrf": {"anything"}})
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "operator role")
	require.Equal(t, before, snapshot(t, w.Pool))
}

// A state change must come from the admin's own page with the session's
// token; each refusal writes nothing. The check fails closed: a request
// with neither Origin nor Sec-Fetch-Site is refused.
func TestStateChangesNeedSameOriginAndToken(t *testing.T) {
	t.Parallel()
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("csrf.mkv", 10))
	approve := "/admin/plans/" + p.ID.String() + "/approve"
	ann := newClient(t, srv, u.operator)
	ann.get("/admin")
	require.NotEmpty(t, ann.csrf)
	stranger := newClient(t, srv, u.operator) // authenticated, but never loaded a page: no cookie

	refusals := []struct {
		name   string
		c      *client
		form   url.Values
		header map[string]string
		want   int
	}{
		{"no origin headers", ann, nil, nil, http.StatusForbidden},
		{"cross-site fetch", ann, nil, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": srv.URL}, http.StatusForbidden},
		{"same-site fetch", ann, nil, map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"foreign origin", ann, nil, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"opaque origin", ann, nil, map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"no token", ann, url.Values{"csrf": {""}}, map[string]string{"Origin": srv.URL}, http.StatusForbidden},
		{"wrong token", ann, url.Values{"csrf": {ann.csrf + "x"}}, map[string]string{"Origin": srv.URL}, http.StatusForbidden},
		{"token without its cookie", stranger, url.Values{"csrf": {ann.csrf}}, map[string]string{"Origin": srv.URL}, http.StatusForbidden},
		{"body over the cap", ann, url.Values{"note": {strings.Repeat("n", admin.MaxBody)}}, map[string]string{"Origin": srv.URL}, http.StatusRequestEntityTooLarge},
		{"note over its bound", ann, url.Values{"note": {strings.Repeat("n", plans.MaxNote+1)}}, map[string]string{"Origin": srv.URL}, http.StatusBadRequest},
	}
	for _, r := range refusals {
		before := snapshot(t, w.Pool)
		status, body := r.c.postWith(approve, r.form, func(req *http.Request) {
			for k, v := range r.header {
				req.Header.Set(k, v)
			}
		})
		require.Equal(t, r.want, status, "%s: %s", r.name, body)
		require.Equal(t, before, snapshot(t, w.Pool), "%s: nothing written", r.name)
	}
	// A browser that sends Sec-Fetch-Site but no Origin, with the token.
	status, _ := ann.postWith(approve, nil, func(req *http.Request) { req.Header.Set("Sec-Fetch-Site", "same-origin") })
	require.Equal(t, http.StatusSeeOther, status)
}

// Basic auth takes the token as password and must name the token's user;
// a 401 asks the browser for it.
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	_, srv, u := newServer(t)
	get := func(user, pass string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/admin", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp := get("ann", u.operator)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, readAll(t, resp), "signed in as ann (operator)")
	resp = get("vic", u.operator)
	readAll(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "another user with ann's token")
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")
	resp = get("ann", "guess")
	readAll(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// Behind oauth2-proxy: the user header is believed from the proxy's own
// addresses only; listed users are operators, the others viewers, and the
// operator's action records their name. The same header from any other
// address is nobody: 401 on the page and on an approval, nothing written.
// A network wider than 256 addresses is refused: it is a network other
// clients share, not a proxy.
func TestTrustedProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := &admin.TrustedProxy{Header: "X-Forwarded-User", From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Operators: []string{"olga"}}
	w, srv := newServerWith(t, admin.Config{Auth: admin.Auth{Proxy: proxy}})
	p := w.CreatePlan(t, apptest.NewAsset("proxy.mkv", 10))

	as := func(srv *httptest.Server, user string) *client {
		c := newClient(t, srv, "")
		c.http.Transport = headerTransport{"X-Forwarded-User": user}
		return c
	}
	status, body := as(srv, "olga").get("/admin")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "signed in as olga (operator)")
	status, body = as(srv, "vera").get("/admin")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "signed in as vera (viewer)")
	status, _ = as(srv, "").get("/admin")
	require.Equal(t, http.StatusUnauthorized, status)

	olga := as(srv, "olga")
	olga.get("/admin")
	status, _ = olga.post("/admin/plans/"+p.ID.String()+"/approve", nil)
	require.Equal(t, http.StatusSeeOther, status)
	var by string
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT decided_by FROM approval WHERE plan_id = $1`, p.ID).Scan(&by))
	require.Equal(t, "olga", by)

	// The proxy is 10.0.0.7; this client connects from 127.0.0.1.
	elsewhere := &admin.TrustedProxy{Header: "X-Forwarded-User", From: []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32")}, Operators: []string{"olga"}}
	w2, srv2 := newServerWith(t, admin.Config{Auth: admin.Auth{Proxy: elsewhere}})
	p2 := w2.CreatePlan(t, apptest.NewAsset("not-proxy.mkv", 10))
	before := snapshot(t, w2.Pool)
	forger := as(srv2, "olga")
	status, body = forger.get("/admin")
	require.Equal(t, http.StatusUnauthorized, status)
	require.NotContains(t, body, `name="csrf"`)
	status, _ = forger.post("/admin/plans/"+p2.ID.String()+"/approve", url.Values{"csrf": {"guessed"}})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, before, snapshot(t, w2.Pool), "nothing written")
	var approvals int
	require.NoError(t, w2.Pool.QueryRow(ctx, `SELECT count(*) FROM approval WHERE plan_id = $1`, p2.ID).Scan(&approvals))
	require.Zero(t, approvals, "the plan is not approved")

	for _, network := range []string{"10.42.0.0/16", "127.0.0.0/8", "fd00::/64"} {
		wide := &admin.TrustedProxy{Header: "X-Forwarded-User", From: []netip.Prefix{netip.MustParsePrefix(network)}}
		_, err := admin.New(admin.Config{Pool: w.Pool, Plans: w.Plans, Runs: w.Engine.(port.Admin), Registry: w.Registry,
			Auth: admin.Auth{Proxy: wide}, Origins: []string{"https://admin.example.com"}})
		require.ErrorContains(t, err, "more than 256 addresses", network)
	}
}

// headerTransport adds headers to every request, as a proxy in front would.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		if v != "" {
			r.Header.Set(k, v)
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A token file is hashes only, and a bad one says which line is wrong.
func TestTokenFile(t *testing.T) {
	t.Parallel()
	token, line, err := admin.NewToken("ann", admin.RoleOperator)
	require.NoError(t, err)
	require.NotContains(t, line, token, "the file holds the hash, not the token")
	require.True(t, strings.HasPrefix(line, "ann operator sha256:"), line)
	for in, want := range map[string]string{
		"":                         "no admin tokens",
		"# only a comment\n":       "no admin tokens",
		"ann operator\n":           "line 1",
		"ann root sha256:00\n":     "role must be viewer or operator",
		"ann viewer md5:00\n":      "sha256:",
		"\nann viewer sha256:zz\n": "line 2",
		"ann viewer sha256:0011\n": "64 hex digits",
	} {
		_, err := admin.ParseTokens([]byte(in))
		require.ErrorContains(t, err, want, "%q", in)
	}
	for _, user := range []string{"two words", "", "ann:x"} {
		_, _, err = admin.NewToken(user, admin.RoleViewer)
		require.Error(t, err, "%q", user)
	}
	_, _, err = admin.NewToken("ann", admin.RoleNone)
	require.Error(t, err)
}
