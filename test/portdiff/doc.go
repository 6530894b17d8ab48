// Package portdiff is the differential random test at the port level
// (issue 24): one seeded plan of programs and operations runs on every
// engine, the RunViews seen at each observation point are normalized into a
// trace, and the traces are compared field by field against the first
// engine's. The business-level differential test (test/contract) compares
// what the runs did; this one compares what the port says about them.
//
// # Programs
//
// A program is data: a list of moves (steps that fail n times and then
// succeed or never do, steps whose first attempt blocks until the test
// releases it, waits, sleeps, version markers, a step on an activity that
// was never bound). One generic handler per program kind interprets it, so
// the same program runs on every engine. The handler checks what a wait
// received and what a marker returned against the program and fails the run
// when they differ, which makes those outcomes visible as Status and
// LastError.
//
// # Determinism
//
// Observations are only taken where every engine has one answer (see
// SEMANTICS.md): a run not enqueued yet, delayed, held in a step body the
// test blocks, parked in a wait or sleep whose timeout is far away, or
// terminal. Between two operations every run sits at such a point, so Get and
// ListRuns at any operation boundary are deterministic. The driver polls Get
// until the run is at the point the program says (Status and CurrentStep),
// then gives its other fields a short settle to reach what SEMANTICS.md
// prescribes before it records them: the record is what the engine says, the
// prescription only stops the polling early.
//
// Cancels at racy moments record only what is deterministic: a cancel
// racing the run's start (a concurrent EnqueueMany, the run's first move a
// held step) must end canceled with at most that first body started and no
// later one; its Attempts and CurrentStep are not compared.
//
// Timestamps are facts of order only (CreatedAt <= UpdatedAt <= FinishedAt
// or now, FinishedAt set exactly when terminal, UpdatedAt unchanged by a
// cancel of a finished run), and RunIDs are replaced by the idempotency key
// of the run they name.
package portdiff
