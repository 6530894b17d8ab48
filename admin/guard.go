package admin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// MaxBody caps the body of a state-changing request: a form with a note.
const MaxBody = 64 << 10

// The CSRF defence is a double-submit token: a random per-browser-session
// cookie that every form repeats in a hidden field. Another site can make
// the browser send the cookie but cannot read it to fill the field.
const (
	csrfCookie = "taskport_csrf"
	csrfField  = "csrf"
)

type identityKey struct{}

// identityOf is who made r, as guard put it there.
func identityOf(r *http.Request) Identity {
	id, _ := r.Context().Value(identityKey{}).(Identity)
	return id
}

// guard admits r to h only if it is authenticated with at least role need
// (401, 403 otherwise); a state change must also come from an admin page
// (Origin or Sec-Fetch-Site), carry the session's CSRF token and fit in
// MaxBody (403, 413). A refused request reaches no handler, so it writes
// nothing.
func (s *Server) guard(need Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := s.auth.identify(r)
		if !ok {
			if c := s.auth.challenge(); c != "" {
				w.Header().Set("WWW-Authenticate", c)
			}
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		if id.Role < need {
			http.Error(w, fmt.Sprintf("forbidden: this needs the %s role; %s is a %s", need, id.User, id.Role), http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := s.sameOrigin(r); err != nil {
				http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
			if err := r.ParseForm(); err != nil {
				if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
					http.Error(w, fmt.Sprintf("request body larger than %d bytes", MaxBody), http.StatusRequestEntityTooLarge)
					return
				}
				http.Error(w, "unreadable form", http.StatusBadRequest)
				return
			}
			if !csrfMatches(r) {
				http.Error(w, "forbidden: missing or stale CSRF token; reload the page", http.StatusForbidden)
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	}
}

// sameOrigin fails closed: a state change needs an Origin naming this
// admin, or, from a browser that sends no Origin, Sec-Fetch-Site:
// same-origin. A request with neither is refused.
func (s *Server) sameOrigin(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" {
		return fmt.Errorf("a %s request cannot change anything", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || (u.Host != r.Host && !slices.Contains(s.origins, origin)) {
			return fmt.Errorf("origin %q is not this admin", origin)
		}
		return nil
	}
	if site == "same-origin" {
		return nil
	}
	return errors.New("a state change needs an Origin or Sec-Fetch-Site header")
}

// hostAllowed is the defence against DNS rebinding: a page of another
// site whose name the attacker points at this admin's address is same-origin
// with itself, so Origin checks pass, but the browser still names the
// attacker's host in Host. The admin answers only to its public origins'
// hosts and, without authentication (where every request is the local
// operator), to loopback names on the port it serves.
func (s *Server) hostAllowed(r *http.Request) bool {
	host := strings.ToLower(r.Host)
	if s.hosts[host] {
		return true
	}
	if s.auth.Local == "" {
		return false
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		return false
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	if _, served, err := net.SplitHostPort(local.String()); err != nil || port != served {
		return false
	}
	if name == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.IsLoopback()
}

// originHosts are the Host headers that name origins: host[:port] as the
// origin writes it, and without the scheme's default port as browsers send
// it.
func originHosts(origins []string) (map[string]bool, error) {
	hosts := map[string]bool{}
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("admin: public origin must be http(s)://host[:port], got %q", o)
		}
		host := strings.ToLower(u.Host)
		hosts[host] = true
		defaultPort := map[string]string{"http": "80", "https": "443"}[u.Scheme]
		if u.Port() == "" {
			hosts[net.JoinHostPort(strings.ToLower(u.Hostname()), defaultPort)] = true
		} else if u.Port() == defaultPort {
			hosts[strings.TrimSuffix(host, ":"+defaultPort)] = true
		}
	}
	return hosts, nil
}

func csrfMatches(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	field := r.PostFormValue(csrfField)
	return err == nil && c.Value != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(field)) == 1
}

// session is what a page needs to know about its viewer: who they are,
// whether to show actions, and the CSRF token its forms repeat.
type session struct {
	User   string
	Role   Role
	CanAct bool
	CSRF   string
}

// session returns r's session, setting the CSRF cookie when r has none.
func (s *Server) session(w http.ResponseWriter, r *http.Request) session {
	id := identityOf(r)
	out := session{User: id.User, Role: id.Role, CanAct: id.Role >= RoleOperator}
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 26 {
		out.CSRF = c.Value
		return out
	}
	out.CSRF = rand.Text()
	http.SetCookie(w, adminCookie(r, csrfCookie, out.CSRF, 0))
	return out
}

// adminCookie is a cookie of the admin's pages: sent only to them, never
// read by scripts, never sent from another site, and over HTTPS only when
// the admin is reached over HTTPS.
func adminCookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: "/admin", MaxAge: maxAge, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
	}
}

// The result of an action, shown once by the page its redirect lands on. It
// rides in a cookie this server set, not in the URL: a link cannot make the
// admin show a banner of someone else's words.
const doneCookie = "taskport_done"

func setDone(w http.ResponseWriter, r *http.Request, done string) {
	http.SetCookie(w, adminCookie(r, doneCookie, base64.RawURLEncoding.EncodeToString([]byte(done)), 60))
}

// takeDone returns the result setDone left for this page, and clears it.
func takeDone(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(doneCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, adminCookie(r, doneCookie, "", -1))
	done, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return ""
	}
	return string(done)
}
