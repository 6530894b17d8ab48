package temporalserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// baseConfig is the module's own single-node Postgres configuration; the
// harness changes only what a test run needs (see deriveConfig).
const baseConfig = "config/development-postgres12.yaml"

// dynamicConfig turns on what the harness's server promises beyond the
// module's defaults:
//   - frontend.enableCancelWorkerPollsOnShutdown (the namespace capability
//     worker_poll_complete_on_shutdown, server 1.31+): a worker's
//     ShutdownWorker call cancels its outstanding polls on the server, so
//     the SDK lets in-flight polls complete and runs what they got instead
//     of dropping a task in transit until its timeout;
//   - one partition per task queue (the default is four). With several,
//     a poll is forwarded from a child partition to the root, and a task
//     the root hands to a forwarded poll that ShutdownWorker cancels is
//     still lost: measured with TestRestartDuringRetries (60 graceful
//     restarts, 20 failing runs), 9, 11 and 13 runs lost an attempt with
//     four partitions and the capability on, none with one partition (3 and
//     14 with one partition and the capability off). Forwarded polls and
//     cancellation: temporalio/temporal#9267;
//   - matching.longPollExpirationInterval 5s (default 1 minute): a frozen
//     worker (SIGSTOP, a stalled VM) keeps its long polls open and the
//     server hands them tasks, each then lost until its heartbeat or
//     workflow task timeout; expiring polls after 5 s bounds how long a
//     frozen worker goes on swallowing tasks. Measured with the fault soak
//     (TASKPORT_SOAK=5, sigstop_past_lease_commit_fenced, median): the run
//     finished on another worker 7.9 s after the freeze instead of 20.0 s.
//     The cost is an idle poller asking again every 5 s instead of every
//     minute. The adapter's workers now bound their own polls to 4 s
//     (temporaladapter.ClientConfig.PollTimeout, the shorter bound wins),
//     so for them this setting adds nothing: with every setting at its
//     default (Options.ServerDefaults) the same soak measured the run
//     finished 3.9 s after the freeze (docs/engines.md);
//   - history.workflowTaskRetryMaxInterval 10s (default 10 minutes), as on
//     the dev server (internal/devserver, where the reason is written).
const dynamicConfig = `frontend.enableCancelWorkerPollsOnShutdown:
  - value: true
matching.numTaskqueueReadPartitions:
  - value: 1
matching.numTaskqueueWritePartitions:
  - value: 1
matching.longPollExpirationInterval:
  - value: 5s
history.workflowTaskRetryMaxInterval:
  - value: 10s
`

// services are the server's roles, each with its own gRPC and membership
// port.
var services = []string{"frontend", "history", "matching", "worker"}

// configParams is what deriveConfig writes into the base configuration.
type configParams struct {
	db                        dbTarget
	persistenceDB, visibility string
	ports                     []int // see portCount
	ca                        string
	server                    KeyPair
	// serverDefaults: no dynamic config client (every setting at its
	// default); otherwise dynamicConfigFile holds dynamicConfig.
	serverDefaults    bool
	dynamicConfigFile string
}

// dbTarget is the Postgres server the persistence and visibility databases
// live on.
type dbTarget struct {
	host     string
	port     uint16
	user     string
	password string
}

func (d dbTarget) addr() string { return net.JoinHostPort(d.host, strconv.Itoa(int(d.port))) }

// portCount: a gRPC and a membership port per service, and the frontend's
// HTTP port.
var portCount = 2*len(services) + 1

