package test

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/test/contract"
)

// diffSeedEnv overrides the differential workload's seed, to replay a
// failure or explore: TASKPORT_DIFF_SEED=123 go test ./test/ -run TestDifferential
const diffSeedEnv = "TASKPORT_DIFF_SEED"

// TestDifferential runs one seeded workload on the lease engine and on
// Temporal and requires the same final business state from both.
func TestDifferential(t *testing.T) {
	seed := uint64(20261129)
	if s := os.Getenv(diffSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s must be an unsigned integer", diffSeedEnv)
		seed = v
	}
	contract.RunDifferential(t, seed, 60, engines()...)
}

// TestRestartDuringRetries: a graceful worker restart must not cost a
// failing run one of its attempts. Exact on the lease engine and on
// temporal-pg (its server keeps polled tasks on stop); on the dev server
// the attempts charged without running are counted and printed (see
// contract.RestartDuringRetries and Features.LosesPolledTasksOnStop).
func TestRestartDuringRetries(t *testing.T) {
	contract.RestartDuringRetries(t, engines()...)
}
