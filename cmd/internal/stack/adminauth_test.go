package stack

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/runscmd"
)

// Without --auth only loopback is served, and every request acts as the
// local OS user; --insecure-no-auth opens it as "anonymous".
func TestAdminAuthResolve(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true, "127.0.0.2:0": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "admin.example:8080": false,
	} {
		a, err := AdminAuth{}.Resolve(addr)
		if !ok {
			require.ErrorContains(t, err, "not a loopback address", addr)
			continue
		}
		require.NoError(t, err, addr)
		require.Equal(t, "loopback", a.Mode)
		require.Regexp(t, `^local:.+`, a.Auth.Local)
	}
	a, err := AdminAuth{InsecureNoAuth: true}.Resolve(":8080")
	require.NoError(t, err)
	require.Equal(t, "anonymous", a.Auth.Local)

	public := []string{"https://admin.example.com"}
	a, err = AdminAuth{Mode: "proxy", ProxyHeader: "X-Auth-Request-User", ProxyFrom: []string{"10.0.0.0/24", "192.0.2.7"}, Origins: public}.Resolve(":8080")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("192.0.2.7/32")}, a.Auth.Proxy.From)
	_, err = AdminAuth{Mode: "proxy", ProxyHeader: "X-Forwarded-User", ProxyFrom: []string{"not-a-net"}, Origins: public}.Resolve(":8080")
	require.ErrorContains(t, err, "not-a-net")

	t.Setenv("ADMIN_TOKENS", "")
	_, err = AdminAuth{Mode: "token", Origins: public}.Resolve(":8080")
	require.ErrorContains(t, err, "taskport admin token")
	for _, mode := range []string{"token", "proxy"} {
		_, err = AdminAuth{Mode: mode, ProxyFrom: []string{"127.0.0.1"}}.Resolve(":8080")
		require.ErrorContains(t, err, "needs --public-origin", mode)
	}
	// What the admin handler refuses is refused here, before the command
	// connects to anything, as a usage error.
	for _, a := range []AdminAuth{
		{Mode: "proxy", ProxyHeader: "X-Forwarded-User", ProxyFrom: []string{"0.0.0.0/0"}, Origins: public},
		{Mode: "proxy", ProxyHeader: "X-Forwarded-User", ProxyFrom: []string{"127.0.0.1"}, Origins: []string{"not a url"}},
	} {
		_, err = a.Resolve(":8080")
		require.ErrorAs(t, err, new(runscmd.UsageError), "%+v", a)
	}
	_, err = AdminAuth{Mode: "proxy", ProxyHeader: "X-Forwarded-User", ProxyFrom: []string{"0.0.0.0/0"}, Origins: public}.Resolve(":8080")
	require.ErrorContains(t, err, "spans more than 256 addresses")
	_, err = AdminAuth{Mode: "proxy", ProxyHeader: "X-Forwarded-User", ProxyFrom: []string{"127.0.0.1"}, Origins: []string{"not a url"}}.Resolve(":8080")
	require.ErrorContains(t, err, `public origin must be http(s)://host[:port], got "not a url"`)
}

// Resolve says a malformed address is malformed, for every binary that
// calls it (taskport-dev's --admin-addr too), rather than "not a loopback
// address"; a loopback one with port 0 is served.
func TestResolveRefusesAnAddressWithoutPort(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "localhost", "[::1]", "nonsense"} {
		_, err := AdminAuth{}.Resolve(addr)
		require.ErrorContains(t, err, "has no port", addr)
		require.NotContains(t, err.Error(), "loopback", addr)
		require.Equal(t, 2, runscmd.ExitCode(err), addr)
	}
	access, err := AdminAuth{}.Resolve("[::1]:0")
	require.NoError(t, err)
	require.Equal(t, "loopback", access.Mode)
}
