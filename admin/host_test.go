package admin_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/port"
)

// DNS rebinding, as plain HTTP: a page on a name the attacker points at the
// admin's address sends that name as Host and, same-origin with itself,
// a matching Origin. It reads the page for its CSRF token, then posts an
// approval with it. The admin answers such a Host with 421 before any
// handler runs, in every mode; nothing is written and the plan stays
// unapproved. The admin's own names still work: without authentication
// loopback names on the served port, with tokens the public origin only.
func TestRebindingHostIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, localSrv := newServerWith(t, admin.Config{Auth: admin.Auth{Local: "local:tester"}})
	tokens, tokenSrv, u := newServer(t)
	_, port, err := net.SplitHostPort(localSrv.Listener.Addr().String())
	require.NoError(t, err)
	_, tokenPort, err := net.SplitHostPort(tokenSrv.Listener.Addr().String())
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		w     *apptest.World
		c     *client
		host  string
		token string
	}{
		{"no auth, foreign name", local, newClient(t, localSrv, ""), "evil.test:" + port, ""},
		{"no auth, foreign name, no port", local, newClient(t, localSrv, ""), "evil.test", ""},
		{"no auth, localhost on another port", local, newClient(t, localSrv, ""), "localhost:1", ""},
		{"no auth, localhost.evil.test", local, newClient(t, localSrv, ""), "localhost.evil.test:" + port, ""},
		{"tokens, foreign name", tokens, newClient(t, tokenSrv, u.operator), "evil.test:" + tokenPort, u.operator},
		{"tokens, loopback name", tokens, newClient(t, tokenSrv, u.operator), "localhost:" + tokenPort, u.operator},
	} {
		p := tc.w.CreatePlan(t, apptest.NewAsset(tc.name+".mkv", 10))
		before := snapshot(t, tc.w.Pool)
		tc.c.host = tc.host
		status, body := tc.c.get("/admin")
		require.Equal(t, http.StatusMisdirectedRequest, status, "%s: GET: %s", tc.name, body)
		require.NotContains(t, body, `name="csrf"`, tc.name)
		status, body = tc.c.postWith("/admin/plans/"+p.ID.String()+"/approve", nil, func(r *http.Request) {
			r.Header.Set("Origin", "http://"+tc.host)
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		})
		require.Equal(t, http.StatusMisdirectedRequest, status, "%s: POST: %s", tc.name, body)
		require.Equal(t, before, snapshot(t, tc.w.Pool), "%s: nothing written", tc.name)
		var approvals int
		require.NoError(t, tc.w.Pool.QueryRow(ctx, `SELECT count(*) FROM approval WHERE plan_id = $1`, p.ID).Scan(&approvals))
		require.Zero(t, approvals, "%s: the plan is not approved", tc.name)
	}

	// The admin's own names: every loopback name on the served port
	// without authentication; probes under any name (the kubelet uses the
	// pod's IP).
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "127.9.9.9:" + port, "[::1]:" + port, "LOCALHOST:" + port} {
		c := newClient(t, localSrv, "")
		c.host = host
		status, body := c.get("/admin")
		require.Equal(t, http.StatusOK, status, "%s: %s", host, body)
		require.Contains(t, body, `name="csrf"`)
	}
	for _, srv := range []string{localSrv.URL, tokenSrv.URL} {
		c := &client{t: t, base: srv, http: http.DefaultClient, host: "evil.test"}
		status, _ := c.get("/healthz")
		require.Equal(t, http.StatusOK, status, "probes answer any Host")
	}
}

// With tokens or a proxy, the admin must be told the names it answers to.
func TestPublicOriginsAreRequiredWithAuth(t *testing.T) {
	t.Parallel()
	tokens, err := admin.ParseTokens([]byte("ann operator sha256:" + "00000000000000000000000000000000000000000000000000000000000000aa" + "\n"))
	require.NoError(t, err)
	w := apptest.NewWorld(t, apptest.Options{})
	cfg := admin.Config{Pool: w.Pool, Plans: w.Plans, Runs: w.Engine.(port.Admin), Registry: w.Registry, Auth: admin.Auth{Tokens: tokens}}
	_, err = admin.New(cfg)
	require.ErrorContains(t, err, "public origins are required")
	cfg.Origins = []string{"admin.example.com"}
	_, err = admin.New(cfg)
	require.ErrorContains(t, err, "http(s)://host[:port]")
	cfg.Origins = []string{"https://admin.example.com"}
	_, err = admin.New(cfg)
	require.NoError(t, err)
}
