package temporaladapter

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestTemporalReasonIsBounded: Temporal records at most maxTemporalReason
// bytes of a cancel's reason, cut between runes and marked as cut.
func TestTemporalReasonIsBounded(t *testing.T) {
	short := strings.Repeat("r", maxTemporalReason)
	require.Equal(t, short, temporalReason(short))
	long := strings.Repeat("r", maxTemporalReason-1) + "é" + strings.Repeat("r", 10)
	got := temporalReason(long)
	require.True(t, utf8.ValidString(got), "cut inside a rune: %q", got[len(got)-8:])
	require.Equal(t, strings.Repeat("r", maxTemporalReason-1)+"…", got)
}
