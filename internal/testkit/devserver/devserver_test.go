package devserver_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/devserver"
)

// The dev server accepts a trivial workflow and a worker completes it, with
// a search attribute registered at start-up.
func TestDevServerCompletesWorkflow(t *testing.T) {
	srv := devserver.Start(t, devserver.Options{SearchAttributes: map[string]string{"TestKey": "Keyword"}})
	testkit.RequireServes(t, srv.Client, srv.Namespace, "TestKey")
}

// ServerDefaultsEnv=1 drops the package's dynamic configuration from the
// server's flags; unset, the tuned values are there.
func TestServerDefaultsEnv(t *testing.T) {
	attrs := map[string]string{"TestKey": "Keyword"}
	require.Contains(t, devserver.ExtraArgsFor(devserver.Options{SearchAttributes: attrs}), "--dynamic-config-value")
	t.Setenv(devserver.ServerDefaultsEnv, "1")
	args := devserver.ExtraArgsFor(devserver.Options{SearchAttributes: attrs})
	require.NotContains(t, args, "--dynamic-config-value")
	require.Equal(t, []string{"--search-attribute", "TestKey=Keyword"}, args)
}
