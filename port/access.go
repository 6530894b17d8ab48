package port

import (
	"context"
	"encoding/json"

	"github.com/taskport/taskport/port/internal/access"
)

// The engine-facing operations, for package port/engineapi (see package
// access for why they travel this way).
func init() {
	access.RunHandler = func(h Handler, f Flow, input json.RawMessage) (any, error) { return h.run(f, input) }
	access.CheckInput = func(h Handler, input json.RawMessage) error { return h.check(input) }
	access.Lookup = (*Registry).lookup
	access.Activity = (*Registry).activity
	access.Activities = (*Registry).bindings
	access.Invoke = func(b ActivityBinding, ctx context.Context, input json.RawMessage) (any, error) {
		return b.invoke(ctx, input)
	}
}
