// Package enginekit is the engine implementers' kit: what both engines
// (temporaladapter, leaseadapter) and the engine test doubles share, so that
// the same call and the same handler are accepted, refused and run the same
// way on each. Business code never imports it; kind authors and callers
// use port alone.
//
//   - Input: PrepareEnqueue, PrepareSignal, ValidateStartOptions and Serves
//     refuse bad input with the same *port.FieldError on both engines
//     before anything is written; EncodePayload enforces
//     port.MaxPayloadBytes on inputs, payloads and results and refuses what
//     Postgres's jsonb would (a U+0000, a lone surrogate, bytes that are not
//     UTF-8), and ValidateText what its text would, whether or not the
//     engine stores the value in Postgres, so that both refuse alike.
//   - Replay: StepSequence numbers a run's steps and refuses reused names;
//     CheckReplay compares (sequence, name) with the history; CheckMarker
//     refuses a GetVersion that cannot be recorded.
//   - Steps: PrepareStep (ResolveStepOptions, which applies a step's
//     options over its kind's defaults, and the input's encoding) comes
//     before the activity's binding is looked at; StepFailed is the one
//     place a *port.StepError is built; ContinueAsNew reads a handler's
//     request to continue as new.
//   - What a handler gets from its Flow and may return as its run's
//     LastError is worded here once: DecodeStepResult,
//     DecodeSignalPayload, ValidateSleep, CheckMarker, HandlerPanicked.
//   - Activities: RunActivity is the one activity runtime. It installs the
//     step's identity and fencing token (TemporalToken, LeaseToken) where
//     port.StepInfoFrom and port.Heartbeat read them (internal/stepctx),
//     runs the body, and encodes its result; each engine brings only its
//     heartbeat (Beater).
package enginekit
