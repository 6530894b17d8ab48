// Package port is the engine-neutral seam of taskport. It serves two
// audiences, and every exported name's doc starts by naming its own:
//
//   - Callers (business code, the outbox, cmd) talk to a TaskEngine and an
//     Admin: Enqueue, Signal, Cancel, Get, Start, Stop, ListRuns, Retry,
//     with their options, views, statuses and sentinel errors.
//   - Kind authors write task kinds against the authoring API: a Definition
//     whose Handler (built with Handle) sees only a Flow, activities declared
//     with DeclareActivity and bound with Bind, a Registry, retry policies and
//     step options, and inside an activity StepInfoFrom, Heartbeat and the
//     fencing token passed to the ledger.
//
// What only an engine does with the authors' registrations (run a handler,
// look up a kind's version or an activity's body, invoke it) is package
// port/engineapi, out of both audiences' view; an engine proves itself with
// port/porttest. The rest of what this module's engines share (input
// preparation, step sequencing and the replay check, the activity runtime,
// fencing-token construction) is its internal/enginekit.
//
// Two engines sit behind the port (temporaladapter and leaseadapter) and must
// be indistinguishable to business code. The package imports the standard
// library and two standard-library-only leaves of this module
// (internal/stepctx, the context key of the activity runtime, and
// port/internal/access, which hands engineapi its operations), so that a
// handler written against it compiles into either engine.
//
// Business state never lives in an engine (ADR-002): an engine drives progress,
// timed wake-ups, retries and leases; plans, approvals and the operation ledger
// live in Postgres business tables. A Signal is a wake-up hint, never the truth.
package port
