package enginekit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// jsonbCases are raw JSON documents around the values Postgres's jsonb
// refuses: U+0000, lone surrogates and bytes that are not UTF-8, next to
// look-alikes it accepts (an escaped backslash before "u0000", a surrogate
// pair, other escapes).
var jsonbCases = []string{
	`"\u0000"`, `{"\u0000":1}`, `{"a":["x","y\u0000z"]}`, `"\\u0000"`, `"\\\u0000"`, `"\\\\u0000"`,
	`"\ud800"`, `"\udc00"`, `"\ud800\udc00"`, `"\uD83D\uDE00"`, `"\ud800\u0041"`, `"\ud800x"`, `"\ud800\n"`,
	`"\ud800\ud800\udc00"`, `["\ud800","\udc00"]`, `"\udbff\udfff"`, `"a\ud83d\ude00b\u0001"`,
	"\"\xff\"", "\"\xc3\xa9\"", `"\u00e9\"\\\/\b\f\n\r\t"`, `{"plan_id":"p1"}`, `"\u0001"`, `null`,
}

// jsonbAccepts asks Postgres whether it stores raw as jsonb.
func jsonbAccepts(t testing.TB, conn *pgx.Conn, raw string) bool {
	t.Helper()
	var ok bool
	err := conn.QueryRow(context.Background(), `SELECT $1::text::jsonb IS NOT NULL`, raw).Scan(&ok)
	if err != nil {
		// The statement failed on the value, not the connection: the
		// next one must still work.
		require.NoError(t, conn.Ping(context.Background()), "after %q", raw)
	}
	return err == nil
}

func connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// EncodePayload refuses exactly the valid JSON that Postgres's jsonb
// refuses, with a *port.FieldError naming the field, so that no input,
// payload or result reaches Postgres to come back as a raw SQLSTATE.
func TestEncodePayloadRefusesWhatJSONBRefuses(t *testing.T) {
	conn := connect(t)
	for _, raw := range jsonbCases {
		_, err := enginekit.EncodePayload("input", json.RawMessage(raw))
		require.Equal(t, jsonbAccepts(t, conn, raw), err == nil, "%q: Postgres and EncodePayload disagree: %v", raw, err)
		if err != nil {
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "input", fe.Field)
			require.ErrorIs(t, err, port.ErrInvalidInput)
		}
	}
	// A Go value with a NUL encodes as \u0000: refused as well.
	_, err := enginekit.EncodePayload("payload", map[string]string{"note": "a\x00b"})
	require.ErrorContains(t, err, "invalid payload: contains U+0000")
}

// FuzzEncodePayloadAgreesWithJSONB: EncodePayload accepts a valid JSON
// document exactly when Postgres's jsonb does.
func FuzzEncodePayloadAgreesWithJSONB(f *testing.F) {
	for _, raw := range jsonbCases {
		f.Add(raw)
	}
	conn := connect(f)
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			return
		}
		_, err := enginekit.EncodePayload("input", json.RawMessage(raw))
		if pg := jsonbAccepts(t, conn, raw); pg != (err == nil) {
			t.Fatalf("%q: Postgres accepts: %v, EncodePayload: %v", raw, pg, err)
		}
	})
}

