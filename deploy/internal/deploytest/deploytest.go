// Package deploytest holds what the deploy module's tests share.
package deploytest

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot is the main module's directory: the repository root, two levels
// above a package of this module (deploy/<pkg>).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		tb.Fatalf("no main module at %s: %v", root, err)
	}
	return root
}
