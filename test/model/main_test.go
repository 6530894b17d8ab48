package model

import (
	"os"
	"testing"

	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/temporaladapter"
)

// temporalServer is the CLI's dev server, shared by the package's tests;
// each seed and test has a task queue of its own.
var temporalServer *devserver.Server

func TestMain(m *testing.M) {
	os.Exit(devserver.Main(m, devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()},
		func(s *devserver.Server) { temporalServer = s }))
}
