// # Specification: what every engine does, by method and run state
//
// Both engines must give the same answers, error for error, and write the
// same thing (or nothing). package port/porttest checks every row below
// against an engine; an engine is conforming when porttest.Run passes.
//
// The run states of the tables:
//
//	pending    enqueued, no worker holds it (engine not serving, no slot yet)
//	delayed    enqueued with EnqueueOptions.AvailableAt in the future
//	leased     held by a worker but no step body started (prefetched, waiting
//	           for a step slot, replaying)
//	running    a step body is running
//	waiting    parked in Flow.WaitSignal or Flow.Sleep
//	succeeded  terminal: the handler returned nil
//	failed     terminal: the handler returned an error
//	canceled   terminal: Cancel ended it
//	unknown    no run has that id (a well-formed uuid, or not an id at all,
//	           or a run's uuid spelt otherwise than the lowercase,
//	           hyphenated string Enqueue returned: uppercase, braced,
//	           urn:uuid:)
//	other      the id is a run of another engine (same tables, other owner)
//
// "Nothing written" means the run's row (every column, updated_at included)
// and the number of runs are the same after the call as before.
//
// # Enqueue(kind, input, opts) with the (kind, key) of a run in each state
//
//	pending .. canceled  returns that run's id, nil; nothing written (the
//	                     input is not compared; a finished run is returned
//	                     until retention deletes its row)
//	unknown (new key)    inserts a pending run, returns its new id, nil
//	other                error wrapping ErrOtherEngine; nothing written
//	invalid input        *FieldError wrapping ErrInvalidInput; nothing
//	                     written. Invalid: anything Postgres refuses, such as
//	                     U+0000 in any JSON string of the input (Field
//	                     "input"), in the idempotency key or the business key,
//	                     invalid UTF-8 in a key, or an AvailableAt outside
//	                     the years 1 to 9999 (Field "available_at").
//
// # EnqueueMany(items)
//
// Each item answers as Enqueue would, in one transaction:
//
//	key of a run in any state  that run's id, Created false
//	new key                    a new pending run, Created true
//	a key repeated in a batch  one run, the first item's input; the later
//	                           items report the same id, Created false
//	key of another engine      *ItemError{Index} (the first such item)
//	                           wrapping ErrOtherEngine; the batch's other
//	                           items are recorded (the check rides on the
//	                           read of the keys the insert found taken, so
//	                           a batch of new keys pays nothing for it),
//	                           and the same batch without that item finds
//	                           them (Created false)
//	an invalid item            *ItemError{Index} wrapping the *FieldError;
//	                           nothing of the batch written
//	empty batch                nil, nil; nothing written
//
// # EnqueueTx(tx, kind, input, opts) (package porttx)
//
// Enqueue's table, with every write made through the caller's
// transaction tx, and:
//
//	tx commits           the run exists for every caller; it starts once a
//	                     worker of the engine serves, and runs as one that
//	                     Enqueue recorded
//	tx rolls back        nothing written; nothing runs
//	a refusal            nothing written by it; tx stays usable
//	tx on a connection in pgx's exec or simple_protocol query exec mode
//	                     as in the default mode (the engine's own pool must
//	                     not be in those modes: New refuses it)
//	the same key twice in one tx
//	                     one run, the first call's input
//
// # Signal(topic, payload)
//
// delivered counts the runs of this engine parked in a WaitSignal on topic
// at the call; a signal that finds none is kept for the topic's next
// WaitSignal and counts 0. By state of a run that waits (or will wait) on
// topic:
//
//	pending, delayed, leased, running a step (before or after a wait)
//	           0, nil; the next WaitSignal on topic receives it, this
//	           run's or another run's of this engine: a run that ends
//	           without waiting again leaves it kept
//	waiting    1, nil; the wait returns received=true with the payload,
//	           also when its timeout fell due as the signal came
//	           (docs/engines.md, "A signal that meets a wait's timeout").
//	           A second signal before the run woke counts 1 too, and the
//	           run's next WaitSignal on topic receives it, in the
//	           execution a ContinueAsNew began as well; a run that ends
//	           without waiting on topic again drops it
//	succeeded, failed, canceled
//	           0, nil; the run is unchanged
//	unknown, other (no run of this engine waits on topic)
//	           0, nil; kept for this engine's next WaitSignal on topic. A
//	           run of another engine parked on topic is neither counted
//	           nor reached (its engine may be down)
//	payload with U+0000
//	           0, *FieldError{Field: "payload"} wrapping ErrInvalidInput;
//	           nothing kept
//
// # Cancel(id, reason)
//
//	pending, delayed, leased, waiting, running a step
//	           nil. The cancel flag is written first, then the run ends
//	           canceled. No step body starts after Cancel returned. A body
//	           already running is not interrupted by the engine: its
//	           context is canceled with cause ErrCanceled, whether or not
//	           it heartbeats, and it stops itself. A Cancel that races the
//	           run's start is kept: the run ends canceled and runs no step.
//	succeeded, failed, canceled
//	           nil; nothing written (no cancel_requested_at, reason or
//	           updated_at)
//	unknown    error wrapping ErrNotFound; nothing written
//	other      error wrapping ErrOtherEngine (which wraps ErrNotFound),
//	           naming both engines; nothing written
//
// # Get(id)
//
//	pending .. canceled  the RunView (see below), nil; nothing written
//	unknown              error wrapping ErrNotFound
//	other                error wrapping ErrOtherEngine; nothing written
//
// # Wait(ctx, engine, id) and Result[T](ctx, engine, id)
//
//	pending .. waiting   block until the run is terminal; a ctx that ends
//	                     first returns ctx's error; nothing written
//	succeeded            Wait: the view Get returns, nil. Result: the
//	                     kind's result (RunView.Output) decoded into a T
//	failed               Wait: the view, nil. Result: *RunFailedError
//	                     (ErrRunFailed) whose Message is the LastError
//	canceled             Wait: the view, nil. Result: error wrapping
//	                     ErrCanceled; for a run an evacuation moved, its
//	                     message names the replacement (RunView.MovedTo)
//	unknown              error wrapping ErrNotFound
//	other                error wrapping ErrOtherEngine; nothing written
//
// # Admin.ListRuns(filter)
//
//	succeeded, failed, canceled
//	                     listed when the filter matches, with the view Get
//	                     returns (Cursor aside)
//	pending .. waiting   listed when the filter matches the run store's
//	                     projection: the run, open; its status among the
//	                     open ones, step, attempts and last error are as of
//	                     its last projection (see below), and only Get says
//	                     where the run is now
//	unknown              not listed
//	other                never listed: an engine lists only its own runs
//	a filter out of range (Limit, a status, Version or BelowVersion, a
//	cursor that is none; see RunFilter)
//	                     *FieldError naming the field, wrapping
//	                     ErrInvalidInput
//
// # Admin.Retry(id)
//
//	failed               a new run of the same kind, input and business key
//	                     at the current version, idempotency key RetryKey(id);
//	                     a repeated Retry returns the same run; the failed
//	                     run is unchanged
//	pending, delayed, leased, running, waiting, succeeded, canceled
//	                     error wrapping ErrInvalidInput; nothing written
//	unknown              error wrapping ErrNotFound; nothing written
//	other                error wrapping ErrOtherEngine; nothing written
//
// # Start(opts)
//
//	pending    the run is taken and its steps run
//	delayed    nothing happens before AvailableAt
//	leased, running
//	           (held by another serving process) untouched until that
//	           process's lease or task times out
//	waiting    stays waiting until its signal or timeout
//	succeeded, failed, canceled
//	           untouched; nothing written
//	other      never taken: an engine serves only its own runs
//	serving engine
//	           ErrAlreadyStarted; nothing changes
//	opts.Versions naming a kind@version not registered, or serving no
//	registered definition (an empty map, an empty registry)
//	           *FieldError{Field: "versions"} wrapping ErrInvalidInput;
//	           nothing served, a later Start may serve
//	opts.Concurrency negative or above MaxConcurrency
//	           *FieldError{Field: "concurrency"}, the same
//
// # Stop(ctx)
//
//	running a step
//	           the body finishes (its result commits) or is handed back
//	           within the engine's bound, its context ending with a cause
//	           matching ErrLeaseLost; the run goes on under the next
//	           Start, and a step that finished does not run again. A
//	           handed-back attempt counts on Temporal (its server retries
//	           the step as the next attempt; on the last one the step
//	           fails) and not on the lease engine (docs/engines.md,
//	           "Known differences"). A body that finished leaves the
//	           run between two moves: until the next Start it reads as
//	           "A run a Stop left" says (RunView fields, Status)
//	leased     handed back without an attempt charged; until the next
//	           Start it reads as "A run a Stop left" says
//	pending, delayed, waiting
//	           unchanged, picked up again by the next Start
//	succeeded, failed, canceled
//	           untouched
//	not serving, second Stop
//	           nil; nothing happens
//
// # RunView fields
//
// Status:
//   - pending: no worker holds the run: enqueued and not yet taken, delayed,
//     or between two attempts of a step: in the retry backoff, and once the
//     next attempt is due, until a worker takes it (so too a step a Stop
//     handed back, while nothing serves the run).
//   - running: a worker holds the run, from the claim (lease) or the first
//     workflow task (Temporal) until it parks or ends. A run claimed whose
//     step waits for a slot, and a step whose first attempt is scheduled
//     and due, read running.
//   - A run a Stop left neither parked, in a retry backoff nor ended (its
//     step's body finished under the Stop, or never started) reads, while
//     nothing serves it, pending on the lease engine, whose Stop handed its
//     claim back, and running on Temporal, whose next task (a workflow
//     task, or the step's first attempt) is scheduled for whichever worker
//     comes: Temporal cannot tell it from a task a serving worker has not
//     taken yet, which reads running (docs/engines.md, "Known
//     differences"). Its other fields read the same on both, and it moves
//     no further until a Start.
//   - waiting: parked in WaitSignal or Sleep.
//   - succeeded, failed, canceled: terminal; never change again.
//
// Attempts: the number of attempts of CurrentStep whose body has started,
// 1-based. 0 before any step, and 0 while or after CurrentStep is a wait
// or a sleep (a wait is not an attempt). During the backoff after the first
// failure it is 1. An attempt is charged only when a step body started: a
// run leased but not started goes back without a charge.
//
// LastError: while the run is open, the error message of the latest failed
// attempt of CurrentStep, "" if it has none. It is cleared when a step
// succeeds and when a new step, wait or sleep begins. A cancel never sets it.
// Terminal: succeeded "", canceled "", failed the handler's error message
// (err.Error() of what the handler returned; for a *StepError its Error()).
// A message is stored as Postgres text holds it: a NUL, and each run of
// bytes that are not UTF-8, reads U+FFFD, in LastError and in a StepError's
// Message alike. A message (a step attempt's error, the handler's) longer
// than MaxErrorBytes keeps its first MaxErrorBytes bytes, cut between
// runes, and "…": a StepError's Message so, and LastError so again when
// the StepError's Error() is longer (Temporal's server cuts an activity's
// failure at 512 KiB and refuses a request over 4 MiB).
//
// CurrentStep: the name of the step, wait or sleep the run is in or last
// was in; "" before the first. The end of the run does not change it, nor
// does a ContinueAsNew: the new execution's first step, wait or sleep
// replaces it (with its Attempts) when it begins.
// A step becomes CurrentStep when its first body starts, a wait or sleep
// when it parks (a wait with a zero timeout or a sleep of zero, which never
// park, when it returns; a negative timeout or duration is Flow's
// *FieldError, and the run stays in the step before): a step scheduled and
// waiting for a worker or a slot is not the run's step yet, and a step a
// cancel kept from starting never is (the run ends in the step before). CurrentStep and Attempts may differ from a
// step body's start by one write: the lease engine records the start with
// its next group commit, after the body began; Temporal reads it from the
// moment a worker took the activity task, just before the body begins (and
// when a cancel then keeps the body from starting, the run ends in the
// step before after all). A test waits for the body's own record of its
// start, and for the view, with a deadline.
//
// Output: nil until the run succeeded, then the JSON of what its handler
// returned (HandleResult), written with the terminal status; nil for ever
// when it failed or was canceled, or when its kind has no result (Handle).
//
// MovedTo: the run an evacuation (router.Evacuate) moved this one to, set
// when the run is ended by the evacuation and its replacement recorded;
// empty otherwise. A canceled run with MovedTo goes on as that run. Every
// engine reads it from the run's row (taskport.run.evacuated_to); the
// replacement's own MovedTo is empty until it is moved in turn.
//
// CreatedAt: the insert time of the run's row (Postgres clock).
// UpdatedAt: advanced whenever a field above changes; it may also advance
// without a visible change. FinishedAt: zero until terminal, then set once
// (Postgres clock of the terminal write).
//
// # What comparisons normalize
//
// Only what an engine cannot match:
//
//   - Timestamps. They are compared for order, never for equality across
//     engines: CreatedAt <= UpdatedAt <= FinishedAt (or now, while open),
//     and FinishedAt is the same on every Get once set. Cursor is opaque.
//
//   - Where an open run is, as Admin.ListRuns shows it. A listing reads the
//     run store's projection in Postgres. The lease engine's run row is
//     live; Temporal's projection is written when a run starts its first
//     step, parks, has a retried step succeed and ends, and Get reads the
//     rest from Temporal (DescribeWorkflow). Writing it at every step would
//     cost a local activity and a commit per step. So for an open run a
//     listing is compared as "open", and the status among the open ones,
//     CurrentStep, Attempts and LastError are compared from Get only.
//
//   - The status of a run a Stop left between two moves, while nothing
//     serves it: pending or running, by engine (RunView fields, Status).
//
//   - Which earlier step a Temporal run names while a later step's first
//     attempt waits for a worker. Get then reads the projection, which
//     records a run's first step and its steps after a wait, not every
//     step: it may name an earlier step than the last one whose body
//     started (and that step's attempts). Observed at rest (parked, held
//     in a running body, ended) the two engines agree.
//
// Every other field is compared exactly.
package port
