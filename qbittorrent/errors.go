package qbittorrent

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors. Callers classify with errors.Is; an *HTTPError unwraps to
// the sentinel matching its status.
var (
	// ErrUnauthorized: the credentials were refused, or the session was
	// refused again right after a fresh login.
	ErrUnauthorized = errors.New("qbittorrent: unauthorized")
	// ErrBanned: qBittorrent banned this client's IP after too many failed
	// logins (WebUI\BanDuration); retrying before the ban ends cannot succeed.
	ErrBanned = errors.New("qbittorrent: client IP banned after failed logins")
	// ErrNotFound: the endpoint (or the object) does not exist.
	ErrNotFound = errors.New("qbittorrent: not found")
	// ErrAddRejected: qBittorrent answered "Fails." to torrents/add. It gives
	// no reason; the two usual ones are an invalid torrent and a torrent that
	// is already present (e.g. added by an attempt whose answer was lost), so
	// a caller reconciles by hash or tag before deciding.
	ErrAddRejected = errors.New("qbittorrent: add rejected (invalid or already present)")
	// ErrInvalidArgument: the call was refused before any request was sent.
	ErrInvalidArgument = errors.New("qbittorrent: invalid argument")
	// ErrServer: qBittorrent answered with a 5xx status; usually transient.
	ErrServer = errors.New("qbittorrent: server error")
)

// maxErrorBody caps how much of a response body an HTTPError keeps.
const maxErrorBody = 1 << 10

// HTTPError is a response whose status is not the expected 200.
type HTTPError struct {
	Method string
	Path   string // API path, e.g. /api/v2/torrents/add
	Status int
	Body   string // first KiB of the response body
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("qbittorrent %s %s: status %d %s: %q", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Body)
}

// Unwrap maps the status onto a sentinel, so errors.Is(err, ErrNotFound)
// works without inspecting the status.
func (e *HTTPError) Unwrap() error {
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return ErrUnauthorized
	case e.Status == http.StatusNotFound:
		return ErrNotFound
	case e.Status >= 500:
		return ErrServer
	}
	return nil
}

func invalidArg(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
