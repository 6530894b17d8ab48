package testkit

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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

// Main runs a test binary's tests against one server shared by them all,
// launched before the first test and handed to use. A server that fails to
// start, or tests that fail, get the tail of its log printed. It returns the
// exit code for os.Exit.
func (h Harness[O, S]) Main(m *testing.M, opts O, use func(S)) int {
	s, err := h.Launch(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", h.Name, err)
		return 1
	}
	use(s)
	code := m.Run()
	finish(h.Name, s, code != 0)
	return code
}

// Shared is a server for a whole test binary, launched by the first test
// that asks for it (Get) and stopped by Main after the last. A run whose
// tests never ask for it never starts it: `go test -run 'TestContract/lease'`
// starts no Temporal server.
type Shared[S Service] struct {
	name   string
	launch func(ctx context.Context) (S, error)
	once   sync.Once
	s      S
	err    error
	// launched is set once a launch has begun, whatever its outcome.
	launched atomic.Bool
}

// Shared returns a server launched with opts on its first Get.
func (h Harness[O, S]) Shared(opts O) *Shared[S] {
	return &Shared[S]{name: h.Name, launch: func(ctx context.Context) (S, error) { return h.Launch(ctx, opts) }}
}

// Get returns the server, launching it on the first call; tests that call
// it at once wait for the one launch. A failed launch fails every caller.
func (s *Shared[S]) Get(tb testing.TB) S {
	tb.Helper()
	s.once.Do(func() {
		s.launched.Store(true)
		s.s, s.err = s.launch(context.Background())
	})
	if s.err != nil {
		tb.Fatalf("%s: %v", s.name, s.err)
	}
	return s.s
}

// Launched reports whether a test asked for the server.
func (s *Shared[S]) Launched() bool { return s.launched.Load() }

func (s *Shared[S]) finish(failed bool) {
	if s.Launched() && s.err == nil {
		finish(s.name, s.s, failed)
	}
}

// SharedServer is a Shared server of any kind, for Main.
type SharedServer interface{ finish(failed bool) }

// Main runs a test binary's tests, then stops the shared servers they
// launched, printing the tail of each one's log when the tests failed. It
// returns the exit code for os.Exit.
func Main(m *testing.M, shared ...SharedServer) int {
	code := m.Run()
	for _, s := range shared {
		s.finish(code != 0)
	}
	return code
}

// finish stops s, after printing the tail of its log if the tests failed.
func finish(name string, s Service, failed bool) {
	if failed {
		fmt.Fprintf(os.Stderr, "%s: the tests failed; end of the server log %s:\n%s\n", name, s.LogPath(), LogTail(s.LogPath()))
	}
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stop: %v (log %s)\n", name, err, s.LogPath())
	}
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
