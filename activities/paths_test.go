package activities

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// beneath follows symlinks before it decides: a link inside the root that
// leads out is outside; one that leads elsewhere inside is inside; a path
// not created yet is judged by its existing parents; a dangling link and
// a traversal are refused.
func TestBeneathResolvesSymlinks(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "library")
	outside := filepath.Join(base, "elsewhere")
	for _, d := range []string{filepath.Join(root, "films"), outside} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "secret-link")))
	require.NoError(t, os.Symlink(filepath.Join(root, "films"), filepath.Join(root, "alias")))
	require.NoError(t, os.Symlink(filepath.Join(base, "nothing"), filepath.Join(root, "dangling")))
	require.NoError(t, os.Symlink(root, filepath.Join(base, "root-link")))

	for path, ok := range map[string]bool{
		filepath.Join(root, "films", "a.mkv"):                 true, // not created yet
		filepath.Join(root, "new", "dir", "a.mkv"):            true,
		filepath.Join(root, "alias", "a.mkv"):                 true, // a link that stays inside
		filepath.Join(root, "escape", "a.mkv"):                false,
		filepath.Join(root, "escape", "secret"):               false,
		filepath.Join(root, "secret-link"):                    false,
		filepath.Join(root, "dangling"):                       false,
		filepath.Join(root, "films", "..", "..", "elsewhere"): false,
		root:             false, // the root itself is no file in it
		"relative/a.mkv": false,
	} {
		err := beneath(root, path)
		if ok {
			require.NoError(t, err, path)
		} else {
			require.ErrorIs(t, err, errOutside, path)
		}
	}
	// A root reached through a link is the same root.
	require.NoError(t, beneath(filepath.Join(base, "root-link"), filepath.Join(root, "films", "a.mkv")))
	require.NoError(t, beneath(root, filepath.Join(base, "root-link", "films", "a.mkv")))
}
