// Package qbittorrent is a client for the qBittorrent Web API v2 (tested
// against qbittorrent-nox 4.5.2, API 2.8.19; qBittorrent 5's renamed
// endpoints are detected). It covers what the acquisition pipeline needs:
// login, add, info, pause/stop and delete.
//
// The client keeps the session cookie itself rather than in a cookie jar, so a
// caller's *http.Client is used as given and never modified. A request refused
// with 403 (session expired, qBittorrent restarted) logs in again once and is
// resent.
package qbittorrent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Default values applied by New.
const (
	// DefaultTimeout bounds each HTTP request (login included) when
	// Config.Timeout is zero. qBittorrent answers API calls in milliseconds;
	// 30 s leaves room for a busy daemon hashing a large torrent.
	DefaultTimeout = 30 * time.Second
	// maxResponseBody caps what the client reads from one response:
	// torrents/info for thousands of torrents stays well below it.
	maxResponseBody = 64 << 20
)

// Config configures a Client.
type Config struct {
	// BaseURL of the WebUI, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// Username and Password for auth/login. Both may be empty when the WebUI
	// bypasses authentication for the client's address.
	Username string
	Password string
	// Timeout bounds every request. Default DefaultTimeout; negative is
	// refused.
	Timeout time.Duration
	// HTTPClient sends the requests. Default: a client with its own clone of
	// http.DefaultTransport (nothing global is modified either way).
	HTTPClient *http.Client
	// Logger receives re-logins and endpoint fallbacks. Default: discard.
	Logger *slog.Logger
}

// Client talks to one qBittorrent WebUI. It is safe for concurrent use.
type Client struct {
	base     *url.URL
	username string
	password string
	timeout  time.Duration
	hc       *http.Client
	log      *slog.Logger

	mu         sync.Mutex
	session    *http.Cookie // nil until the first login
	stopPath   string       // "" until known: pausePath or stopPath
	apiVersion string
}

