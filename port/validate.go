package port

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Limits on what callers may pass. They are constants so that both engines
// and the documentation agree.
const (
	// MaxPayloadBytes bounds an encoded input, signal payload or step result.
	// Temporal refuses blobs over 2 MiB by default; staying well below keeps
	// histories small and the lease engine's state row cheap to rewrite.
	MaxPayloadBytes = 256 << 10
	// MaxNameLen bounds kinds, idempotency keys, topics and step names.
	MaxNameLen = 200
)

// ValidateName checks an identifier used as a kind, step or activity name:
// non-empty, at most MaxNameLen bytes, and made of letters, digits and
// ". _ - : /" only, so it is safe in workflow types, activity IDs and tokens.
func ValidateName(field, s string) error {
	if s == "" {
		return fieldErr(field, "must not be empty")
	}
	if len(s) > MaxNameLen {
		return fieldErr(field, "longer than %d bytes", MaxNameLen)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '_' || r == '-' || r == ':' || r == '/'
		if !ok {
			return fieldErr(field, "character %q not allowed in %q (letters, digits and . _ - : / only)", r, s)
		}
	}
	return nil
}

// ValidateKey checks an idempotency key or business key: non-empty (when
// required), at most MaxNameLen bytes, printable.
func validateKey(field, s string, required bool) error {
	if s == "" {
		if required {
			return fieldErr(field, "must not be empty")
		}
		return nil
	}
	if len(s) > MaxNameLen {
		return fieldErr(field, "longer than %d bytes", MaxNameLen)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fieldErr(field, "control character %U not allowed", r)
		}
	}
	return nil
}

// ValidateTopic checks a signal topic. Topics follow the same rules as names.
func ValidateTopic(t Topic) error { return ValidateName("topic", string(t)) }

// ValidateTimeout refuses negative durations; zero is allowed where the
// callee documents a meaning for it.
func ValidateTimeout(field string, d time.Duration) error {
	if d < 0 {
		return fieldErr(field, "must not be negative, got %s", d)
	}
	return nil
}

// EncodePayload encodes v as JSON and enforces MaxPayloadBytes. A
// json.RawMessage (or []byte holding JSON) is taken as already encoded but
// must be valid JSON. nil encodes as JSON null.
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
	if len(b) > MaxPayloadBytes {
		return nil, &FieldError{Field: field, Reason: fmt.Sprintf("%d bytes encoded, limit %d", len(b), MaxPayloadBytes), Err: ErrPayloadTooLarge}
	}
	if !json.Valid(b) {
		return nil, fieldErr(field, "is not valid JSON")
	}
	return json.RawMessage(bytes.Clone(b)), nil
}

// DecodePayload decodes a stored payload into out (a pointer, or nil to
// discard it).
func DecodePayload(raw json.RawMessage, out any) error {
	if out == nil || len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func decodeStrict(raw json.RawMessage, out any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after JSON value")
	}
	return nil
}

// PreparedEnqueue is an Enqueue call that passed validation: the definition
// it runs and its encoded input.
type PreparedEnqueue struct {
	Definition Definition
	Input      json.RawMessage
	Options    EnqueueOptions
}

// PrepareEnqueue validates an Enqueue call against the registry. Both engines
// call it before writing anything, so bad input is refused identically.
func (r *Registry) PrepareEnqueue(kind Kind, input any, opts EnqueueOptions) (PreparedEnqueue, error) {
	if err := ValidateName("kind", string(kind)); err != nil {
		return PreparedEnqueue{}, err
	}
	def, err := r.Current(kind)
	if err != nil {
		return PreparedEnqueue{}, err
	}
	if opts.MinVersion < 0 {
		return PreparedEnqueue{}, fieldErr("min_version", "must not be negative, got %d", opts.MinVersion)
	}
	if opts.MinVersion > def.Version {
		return PreparedEnqueue{}, fmt.Errorf("kind %q: input needs version %d, newest registered is %d: %w",
			kind, opts.MinVersion, def.Version, ErrUnknownVersion)
	}
	if err := validateKey("idempotency_key", opts.IdempotencyKey, true); err != nil {
		return PreparedEnqueue{}, err
	}
	if err := validateKey("business_key", opts.BusinessKey, false); err != nil {
		return PreparedEnqueue{}, err
	}
	if opts.Priority < MinPriority || opts.Priority > MaxPriority {
		return PreparedEnqueue{}, fieldErr("priority", "must lie in [%d, %d], got %d", MinPriority, MaxPriority, opts.Priority)
	}
	raw, err := EncodePayload("input", input)
	if err != nil {
		return PreparedEnqueue{}, err
	}
	if err := def.Handler.CheckInput(raw); err != nil {
		return PreparedEnqueue{}, err
	}
	return PreparedEnqueue{Definition: def, Input: raw, Options: opts}, nil
}

// PrepareSignal validates a Signal call and encodes its payload.
func PrepareSignal(topic Topic, payload any) (json.RawMessage, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	return EncodePayload("payload", payload)
}

// ValidateStartOptions checks StartOptions and fills in the default role.
func ValidateStartOptions(opts StartOptions) (StartOptions, error) {
	if opts.Concurrency < 0 {
		return opts, fieldErr("concurrency", "must not be negative, got %d", opts.Concurrency)
	}
	if len(opts.Roles) == 0 {
		opts.Roles = []Role{RoleWorker}
	}
	for _, role := range opts.Roles {
		if role != RoleWorker {
			return opts, fieldErr("roles", "unknown role %q", role)
		}
	}
	return opts, nil
}
