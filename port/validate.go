package port

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Callers and kind authors: limits on what may be passed. They are
// constants so that both engines and the documentation agree.
const (
	// MaxPayloadBytes bounds an encoded input, signal payload or step result.
	// Temporal refuses blobs over 2 MiB by default; staying well below keeps
	// histories small and the lease engine's state row cheap to rewrite.
	MaxPayloadBytes = 256 << 10
	// MaxNameLen bounds kinds, idempotency keys, topics and step names.
	MaxNameLen = 200
	// MaxErrorBytes bounds an error message as a run keeps it (a step
	// attempt's, the handler's): a longer one keeps its first MaxErrorBytes
	// bytes, cut between runes, and "…" (RunView.LastError,
	// StepError.Message). Temporal's server cuts an activity's failure at
	// 512 KiB and refuses a request over 4 MiB.
	MaxErrorBytes = 64 << 10
)

// Kind authors: ValidateName checks an identifier used as a kind, step,
// activity name or topic: non-empty, at most MaxNameLen bytes, and made of
// letters, digits and ". _ - : /" only, so it is safe in workflow types,
// activity IDs and tokens. Both engines apply it to every name a handler
// gives; a kind's input can apply it to ids it builds names from.
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

// decodeStrict decodes a handler's input, refusing unknown fields and
// trailing data (Handle).
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