// New applies defaults, validates cfg and returns a client. It does not
// contact qBittorrent: the first call logs in.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, invalidArg("config: BaseURL is required")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: config: BaseURL: %w", ErrInvalidArgument, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalidArg("config: BaseURL %q must be http(s)://host[:port]", cfg.BaseURL)
	}
	if cfg.Timeout < 0 {
		return nil, invalidArg("config: Timeout %s is negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HTTPClient == nil {
		tr, ok := http.DefaultTransport.(*http.Transport)
		if !ok {
			return nil, invalidArg("config: http.DefaultTransport is not an *http.Transport; pass HTTPClient")
		}
		cfg.HTTPClient = &http.Client{Transport: tr.Clone()}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{
		base:     u,
		username: cfg.Username,
		password: cfg.Password,
		timeout:  cfg.Timeout,
		hc:       cfg.HTTPClient,
		log:      cfg.Logger,
	}, nil
}

// API paths used by the client (and served by qbtfake).
const (
	PathLogin      = "/api/v2/auth/login"
	PathAPIVersion = "/api/v2/app/webapiVersion"
	PathAdd        = "/api/v2/torrents/add"
	PathInfo       = "/api/v2/torrents/info"
	PathPause      = "/api/v2/torrents/pause" // qBittorrent < 5 (API < 2.11)
	PathStop       = "/api/v2/torrents/stop"  // qBittorrent >= 5 (API >= 2.11)
	PathDelete     = "/api/v2/torrents/delete"
)

// Login opens a session (auth/login) and keeps its cookie. Wrong credentials
// give ErrUnauthorized; an IP ban gives ErrBanned.
func (c *Client) Login(ctx context.Context) error {
	form := url.Values{"username": {c.username}, "password": {c.password}}
	resp, body, err := c.send(ctx, http.MethodPost, PathLogin, nil, formBody(form), nil)
	if err != nil {
		return fmt.Errorf("qbittorrent login: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("qbittorrent login: %w: %q", ErrBanned, truncate(body))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("qbittorrent login: %w", httpError(http.MethodPost, PathLogin, resp.StatusCode, body))
	case strings.TrimSpace(string(body)) != "Ok.":
		return fmt.Errorf("qbittorrent login as %q: %w: %q", c.username, ErrUnauthorized, truncate(body))
	}
	// The cookie is SID up to qBittorrent 5.0 and QBT_SID_<port> later:
	// keep whatever session cookie the login set.
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "SID" || strings.HasPrefix(ck.Name, "QBT_SID") {
			sess = &http.Cookie{Name: ck.Name, Value: ck.Value}
		}
	}
	if sess == nil {
		return fmt.Errorf("qbittorrent login: %w: answer Ok. without a session cookie", ErrUnauthorized)
	}
	c.mu.Lock()
	c.session = sess
	c.mu.Unlock()
	return nil
}

// AddRequest describes torrents to add. At least one of URLs and Torrent is
// required.
type AddRequest struct {
	URLs     []string // magnet links or http(s) URLs of .torrent files
	Torrent  []byte   // the content of a .torrent file
	SavePath string   // where qBittorrent stores the content; default: its own
	Tags     []string // e.g. ManagedTag(plan); no commas
	Paused   bool     // add without starting
}

// ManagedTag is the tag that marks torrents owned by an acquisition plan.
func ManagedTag(planID string) string { return "tp-" + planID }

// Add submits torrents (torrents/add). qBittorrent answers "Fails." both for
// an invalid torrent and for one already present: that is ErrAddRejected, and
// the caller reconciles by hash or tag. A connection lost after sending may
// still have added the torrent.
func (c *Client) Add(ctx context.Context, req AddRequest) error {
	if len(req.URLs) == 0 && len(req.Torrent) == 0 {
		return invalidArg("add: neither URLs nor Torrent given")
	}
	for _, u := range req.URLs {
		if strings.TrimSpace(u) == "" || strings.ContainsAny(u, "\r\n") {
			return invalidArg("add: URL %q is empty or spans lines", u)
		}
	}
	for _, t := range req.Tags {
		if strings.TrimSpace(t) == "" || strings.Contains(t, ",") {
			return invalidArg("add: tag %q is empty or contains a comma", t)
		}
	}
	body := func() (io.Reader, string, error) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		fields := [][2]string{
			{"savepath", req.SavePath},
			{"tags", strings.Join(req.Tags, ",")},
			// qBittorrent 5 renamed paused to stopped; each version ignores
			// the other's name.
			{"paused", fmt.Sprint(req.Paused)},
			{"stopped", fmt.Sprint(req.Paused)},
		}
		if len(req.URLs) > 0 {
			fields = append(fields, [2]string{"urls", strings.Join(req.URLs, "\n")})
		}
		for _, f := range fields {
			if f[1] == "" {
				continue
			}
			if err := w.WriteField(f[0], f[1]); err != nil {
				return nil, "", fmt.Errorf("write field %s: %w", f[0], err)
			}
		}
		if len(req.Torrent) > 0 {
			part, err := w.CreateFormFile("torrents", "upload.torrent")
			if err != nil {
				return nil, "", fmt.Errorf("create torrent part: %w", err)
			}
			if _, err := part.Write(req.Torrent); err != nil {
				return nil, "", fmt.Errorf("write torrent part: %w", err)
			}
		}
		if err := w.Close(); err != nil {
			return nil, "", fmt.Errorf("close multipart body: %w", err)
		}
		return &buf, w.FormDataContentType(), nil
	}
	out, err := c.call(ctx, http.MethodPost, PathAdd, nil, body)
	if err != nil {
		return fmt.Errorf("qbittorrent add: %w", err)
	}
	if err := addOutcome(out); err != nil {
		return fmt.Errorf("qbittorrent add: %w", err)
	}
	return nil
}

// Filter selects torrents for Torrents. Empty fields do not filter.
type Filter struct {
	Hashes []string // info hashes (v1: 40 hex digits, v2: 64)
	Tag    string
}

// Torrents lists torrents (torrents/info) matching f.
func (c *Client) Torrents(ctx context.Context, f Filter) ([]Torrent, error) {
	q := url.Values{}
	if len(f.Hashes) > 0 {
		if err := checkHashes(f.Hashes); err != nil {
			return nil, fmt.Errorf("qbittorrent torrents: %w", err)
		}
		q.Set("hashes", strings.Join(f.Hashes, "|"))
	}
	if f.Tag != "" {
		q.Set("tag", f.Tag)
	}
	out, err := c.call(ctx, http.MethodGet, PathInfo, q, nil)
	if err != nil {
		return nil, fmt.Errorf("qbittorrent torrents: %w", err)
	}
	ts, err := DecodeTorrents(out)
	if err != nil {
		return nil, fmt.Errorf("qbittorrent torrents: %w", err)
	}
	return ts, nil
}

