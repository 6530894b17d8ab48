package test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The lease engine's column of the contract suite runs without a Temporal
// server: this test binary runs itself on TestContract/lease with
// noTemporalEnv set, and TestMain fails that run if any test launched one
// (the servers are testkit.Shared, launched on a cell's first use).
func TestLeaseCellsStartNoTemporalServer(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestContract$/^lease$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), noTemporalEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the lease cells, with no Temporal server allowed:\n%s", out)
	passed := regexp.MustCompile(`(?m)^\s*--- PASS: TestContract/lease/\S+`).FindAll(out, -1)
	require.NotEmpty(t, passed, "no lease cell ran:\n%s", out)
	require.NotRegexp(t, `TestContract/temporal`, string(out), "a temporal cell ran")
	t.Logf("%d lease cells passed; no Temporal server launched", len(passed))
}
