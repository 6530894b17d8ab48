package port

import (
	"math"
	"time"
)

// Kind authors: RetryPolicy says how often and how fast a failed step is
// tried again (ADR 2.6: explicit per kind; the engine default is never
// relied on).
type RetryPolicy struct {
	// MaxAttempts counts the first attempt too; 1 means no retry. Required,
	// from 1 to math.MaxInt32 (what Temporal's retry policy and the run
	// table's column hold).
	MaxAttempts int
	// InitialInterval is the wait before the second attempt. Default 1s.
	InitialInterval time.Duration
	// MaxInterval caps the wait between attempts. Default 60s.
	MaxInterval time.Duration
	// BackoffCoefficient multiplies the wait after each attempt. Default 2.
	BackoffCoefficient float64
}

// Kind authors: NetworkRetry is the preset for steps that talk to an
// external network service (ADR 2.6): 5 attempts, 1s growing to at most 60s.
func NetworkRetry() RetryPolicy {
	return RetryPolicy{MaxAttempts: 5, InitialInterval: time.Second, MaxInterval: time.Minute, BackoffCoefficient: 2}
}

// Kind authors: FileRetry is the preset for file-system steps (ADR 2.6): 3 attempts.
func FileRetry() RetryPolicy {
	return RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: time.Minute, BackoffCoefficient: 2}
}

// Kind authors and engines: WithDefaults fills the zero fields with the
// documented defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.InitialInterval == 0 {
		p.InitialInterval = time.Second
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = time.Minute
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = 2
	}
	return p
}

// Kind authors, callers and engines: Validate reports the first field that
// makes the policy unusable.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fieldErr("retry.max_attempts", "must be at least 1, got %d", p.MaxAttempts)
	case p.MaxAttempts > math.MaxInt32:
		return fieldErr("retry.max_attempts", "must be at most %d, got %d", math.MaxInt32, p.MaxAttempts)
	case p.InitialInterval < 0:
		return fieldErr("retry.initial_interval", "must not be negative, got %s", p.InitialInterval)
	case p.MaxInterval < 0:
		return fieldErr("retry.max_interval", "must not be negative, got %s", p.MaxInterval)
	case p.MaxInterval != 0 && p.InitialInterval > p.MaxInterval:
		return fieldErr("retry.max_interval", "must not be below initial_interval (%s < %s)", p.MaxInterval, p.InitialInterval)
	case p.BackoffCoefficient != 0 && !(p.BackoffCoefficient >= 1) || math.IsInf(p.BackoffCoefficient, 1):
		return fieldErr("retry.backoff_coefficient", "must be a finite number of at least 1, got %g", p.BackoffCoefficient)
	}
	return nil
}

// Callers and engines: Backoff returns the wait after the given failed
// attempt (1-based), the same formula Temporal uses:
// initial * coefficient^(attempt-1), capped at max.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	p = p.WithDefaults()
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(attempt-1))
	if d > float64(p.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxInterval
	}
	return time.Duration(d)
}