// Pause stops the torrents (torrents/pause, renamed torrents/stop in
// qBittorrent 5). The endpoint is chosen from app/webapiVersion and, should
// that guess be refused with 404, the other one is tried and remembered.
func (c *Client) Pause(ctx context.Context, hashes ...string) error {
	if err := checkHashes(hashes); err != nil {
		return fmt.Errorf("qbittorrent pause: %w", err)
	}
	path, err := c.pausePath(ctx)
	if err != nil {
		return fmt.Errorf("qbittorrent pause: %w", err)
	}
	form := url.Values{"hashes": {strings.Join(hashes, "|")}}
	_, err = c.call(ctx, http.MethodPost, path, nil, formBody(form))
	if errors.Is(err, ErrNotFound) {
		other := PathStop
		if path == PathStop {
			other = PathPause
		}
		c.log.InfoContext(ctx, "qbittorrent: pause endpoint missing, trying the other name",
			slog.String("tried", path), slog.String("next", other))
		if _, err = c.call(ctx, http.MethodPost, other, nil, formBody(form)); err == nil {
			c.mu.Lock()
			c.stopPath = other
			c.mu.Unlock()
		}
	}
	if err != nil {
		return fmt.Errorf("qbittorrent pause: %w", err)
	}
	return nil
}

// Delete removes the torrents (torrents/delete) and, with deleteFiles, their
// downloaded content. Unknown hashes are ignored by qBittorrent.
func (c *Client) Delete(ctx context.Context, deleteFiles bool, hashes ...string) error {
	if err := checkHashes(hashes); err != nil {
		return fmt.Errorf("qbittorrent delete: %w", err)
	}
	form := url.Values{"hashes": {strings.Join(hashes, "|")}, "deleteFiles": {fmt.Sprint(deleteFiles)}}
	if _, err := c.call(ctx, http.MethodPost, PathDelete, nil, formBody(form)); err != nil {
		return fmt.Errorf("qbittorrent delete: %w", err)
	}
	return nil
}

// APIVersion returns app/webapiVersion, e.g. "2.8.19" (cached after the
// first successful call).
func (c *Client) APIVersion(ctx context.Context) (string, error) {
	c.mu.Lock()
	v := c.apiVersion
	c.mu.Unlock()
	if v != "" {
		return v, nil
	}
	out, err := c.call(ctx, http.MethodGet, PathAPIVersion, nil, nil)
	if err != nil {
		return "", fmt.Errorf("qbittorrent api version: %w", err)
	}
	v = strings.TrimSpace(string(out))
	c.mu.Lock()
	c.apiVersion = v
	c.mu.Unlock()
	return v, nil
}

func (c *Client) pausePath(ctx context.Context) (string, error) {
	c.mu.Lock()
	p := c.stopPath
	c.mu.Unlock()
	if p != "" {
		return p, nil
	}
	v, err := c.APIVersion(ctx)
	if err != nil {
		return "", err
	}
	p = PathPause
	if versionAtLeast(v, 2, 11) {
		p = PathStop
	}
	c.mu.Lock()
	c.stopPath = p
	c.mu.Unlock()
	return p, nil
}

// bodyFunc builds a request body; it is called again when a request is
// resent after a re-login.
type bodyFunc func() (io.Reader, string, error)

func formBody(v url.Values) bodyFunc {
	return func() (io.Reader, string, error) {
		return strings.NewReader(v.Encode()), "application/x-www-form-urlencoded", nil
	}
}

// call sends an authenticated API request and returns the body of a 200
// answer. It logs in first when there is no session yet, and once more when
// the session is refused.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, body bodyFunc) ([]byte, error) {
	c.mu.Lock()
	sess := c.session
	c.mu.Unlock()
	if sess == nil {
		if err := c.Login(ctx); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		sess = c.session
		c.mu.Unlock()
		resp, out, err := c.send(ctx, method, path, q, body, sess)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return out, nil
		}
		if resp.StatusCode == http.StatusForbidden && attempt == 0 {
			c.log.InfoContext(ctx, "qbittorrent: session refused, logging in again", slog.String("path", path))
			if err := c.Login(ctx); err != nil {
				return nil, err
			}
			continue
		}
		return nil, httpError(method, path, resp.StatusCode, out)
	}
}

// send performs one request under the per-request timeout and reads the
// whole (capped) body.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body bodyFunc, sess *http.Cookie) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var (
		rd    io.Reader
		ctype string
	)
	if body != nil {
		var err error
		if rd, ctype, err = body(); err != nil {
			return nil, nil, fmt.Errorf("%s %s: build body: %w", method, path, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if sess != nil {
		req.AddCookie(sess)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	return resp, out, nil
}

func httpError(method, path string, status int, body []byte) *HTTPError {
	return &HTTPError{Method: method, Path: path, Status: status, Body: truncate(body)}
}

func truncate(b []byte) string {
	if len(b) > maxErrorBody {
		b = b[:maxErrorBody]
	}
	return string(b)
}
