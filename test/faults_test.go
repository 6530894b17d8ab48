package test

import (
	"testing"

	"github.com/taskport/taskport/test/contract"
)

// TestFaults runs the fault-injection suite (issue 6) against both engines:
// worker processes killed, frozen and upgraded mid-run, and the DB-level
// faults. TASKPORT_SOAK=N repeats every scenario N times (see
// contract.SoakEnv).
func TestFaults(t *testing.T) {
	contract.RunFaults(t, engines()...)
}
