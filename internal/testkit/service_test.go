package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "line %d %s\n", i, strings.Repeat("x", 1000))
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	tail := strings.Split(LogTail(path), "\n")
	require.Len(t, tail, tailLines)
	require.True(t, strings.HasPrefix(tail[0], "line 60 "), tail[0][:20])
	require.True(t, strings.HasPrefix(tail[len(tail)-1], "line 99 "))
	require.Len(t, tail[0], lineBytes+len("…"))

	require.Contains(t, LogTail(filepath.Join(t.TempDir(), "missing.log")), "no log")
}