// Every string the engines write to a text column is refused before the
// write when Postgres could not store it: the keys of Enqueue (and of each
// EnqueueMany item, named by its index) and a Signal's payload.
func TestPrepareRefusesWhatPostgresCannotStore(t *testing.T) {
	reg := testRegistry(t)
	ok := importInput{PlanID: "p1"}
	tests := []struct {
		name  string
		input any
		opts  port.EnqueueOptions
		field string
	}{
		{"NUL in the input", importInput{PlanID: "p\x001"}, port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"escaped NUL in raw input", json.RawMessage(`{"plan_id":"p\u0000"}`), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"lone surrogate in raw input", json.RawMessage(`{"plan_id":"\udead"}`), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"invalid UTF-8 in raw input", json.RawMessage("{\"plan_id\":\"\xfe\"}"), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"NUL in the idempotency key", ok, port.EnqueueOptions{IdempotencyKey: "k\x00"}, "idempotency_key"},
		{"invalid UTF-8 in the idempotency key", ok, port.EnqueueOptions{IdempotencyKey: "k\xff"}, "idempotency_key"},
		{"invalid UTF-8 in the business key", ok, port.EnqueueOptions{IdempotencyKey: "k", BusinessKey: "plan-\xc3"}, "business_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := enginekit.PrepareEnqueue(reg, "asset.import", tt.input, tt.opts)
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
			require.ErrorIs(t, err, port.ErrInvalidInput)

			items := []port.EnqueueItem{
				{Kind: "asset.import", Input: ok, Options: port.EnqueueOptions{IdempotencyKey: "fine"}},
				{Kind: "asset.import", Input: tt.input, Options: tt.opts},
			}
			_, err = enginekit.PrepareBatch(reg, items)
			var ie *port.ItemError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, 1, ie.Index, "the batch names the bad item")
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
			require.ErrorIs(t, err, port.ErrInvalidInput)
		})
	}
	_, err := enginekit.PrepareSignal("approval:p1", map[string]string{"by": "a\x00"})
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "payload", fe.Field)
	_, err = enginekit.PrepareSignal("approval:p1", json.RawMessage(`"\ud800"`))
	require.ErrorIs(t, err, port.ErrInvalidInput)

	require.NoError(t, enginekit.ValidateText("reason", "user changed their mind: é"))
	require.ErrorContains(t, enginekit.ValidateText("reason", "a\x00"), "invalid reason: contains U+0000")
	require.ErrorContains(t, enginekit.ValidateText("reason", "\xff"), "invalid reason: is not valid UTF-8")
}

// A step result Postgres could not store fails its step at once on both
// engines (RunActivity is their one activity runtime), naming the field:
// retrying would produce the same result.
func TestRunActivityRefusesAResultPostgresCannotStore(t *testing.T) {
	ref := port.DeclareActivity[int, string]("k.act")
	for _, res := range []string{"a\x00b", "\xff"} {
		b := port.Bind(ref, func(context.Context, int) (string, error) { return res, nil })
		_, err := enginekit.RunActivity(context.Background(), b, port.StepInfo{}, nil, json.RawMessage(`1`))
		if strings.Contains(res, "\x00") {
			require.ErrorContains(t, err, "activity k.act: invalid result: contains U+0000")
			require.True(t, port.IsNonRetryable(err))
			require.ErrorIs(t, err, port.ErrInvalidInput)
			continue
		}
		// json.Marshal writes invalid UTF-8 of a Go string as U+FFFD,
		// which Postgres stores.
		require.NoError(t, err)
	}
}

// benchPayloads are a small input, a 64 KiB one with no escapes, the same
// with an escape every 64 bytes, and one of two-byte characters.
func benchPayloads() (names []string, raws []json.RawMessage) {
	return []string{"small", "64KiB", "64KiB escaped", "64KiB non-ASCII"}, []json.RawMessage{
		json.RawMessage(`{"plan_id":"0190a5c6-0000-7000-8000-000000000000","path":"/library/films/x.mkv","bytes":734003200}`),
		json.RawMessage(`{"blob":"` + strings.Repeat("abcdefgh", 8<<10) + `"}`),
		json.RawMessage(`{"blob":"` + strings.Repeat(strings.Repeat("x", 58)+`\u00e9`, 1<<10) + `"}`),
		json.RawMessage(`{"blob":"` + strings.Repeat("é", 32<<10) + `"}`),
	}
}

// BenchmarkEncodePayload prices EncodePayload of raw JSON, its jsonb check
// included (encode/...), and the check alone (check/...).
func BenchmarkEncodePayload(b *testing.B) {
	names, raws := benchPayloads()
	ops := []struct {
		name string
		run  func(json.RawMessage) error
	}{
		{"encode", func(raw json.RawMessage) error { _, err := enginekit.EncodePayload("input", raw); return err }},
		{"check", func(raw json.RawMessage) error {
			if reason := enginekit.CheckJSONB(raw); reason != "" {
				return errors.New(reason)
			}
			return nil
		}},
	}
	for _, op := range ops {
		for i, raw := range raws {
			b.Run(op.name+"/"+names[i], func(b *testing.B) {
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					if err := op.run(raw); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
