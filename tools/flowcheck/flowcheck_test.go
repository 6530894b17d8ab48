package flowcheck_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/taskport/taskport/tools/flowcheck"
)

// The fixture marks every expected report with a `want` comment; analysistest
// fails on a missing report and on an unexpected one.
func TestFlowcheckFlagsEachPattern(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), flowcheck.Analyzer, "handlers")
}
