package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
)

// Service is a server a harness runs for tests.
type Service interface {
	// Stop ends the server and releases what it holds; safe to call once.
	Stop() error
	// LogPath is the file the server writes its output to.
	LogPath() string
}

// Harness launches one kind of server, configured by options O. A harness
// package (devserver, temporalserver) exposes its Start, Launcher and Main
// through one.
type Harness[O any, S Service] struct {
	// Name prefixes the messages about this server.
	Name string
	// Launch starts a server; the caller stops it.
	Launch func(ctx context.Context, opts O) (S, error)
}

// Start launches a server for tb and stops it when tb ends, logging the
// tail of its log if tb failed.
func (h Harness[O, S]) Start(tb testing.TB, opts O) S {
	tb.Helper()
	s, err := h.Launch(context.Background(), opts)
	if err != nil {
		tb.Fatalf("%s: %v", h.Name, err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("%s: end of the server log %s:\n%s", h.Name, s.LogPath(), LogTail(s.LogPath()))
		}
		if err := s.Stop(); err != nil {
			tb.Logf("%s: stop: %v (log %s)", h.Name, err, s.LogPath())
		}
	})
	return s
}

// Launcher launches a server for Main, which hands it to use before the
// first test (use typically stores it in the test binary's variable).
func (h Harness[O, S]) Launcher(opts O, use func(S)) Launcher {
	return Launcher{name: h.Name, launch: func(ctx context.Context) (Service, error) {
		s, err := h.Launch(ctx, opts)
		if err != nil {
			return nil, err
		}
		use(s)
		return s, nil
	}}
}

// Main runs a test binary's tests against one server shared by them all.
func (h Harness[O, S]) Main(m *testing.M, opts O, use func(S)) int {
	return Main(m, h.Launcher(opts, use))
}

// Launcher starts one server for a test binary (see Main).
type Launcher struct {
	name   string
	launch func(ctx context.Context) (Service, error)
}

// Main launches every server at once (their start-ups overlap), runs the
// test binary's tests against them, then stops them. A server that fails to
// start, or tests that fail, get the tail of each server's log printed. It
// returns the exit code for os.Exit.
func Main(m *testing.M, launchers ...Launcher) int {
	services := make([]Service, len(launchers))
	errs := make([]error, len(launchers))
	var wg sync.WaitGroup
	for i, l := range launchers {
		wg.Go(func() {
			services[i], errs[i] = l.launch(context.Background())
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", l.name, errs[i])
			}
		})
	}
	wg.Wait()
	code := 1
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	for i, s := range services {
		if s == nil {
			continue
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "%s: the tests failed; end of the server log %s:\n%s\n", launchers[i].name, s.LogPath(), LogTail(s.LogPath()))
		}
		if err := s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stop: %v (log %s)\n", launchers[i].name, err, s.LogPath())
		}
	}
	return code
}

// LogTail bounds: the last tailLines lines of the last tailBytes of the
// file, each cut at lineBytes. A Temporal server logs errors as JSON with a
// stack trace on one line; the message and error come first.
const (
	tailBytes = 64 << 10
	tailLines = 40
	lineBytes = 600
)

// LogTail returns the end of the file at path, or a note saying why it
// cannot.
func LogTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-tailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if off > 0 {
		lines = lines[1:] // cut mid-line
	}
	lines = lines[max(len(lines)-tailLines, 0):]
	for i, l := range lines {
		if len(l) > lineBytes {
			lines[i] = l[:lineBytes] + "…"
		}
	}
	return strings.Join(lines, "\n")
}
