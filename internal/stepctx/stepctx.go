// Package stepctx is the context key under which an engine installs the
// runtime of a running activity (internal/enginekit does) and from which
// port's StepInfoFrom and Heartbeat read it.
//
// It is a leaf of its own, importing only context, so that port can read the
// runtime without importing the engine kit (which imports port), and the kit
// can install it without port exporting an installer that business code
// could misuse. The value is untyped here; port type-asserts it to the
// interface it needs.
package stepctx

import "context"

type key struct{}

// With returns ctx carrying the activity runtime rt.
func With(ctx context.Context, rt any) context.Context {
	return context.WithValue(ctx, key{}, rt)
}

// From returns the runtime installed in ctx, or nil outside an activity.
func From(ctx context.Context) any { return ctx.Value(key{}) }
