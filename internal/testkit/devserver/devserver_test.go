package devserver_test

import (
	"testing"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/devserver"
)

// The dev server accepts a trivial workflow and a worker completes it, with
// a search attribute registered at start-up.
func TestDevServerCompletesWorkflow(t *testing.T) {
	srv := devserver.Start(t, devserver.Options{SearchAttributes: map[string]string{"TestKey": "Keyword"}})
	testkit.RequireServes(t, srv.Client, srv.Namespace, "TestKey")
}
