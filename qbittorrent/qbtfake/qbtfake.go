// Package qbtfake is an in-memory qBittorrent Web API v2 server for fault
// tests: it speaks the endpoints the qbittorrent client uses, with the same
// answers as qbittorrent-nox 4.5.2 (or 5.x with Options.APIVersion >= 2.11),
// and can misbehave on demand in ways a real daemon cannot be made to:
// drop the connection right after accepting an add, answer 5xx, answer
// slowly, forget sessions.
//
// The real daemon is exercised by the qbittorrent package's end-to-end test;
// this server exists for the faults.
package qbtfake

import (
	"crypto/rand"
	"crypto/sha1" // stands in for an info hash, not for security
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskport/taskport/qbittorrent"
)

// Options configure the fake. Zero values take the defaults documented on
// each field.
type Options struct {
	// Username and Password accepted by auth/login. Default admin/adminadmin
	// (qBittorrent 4's defaults).
	Username, Password string
	// APIVersion answered by app/webapiVersion. Default "2.8.19"
	// (qBittorrent 4.5.2), which serves torrents/pause; from "2.11" on
	// (qBittorrent 5) only torrents/stop exists and pause answers 404.
	APIVersion string
	// MaxAuthFailures is the number of failed logins after which auth/login
	// answers 403 (banned), like WebUI\MaxAuthenticationFailCount. Default 5.
	MaxAuthFailures int
	// DefaultSavePath is used when an add names none. Default "/downloads".
	DefaultSavePath string
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to give the client, e.g. http://127.0.0.1:41234.
	URL string

	srv  *httptest.Server
	opts Options

	mu           sync.Mutex
	sessions     map[string]bool
	torrents     map[string]*torrent
	order        []string // hashes in insertion order: info lists like qBittorrent does
	deleted      map[string]bool
	authFailures int
	dropAdds     int
	failNext     int
	failStatus   int
	delay        time.Duration
	calls        map[string]int
	// added counts, per tag, the torrents that add requests put in (not
	// the requests refused as duplicates or failed).
	added map[string]int
}

type torrent struct {
	qbittorrent.Torrent
	paused bool
	// metaDL: a magnet whose metadata has not arrived; qBittorrent then
	// reports no content path and size 0.
	metaDL bool
}

// Start runs a fake on a loopback port and closes it when tb ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.Username == "" && opts.Password == "" {
		opts.Username, opts.Password = "admin", "adminadmin"
	}
	if opts.APIVersion == "" {
		opts.APIVersion = "2.8.19"
	}
	if opts.MaxAuthFailures == 0 {
		opts.MaxAuthFailures = 5
	}
	if opts.DefaultSavePath == "" {
		opts.DefaultSavePath = "/downloads"
	}
	s := &Server{
		opts:     opts,
		sessions: map[string]bool{},
		torrents: map[string]*torrent{},
		deleted:  map[string]bool{},
		calls:    map[string]int{},
		added:    map[string]int{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	tb.Cleanup(s.srv.Close)
	return s
}

// DropNextAdds makes the next n torrents/add requests add their torrents and
// then close the connection without answering: the client sees a transport
// error although the torrent is in.
func (s *Server) DropNextAdds(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAdds = n
}

// FailNext makes the next n requests (login included) answer status, e.g.
// 500 or 503, without doing anything.
func (s *Server) FailNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failStatus = n, status
}

// SetDelay makes every request wait d before it is handled (or until the
// client gives up); zero turns the delay off.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// ExpireSessions forgets every session cookie, as a qBittorrent restart or a
// session timeout does: the next API call gets 403.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.sessions)
}

// SetProgress sets a torrent's progress in [0, 1] and derives amount left and
// state from it.
func (s *Server) SetProgress(hash string, progress float64) error {
	if !(progress >= 0 && progress <= 1) {
		return fmt.Errorf("qbtfake: progress %v outside [0, 1]", progress)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.torrents[strings.ToLower(hash)]
	if !ok {
		return fmt.Errorf("qbtfake: set progress: no torrent %s", hash)
	}
	t.Progress = progress
	if t.metaDL {
		t.metaDL = false
		t.ContentPath = path.Join(t.SavePath, t.Name)
	}
	t.AmountLeft = t.Size - int64(float64(t.Size)*progress)
	if progress == 1 {
		t.AmountLeft = 0
	}
	t.State = s.state(t)
	return nil
}

// Complete marks a torrent fully downloaded.
func (s *Server) Complete(hash string) error { return s.SetProgress(hash, 1) }

// Torrents returns a snapshot of the torrents held, in insertion order.
func (s *Server) Torrents() []qbittorrent.Torrent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]qbittorrent.Torrent, 0, len(s.order))
	for _, h := range s.order {
		out = append(out, s.torrents[h].Torrent)
	}
	return out
}

// Paused reports whether the torrent exists and is paused (stopped).
func (s *Server) Paused(hash string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.torrents[strings.ToLower(hash)]
	return ok && t.paused
}

