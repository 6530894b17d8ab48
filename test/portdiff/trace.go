package portdiff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskport/taskport/port"
)

// Field is one normalized fact of an entry.
type Field struct{ Name, Value string }

// Entry is one observation: what the port answered to one operation, or
// what it said of one run after it.
type Entry struct {
	Op      int    // index of the operation in the plan; len(ops) for the final state
	What    string // the operation, e.g. "release r3/h1", or "final"
	Run     string // the run's idempotency key; "" for an answer about no run
	Program string // the run's kind
	Fields  []Field
}

// ids align the entries of two traces: an operation's entries about one
// run are told apart by their order.
func ids(es []Entry) []string {
	n := map[string]int{}
	out := make([]string, len(es))
	for i, e := range es {
		k := fmt.Sprintf("%d|%s|%s", e.Op, e.What, e.Run)
		n[k]++
		out[i] = fmt.Sprintf("%s|%d", k, n[k])
	}
	return out
}

// Trace is one engine's execution of a plan.
type Trace struct {
	Engine  string
	Entries []Entry
}

// Divergence is a field two engines answered differently.
type Divergence struct {
	Op           int
	What         string
	Run, Program string
	Field        string
	A, B         string // the first engine's value, the second's
}

func (d Divergence) String() string {
	return fmt.Sprintf("op %d (%s) run %s (%s): %s: %q vs %q", d.Op, d.What, d.Run, d.Program, d.Field, d.A, d.B)
}

// Compare returns every field where b differs from a, in a's order; an
// entry one trace has and the other has not is a divergence of the field
// "(entry)".
func Compare(a, b Trace) []Divergence {
	idsA, idsB := ids(a.Entries), ids(b.Entries)
	byID := make(map[string]Entry, len(b.Entries))
	for i, e := range b.Entries {
		byID[idsB[i]] = e
	}
	var out []Divergence
	seen := map[string]bool{}
	for i, ea := range a.Entries {
		seen[idsA[i]] = true
		eb, ok := byID[idsA[i]]
		if !ok {
			out = append(out, Divergence{Op: ea.Op, What: ea.What, Run: ea.Run, Program: ea.Program, Field: "(entry)", A: "present", B: "missing"})
			continue
		}
		out = append(out, compareFields(ea, eb)...)
	}
	for i, eb := range b.Entries {
		if !seen[idsB[i]] {
			out = append(out, Divergence{Op: eb.Op, What: eb.What, Run: eb.Run, Program: eb.Program, Field: "(entry)", A: "missing", B: "present"})
		}
	}
	slices.SortStableFunc(out, func(x, y Divergence) int { return x.Op - y.Op })
	return out
}

func compareFields(a, b Entry) []Divergence {
	vb := map[string]string{}
	for _, f := range b.Fields {
		vb[f.Name] = f.Value
	}
	var out []Divergence
	names := map[string]bool{}
	for _, f := range a.Fields {
		names[f.Name] = true
		got, ok := vb[f.Name]
		if !ok {
			got = "(absent)"
		}
		if got != f.Value {
			out = append(out, Divergence{Op: a.Op, What: a.What, Run: a.Run, Program: a.Program, Field: f.Name, A: f.Value, B: got})
		}
	}
	for _, f := range b.Fields {
		if !names[f.Name] {
			out = append(out, Divergence{Op: a.Op, What: a.What, Run: a.Run, Program: a.Program, Field: f.Name, A: "(absent)", B: f.Value})
		}
	}
	return out
}

// view normalizes a RunView (or Get's error): the run it names by key,
// its fields, and its timestamps as facts of order. skip names fields
// that are not deterministic at this observation.
func view(v port.RunView, err error, keyOf map[port.RunID]string, skip ...string) []Field {
	if err != nil {
		return []Field{{"error", errClass(err)}}
	}
	run, ok := keyOf[v.ID]
	if !ok {
		run = "(an id no enqueue returned)"
	}
	fs := []Field{
		{"run", run},
		{"kind", string(v.Kind)},
		{"version", strconv.Itoa(v.Version)},
		{"business_key", v.BusinessKey},
		{"status", string(v.Status)},
		{"attempts", strconv.Itoa(v.Attempts)},
		{"last_error", v.LastError},
		{"current_step", v.CurrentStep},
		{"finished_at_set_iff_terminal", strconv.FormatBool(v.FinishedAt.IsZero() != v.Status.Terminal())},
		{"created_le_updated_le_finished_or_now", strconv.FormatBool(timesOrdered(v))},
	}
	return slices.DeleteFunc(fs, func(f Field) bool { return slices.Contains(skip, f.Name) })
}

func timesOrdered(v port.RunView) bool {
	end := v.FinishedAt
	if end.IsZero() {
		end = time.Now()
	}
	return !v.CreatedAt.IsZero() && !v.UpdatedAt.Before(v.CreatedAt) && !end.Before(v.UpdatedAt)
}

// Render is the trace, one entry a line: what a failing seed's log shows.
func (t Trace) Render() string {
	var b strings.Builder
	for _, e := range t.Entries {
		fs := make([]string, len(e.Fields))
		for i, f := range e.Fields {
			fs[i] = f.Name + "=" + strconv.Quote(f.Value)
		}
		fmt.Fprintf(&b, "%3d %-28s %-5s %s\n", e.Op, e.What, e.Run, strings.Join(fs, " "))
	}
	return b.String()
}
