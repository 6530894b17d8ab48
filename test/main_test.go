package test

import (
	"os"
	"testing"

	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/temporaladapter"
)

// temporalServer is one dev server for the whole test binary; scenarios
// isolate themselves with a task queue each.
var temporalServer *devserver.Server

func TestMain(m *testing.M) {
	os.Exit(devserver.Main(m, devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()},
		func(s *devserver.Server) { temporalServer = s }))
}
