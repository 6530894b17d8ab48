package stack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/runscmd"
)

// AdminAuth is the admin's flags: its authentication, and the Temporal UI
// its timeline links to. Authentication is on by default: without --auth
// the admin serves only a loopback address (where every request acts as
// the local OS user), unless --insecure-no-auth.
type AdminAuth struct {
	// TemporalUI is the Temporal UI's base URL; empty: no links.
	TemporalUI string
	// Mode is token, proxy, or empty.
	Mode string
	// TokensFile holds the token lines `taskport admin token` prints;
	// ADMIN_TOKENS may hold the same lines instead (a Kubernetes secret
	// as an environment variable).
	TokensFile     string
	ProxyHeader    string
	ProxyFrom      []string
	ProxyOperators []string
	Origins        []string
	InsecureNoAuth bool
}

// Bind adds the flags to fs.
func (a *AdminAuth) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&a.Mode, "auth", EnvOr("ADMIN_AUTH", ""),
		"token (bearer or basic tokens from --auth-tokens-file) or proxy (a user header from a trusted proxy such as oauth2-proxy); "+
			"empty: loopback only (env ADMIN_AUTH)")
	// No backquotes in a flag's help: pflag shows the first quoted word as
	// the value's placeholder.
	fs.StringVar(&a.TokensFile, "auth-tokens-file", EnvOr("ADMIN_TOKENS_FILE", ""),
		"token mode: file of the token lines taskport admin token prints (env ADMIN_TOKENS_FILE; or the lines in env ADMIN_TOKENS)")
	fs.StringVar(&a.ProxyHeader, "auth-proxy-header", EnvOr("ADMIN_PROXY_HEADER", "X-Forwarded-User"),
		"proxy mode: the header carrying the user (env ADMIN_PROXY_HEADER)")
	fs.StringSliceVar(&a.ProxyFrom, "auth-proxy-cidrs", splitEnv("ADMIN_PROXY_CIDRS"),
		"proxy mode: the proxy's own addresses (IPs or CIDRs of at most 256 addresses; 127.0.0.1 for a sidecar); the header is ignored from anywhere else (env ADMIN_PROXY_CIDRS, comma-separated)")
	fs.StringSliceVar(&a.ProxyOperators, "auth-proxy-operators", splitEnv("ADMIN_PROXY_OPERATORS"),
		"proxy mode: users with the operator role; everyone else the proxy admits is a viewer (env ADMIN_PROXY_OPERATORS)")
	fs.StringSliceVar(&a.Origins, "public-origin", splitEnv("ADMIN_PUBLIC_ORIGINS"),
		"origins (https://admin.example.com) the admin is published under: it answers only to their hosts (and, without --auth, to loopback names on its port), and forms may post from them; required with --auth (env ADMIN_PUBLIC_ORIGINS)")
	fs.StringVar(&a.TemporalUI, "temporal-ui-url", EnvOr("TEMPORAL_UI_URL", ""),
		"temporal engine: the Temporal UI's base URL (http://127.0.0.1:8233); the timeline links runs to it (env TEMPORAL_UI_URL)")
	fs.BoolVar(&a.InsecureNoAuth, "insecure-no-auth", false,
		"serve a non-loopback address without authentication: anyone who reaches it is an operator (env ADMIN_INSECURE_NO_AUTH=true)")
}

