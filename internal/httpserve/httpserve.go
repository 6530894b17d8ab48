// Package httpserve is the one way this module's processes serve HTTP:
// the worker's probes and metrics (package host) and the admin.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ListenAndServe serves h on addr until ctx ends and returns the bound
// address (addr may use port 0) and a channel that reports why serving
// stopped. Once ctx ends the server shuts down, letting requests in flight
// finish for up to 5 s.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) (string, <-chan error, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			done <- err
		}
		close(done)
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return l.Addr().String(), done, nil
}
