package enginekit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

func fieldErr(field, format string, args ...any) error {
	return &port.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// PreparedEnqueue is an Enqueue call that passed validation: the definition
// it runs and its encoded input.
type PreparedEnqueue struct {
	Definition port.Definition
	Input      json.RawMessage
	Options    port.EnqueueOptions
}

// PrepareEnqueue validates an Enqueue call against the registry. Both engines
// call it before writing anything, so bad input is refused identically.
func PrepareEnqueue(reg *port.Registry, kind port.Kind, input any, opts port.EnqueueOptions) (PreparedEnqueue, error) {
	if err := CheckOptions(kind, opts); err != nil {
		return PreparedEnqueue{}, err
	}
	// Both refusals are *port.FieldErrors, as the port promises for any
	// invalid input, and still match their sentinels.
	def, err := reg.Current(kind)
	if err != nil {
		return PreparedEnqueue{}, &port.FieldError{Field: "kind", Reason: fmt.Sprintf("unknown kind %q: not registered in this process", kind), Err: port.ErrUnknownKind}
	}
	if opts.MinVersion > def.Version {
		return PreparedEnqueue{}, &port.FieldError{Field: "min_version", Err: port.ErrUnknownVersion,
			Reason: fmt.Sprintf("kind %q: input needs version %d, newest registered is %d", kind, opts.MinVersion, def.Version)}
	}
	raw, err := EncodePayload("input", input)
	if err != nil {
		return PreparedEnqueue{}, err
	}
	if err := engineapi.CheckInput(def.Handler, raw); err != nil {
		return PreparedEnqueue{}, err
	}
	return PreparedEnqueue{Definition: def, Input: raw, Options: opts}, nil
}

// CheckOptions is the part of PrepareEnqueue that needs no registry: the
// kind's name and the options. A caller that reads the run store by an
// item's kind and key before handing it to an engine (the router) checks
// them first, so that a key Postgres cannot take is refused as the engines
// refuse it, not by the server.
func CheckOptions(kind port.Kind, opts port.EnqueueOptions) error {
	if err := port.ValidateName("kind", string(kind)); err != nil {
		return err
	}
	if opts.MinVersion < 0 {
		return fieldErr("min_version", "must not be negative, got %d", opts.MinVersion)
	}
	if err := validateKey("idempotency_key", opts.IdempotencyKey, true); err != nil {
		return err
	}
	if err := validateKey("business_key", opts.BusinessKey, false); err != nil {
		return err
	}
	if opts.Priority < port.MinPriority || opts.Priority > port.MaxPriority {
		return fieldErr("priority", "must lie in [%d, %d], got %d", port.MinPriority, port.MaxPriority, opts.Priority)
	}
	// Years 1-9999: RFC 3339's and protobuf Timestamp's range, inside
	// Postgres's, which refused an instant beyond it with its own error
	// ("timestamp out of range") after validation had passed.
	if at := opts.AvailableAt; !at.IsZero() && (at.Before(minAvailableAt) || !at.Before(maxAvailableAt)) {
		return fieldErr("available_at", "must lie in the years 1 to 9999, got %s", at.Format(time.RFC3339))
	}
	return nil
}

// CheckBatchOptions is CheckOptions for every item of a batch, the first
// bad one refused as PrepareBatch refuses it: a *port.ItemError with the
// item's index.
func CheckBatchOptions(items []port.EnqueueItem) error {
	for i, it := range items {
		if err := CheckOptions(it.Kind, it.Options); err != nil {
			return &port.ItemError{Index: i, Err: err}
		}
	}
	return nil
}

var (
	minAvailableAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxAvailableAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// PrepareBatch validates every item of an EnqueueMany batch with
// PrepareEnqueue, in order. The first bad item refuses the batch: its error
// is a *port.ItemError with the item's index. An empty batch is no error.
func PrepareBatch(reg *port.Registry, items []port.EnqueueItem) ([]PreparedEnqueue, error) {
	out := make([]PreparedEnqueue, len(items))
	for i, it := range items {
		p, err := PrepareEnqueue(reg, it.Kind, it.Input, it.Options)
		if err != nil {
			return nil, &port.ItemError{Index: i, Err: err}
		}
		out[i] = p
	}
	return out, nil
}

// validateKey checks an idempotency key or business key: non-empty (when
// required), at most port.MaxNameLen bytes, UTF-8, no control character.
func validateKey(field, s string, required bool) error {
	if s == "" {
		if required {
			return fieldErr(field, "must not be empty")
		}
		return nil
	}
	if len(s) > port.MaxNameLen {
		return fieldErr(field, "longer than %d bytes", port.MaxNameLen)
	}
	if !utf8.ValidString(s) {
		return fieldErr(field, "is not valid UTF-8")
	}
	// C0, DEL and C1 (U+0080-U+009F): a key is shown back to operators,
	// and a C1 control is a terminal escape as much as a C0 one.
	for _, r := range s {
		if unicode.IsControl(r) {
			return fieldErr(field, "control character %U not allowed", r)
		}
	}
	return nil
}

// ValidateText refuses a string that a Postgres text column cannot store:
// bytes that are not UTF-8, or a NUL. Free text the engines write (a
// cancel reason) goes through it before any write.
func ValidateText(field, s string) error {
	if !utf8.ValidString(s) {
		return fieldErr(field, "is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fieldErr(field, "contains U+0000, which Postgres text cannot store")
	}
	return nil
}

// ValidateLine refuses what ValidateText refuses, and control characters
// other than those in keep ("" for one line, "\n\t" for a note): text an
// operator reads back in a terminal must not carry escape codes into it.
func ValidateLine(field, s, keep string) error {
	if err := ValidateText(field, s); err != nil {
		return err
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) && !strings.ContainsRune(keep, r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fieldErr(field, "must not contain control characters, got %U at byte %d", r, i)
	}
	return nil
}

// ValidateBoundedLine refuses what ValidateLine refuses, and text longer
// than maxLen characters (runes): the free text an operator writes and
// reads back (who acted, a note, a reason, a title).
func ValidateBoundedLine(field, s, keep string, maxLen int) error {
	if err := ValidateLine(field, s, keep); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(s); n > maxLen {
		return fieldErr(field, "must be at most %d characters, got %d", maxLen, n)
	}
	return nil
}

// PrepareSignal validates a Signal call and encodes its payload.
func PrepareSignal(topic port.Topic, payload any) (json.RawMessage, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	return EncodePayload("payload", payload)
}

// ValidateStartOptions checks StartOptions against the definitions
// registered (defs) and fills in the default role. A worker must serve at
// least one definition, and Versions may list only registered ones: a
// misspelt kind or a version this binary lacks would otherwise start a
// worker that serves less than its caller asked, or nothing, in silence.
func ValidateStartOptions(opts port.StartOptions, defs []port.Definition) (port.StartOptions, error) {
	for kind, versions := range opts.Versions {
		for _, v := range versions {
			if !slices.ContainsFunc(defs, func(d port.Definition) bool { return d.Kind == kind && d.Version == v }) {
				return opts, fieldErr("versions", "%s@v%d is not registered", kind, v)
			}
		}
	}
	if !slices.ContainsFunc(defs, func(d port.Definition) bool { return Serves(opts, d.Kind, d.Version) }) {
		return opts, fieldErr("versions", "the worker serves no registered definition")
	}
	if opts.Concurrency < 0 || opts.Concurrency > port.MaxConcurrency {
		return opts, fieldErr("concurrency", "must lie in [0, %d], got %d", port.MaxConcurrency, opts.Concurrency)
	}
	if len(opts.Roles) == 0 {
		opts.Roles = []port.Role{port.RoleWorker}
	}
	for _, role := range opts.Roles {
		if role != port.RoleWorker {
			return opts, fieldErr("roles", "unknown role %q", role)
		}
	}
	return opts, nil
}

// Serves reports whether a worker started with opts serves kind at version.
func Serves(opts port.StartOptions, kind port.Kind, version int) bool {
	if opts.Versions == nil {
		return true
	}
	return slices.Contains(opts.Versions[kind], version)
}

// ValidateTopic checks a signal topic. Topics follow the same rules as names.
func ValidateTopic(t port.Topic) error { return port.ValidateName("topic", string(t)) }

// ValidateTimeout refuses negative durations; zero is allowed where the
// callee documents a meaning for it.
func ValidateTimeout(field string, d time.Duration) error {
	if d < 0 {
		return fieldErr(field, "must not be negative, got %s", d)
	}
	return nil
}

// ResolveStepOptions applies opts over the definition's defaults and
// validates the result. Engines call it for every Step.
func ResolveStepOptions(def port.Definition, opts ...port.StepOption) (port.StepOptions, error) {
	o := port.StepOptions{Retry: def.Retry, Timeout: def.StepTimeout, HeartbeatTimeout: def.HeartbeatTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if err := ValidateTimeout("timeout", o.Timeout); err != nil {
		return o, err
	}
	if err := ValidateTimeout("heartbeat_timeout", o.HeartbeatTimeout); err != nil {
		return o, err
	}
	if o.Timeout == 0 {
		o.Timeout = port.DefaultStepTimeout
	}
	if err := o.Retry.Validate(); err != nil {
		return o, err
	}
	o.Retry = o.Retry.WithDefaults()
	return o, nil
}

// EncodePayload encodes v as JSON and enforces port.MaxPayloadBytes. A
// json.RawMessage (or []byte holding JSON) is taken as already encoded but
// must be valid JSON. nil encodes as JSON null; the result is never nil.
// It also refuses what Postgres's jsonb would (checkJSONB), so that an
// input, payload or result is refused the same way whether or not the
// engine stores it in Postgres.
func EncodePayload(field string, v any) (json.RawMessage, error) {
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fieldErr(field, "does not encode as JSON: %s", err.Error())
		}
	}
	if len(b) > port.MaxPayloadBytes {
		return nil, &port.FieldError{Field: field, Reason: fmt.Sprintf("%d bytes encoded, limit %d", len(b), port.MaxPayloadBytes),
			Err: port.ErrPayloadTooLarge}
	}
	if !json.Valid(b) {
		return nil, fieldErr(field, "is not valid JSON")
	}
	if reason := checkJSONB(b); reason != "" {
		return nil, fieldErr(field, "%s", reason)
	}
	return json.RawMessage(bytes.Clone(b)), nil
}

// checkJSONB returns why Postgres's jsonb would refuse the valid JSON b,
// or "": bytes that are not UTF-8 (encoding/json accepts them in strings),
// a \u0000 escape (jsonb stores strings as text, which has no NUL), or a
// surrogate escape not in a high-low pair (encoding/json decodes a lone one
// to U+FFFD). json.Marshal writes a NUL of a Go string as \u0000, so this
// covers encoded values too. It is a byte scan, no decoding: utf8.Valid,
// then each backslash found by bytes.IndexByte; in valid JSON a backslash
// only starts an escape (\x or \uXXXX) inside a string, so stepping over
// whole escapes never mistakes an escaped backslash for one.
func checkJSONB(b []byte) string {
	const lone = "contains a lone surrogate escape (\\ud800-\\udfff not in a high-low pair), which Postgres jsonb refuses"
	if !utf8.Valid(b) {
		return "is not valid UTF-8"
	}
	needLow := -1 // after a high surrogate: where its low one must start
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			break
		}
		i += j
		if needLow >= 0 && i != needLow {
			return lone
		}
		if i+1 < len(b) && b[i+1] != 'u' {
			if needLow >= 0 {
				return lone
			}
			i += 2
			continue
		}
		if i+6 > len(b) { // an escape cut short: json.Valid refuses it
			return "is not valid JSON"
		}
		cp, ok := hex4(b[i+2 : i+6])
		if !ok {
			return "is not valid JSON"
		}
		if isLow := cp >= 0xDC00 && cp <= 0xDFFF; isLow != (needLow >= 0) {
			return lone
		}
		needLow = -1
		switch {
		case cp == 0:
			return "contains U+0000 (\\u0000), which Postgres jsonb cannot store"
		case cp >= 0xD800 && cp <= 0xDBFF:
			needLow = i + 6
		}
		i += 6
	}
	if needLow >= 0 {
		return lone
	}
	return ""
}

