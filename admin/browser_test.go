package admin_test

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/port"
)

// chromiumPath is Debian's chromium, which `make tools` installs.
const chromiumPath = "/usr/bin/chromium"

// browser is a headless Chromium for the test; each tab gets a browser
// context of its own (its own cookies), as a separate person would.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is needed (make tools installs chromium): %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900))
	opts = append(opts, extra...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	root, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(root), "start chromium") // tabs need a running browser
	return root
}

// tab opens a tab of its own, sending the Authorization header of the user
// with this token (none when empty) on every request, as a browser does
// once the user has logged in with Basic auth.
func tab(t *testing.T, alloc context.Context, user, token string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	if token != "" {
		auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+token))
		_, err = chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		require.NoError(t, err)
	}
	return ctx
}

// screenshot saves the page to $ADMIN_SCREENSHOT_DIR when set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("ADMIN_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	t.Logf("screenshot %s", filepath.Join(dir, name))
}

func bodyText(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	require.NoError(t, err)
	return s
}

func jsInt(t *testing.T, ctx context.Context, expr string) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	return v
}

// The admin in a real browser: an operator approves a plan from the
// overview and the plan page shows who approved; a viewer sees no action
// and a post forged from the page is refused; without credentials the
// admin answers 401; a form on another origin that posts to the admin is
// refused; an operator retries a dead letter and sees the new run. Each
// refusal writes nothing.
func TestInBrowser(t *testing.T) {
	w, srv, u := newServer(t)
	p := w.CreatePlan(t, apptest.NewAsset("browser.mkv", 10))
	dead := failedRun(t, w, "plan:browser", p.ID.String())
	alloc := browser(t)

	// Operator: approve from the overview; the timeline names ann.
	ann := tab(t, alloc, "ann", u.operator)
	require.NoError(t, chromedp.Do(ann, chromedp.Navigate(srv.URL+"/admin")))
	require.NoError(t, chromedp.Do(ann,
		chromedp.Click(chromedp.CSS(`form[action="/admin/plans/`+p.ID.String()+`/approve"] button`)),
		chromedp.WaitVisible(chromedp.CSS("p.done"))))
	text := bodyText(t, ann)
	require.Contains(t, text, "approved by ann")
	require.Regexp(t, `approval\s+approved\s+ann`, text, "the timeline shows who approved")
	screenshot(t, ann, "plan-audit.png")

	// Viewer: no action buttons; a post forged from the page (with the
	// page's own origin and cookie) is refused by role.
	before := snapshot(t, w.Pool)
	vic := tab(t, alloc, "vic", u.viewer)
	require.NoError(t, chromedp.Do(vic, chromedp.Navigate(srv.URL+"/admin")))
	require.Zero(t, jsInt(t, vic, `document.querySelectorAll('form[method=post]').length`))
	require.Equal(t, http.StatusForbidden, jsInt(t, vic,
		`fetch('/admin/plans/`+p.ID.String()+`/cancel', {method: 'POST', body: new URLSearchParams({reason: 'forged'})}).then(r => r.status)`))

	// Nobody: 401.
	anon := tab(t, alloc, "", "")
	require.NoError(t, chromedp.Do(anon, chromedp.Navigate(srv.URL+"/healthz")))
	require.Equal(t, http.StatusUnauthorized, jsInt(t, anon, `fetch('/admin', {credentials: 'omit'}).then(r => r.status)`))

	// Another site's form posting to the admin, in the operator's browser
	// (her credentials ride along): refused.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<form id="f" method="post" action="` + srv.URL + `/admin/plans/` + p.ID.String() + `/cancel">` +
			`<input name="reason" value="cross-site"></form><script>document.getElementById('f').submit()</script>`))
	}))
	t.Cleanup(evil.Close)
	evilTab := tab(t, alloc, "ann", u.operator)
	resp, err := chromedp.Run(evilTab, chromedp.NavigateResponse(evil.URL))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Eventually(t, func() bool {
		url, err := chromedp.Run(evilTab, chromedp.Location())
		return err == nil && url == srv.URL+"/admin/plans/"+p.ID.String()+"/cancel"
	}, 30*time.Second, 50*time.Millisecond, "the form was posted")
	require.Contains(t, bodyText(t, evilTab), "forbidden")
	require.Equal(t, before, snapshot(t, w.Pool), "no refusal wrote anything")

	// Operator: retry the dead letter; the overview names the new run.
	require.NoError(t, chromedp.Do(ann, chromedp.Navigate(srv.URL+"/admin")))
	require.NoError(t, chromedp.Do(ann,
		chromedp.Click(chromedp.CSS(`form[action="/admin/runs/`+string(dead)+`/retry"] button`)),
		chromedp.WaitVisible(chromedp.CSS("p.done"))))
	text = bodyText(t, ann)
	require.Regexp(t, `run `+string(dead)+` retried as run [0-9a-f-]{36}`, text)
	runs, err := w.Engine.(port.Admin).ListRuns(context.Background(), port.RunFilter{BusinessKey: p.ID.String(), Kind: "asset.import"})
	require.NoError(t, err)
	require.Len(t, runs, 2, "the failed run and its retry")
	require.Contains(t, text, string(dead), "the failed run stays listed")
	screenshot(t, ann, "dead-letter-retry.png")
}

// DNS rebinding in a real browser: a name the attacker controls
// (evil.test) resolves to the admin's loopback address, so its page is
// same-origin with itself and would read the CSRF token and post with it.
// The admin without authentication answers the same browser under
// localhost, and refuses the page under the foreign name before any
// handler runs: no form, no token, nothing written.
func TestInBrowserRefusesARebindingName(t *testing.T) {
	w, srv := newServerWith(t, admin.Config{Auth: admin.Auth{Local: "local:tester"}})
	p := w.CreatePlan(t, apptest.NewAsset("rebind.mkv", 10))
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	alloc := browser(t, chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1"))
	before := snapshot(t, w.Pool)

	local := tab(t, alloc, "", "")
	resp, err := chromedp.Run(local, chromedp.NavigateResponse("http://localhost:"+port+"/admin"))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status, "the local operator's own page")
	require.Contains(t, bodyText(t, local), "local:tester")

	evil := tab(t, alloc, "", "")
	resp, err = chromedp.Run(evil, chromedp.NavigateResponse("http://evil.test:"+port+"/admin"))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusMisdirectedRequest), resp.Status)
	require.Equal(t, "127.0.0.1", resp.RemoteIPAddress, "the foreign name reached the admin")
	require.Contains(t, bodyText(t, evil), "does not answer to host")
	require.Zero(t, jsInt(t, evil, `document.querySelectorAll('form').length`), "no form, no CSRF token")
	require.Equal(t, http.StatusMisdirectedRequest, jsInt(t, evil,
		`fetch('/admin/plans/`+p.ID.String()+`/approve', {method: 'POST', body: new URLSearchParams({csrf: 'x'})}).then(r => r.status)`))
	screenshot(t, evil, "rebinding-refused.png")
	require.Equal(t, before, snapshot(t, w.Pool), "nothing written")
}
