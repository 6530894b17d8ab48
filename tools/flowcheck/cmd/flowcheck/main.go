// Command flowcheck reports non-deterministic code reachable from port.Flow
// handlers: `flowcheck ./workflows/...` (run from the main module).
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/taskport/taskport/tools/flowcheck"
)

func main() { singlechecker.Main(flowcheck.Analyzer) }
