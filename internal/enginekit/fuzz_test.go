package enginekit_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
)

// FuzzPrepareEnqueue: whatever kind, key and payload arrive, PrepareEnqueue
// either accepts them with a valid, bounded JSON input or refuses them with
// an ErrInvalidInput; it never panics and never accepts an empty key.
func FuzzPrepareEnqueue(f *testing.F) {
	f.Add("asset.import", "plan:1:import", `{"plan_id":"p1"}`, 0)
	f.Add("", "", `{}`, 0)
	f.Add("asset.import", "k", `{"plan_id":`, 101)
	f.Add("asset.import", "k\x00", `{"plan_id":"p","x":1}`, -3)
	f.Add("asset import", "k", `null`, 0)
	reg := port.NewRegistry()
	if err := reg.Register(port.Definition{Kind: "asset.import", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(port.Flow, importInput) error { return nil })}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, kind, key, payload string, priority int) {
		p, err := enginekit.PrepareEnqueue(reg, port.Kind(kind), json.RawMessage(payload), port.EnqueueOptions{IdempotencyKey: key, Priority: priority})
		if err != nil {
			if !errors.Is(err, port.ErrInvalidInput) {
				t.Fatalf("refusal is not ErrInvalidInput: %v", err)
			}
			return
		}
		if key == "" || !json.Valid(p.Input) || len(p.Input) > port.MaxPayloadBytes {
			t.Fatalf("accepted bad input: key=%q input=%q", key, p.Input)
		}
	})
}

// FuzzTopic: a topic is accepted only when it is a valid name.
func FuzzTopic(f *testing.F) {
	for _, s := range []string{"approval:p1", "", "a b", "download:6f1c/x", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		_, err := enginekit.PrepareSignal(port.Topic(topic), nil)
		if (err == nil) != (port.ValidateName("topic", topic) == nil) {
			t.Fatalf("topic %q: PrepareSignal and ValidateName disagree: %v", topic, err)
		}
		if err != nil && !errors.Is(err, port.ErrInvalidInput) {
			t.Fatalf("refusal is not ErrInvalidInput: %v", err)
		}
	})
}
