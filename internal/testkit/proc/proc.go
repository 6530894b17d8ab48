// Package proc builds a main package of this module into a binary and runs
// it as a child process that a fault test can SIGKILL, SIGSTOP and SIGCONT.
// Every process started here is killed and reaped when its test ends, so a
// failing test never leaves a worker behind.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskport/taskport/internal/syncbuf"
)

var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

// Build compiles the main package pkg (an import path of this module, e.g.
// "github.com/taskport/taskport/test/contract/worker") once per
// test binary and returns the path of the executable.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if bin, ok := builds.bins[pkg]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "taskport-proc-")
		if err != nil {
			tb.Fatalf("proc: temp dir: %v", err)
		}
		builds.dir = dir
		builds.bins = map[string]string{}
	}
	bin := filepath.Join(builds.dir, strings.ReplaceAll(pkg, "/", "_"))
	var stderr bytes.Buffer
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("proc: go build %s: %v\n%s", pkg, err, stderr.String())
	}
	builds.bins[pkg] = bin
	return bin
}

// BuildAt compiles the main package pkg as it was at commit, once per test
// binary: the commit's tree is exported from this checkout's history (git
// archive) into a temporary directory and built there, so that a test can
// run a previous release's binary beside the current one. It needs the
// commit in the local history: a shallow clone fails here, saying so.
func BuildAt(tb testing.TB, commit, pkg string) string {
	tb.Helper()
	key := commit + " " + pkg
	builds.mu.Lock()
	bin, ok := builds.bins[key]
	builds.mu.Unlock()
	if ok {
		return bin
	}
	src := tb.TempDir()
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive --format=tar "$1" | tar -x -C "$2"`, "sh", commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		tb.Fatalf("proc: export commit %s (a shallow clone lacks it: git fetch --unshallow): %v\n%s", commit, err, out)
	}
	dir, err := os.MkdirTemp("", "taskport-proc-")
	if err != nil {
		tb.Fatalf("proc: temp dir: %v", err)
	}
	bin = filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_"))
	var stderr bytes.Buffer
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = src
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("proc: go build %s at %s: %v\n%s", pkg, commit, err, stderr.String())
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.bins == nil {
		builds.bins = map[string]string{}
	}
	builds.bins[key] = bin
	return bin
}

// Process is a running child.
type Process struct {
	Name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error // set before done is closed
}

// Start runs bin with args and extra environment. Its stdout and stderr are
// captured (Output) and logged if the test fails.
func Start(tb testing.TB, name, bin string, args []string, env ...string) *Process {
	tb.Helper()
	out := &syncbuf.Buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = out
	cmd.Stderr = out
	// Its own process group, so a signal sent to the test's group (Ctrl-C)
	// does not race with the signals a test sends on purpose.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("proc: start %s: %v", name, err)
	}
	p := &Process{Name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		_ = p.Signal(syscall.SIGCONT) // a stopped process cannot die of SIGKILL until it is reaped; CONT is harmless
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
		if tb.Failed() {
			tb.Logf("proc: output of %s (pid %d):\n%s", name, p.Pid(), p.Output())
		}
	})
	return p
}

// Pid returns the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig unless the process has already exited.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits until the process is reaped.
func (p *Process) Kill(ctx context.Context) error {
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	return p.Wait(ctx)
}

// Stop freezes the process (SIGSTOP): it keeps its sockets and leases but
// runs no code, like a long GC pause or a stalled VM.
func (p *Process) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont resumes a stopped process.
func (p *Process) Cont() error { return p.Signal(syscall.SIGCONT) }

// Wait blocks until the process has exited and been reaped, or ctx ends.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for %s (pid %d): %w", p.Name, p.Pid(), ctx.Err())
	}
}

// Exited reports whether the process has been reaped, and its exit error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Output returns what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// WaitOutput polls the output until it contains s or the timeout passes.
func (p *Process) WaitOutput(s string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(p.Output(), s) {
			return nil
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("%s did not print %q within %s; output:\n%s", p.Name, s, timeout, p.Output())
		case <-p.done:
			if strings.Contains(p.Output(), s) {
				return nil
			}
			return fmt.Errorf("%s exited (%v) before printing %q; output:\n%s", p.Name, p.err, s, p.Output())
		case <-tick.C:
		}
	}
}
