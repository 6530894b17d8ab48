package test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/temporaladapter"
)

// temporalServer is one dev server for the whole test binary; scenarios
// isolate themselves with a task queue each.
var temporalServer *devserver.Server

func TestMain(m *testing.M) {
	srv, err := devserver.Launch(context.Background(), devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "test: temporal dev server:", err)
		os.Exit(1)
	}
	temporalServer = srv
	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "test: stop dev server:", err)
	}
	os.Exit(code)
}