// deriveConfig rewrites the module's configuration for one test run: the
// two databases, a free port for every listener, mTLS on the frontend, the
// harness's dynamic config file (no dynamic config client with
// serverDefaults), warnings-only logs, and no pprof or metrics
// listener (they would bind fixed ports). Archival stays as the module has
// it: on for the cluster, off for namespaces, so nothing is written.
// It returns the frontend's host:port.
func deriveConfig(base []byte, p configParams) (out []byte, frontend string, err error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(base, &cfg); err != nil {
		return nil, "", fmt.Errorf("parse %s: %w", baseConfig, err)
	}
	c := &editor{root: cfg}
	c.set("log.level", "warn")
	for _, kv := range [...]struct{ key, db string }{
		{"persistence.defaultStore", p.persistenceDB}, {"persistence.visibilityStore", p.visibility},
	} {
		key, db := kv.key, kv.db
		store, ok := c.get(key).(string)
		if !ok {
			return nil, "", fmt.Errorf("%s: %s is not set", baseConfig, key)
		}
		sql := "persistence.datastores." + store + ".sql."
		if _, ok := c.get(sql + "pluginName").(string); !ok {
			return nil, "", fmt.Errorf("%s: datastore %s is not an SQL store", baseConfig, store)
		}
		c.set(sql+"databaseName", db)
		c.set(sql+"connectAddr", p.db.addr())
		c.set(sql+"user", p.db.user)
		c.set(sql+"password", p.db.password)
	}
	// Every service of the process opens its own pool on the persistence
	// store; the module's 20 connections each, held idle, made one server
	// take a third of a default Postgres (100 connections), and a few test
	// binaries running at once (make test runs packages in parallel) ran it
	// out. A test cluster needs few.
	c.set("persistence.datastores."+c.get("persistence.defaultStore").(string)+".sql.maxConns", 10)
	c.set("persistence.datastores."+c.get("persistence.defaultStore").(string)+".sql.maxIdleConns", 2)
	c.remove("global.pprof")
	c.remove("global.metrics")

	ports := p.ports
	for _, svc := range services {
		c.set("services."+svc+".rpc.grpcPort", ports[0])
		c.set("services."+svc+".rpc.membershipPort", ports[1])
		c.set("services."+svc+".rpc.bindOnLocalHost", true)
		ports = ports[2:]
	}
	c.set("services.frontend.rpc.httpPort", ports[0])
	frontend = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.ports[0]))
	// The cluster's own address, as clients reach the frontend.
	c.set("clusterMetadata.clusterInformation."+currentCluster(c)+".rpcAddress", frontend)

	// mTLS on the frontend: its certificate for 127.0.0.1/localhost, client
	// certificates signed by the harness's CA required. The server's own
	// system workers dial the frontend too, with the server certificate
	// (it is also valid for client authentication).
	c.set("global.tls.frontend.server", map[string]any{
		"certFile": p.server.CertFile, "keyFile": p.server.KeyFile,
		"requireClientAuth": true, "clientCaFiles": []string{p.ca},
	})
	c.set("global.tls.frontend.client", map[string]any{"serverName": "localhost", "rootCaFiles": []string{p.ca}})
	c.set("global.tls.systemWorker", map[string]any{
		"certFile": p.server.CertFile, "keyFile": p.server.KeyFile,
		"client": map[string]any{"serverName": "localhost", "rootCaFiles": []string{p.ca}},
	})
	if p.serverDefaults {
		c.remove("dynamicConfigClient")
	} else {
		c.set("dynamicConfigClient.filepath", p.dynamicConfigFile)
	}
	if c.err != nil {
		return nil, "", fmt.Errorf("derive from %s: %w", baseConfig, c.err)
	}
	out, err = yaml.Marshal(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("write server config: %w", err)
	}
	return out, frontend, nil
}

func currentCluster(c *editor) string {
	name, _ := c.get("clusterMetadata.currentClusterName").(string)
	if name == "" {
		c.fail("clusterMetadata.currentClusterName is not set")
	}
	return name
}

// writeConfig writes the server's configuration and dynamic config into
// dir and returns the configuration file and the frontend's host:port.
func writeConfig(moduleDir, dir string, p configParams) (file, frontend string, err error) {
	base, err := os.ReadFile(filepath.Join(moduleDir, baseConfig))
	if err != nil {
		return "", "", fmt.Errorf("read the module's base config: %w", err)
	}
	if !p.serverDefaults {
		p.dynamicConfigFile = filepath.Join(dir, "dynamicconfig.yaml")
		if err := os.WriteFile(p.dynamicConfigFile, []byte(dynamicConfig), 0o600); err != nil {
			return "", "", fmt.Errorf("write dynamic config: %w", err)
		}
	}
	out, frontend, err := deriveConfig(base, p)
	if err != nil {
		return "", "", err
	}
	file = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		return "", "", fmt.Errorf("write server config: %w", err)
	}
	return file, frontend, nil
}

// editor edits a decoded YAML document by dotted paths; the first path
// that crosses a value which is not a mapping is kept as the error.
type editor struct {
	root map[string]any
	err  error
}

func (e *editor) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf(format, args...)
	}
}

// parent returns the mapping that holds the last key of path, creating
// missing mappings when create is set.
func (e *editor) parent(path string, create bool) (map[string]any, string) {
	keys := strings.Split(path, ".")
	m := e.root
	for i, k := range keys[:len(keys)-1] {
		next, ok := m[k]
		if !ok && create {
			next = map[string]any{}
			m[k] = next
		}
		nm, ok := next.(map[string]any)
		if !ok {
			if next != nil || create {
				e.fail("%s is not a mapping", strings.Join(keys[:i+1], "."))
			}
			return nil, ""
		}
		m = nm
	}
	return m, keys[len(keys)-1]
}

func (e *editor) get(path string) any {
	m, k := e.parent(path, false)
	if m == nil {
		return nil
	}
	return m[k]
}

func (e *editor) set(path string, v any) {
	if m, k := e.parent(path, true); m != nil {
		m[k] = v
	}
}

func (e *editor) remove(path string) {
	if m, k := e.parent(path, false); m != nil {
		delete(m, k)
	}
}
