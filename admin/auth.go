package admin

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Role is what an authenticated user may do.
type Role int

// The roles, each allowed what the one before it is.
const (
	// RoleNone is an unauthenticated request: it sees nothing but the
	// health and metrics endpoints.
	RoleNone Role = iota
	// RoleViewer reads every page.
	RoleViewer
	// RoleOperator also approves, cancels, resolves decisions and retries.
	RoleOperator
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	}
	return "none"
}

// ParseRole reads "viewer" or "operator".
func ParseRole(s string) (Role, error) {
	switch s {
	case "viewer":
		return RoleViewer, nil
	case "operator":
		return RoleOperator, nil
	}
	return RoleNone, fmt.Errorf("role must be viewer or operator, got %q", s)
}

// Identity is who made a request: the user recorded on what they do.
type Identity struct {
	User string
	Role Role
}

// Auth says how requests are authenticated. Exactly one of Tokens, Proxy
// and Local is set; cmd allows Local only on a loopback listener or with
// --insecure-no-auth.
type Auth struct {
	// Tokens authenticates "Authorization: Bearer <token>" or Basic with
	// the token as password and its user as user name.
	Tokens *TokenSet
	// Proxy trusts a user header set by an authenticating proxy
	// (oauth2-proxy), from the proxy's addresses only.
	Proxy *TrustedProxy
	// Local authenticates nobody: every request acts as this operator.
	Local string
}

func (a Auth) validate() error {
	set := 0
	for _, on := range []bool{a.Tokens != nil, a.Proxy != nil, a.Local != ""} {
		if on {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("admin auth: exactly one of tokens, trusted proxy and local is required, got %d", set)
	}
	if a.Proxy != nil {
		return a.Proxy.validate()
	}
	return nil
}

// identify returns who made r; ok is false when r carries no credential
// this Auth accepts.
func (a Auth) identify(r *http.Request) (Identity, bool) {
	switch {
	case a.Tokens != nil:
		return a.Tokens.identify(r)
	case a.Proxy != nil:
		return a.Proxy.identify(r)
	}
	return Identity{User: a.Local, Role: RoleOperator}, true
}

// challenge is the WWW-Authenticate header of a 401, so that a browser
// asks for the token; a proxy does its own login.
func (a Auth) challenge() string {
	if a.Tokens != nil {
		return `Basic realm="taskport admin", charset="UTF-8"`
	}
	return ""
}

// TokenSet is the admin tokens, held as SHA-256 hashes: a token is 128 random
// bits (NewToken), so a plain hash cannot be reversed by guessing, and the
// secret that holds the set reveals no token.
type TokenSet struct {
	tokens []tokenEntry
}

type tokenEntry struct {
	user string
	role Role
	hash [sha256.Size]byte
}

// hashPrefix marks the hash in a token line, naming its algorithm.
const hashPrefix = "sha256:"

// ParseTokens reads a token file: one token a line, "<user> <role>
// sha256:<hex>", as NewToken prints it; blank lines and lines starting
// with # are skipped. An empty set is an error: it would lock everybody out
// without saying why.
func ParseTokens(data []byte) (*TokenSet, error) {
	var s TokenSet
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("token line %d: want \"<user> <role> sha256:<hex>\", got %d fields", n, len(f))
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("token line %d: %w", n, err)
		}
		hexHash, ok := strings.CutPrefix(f[2], hashPrefix)
		if !ok {
			return nil, fmt.Errorf("token line %d: the hash must start with %q", n, hashPrefix)
		}
		e := tokenEntry{user: f[0], role: role}
		b, err := hex.DecodeString(hexHash)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("token line %d: the hash must be %d hex digits", n, 2*sha256.Size)
		}
		copy(e.hash[:], b)
		s.tokens = append(s.tokens, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if len(s.tokens) == 0 {
		return nil, errors.New("no admin tokens: create one with `taskport admin token`")
	}
	return &s, nil
}

// NewToken returns a new random token for user with role, and the line of
// the token file that admits it (the token's hash, never the token).
func NewToken(user string, role Role) (token, line string, err error) {
	if user == "" || strings.ContainsFunc(user, func(r rune) bool { return r <= ' ' || r == ':' }) {
		// A colon would end the user name of a browser's Basic login.
		return "", "", fmt.Errorf("token user must be a non-empty word without a colon, got %q", user)
	}
	if role != RoleViewer && role != RoleOperator {
		return "", "", fmt.Errorf("token role must be viewer or operator, got %s", role)
	}
	token = rand.Text()
	sum := sha256.Sum256([]byte(token))
	return token, fmt.Sprintf("%s %s %s%s", user, role, hashPrefix, hex.EncodeToString(sum[:])), nil
}

// identify checks the request's token against every entry in constant time
// per entry, so the time taken says nothing about how close a guess was.
func (s *TokenSet) identify(r *http.Request) (Identity, bool) {
	token, basicUser, basic := "", "", false
	if user, pass, ok := r.BasicAuth(); ok {
		token, basicUser, basic = pass, user, true
	} else if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		token = strings.TrimSpace(bearer)
	}
	if token == "" {
		return Identity{}, false
	}
	sum := sha256.Sum256([]byte(token))
	var found *tokenEntry
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].hash[:]) == 1 {
			found = &s.tokens[i]
		}
	}
	if found == nil || (basic && basicUser != found.user) {
		return Identity{}, false
	}
	return Identity{User: found.user, Role: found.role}, true
}

// TrustedProxy reads the user an authenticating proxy (oauth2-proxy) puts in
// a header. The header is believed only on a connection from one of the
// proxy's own addresses: anyone else could set it.
type TrustedProxy struct {
	// Header carries the user name, e.g. X-Forwarded-User (oauth2-proxy
	// with --pass-user-headers) or X-Auth-Request-User (auth_request).
	Header string
	// From are the addresses the proxy connects from, each at most 256
	// addresses wide (127.0.0.1/32 for a sidecar in the admin's pod).
	From []netip.Prefix
	// Operators are the users with the operator role; every other user
	// the proxy lets through is a viewer.
	Operators []string
}

func (p *TrustedProxy) validate() error {
	if p.Header == "" {
		return errors.New("admin auth: the trusted proxy's user header is required")
	}
	if len(p.From) == 0 {
		return errors.New("admin auth: the trusted proxy's addresses are required")
	}
	for _, n := range p.From {
		if n.Addr().BitLen()-n.Bits() > maxProxyHostBits {
			return fmt.Errorf("admin auth: trusted proxy %s spans more than %d addresses: name the proxy's own addresses, not a network other clients share",
				n, 1<<maxProxyHostBits)
		}
	}
	return nil
}

// maxProxyHostBits bounds each trusted proxy network at 256 addresses (an
// IPv4 /24, an IPv6 /120): enough for an ingress's nodes, too few for a pod
// or node network, where every other workload (Prometheus, any pod) could
// set the user header itself.
const maxProxyHostBits = 8

func (p *TrustedProxy) identify(r *http.Request) (Identity, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return Identity{}, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return Identity{}, false
	}
	addr = addr.Unmap()
	if !slices.ContainsFunc(p.From, func(n netip.Prefix) bool { return n.Contains(addr) }) {
		return Identity{}, false
	}
	user := strings.TrimSpace(r.Header.Get(p.Header))
	if user == "" {
		return Identity{}, false
	}
	if slices.Contains(p.Operators, user) {
		return Identity{User: user, Role: RoleOperator}, true
	}
	return Identity{User: user, Role: RoleViewer}, true
}
