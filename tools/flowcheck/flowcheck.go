// Package flowcheck reports non-deterministic code reachable from task
// handlers: functions with a port.Flow parameter. Temporal's workflowcheck
// finds workflows by a workflow.Context first parameter, so it sees nothing
// in workflows/, whose handlers only know port.Flow; this analyzer applies
// the same rules (ADR 2.5) to them.
//
// Reported, in a handler or in any function of the same package it calls
// (directly or through closures): go statements; channel sends, receives,
// selects and make(chan); range over a map; wall clock and timers (time.Now,
// time.Sleep, ...); math/rand and crypto/rand; I/O through os, net, net/http,
// os/exec, io/ioutil, syscall, the log package and fmt.Print*. Calls into
// other packages are checked against that list only, not followed.
//
// Also reported: constructs that defeat the engines' unwinding. The lease
// engine parks a run, and gives up a run whose lease is lost, by unwinding
// the handler with a panic that it recovers itself; Temporal's SDK does the
// same to end a workflow task. A recover() in a handler (or a function it
// calls) would swallow that unwinding and let the handler run on as if the
// step had returned; runtime.Goexit ends the goroutine under the engine.
package flowcheck

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// FlowType is the type whose parameters mark a handler.
const FlowType = "github.com/taskport/taskport/port.Flow"

// Analyzer is the flowcheck analysis.
var Analyzer = &analysis.Analyzer{
	Name:     "flowcheck",
	Doc:      "report non-deterministic code reachable from port.Flow handlers",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// forbiddenPackages: every function of these packages is I/O or randomness.
var forbiddenPackages = map[string]string{
	"math/rand":    "randomness",
	"math/rand/v2": "randomness",
	"crypto/rand":  "randomness",
	"os":           "I/O or process state",
	"os/exec":      "I/O",
	"net":          "I/O",
	"net/http":     "I/O",
	"io/ioutil":    "I/O",
	"syscall":      "I/O",
	"log":          "I/O (use Flow.Logger)",
}

// forbiddenFuncs: single functions of otherwise allowed packages.
var forbiddenFuncs = map[string]string{
	"time.Now":       "wall clock (use Flow.Now)",
	"time.Since":     "wall clock (use Flow.Now)",
	"time.Until":     "wall clock (use Flow.Now)",
	"time.Sleep":     "wall-clock sleep (use Flow.Sleep)",
	"time.After":     "timer (use Flow.Sleep)",
	"time.AfterFunc": "timer (use Flow.Sleep)",
	"time.Tick":      "timer (use Flow.Sleep)",
	"time.NewTimer":  "timer (use Flow.Sleep)",
	"time.NewTicker": "timer (use Flow.Sleep)",
	"fmt.Print":      "I/O (use Flow.Logger)",
	"fmt.Printf":     "I/O (use Flow.Logger)",
	"fmt.Println":    "I/O (use Flow.Logger)",
	"runtime.Goexit": "ends the engine's goroutine: return an error instead",
}

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)

	// Bodies of the package's own functions and methods, to follow calls.
	decls := map[*types.Func]*ast.FuncDecl{}
	ins.Preorder([]ast.Node{(*ast.FuncDecl)(nil)}, func(n ast.Node) {
		fd := n.(*ast.FuncDecl)
		if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok && fd.Body != nil {
			decls[fn] = fd
		}
	})

	c := &checker{pass: pass, decls: decls, visited: map[ast.Node]bool{}, reported: map[ast.Node]bool{}}
	ins.Preorder([]ast.Node{(*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)}, func(n ast.Node) {
		var ft *ast.FuncType
		var body *ast.BlockStmt
		name := "handler"
		switch fn := n.(type) {
		case *ast.FuncDecl:
			ft, body, name = fn.Type, fn.Body, fn.Name.Name
		case *ast.FuncLit:
			ft, body = fn.Type, fn.Body
		}
		if body == nil || !c.takesFlow(ft) {
			return
		}
		c.check(body, []string{name})
	})
	return nil, nil
}