func splitEnv(key string) []string {
	if v := os.Getenv(key); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// AdminAccess is the admin's resolved authentication.
type AdminAccess struct {
	Auth       admin.Auth
	Origins    []string
	TemporalUI string
	// Mode names it for the log: token, proxy, loopback or insecure.
	Mode string
}

// Resolve checks the flags for a listener on addr and loads the tokens. A
// refused flag or variable value is a usage error (exit 2).
func (a AdminAuth) Resolve(addr string) (AdminAccess, error) {
	out := AdminAccess{Origins: a.Origins, Mode: a.Mode, TemporalUI: a.TemporalUI}
	// A malformed address is said to be so, not "not a loopback address"
	// (the caller may have checked it already, naming its flag).
	if err := CheckListenAddr("admin address", addr); err != nil {
		return out, err
	}
	if a.TemporalUI != "" {
		if u, err := url.Parse(a.TemporalUI); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return out, usage(fmt.Errorf("--temporal-ui-url must be an http(s) URL, got %q", a.TemporalUI))
		}
	}
	if a.Mode != "" && a.InsecureNoAuth {
		return out, usage(fmt.Errorf("--insecure-no-auth and --auth %s contradict each other", a.Mode))
	}
	if (a.Mode == "token" || a.Mode == "proxy") && len(a.Origins) == 0 {
		return out, usage(fmt.Errorf("--auth %s needs --public-origin (https://admin.example.com): the admin answers only to the hosts it is published under, against DNS rebinding", a.Mode))
	}
	switch a.Mode {
	case "token":
		data := []byte(os.Getenv("ADMIN_TOKENS"))
		if a.TokensFile != "" {
			var err error
			if data, err = os.ReadFile(a.TokensFile); err != nil {
				return out, fmt.Errorf("--auth-tokens-file: %w", err)
			}
		}
		tokens, err := admin.ParseTokens(data)
		if err != nil {
			err = fmt.Errorf("--auth token: %w", err)
			if a.TokensFile == "" {
				// Lines from ADMIN_TOKENS are a variable's value; a file's
				// are not, and fail the command like a file it cannot read.
				err = usage(err)
			}
			return out, err
		}
		out.Auth.Tokens = tokens
	case "proxy":
		p := &admin.TrustedProxy{Header: a.ProxyHeader, Operators: a.ProxyOperators}
		for _, s := range a.ProxyFrom {
			n, err := parseNetwork(strings.TrimSpace(s))
			if err != nil {
				return out, usage(fmt.Errorf("--auth-proxy-cidrs: %w", err))
			}
			p.From = append(p.From, n)
		}
		if len(p.From) == 0 {
			return out, usage(errors.New("--auth proxy needs --auth-proxy-cidrs: the header is believed only from the proxy"))
		}
		out.Auth.Proxy = p
	case "":
		name := runscmd.DefaultActor()
		switch {
		case a.InsecureNoAuth:
			out.Auth.Local, out.Mode = "anonymous", "insecure"
		case loopback(addr):
			out.Auth.Local, out.Mode = "local:"+name, "loopback"
		default:
			return out, usage(fmt.Errorf("admin: %s is not a loopback address and no --auth is set: "+
				"use --auth token or --auth proxy (see docs/admin.md), or --insecure-no-auth to expose it to anyone", addr))
		}
	default:
		return out, usage(fmt.Errorf("--auth must be token or proxy, got %q", a.Mode))
	}
	// What the admin handler would refuse (a malformed origin, a trusted
	// proxy network wider than it believes), refused here, before the
	// command connects: a database or Temporal outage must not hide it.
	if err := admin.CheckAccess(out.Auth, out.Origins); err != nil {
		return out, usage(err)
	}
	return out, nil
}

// parseNetwork reads a CIDR, or one address as a network of one.
func parseNetwork(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR nor an address", s)
	}
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// CheckListenAddr refuses, as a usage error naming it (a flag such as
// --addr), a listen address that net.Listen would refuse, or would read
// otherwise than meant: no port (127.0.0.1), an empty one (127.0.0.1:,
// which listens on a port the system picks: an unset variable, not a
// choice), or a port that is not a number from 0 to 65535 (a service name
// such as http is refused too: a probe or a proxy is configured with the
// number). Port 0 stays accepted: the system picks the port, as tests ask.
func CheckListenAddr(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	var ae *net.AddrError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Err == "missing port in address":
		return usage(fmt.Errorf("%s %q has no port: want host:port, e.g. 127.0.0.1:8080, or :8080 for every interface", name, addr))
	case strings.Count(addr, ":") > 1 && !strings.HasPrefix(addr, "["):
		return usage(fmt.Errorf("%s %q is not host:port: an IPv6 address goes in brackets, e.g. [::1]:8080", name, addr))
	default:
		return usage(fmt.Errorf("%s %q is not host:port, e.g. 127.0.0.1:8080: %w", name, addr, err))
	}
	if port == "" {
		return usage(fmt.Errorf("%s %q has an empty port: want host:port, e.g. 127.0.0.1:8080", name, addr))
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return usage(fmt.Errorf("%s %q: the port must be a number from 0 to 65535, got %q", name, addr, port))
	}
	return nil
}

// loopback reports whether addr (host:port) listens on loopback only; an
// empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
