package workflows_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// A step allowed to run longer than the default timeout must heartbeat:
// on Temporal, the step of a worker that died is retried only when its
// heartbeat or its whole timeout runs out. asset.verify had no heartbeat
// timeout, so a worker lost while hashing held the plan for an hour.
func TestLongStepsHeartbeat(t *testing.T) {
	for _, d := range workflows.Definitions() {
		if d.StepTimeout > port.DefaultStepTimeout {
			require.Positive(t, d.HeartbeatTimeout, "%s: step timeout %s with no heartbeat timeout", d.Kind, d.StepTimeout)
			require.Less(t, d.HeartbeatTimeout, d.StepTimeout, d.Kind)
		}
	}
}
