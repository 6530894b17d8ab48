// Package access carries the engine-facing operations of package port to
// package port/engineapi, so that port need not export them where the
// authors of kinds and the callers of the port would see them. Package
// port sets each variable when it is initialized; engineapi reads them
// once, as typed functions, when it is. Nothing else may use them.
package access

// Each holds a func of the type its comment gives (port's types, which this
// package cannot name without an import cycle).
var (
	RunHandler any // func(port.Handler, port.Flow, json.RawMessage) (any, error)
	CheckInput any // func(port.Handler, json.RawMessage) error
	Lookup     any // func(*port.Registry, port.Kind, int) (port.Definition, error)
	Activity   any // func(*port.Registry, string) (port.ActivityBinding, error)
	Activities any // func(*port.Registry) []port.ActivityBinding
	Invoke     any // func(port.ActivityBinding, context.Context, json.RawMessage) (any, error)
)
