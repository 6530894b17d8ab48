package gotool

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBinaryAndModuleDir(t *testing.T) {
	p, err := Binary("go")
	require.NoError(t, err)
	require.Equal(t, "go", filepath.Base(p))
	_, err = Binary("taskport-no-such-tool")
	require.ErrorIs(t, err, ErrNotFound)

	// The module of this repository's SDK is in the cache once it builds.
	dir, err := ModuleDir("go.temporal.io/sdk", "v1.51.0")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "go.mod"))
	_, err = ModuleDir("example.com/taskport/none", "v0.0.1")
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "go mod download example.com/taskport/none@v0.0.1")
}

func TestEscapeCapitals(t *testing.T) {
	require.Equal(t, "github.com/!shopify/toxiproxy/v2", escape("github.com/Shopify/toxiproxy/v2"))
	require.Equal(t, "go.temporal.io/server", escape("go.temporal.io/server"))
}
