package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// IdempotencyHeader carries the event's idempotency key, so a receiver can
// drop the repeats that at-least-once delivery produces.
const IdempotencyHeader = "Idempotency-Key"

// PostWebhook POSTs the event as JSON to the configured URL. A 4xx answer
// other than 408 and 429 will not change on retry and is non-retryable.
func (a *Activities) PostWebhook(ctx context.Context, in workflows.NotifyInput) (workflows.Outcome, error) {
	defer a.keepBeating(ctx)()
	if a.cfg.WebhookURL == "" {
		return workflows.Outcome{}, nil
	}
	body, err := json.Marshal(in)
	if err != nil {
		return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("encode webhook %s: %w", in.IdempotencyKey(), err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		// The parse error quotes the URL: say only that it is bad.
		return workflows.Outcome{}, port.NonRetryable(errors.New("webhook request: the webhook URL does not parse"))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(IdempotencyHeader, in.IdempotencyKey())
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		err = withoutURL(err)
		a.cfg.Logger.WarnContext(ctx, "webhook post failed", slog.String("key", in.IdempotencyKey()), slog.Any("err", err))
		return workflows.Outcome{}, fmt.Errorf("post webhook %s: %w", in.IdempotencyKey(), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return workflows.Outcome{}, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 &&
		resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("post webhook %s: status %d", in.IdempotencyKey(), resp.StatusCode))
	}
	return workflows.Outcome{}, fmt.Errorf("post webhook %s: status %d", in.IdempotencyKey(), resp.StatusCode)
}

// withoutURL drops the URL from a client error: *url.Error prints the whole
// URL, and a webhook's path or query often holds its secret token. The
// error would otherwise reach the run's last error, the decision reason, the
// logs and the Temporal UI. The cause is kept (a refused connection, a
// timeout), wrapped, so that retries and cancellation still see it.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s webhook: %w", ue.Op, ue.Err)
	}
	return err
}
