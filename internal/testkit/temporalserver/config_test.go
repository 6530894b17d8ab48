package temporalserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/taskport/taskport/internal/gotool"
)

func testParams() configParams {
	return configParams{
		db:            dbTarget{host: "127.0.0.1", port: 5432, user: "postgres", password: "pw"},
		persistenceDB: "p_db", visibility: "v_db",
		ports: []int{10001, 10002, 10003, 10004, 10005, 10006, 10007, 10008, 10009},
		ca:    "/x/ca.pem", server: KeyPair{CertFile: "/x/server.pem", KeyFile: "/x/server.key"},
		dynamicConfigFile: "/x/dc.yaml",
	}
}

// The module's configuration gets the run's databases, ports, mTLS and
// dynamic config, and nothing that binds fixed ports.
func TestDeriveConfigFromTheModule(t *testing.T) {
	dir, err := gotool.ModuleDir(Module, ServerVersion)
	require.NoError(t, err)
	_, _, err = writeConfig(dir, t.TempDir(), testParams()) // reads the real base file
	require.NoError(t, err)

	base := []byte(`
persistence:
  defaultStore: a
  visibilityStore: b
  datastores:
    a: {sql: {pluginName: postgres12, databaseName: temporal}}
    b: {sql: {pluginName: postgres12, databaseName: temporal_visibility}}
global: {pprof: {port: 7936}, metrics: {prometheus: {listenAddress: "127.0.0.1:8000"}}}
clusterMetadata: {currentClusterName: active, clusterInformation: {active: {rpcAddress: "localhost:7233"}}}
`)
	out, frontend, err := deriveConfig(base, testParams())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:10001", frontend)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(out, &cfg))
	e := &editor{root: cfg}
	require.Equal(t, "p_db", e.get("persistence.datastores.a.sql.databaseName"))
	require.Equal(t, "v_db", e.get("persistence.datastores.b.sql.databaseName"))
	require.Equal(t, "127.0.0.1:5432", e.get("persistence.datastores.b.sql.connectAddr"))
	require.Nil(t, e.get("global.pprof"))
	require.Nil(t, e.get("global.metrics"))
	require.Equal(t, 10001, e.get("services.frontend.rpc.grpcPort"))
	require.Equal(t, 10008, e.get("services.worker.rpc.membershipPort"))
	require.Equal(t, 10009, e.get("services.frontend.rpc.httpPort"))
	require.Equal(t, true, e.get("global.tls.frontend.server.requireClientAuth"))
	require.Equal(t, "127.0.0.1:10001", e.get("clusterMetadata.clusterInformation.active.rpcAddress"))
	require.Equal(t, "/x/dc.yaml", e.get("dynamicConfigClient.filepath"))
	require.NoError(t, e.err)
}

// A base configuration that no longer has the expected shape is refused
// with the path that is wrong, not turned into a half-written config.
func TestDeriveConfigRefusesAnUnexpectedBase(t *testing.T) {
	for base, want := range map[string]string{
		`persistence: {visibilityStore: b}`: "persistence.defaultStore is not set",
		`persistence: {defaultStore: a, visibilityStore: b, datastores: {a: {cassandra: {}}, b: {}}}`: "datastore a is not an SQL store",
		`persistence: {defaultStore: a, visibilityStore: a, datastores: {a: {sql: {pluginName: x}}}}
services: 3`: "services is not a mapping",
	} {
		_, _, err := deriveConfig([]byte(base), testParams())
		require.ErrorContains(t, err, want, base)
	}
}

// With ServerDefaults the server gets no dynamic config client at all (the
// module's base names its development file): every setting at its default.
func TestServerDefaultsDropTheDynamicConfig(t *testing.T) {
	dir, err := gotool.ModuleDir(Module, ServerVersion)
	require.NoError(t, err)
	p := testParams()
	p.serverDefaults, p.dynamicConfigFile = true, ""
	tmp := t.TempDir()
	file, _, err := writeConfig(dir, tmp, p)
	require.NoError(t, err)
	out, err := os.ReadFile(file)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(out, &cfg))
	require.NotContains(t, cfg, "dynamicConfigClient")
	require.NoFileExists(t, filepath.Join(tmp, "dynamicconfig.yaml"))
}

// ServerDefaultsEnv=1 turns ServerDefaults on; anything else leaves the
// options as they are.
func TestServerDefaultsEnv(t *testing.T) {
	t.Setenv(ServerDefaultsEnv, "1")
	require.True(t, fromEnv(Options{}).ServerDefaults)
	t.Setenv(ServerDefaultsEnv, "")
	require.False(t, fromEnv(Options{}).ServerDefaults)
	require.True(t, fromEnv(Options{ServerDefaults: true}).ServerDefaults)
}
