package test

import (
	"os"
	"testing"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/temporalserver"
	"github.com/taskport/taskport/temporaladapter"
)

// The two Temporal servers of the test binary, launched together before the
// first test and shared by every scenario (scenarios isolate themselves with
// a task queue each):
//   - devServer: the CLI's dev server (1.29, SQLite in memory, plaintext),
//     what `make run` uses;
//   - pgServer: temporal-server 1.32 with Postgres persistence and
//     visibility and mTLS on the frontend, shaped like a production cluster.
var (
	devServer *devserver.Server
	pgServer  *temporalserver.Server
)

func TestMain(m *testing.M) {
	attrs := temporaladapter.SearchAttributes()
	os.Exit(testkit.Main(m,
		devserver.Launcher(devserver.Options{SearchAttributes: attrs}, func(s *devserver.Server) { devServer = s }),
		temporalserver.Launcher(temporalserver.Options{SearchAttributes: attrs}, func(s *temporalserver.Server) { pgServer = s }),
	))
}