// Deleted reports whether the torrent was deleted, and whether its files
// were deleted with it.
func (s *Server) Deleted(hash string) (deleted, withFiles bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	withFiles, deleted = s.deleted[strings.ToLower(hash)]
	return deleted, withFiles
}

// Calls counts the requests received for an API path (e.g.
// qbittorrent.PathAdd), faulty ones included.
func (s *Server) Calls(apiPath string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[apiPath]
}

// Added counts the torrents carrying tag that add requests put in, over the
// server's life: a torrent deleted and added again counts twice. Requests
// refused as duplicates ("Fails.") or failed on purpose do not count.
func (s *Server) Added(tag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.added[tag]
}

// AddRequests counts torrents/add requests, rejected and dropped ones
// included.
func (s *Server) AddRequests() int { return s.Calls(qbittorrent.PathAdd) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls[r.URL.Path]++
	delay := s.delay
	fail := 0
	if s.failNext > 0 {
		s.failNext--
		fail = s.failStatus
	}
	s.mu.Unlock()

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if fail != 0 {
		http.Error(w, http.StatusText(fail), fail)
		return
	}
	if r.URL.Path == qbittorrent.PathLogin {
		s.login(w, r)
		return
	}
	if !s.authenticated(r) {
		// qBittorrent answers 403 "Forbidden" to any API call without a
		// valid session.
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	v5 := s.v5()
	switch {
	case r.URL.Path == qbittorrent.PathAPIVersion:
		_, _ = io.WriteString(w, s.opts.APIVersion)
	case r.URL.Path == qbittorrent.PathAdd && r.Method == http.MethodPost:
		s.add(w, r)
	case r.URL.Path == qbittorrent.PathInfo:
		s.info(w, r)
	case r.URL.Path == qbittorrent.PathPause && !v5 && r.Method == http.MethodPost,
		r.URL.Path == qbittorrent.PathStop && v5 && r.Method == http.MethodPost:
		s.pause(w, r)
	case r.URL.Path == qbittorrent.PathDelete && r.Method == http.MethodPost:
		s.delete(w, r)
	default:
		http.Error(w, "Not Found", http.StatusNotFound)
	}
}

func (s *Server) v5() bool {
	var major, minor int
	_, err := fmt.Sscanf(s.opts.APIVersion, "%d.%d", &major, &minor)
	return err == nil && (major > 2 || major == 2 && minor >= 11)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.authFailures >= s.opts.MaxAuthFailures {
		http.Error(w, "Your IP address has been banned after too many failed authentication attempts.", http.StatusForbidden)
		return
	}
	if r.PostForm.Get("username") != s.opts.Username || r.PostForm.Get("password") != s.opts.Password {
		s.authFailures++
		_, _ = io.WriteString(w, "Fails.")
		return
	}
	sid := make([]byte, 16)
	_, _ = rand.Read(sid)
	id := hex.EncodeToString(sid)
	s.sessions[id] = true
	http.SetCookie(w, &http.Cookie{Name: "SID", Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	_, _ = io.WriteString(w, "Ok.")
}

func (s *Server) authenticated(r *http.Request) bool {
	ck, err := r.Cookie("SID")
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[ck.Value]
}

func (s *Server) add(w http.ResponseWriter, r *http.Request) {
	// Like qBittorrent, accept URLs form-encoded as well as multipart.
	err := r.ParseMultipartForm(32 << 20)
	if errors.Is(err, http.ErrNotMultipart) {
		err = r.ParseForm()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// A candidate whose metaDL is set is a magnet without a known size.
	var candidates []torrent
	for _, u := range strings.Split(r.FormValue("urls"), "\n") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		t, err := fromURL(u)
		if err != nil {
			continue // qBittorrent skips what it cannot use
		}
		candidates = append(candidates, torrent{Torrent: t, metaDL: strings.HasPrefix(u, "magnet:") && t.Size == 0})
	}
	if r.MultipartForm != nil {
		for _, fhs := range r.MultipartForm.File {
			for _, fh := range fhs {
				t, err := fromFile(fh)
				if err != nil {
					continue
				}
				candidates = append(candidates, torrent{Torrent: t})
			}
		}
	}
	savePath := r.FormValue("savepath")
	if savePath == "" {
		savePath = s.opts.DefaultSavePath
	}
	paused := r.FormValue("paused") == "true"
	if s.v5() {
		paused = r.FormValue("stopped") == "true"
	}
	var tags []string
	for _, t := range strings.Split(r.FormValue("tags"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}

	s.mu.Lock()
	added := 0
	for _, c := range candidates {
		if _, dup := s.torrents[c.Hash]; dup {
			continue
		}
		t := &c
		t.SavePath = savePath
		if !t.metaDL {
			t.ContentPath = path.Join(savePath, t.Name)
		}
		t.Tags = strings.Join(tags, ", ")
		t.AmountLeft = t.Size
		t.paused = paused
		t.State = s.state(t)
		s.torrents[c.Hash] = t
		s.order = append(s.order, c.Hash)
		added++
		for _, tag := range tags {
			s.added[tag]++
		}
	}
	drop := s.dropAdds > 0
	if drop {
		s.dropAdds--
	}
	s.mu.Unlock()

	if drop {
		// The torrent is in; the answer never leaves.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "qbtfake: cannot drop the connection: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_ = conn.Close()
		return
	}
	if added == 0 {
		_, _ = io.WriteString(w, "Fails.")
		return
	}
	_, _ = io.WriteString(w, "Ok.")
}

// fromURL derives a torrent from a magnet link (hash and name from xt/dn,
// size from xl) or from a .torrent URL (hash = SHA-1 of the URL: the fake
// does not fetch it).
func fromURL(raw string) (qbittorrent.Torrent, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return qbittorrent.Torrent{}, fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme == "http" || u.Scheme == "https" {
		sum := sha1.Sum([]byte(raw))
		name := path.Base(u.Path)
		return qbittorrent.Torrent{Hash: hex.EncodeToString(sum[:]), Name: strings.TrimSuffix(name, ".torrent")}, nil
	}
	if u.Scheme != "magnet" {
		return qbittorrent.Torrent{}, fmt.Errorf("unsupported source %q", raw)
	}
	q := u.Query()
	xt := strings.ToLower(q.Get("xt"))
	hash, ok := strings.CutPrefix(xt, "urn:btih:")
	if !ok || len(hash) != 40 {
		return qbittorrent.Torrent{}, errors.New("magnet without a hex btih")
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return qbittorrent.Torrent{}, fmt.Errorf("magnet btih: %w", err)
	}
	var size int64
	_, _ = fmt.Sscan(q.Get("xl"), &size)
	name := q.Get("dn")
	if name == "" {
		name = hash
	}
	return qbittorrent.Torrent{Hash: hash, Name: name, Size: max(size, 0)}, nil
}

func fromFile(fh *multipart.FileHeader) (qbittorrent.Torrent, error) {
	f, err := fh.Open()
	if err != nil {
		return qbittorrent.Torrent{}, fmt.Errorf("open upload: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return qbittorrent.Torrent{}, fmt.Errorf("read upload: %w", err)
	}
	tf, err := qbittorrent.ParseTorrentFile(b)
	if err != nil {
		return qbittorrent.Torrent{}, err
	}
	return qbittorrent.Torrent{Hash: tf.InfoHash, Name: tf.Name, Size: tf.Size}, nil
}

// state names the torrent's state the way qBittorrent does (4.x says
// paused, 5.x stopped).
func (s *Server) state(t *torrent) string {
	done := t.Progress >= 1
	switch {
	case t.paused && done && s.v5():
		return "stoppedUP"
	case t.paused && s.v5():
		return "stoppedDL"
	case t.paused && done:
		return "pausedUP"
	case t.paused:
		return "pausedDL"
	case t.metaDL:
		return "metaDL"
	case done:
		return "uploading"
	}
	return "downloading"
}

// selectHashes resolves a hashes= parameter ("h1|h2" or "all").
func (s *Server) selectHashes(param string) []string {
	if param == "all" {
		return slices.Clone(s.order)
	}
	var out []string
	for _, h := range strings.Split(param, "|") {
		if _, ok := s.torrents[strings.ToLower(h)]; ok {
			out = append(out, strings.ToLower(h))
		}
	}
	return out
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	hashes := s.order
	if q.Has("hashes") {
		hashes = s.selectHashes(q.Get("hashes"))
	}
	tag := q.Get("tag")
	out := []map[string]any{}
	for _, h := range hashes {
		t := s.torrents[h]
		if tag != "" && !t.HasTag(tag) {
			continue
		}
		// Beyond the fields the client reads, a few others qBittorrent
		// always sends, so decoding is tested against unknown fields.
		out = append(out, map[string]any{
			"hash": t.Hash, "name": t.Name, "state": t.State, "progress": t.Progress,
			"size": t.Size, "total_size": t.Size, "amount_left": t.AmountLeft,
			"save_path": t.SavePath, "content_path": t.ContentPath, "tags": t.Tags,
			"category": "", "dlspeed": 0, "eta": 8640000, "magnet_uri": "magnet:?xt=urn:btih:" + t.Hash,
		})
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.selectHashes(r.PostForm.Get("hashes")) {
		t := s.torrents[h]
		t.paused = true
		t.State = s.state(t)
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	withFiles := r.PostForm.Get("deleteFiles") == "true"
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.selectHashes(r.PostForm.Get("hashes")) {
		delete(s.torrents, h)
		s.order = slices.DeleteFunc(s.order, func(x string) bool { return x == h })
		s.deleted[h] = withFiles
	}
}
