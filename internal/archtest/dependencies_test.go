package archtest_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every module a go.mod of the repository requires directly (the main
// module and the nested ones: deploy, bench, tools) is named, by its full
// path in backquotes, in docs/dependencies.md, the table that says why
// each one is there. A dependency added without its line fails here.
func TestEveryDirectDependencyHasARow(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "dependencies.md"))
	require.NoError(t, err)
	var direct []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		out, err := exec.Command("go", "mod", "edit", "-json", path).Output()
		require.NoError(t, err, "go mod edit -json %s", path)
		var mod struct {
			Require []struct {
				Path     string
				Indirect bool
			}
		}
		require.NoError(t, json.Unmarshal(out, &mod), path)
		for _, r := range mod.Require {
			if !r.Indirect && !strings.HasPrefix(r.Path, "github.com/taskport/taskport") {
				direct = append(direct, r.Path)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, direct, "go.temporal.io/sdk", "no go.mod read")
	require.Empty(t, unlisted(string(doc), direct), "direct dependencies without a row in docs/dependencies.md")

	// The check can fail: a module named only in part is not listed.
	require.Equal(t, []string{"github.com/a/b/c"},
		unlisted("| `github.com/a/b` + `c` | why |", []string{"github.com/a/b", "github.com/a/b/c"}))
}

// unlisted returns the modules that doc does not name as `path`.
func unlisted(doc string, modules []string) []string {
	var missing []string
	for _, m := range modules {
		if !strings.Contains(doc, "`"+m+"`") {
			missing = append(missing, m)
		}
	}
	return missing
}
