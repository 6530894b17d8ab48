package port

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Callers: ErrRunFailed is what Result returns for a run that failed; the
// concrete error is a *RunFailedError carrying the run's last error.
var ErrRunFailed = errors.New("taskport: run failed")

// Callers: RunFailedError is Result's error for a failed run: Message is
// its RunView.LastError. It unwraps to ErrRunFailed.
type RunFailedError struct {
	ID      RunID
	Message string
}

// Callers: Error names the run and why it failed.
func (e *RunFailedError) Error() string {
	return fmt.Sprintf("run %s failed: %s", e.ID, e.Message)
}

// Callers: Unwrap returns ErrRunFailed.
func (e *RunFailedError) Unwrap() error { return ErrRunFailed }

// The bounds of Wait's polling: it starts fast, for runs that end within a
// moment, and backs off so that a long wait costs one Get a second.
const (
	firstWaitPoll = 10 * time.Millisecond
	maxWaitPoll   = time.Second
)

// Callers: Wait blocks until the run is terminal (succeeded, failed or
// canceled) and returns its view, or until ctx ends, returning ctx's error.
// It reads through e.Get, so it works on every engine and from any process,
// whether or not it serves: an unknown id is ErrNotFound and a run of another
// engine ErrOtherEngine, at once. The run moves only while some process's
// engine serves its kind (TaskEngine.Start): with none, it stays pending
// and Wait returns when ctx ends. It writes nothing. It polls, from 10 ms
// doubling to once a second: a run that ends is seen within a second of its
// end at most.
func Wait(ctx context.Context, e TaskEngine, id RunID) (RunView, error) {
	poll := firstWaitPoll
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return RunView{}, ctx.Err()
		case <-timer.C:
		}
		v, err := e.Get(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return RunView{}, ctx.Err()
			}
			return RunView{}, err
		}
		if v.Status.Terminal() {
			return v, nil
		}
		timer.Reset(poll)
		poll = min(2*poll, maxWaitPoll)
	}
}

// Callers: Result waits for the run (Wait) and decodes the result its kind
// returned (HandleResult) into a T. A run that failed is a *RunFailedError
// (ErrRunFailed), one that was canceled ErrCanceled (naming the run an
// evacuation moved it to, RunView.MovedTo, if one did); a run that succeeded
// without a result (a kind built with Handle) decodes as JSON null, T's
// zero value.
func Result[T any](ctx context.Context, e TaskEngine, id RunID) (T, error) {
	var out T
	v, err := Wait(ctx, e, id)
	if err != nil {
		return out, err
	}
	switch v.Status {
	case StatusFailed:
		return out, &RunFailedError{ID: id, Message: v.LastError}
	case StatusCanceled:
		if v.MovedTo != "" {
			// Canceled here, but its work goes on: a caller that took the
			// error for the work's end would drop it.
			return out, fmt.Errorf("run %s: %w: an evacuation moved it to run %s, where its work goes on", id, ErrCanceled, v.MovedTo)
		}
		return out, fmt.Errorf("run %s: %w", id, ErrCanceled)
	}
	if v.Output == nil {
		return out, nil
	}
	if err := json.Unmarshal(v.Output, &out); err != nil {
		return out, fmt.Errorf("decode the result of run %s: %w", id, err)
	}
	return out, nil
}