type checker struct {
	pass     *analysis.Pass
	decls    map[*types.Func]*ast.FuncDecl
	visited  map[ast.Node]bool
	reported map[ast.Node]bool
}

func (c *checker) takesFlow(ft *ast.FuncType) bool {
	for _, field := range ft.Params.List {
		if t := c.pass.TypesInfo.TypeOf(field.Type); t != nil && types.TypeString(t, nil) == FlowType {
			return true
		}
	}
	return false
}

func (c *checker) report(n ast.Node, path []string, format string, args ...any) {
	if c.reported[n] {
		return
	}
	c.reported[n] = true
	c.pass.Reportf(n.Pos(), "%s (reachable from %s)", fmt.Sprintf(format, args...), strings.Join(path, " -> "))
}

// check walks body, reporting forbidden constructs and following calls to
// functions declared in the package.
func (c *checker) check(body *ast.BlockStmt, path []string) {
	if c.visited[body] {
		return
	}
	c.visited[body] = true
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			c.report(n, path, "go statement: handlers must not start goroutines")
		case *ast.SendStmt:
			c.report(n, path, "channel send: use Flow.WaitSignal")
		case *ast.SelectStmt:
			c.report(n, path, "select statement: use Flow.WaitSignal")
		case *ast.UnaryExpr:
			if n.Op.String() == "<-" {
				c.report(n, path, "channel receive: use Flow.WaitSignal")
			}
		case *ast.RangeStmt:
			switch c.pass.TypesInfo.TypeOf(n.X).Underlying().(type) {
			case *types.Map:
				c.report(n, path, "range over a map: iteration order is random; sort the keys")
			case *types.Chan:
				c.report(n, path, "range over a channel: use Flow.WaitSignal")
			}
		case *ast.CallExpr:
			c.call(n, path)
		}
		return true
	})
}

func (c *checker) call(call *ast.CallExpr, path []string) {
	if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok {
		if _, builtin := c.pass.TypesInfo.Uses[id].(*types.Builtin); builtin {
			c.builtin(call, id.Name, path)
			return
		}
	}
	fn := callee(c.pass.TypesInfo, call)
	if fn == nil || fn.Pkg() == nil {
		return
	}
	pkg := fn.Pkg().Path()
	if why, bad := forbiddenPackages[pkg]; bad {
		c.report(call, path, "call to %s.%s: %s", pkg, fn.Name(), why)
		return
	}
	if why, bad := forbiddenFuncs[pkg+"."+fn.Name()]; bad && fn.Signature().Recv() == nil {
		c.report(call, path, "call to %s.%s: %s", pkg, fn.Name(), why)
		return
	}
	if fd, ok := c.decls[fn]; ok {
		c.check(fd.Body, append(path[:len(path):len(path)], fn.Name()))
	}
}

// builtin reports the built-in calls a handler must not make.
func (c *checker) builtin(call *ast.CallExpr, name string, path []string) {
	switch name {
	case "make":
		if len(call.Args) == 0 {
			return
		}
		if _, isChan := c.pass.TypesInfo.TypeOf(call.Args[0]).Underlying().(*types.Chan); isChan {
			c.report(call, path, "make(chan): handlers must not use channels")
		}
	case "recover":
		c.report(call, path, "recover(): it would swallow the engine's unwinding of the handler (a park, a lost lease); let panics through")
	}
}

// callee returns the statically known function or method a call invokes.
func callee(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fun
	case *ast.SelectorExpr:
		id = fun.Sel
	case *ast.IndexExpr: // generic instantiation f[T](...)
		if x, ok := fun.X.(*ast.Ident); ok {
			id = x
		} else if s, ok := fun.X.(*ast.SelectorExpr); ok {
			id = s.Sel
		}
	}
	if id == nil {
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	if fn != nil {
		return fn.Origin()
	}
	return nil
}
