package proc_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/proc"
)

// procState reads the one-letter state of pid from /proc (R, S, T, Z...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	// The state follows the parenthesised command name.
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func TestStopContKillReaps(t *testing.T) {
	bin := proc.Build(t, "github.com/taskport/taskport/internal/testkit/proc/testdata/sleeper")
	p := proc.Start(t, "sleeper", bin, nil)
	require.NoError(t, p.WaitOutput("ready", time.Minute))
	pid := p.Pid()

	require.NoError(t, p.Stop())
	require.Eventually(t, func() bool { return procState(t, pid) == "T" }, 30*time.Second, 10*time.Millisecond, "SIGSTOP did not stop pid %d", pid)
	require.NoError(t, p.Cont())
	require.Eventually(t, func() bool { return procState(t, pid) == "S" || procState(t, pid) == "R" }, 30*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Kill(ctx))
	exited, err := p.Exited()
	require.True(t, exited)
	var exitErr interface{ Sys() any }
	require.ErrorAs(t, err, &exitErr)
	require.Equal(t, syscall.SIGKILL, exitErr.Sys().(syscall.WaitStatus).Signal())
	// Reaped: no zombie left behind.
	require.Equal(t, "gone", procState(t, pid))
}

func TestGracefulExit(t *testing.T) {
	bin := proc.Build(t, "github.com/taskport/taskport/internal/testkit/proc/testdata/sleeper")
	p := proc.Start(t, "sleeper", bin, nil)
	require.NoError(t, p.WaitOutput("ready", time.Minute))
	require.NoError(t, p.Signal(syscall.SIGTERM))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(ctx))
	require.Contains(t, p.Output(), "terminated")
}
