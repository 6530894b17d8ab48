package port

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// Kind authors: MaxVersionsPerKind is how many versions of one kind a
// registry holds: the current one and the previous one, until the old runs
// are drained (ADR 2.5).
const MaxVersionsPerKind = 2

// Kind authors: Registry holds the kinds and activities a process knows.
// Register everything before handing the registry to an engine; lookups (for
// engines) are safe for concurrent use.
type Registry struct {
	mu         sync.RWMutex
	defs       map[Kind]map[int]Definition
	activities map[string]ActivityBinding
}

// Kind authors: NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{defs: map[Kind]map[int]Definition{}, activities: map[string]ActivityBinding{}}
}

// Kind authors: Register adds kind definitions. It refuses an invalid
// definition, a duplicate (kind, version) and a third version of a kind.
func (r *Registry) Register(defs ...Definition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range defs {
		if err := ValidateName("kind", string(d.Kind)); err != nil {
			return err
		}
		if d.Version < 1 {
			return fieldErr("version", "kind %s: must be at least 1, got %d", d.Kind, d.Version)
		}
		if !d.Handler.defined() {
			return fieldErr("handler", "kind %s@v%d: missing (build it from a non-nil function with port.Handle)", d.Kind, d.Version)
		}
		if err := d.Retry.Validate(); err != nil {
			return fmt.Errorf("kind %s@v%d: %w", d.Kind, d.Version, err)
		}
		if d.StepTimeout < 0 {
			return fieldErr("step_timeout", "kind %s@v%d: must not be negative, got %s", d.Kind, d.Version, d.StepTimeout)
		}
		if d.HeartbeatTimeout < 0 {
			return fieldErr("heartbeat_timeout", "kind %s@v%d: must not be negative, got %s", d.Kind, d.Version, d.HeartbeatTimeout)
		}
		versions := r.defs[d.Kind]
		if versions == nil {
			versions = map[int]Definition{}
			r.defs[d.Kind] = versions
		}
		if _, dup := versions[d.Version]; dup {
			return fieldErr("version", "kind %s@v%d registered twice", d.Kind, d.Version)
		}
		if len(versions) >= MaxVersionsPerKind {
			return fieldErr("version", "kind %s already has %d versions; drain and drop the oldest first", d.Kind, MaxVersionsPerKind)
		}
		versions[d.Version] = d
	}
	return nil
}

// Kind authors: RegisterActivity adds activity bodies (see Bind).
func (r *Registry) RegisterActivity(bindings ...ActivityBinding) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range bindings {
		if err := ValidateName("activity", b.name); err != nil {
			return err
		}
		if b.invoke == nil {
			return fieldErr("activity", "%s has no body (bind it to a non-nil function with port.Bind)", b.name)
		}
		if _, dup := r.activities[b.name]; dup {
			return fieldErr("activity", "%s registered twice", b.name)
		}
		r.activities[b.name] = b
	}
	return nil
}

// Engines and operator tools: Current returns the highest registered
// version of kind: the one new runs use.
func (r *Registry) Current(kind Kind) (Definition, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var best Definition
	for v, d := range r.defs[kind] {
		if v > best.Version {
			best = d
		}
	}
	if best.Version == 0 {
		return Definition{}, fmt.Errorf("kind %q: %w", kind, ErrUnknownKind)
	}
	return best, nil
}

// lookup returns one version of a kind (engineapi.Lookup).
func (r *Registry) lookup(kind Kind, version int) (Definition, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.defs[kind][version]
	if !ok {
		return Definition{}, fmt.Errorf("kind %q version %d: %w", kind, version, ErrUnknownKind)
	}
	return d, nil
}

// Engines and operator tools: Definitions returns every registered
// definition ordered by kind, then version.
func (r *Registry) Definitions() []Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Definition
	for _, versions := range r.defs {
		for _, d := range versions {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Definition) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Version, b.Version))
	})
	return out
}

// activity returns the body registered under name (engineapi.Activity).
func (r *Registry) activity(name string) (ActivityBinding, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.activities[name]
	if !ok {
		return ActivityBinding{}, fmt.Errorf("activity %q: %w", name, ErrUnknownActivity)
	}
	return b, nil
}

// bindings returns every registered activity ordered by name
// (engineapi.Activities).
func (r *Registry) bindings() []ActivityBinding {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]ActivityBinding, 0, len(r.activities))
	for _, b := range r.activities {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b ActivityBinding) int { return cmp.Compare(a.name, b.name) })
	return out
}
