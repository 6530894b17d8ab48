package test

import (
	"fmt"
	"os"
	"testing"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/temporalserver"
	"github.com/taskport/taskport/temporaladapter"
)

// The two Temporal servers of the test binary, each launched by the first
// test that needs it and shared by every scenario after (scenarios isolate
// themselves with a task queue each); the lease engine's cells need neither:
//   - devServer: the CLI's dev server (1.29, SQLite in memory, plaintext),
//     what `make run` uses;
//   - pgServer: temporal-server 1.32 with Postgres persistence and
//     visibility and mTLS on the frontend, shaped like a production cluster.
var (
	devServer = devserver.Shared(devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
	pgServer  = temporalserver.Shared(temporalserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
)

// noTemporalEnv, when set, makes the test binary fail if any test launched a
// Temporal server (see TestLeaseCellsStartNoTemporalServer).
const noTemporalEnv = "TASKPORT_TEST_NO_TEMPORAL"

func TestMain(m *testing.M) {
	code := testkit.Main(m, devServer, pgServer)
	if os.Getenv(noTemporalEnv) != "" && (devServer.Launched() || pgServer.Launched()) {
		fmt.Fprintf(os.Stderr, "%s is set, yet a test launched a Temporal server (dev server: %v, temporal-server: %v)\n",
			noTemporalEnv, devServer.Launched(), pgServer.Launched())
		code = 1
	}
	os.Exit(code)
}
