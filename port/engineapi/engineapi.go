// Package engineapi is for the authors of engines: the operations an engine
// performs on what the authors of kinds registered (run a handler, find a
// kind's version or an activity's body, invoke it). They live here, not on
// package port's types, so that neither a kind's author nor a caller of
// port.TaskEngine meets them; an engine outside this module imports this
// package, and proves itself with port/porttest.
package engineapi

import (
	"context"
	"encoding/json"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/internal/access"
)

var (
	runHandler = access.RunHandler.(func(port.Handler, port.Flow, json.RawMessage) (any, error))
	checkInput = access.CheckInput.(func(port.Handler, json.RawMessage) error)
	lookup     = access.Lookup.(func(*port.Registry, port.Kind, int) (port.Definition, error))
	activity   = access.Activity.(func(*port.Registry, string) (port.ActivityBinding, error))
	activities = access.Activities.(func(*port.Registry) []port.ActivityBinding)
	invoke     = access.Invoke.(func(port.ActivityBinding, context.Context, json.RawMessage) (any, error))
)

// Run executes the handler on a JSON input and returns its result as the
// handler made it: nil for a kind built with port.Handle, and whatever a
// port.HandleResult handler returned with a nil error. The engine encodes
// it (internal/enginekit.Outcome) and records it with the run's success. An
// input that does not decode is a non-retryable error.
func Run(h port.Handler, f port.Flow, input json.RawMessage) (any, error) {
	return runHandler(h, f, input)
}

// CheckInput decodes and validates input for h without running anything.
func CheckInput(h port.Handler, input json.RawMessage) error { return checkInput(h, input) }

// Lookup returns one version of a kind; an unregistered one is
// port.ErrUnknownKind.
func Lookup(r *port.Registry, kind port.Kind, version int) (port.Definition, error) {
	return lookup(r, kind, version)
}

// Activity returns the body registered under name; an unbound one is
// port.ErrUnknownActivity.
func Activity(r *port.Registry, name string) (port.ActivityBinding, error) { return activity(r, name) }

// Activities returns every registered activity ordered by name.
func Activities(r *port.Registry) []port.ActivityBinding { return activities(r) }

// Invoke decodes the JSON input and runs the body. The result is returned
// as the body made it; the engine encodes it (and enforces
// port.MaxPayloadBytes) the same way for every activity. An input that does
// not decode is a non-retryable error.
func Invoke(ctx context.Context, b port.ActivityBinding, input json.RawMessage) (any, error) {
	return invoke(b, ctx, input)
}
