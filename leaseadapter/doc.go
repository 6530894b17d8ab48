// Package leaseadapter is the Postgres lease-table engine behind
// port.TaskEngine: the ADR-002 appendix design, fixing the risks the ADR
// lists for OpenWorkflow 0.10.1 (fixed 30 s lease, no lease state inside a
// step, lost early signals, 24 h idempotency window). It runs the
// port.Definition handlers unchanged and is the reference the Temporal
// adapter is held against.
//
// # Tables
//
// A lease run is one row of taskport.run (migration 00014): the
// idempotency authority, UNIQUE(kind, idempotency_key) with no window
// (package runstore); the view Get and ListRuns read (status, attempts, last
// error, current step), which is live (a claimed run is running); and the
// lease state only this engine writes: the claim (lease_owner, lease_token,
// lease_until, claims), the kind's retry policy, the wait in progress and
// the next claim time. taskport_lease.step_result holds the history and
// task_signal the persisted signals. One row per run means one insert per
// enqueue and one update per state change (see `compare enqueue` in the
// bench module).
//
// # Execution
//
// A worker claims up to BatchSize ready runs per statement (FOR UPDATE SKIP
// LOCKED, only the (kind, version) pairs it serves, in index order whatever
// the table statistics say), each with a fresh lease_token. It executes up
// to ActiveRuns of them at once (by default twice its concurrency, up to
// four times while runs wait on commits and leave step slots idle) and
// keeps up to Prefetch more queued, so that a run that ends hands its place
// to the next at once. StartOptions.Concurrency bounds the steps running at
// once, as the port defines it and as the Temporal engine's activity slots
// do: a run whose step's commit is in flight, or whose handler replays,
// holds no step slot, so short steps keep the slots busy while their
// commits wait on the WAL flush. Priority orders the claims; the runs a
// worker holds take free step slots in no set order. While runs flow, the claims that refill that queue
// ride in the group commits described below (a claim costs no commit of its
// own); the claim loop claims on its own only when an executor would
// otherwise go idle. An executor replays each handler from the start:
// completed steps return their stored result after their (seq, name) is
// checked against the history (a mismatch fails the run with a
// *enginekit.NondeterminismError). A new step's result is committed by a
// statement that checks lease_token on the run row in the same
// transaction; nothing of an attempt whose lease is gone is written.
// Commits from all runs of a worker (and the Enqueue calls of its process
// while it serves) are grouped by the committer goroutines (two by default:
// one group commits while the next gathers) into one pipelined transaction
// each, without a waiting window; within a group, the steps starting and
// the runs ending are one statement each, over arrays of their runs,
// and the result of a step is committed when the handler's next move is
// known (handler code between Flow calls has no side effects), so the last
// step's result and the run's end share one commit, and a step's result
// and the next step's started marker share one when a step slot is free.
//
// One heartbeat statement per HeartbeatInterval renews every lease a worker
// holds; it skips rows locked by a commit in progress rather than wait (and
// deadlock) behind it. A run missing from its result lost its lease: its context is
// canceled at once with cause port.ErrLeaseLost. The worker also keeps, per
// run, the deadline of the last renewal that succeeded (the claim's, then
// each heartbeat's): the time the statement was sent plus LeaseDuration,
// minus a margin (half of the smaller of HeartbeatInterval and
// LeaseDuration-HeartbeatInterval), on its monotonic clock. When renewals
// fail (the database unreachable, the statement erroring or hanging) until
// that deadline passes, the run's context is canceled with
// port.ErrLeaseLost then, before the lease can end on the server. A run
// whose lease is lost commits nothing more of its claim: not the attempt's
// result, not a held step, not its end; the next claim replays. A run whose
// cancel_requested_at is set gets cause port.ErrCanceled (at once when the
// Cancel's notification arrives, at the latest at the next heartbeat).
//
// Activities see port.StepInfo with the fencing token
// {Scope: run/step, Epoch: claims, Nonce: lease_token, Generation: the run's
// seq}: every retry and every recovery is a new claim, so a newer attempt
// always has a larger epoch and the ledger can refuse the older one; a run
// enqueued later (a decision retry) has a larger generation, so the ledger
// refuses the run it superseded.
//
// Enqueue is one statement (the run row); it notifies workers at
// most once per 5 ms per process (a NOTIFY serializes commits database-wide)
// with a trailing NOTIFY for the rest, and wakes its own process's worker
// directly. In a process whose worker serves the kind, the enqueue of a
// run due now commits in a group that also claims, when the worker has a
// free place and no claim in flight: the run is taken in the transaction
// that inserts it (no other worker sees it ready), and when that claim
// left no ready run, neither the wake nor the trailing NOTIFY is sent. EnqueueMany is one statement per batch too: the runs inserted
// from arrays (runstore's batch insert, in (kind, key) order so that racing
// batches never deadlock), each with its kind's retry policy, and one
// NOTIFY if any is ready.
//
// # Waiting, signals, retries
//
// Sleep, WaitSignal and retry backoffs park the run (status waiting or
// pending, next_run_at set) and release the lease: a parked run holds no
// worker slot. Signal stores one task_signal row per run waiting on the
// topic when it is sent, wakes them (next_run_at = now, NOTIFY) and returns
// their number. With no waiter the signal is stored untargeted, and the
// first run that waits on the topic consumes it, so an early signal is not
// lost. Waiters and senders of a topic are serialized by a transaction
// advisory lock, so a signal is either seen by the waiter's check or finds
// it registered. The outcome of a wait is recorded as the step's result.
// LISTEN/NOTIFY only shortens latency: polling every PollInterval finds
// everything a lost notification would have announced.
//
// A failed attempt puts the run back to pending with next_run_at = now +
// RetryPolicy.Backoff(attempt); a non-retryable error or the last attempt
// records a failed step, and Flow.Step returns *port.StepError to the
// handler (again on every replay). A handler error fails the run
// (dead_letter_at set, last_error kept).
//
// # Recovery and Stop
//
// Each worker's reaper, every PollInterval, returns expired leases to
// pending. An attempt is charged only to a step whose body started: before
// a step body starts, its worker sends a marker (started_seq, the step's
// seq, on the run row) with the step's cancel-flag read in the next group
// commit and waits for it (a group writes all the markers it gathered in
// one statement, none for a run asked to cancel), and each heartbeat
// writes it again while the body runs. An expired lease whose
// marker is unset, or whose step already has a result, goes back to pending
// at once, charged nothing: the worker died with the run prefetched, waiting
// for a step slot, replaying or between steps; a claim committed on the
// server whose client saw an error is one too. The edges: a marker the
// group skipped because the row was locked at that instant waits for the
// next heartbeat, and a worker that dies between the marker's commit and
// the body's start is charged for a body that did not run; so that a
// handler that kills its worker outside any step still runs out of
// attempts, the third claim in a row lost without a marker
// (unstarted_losses) is charged anyway. A charged lost
// lease of the same step waits Backoff(n-1) for its n-th loss (the first
// none). A killed worker's run is therefore claimable again at most
// LeaseDuration + PollInterval after its last renewal. A lost lease counts
// against the kind's retry policy (the reaper does not know a step's own
// override). When the step is out of attempts the run is claimable at once,
// and that claim's replay records the step as failed for good without running
// it, so Flow.Step returns *port.StepError and the handler decides, as on
// Temporal, where the last attempt's timeout reaches the workflow. Only if
// that claim's lease is charged too (the handler itself kills its worker) does
// the run fail: a dead letter whose last_error names the lost lease. A
// canceled run whose lease expired ends canceled and is charged nothing.
//
// The run's view follows the port's semantics: attempts counts the started
// attempts of current_step (0 for a wait or sleep, which is no attempt);
// last_error is the latest failed attempt's message while the run is open,
// cleared when a step succeeds and when a new step, wait or sleep begins,
// never set by a cancel, "" once succeeded or canceled, and the handler's
// error once failed.
//
// A run canceled while it waits in the prefetch queue ends canceled at once
// (finished by the goroutine that learned of the cancel), not when a busy
// executor frees.
//
// Stop stops claiming, lets in-flight runs reach their next Flow call (they
// then hand themselves back), and after StopTimeout hands back the rest:
// lease released, status pending, step context canceled. Start and Stop
// follow the port's lifecycle rules (internal/startstop): a stopped engine
// starts again with a fresh worker (loops, committers, queue).
//
// # Tracing
//
// The run row keeps the W3C trace context of the Enqueue that created it
// (the dispatcher's span, itself a child of the business transaction that
// wrote the outbox row); each step attempt runs in a span (step:<activity>)
// parented on it, and the activity's context carries that span, so the
// outbox rows a step writes continue the trace. A task_signal row keeps its
// signaller's trace context, and the wait that consumes it moves the run
// onto that trace (run row and claim alike), as the Temporal adapter does
// for the signals a wait receives. Log lines about a run carry its trace.
package leaseadapter