// hex4 decodes four hex digits.
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// DecodePayload decodes a stored payload into out (a pointer, or nil to
// discard it).
func DecodePayload(raw json.RawMessage, out any) error {
	if out == nil || len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// The errors a handler gets from its Flow, worded once for both engines:
// a handler that returns one fails its run with it as LastError, which
// must read the same on either engine.

// DecodeStepResult decodes the result of step name (activity) into out.
func DecodeStepResult(name, activity string, raw json.RawMessage, out any) error {
	if err := DecodePayload(raw, out); err != nil {
		return fmt.Errorf("step %s: decode result of %s: %w", name, activity, err)
	}
	return nil
}

// DecodeSignalPayload decodes the payload wait name received into payload.
func DecodeSignalPayload(name string, raw json.RawMessage, payload any) error {
	if err := DecodePayload(raw, payload); err != nil {
		return fmt.Errorf("wait %s: decode signal payload: %w", name, err)
	}
	return nil
}

// PrepareStep resolves step name's options, checks its activity's name and
// encodes its input, before anything else of the step (its activity's
// binding included) is looked at: an error here, "step <name>: ...", means
// the step never started. (A name Temporal could not schedule, such as "",
// would otherwise fail the workflow task for ever there.)
func PrepareStep(def port.Definition, name, activity string, in any, opts ...port.StepOption) (port.StepOptions, json.RawMessage, error) {
	o, err := ResolveStepOptions(def, opts...)
	if err == nil {
		err = port.ValidateName("activity", activity)
	}
	if err != nil {
		return o, nil, fmt.Errorf("step %s: %w", name, err)
	}
	raw, err := EncodePayload("input", in)
	if err != nil {
		return o, nil, fmt.Errorf("step %s: %w", name, err)
	}
	return o, raw, nil
}

// CheckMarker checks a Flow.GetVersion call before either engine records
// or replays it: the change id, recorded as the step "version:<id>" on the
// lease engine, must make a valid step name, and the range must not be
// empty. The run fails with the error.
func CheckMarker(changeID string, minSupported, maxSupported int) error {
	err := port.ValidateName("change_id", MarkerStep(changeID))
	if err == nil && minSupported > maxSupported {
		err = fieldErr("max_supported", "%d is below min_supported %d", maxSupported, minSupported)
	}
	if err != nil {
		return fmt.Errorf("version marker %q: %w", changeID, err)
	}
	return nil
}

// MarkerStep is the step name under which the lease engine records the
// marker changeID.
func MarkerStep(changeID string) string { return "version:" + changeID }

// HandlerPanicked is the failure of a run whose handler panicked with v.
func HandlerPanicked(v any) error { return fmt.Errorf("handler panicked: %v", v) }

// ValidateSleep refuses a negative Flow.Sleep duration.
func ValidateSleep(d time.Duration) error { return ValidateTimeout("duration", d) }

// Outcome splits what a handler returned (engineapi.Run). When err is the
// request port.ContinueAsNew made, next is the new input, encoded;
// otherwise next is nil and outcome is what the run ends with: err, or nil
// when it succeeded, and then output is the handler's result encoded (nil
// when it has none). An input or a result that does not encode is the
// outcome (a *port.FieldError, "input" or "output"): the run fails as if
// the handler had returned that error.
func Outcome(out any, err error) (next, output json.RawMessage, outcome error) {
	// port keeps the request's type unexported, so that only ContinueAsNew
	// makes one; its NextInput method is how engines recognise it.
	var req interface{ NextInput() any }
	if errors.As(err, &req) {
		raw, err := EncodePayload("input", req.NextInput())
		if err != nil {
			return nil, nil, fmt.Errorf("continue as new: %w", err)
		}
		return raw, nil, nil
	}
	if err != nil || out == nil {
		return nil, nil, err
	}
	if output, err = EncodePayload("output", out); err != nil {
		return nil, nil, fmt.Errorf("the run's result: %w", err)
	}
	return nil, output, nil
}

// StorableText is s as a run's LastError can hold it: Postgres text stores
// no NUL and Temporal's failures (protobuf strings) only UTF-8, so each NUL
// and each run of bytes that are not UTF-8 reads U+FFFD; and a message
// longer than port.MaxErrorBytes keeps its first MaxErrorBytes bytes, cut
// between runes, and "…" (Temporal's server cuts an activity's failure at
// 512 KiB and refuses a request over 4 MiB, where the lease engine would
// keep it whole).
func StorableText(s string) string {
	if ValidateText("", s) != nil {
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	}
	return Cut(s, port.MaxErrorBytes)
}

// Cut is s when it has at most n bytes; otherwise its first n bytes or
// fewer, cut between runes, and "…".
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Storable is err when its message fits port.MaxErrorBytes and every
// message of its chain is StorableText already; otherwise an error that
// reads StorableText of err's message and matches what err matched of
// port.NonRetryable's mark, port.ErrCanceled and port.ErrLeaseLost, and
// nothing else of its chain (Temporal encodes a chain as a failure's
// causes, so none of it may carry the bytes, nor the length). A step
// body's error or a handler's, however it was built, then fails its attempt
// or its run in its own words, the same on both engines; before, Postgres
// refused the write, and the lease engine handed the claim back and ran the
// body again without end.
func Storable(err error) error {
	if err == nil {
		return nil
	}
	clean := len(err.Error()) <= port.MaxErrorBytes
	for e := err; e != nil && clean; e = errors.Unwrap(e) {
		clean = ValidateText("", e.Error()) == nil
	}
	if clean {
		return err
	}
	s := &storableError{msg: StorableText(err.Error())}
	if port.IsNonRetryable(err) {
		s.marks = append(s.marks, port.NonRetryable(errors.New("marked non-retryable")))
	}
	for _, sentinel := range []error{port.ErrCanceled, port.ErrLeaseLost} {
		if errors.Is(err, sentinel) {
			s.marks = append(s.marks, sentinel)
		}
	}
	return s
}

type storableError struct {
	msg   string
	marks []error
}

func (e *storableError) Error() string   { return e.msg }
func (e *storableError) Unwrap() []error { return e.marks }
