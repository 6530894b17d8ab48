// Package port is the engine-neutral seam of taskport: the TaskEngine that
// business code talks to, and the authoring API (Definition, Flow, activities)
// that task kinds are written against.
//
// Two engines sit behind it (temporaladapter and leaseadapter) and must be
// indistinguishable to business code. The package imports the standard library
// only, so that a handler written against it compiles into either engine.
//
// Business state never lives in an engine (ADR-002): an engine drives progress,
// timed wake-ups, retries and leases; plans, approvals and the operation ledger
// live in Postgres business tables. A Signal is a wake-up hint, never the truth.
package port
