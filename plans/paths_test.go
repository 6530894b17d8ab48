package plans_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// outsideFile writes a file outside every directory of the world, whose
// size and hash no error may report.
func outsideFile(t *testing.T, dir, name string) (path, size, hash string) {
	t.Helper()
	content := []byte("private bytes that belong to nobody's plan\n")
	path = filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, content, 0o600))
	sum := sha256.Sum256(content)
	return path, strconv.Itoa(len(content)), hex.EncodeToString(sum[:])
}

// A symlink inside the library root that leads out of it: the plan's
// target passes the lexical check at creation, but the import resolves the
// link, refuses to touch the file outside (which differs from the expected
// one), and opens a decision whose reason reports neither that file's size
// nor its hash. Nothing is written outside the root or at the target.
func TestSymlinkCannotLeadTheImportOutOfTheLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	outside := t.TempDir()
	_, size, hash := outsideFile(t, outside, "film.mkv")
	require.NoError(t, os.Symlink(outside, filepath.Join(w.LibraryDir, "escape")))

	a := apptest.NewAsset("film.mkv", 5000)
	p, err := w.Plans.CreatePlan(ctx, plans.NewPlan{Title: "escape", Magnet: a.Magnet(), InfoHash: a.Hash,
		TargetPath: filepath.Join(w.LibraryDir, "escape", a.Name), ExpectedSize: int64(len(a.Content)), ExpectedSHA256: a.SHA256})
	require.NoError(t, err)
	apptest.Acked(t)(w.Plans.Approve(ctx, p.ID.String(), "ann", ""))
	w.Drive(t)
	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, p.ID.String(), ""))
	w.Drive(t)

	d := openDecision(t, w, workflows.KindAssetImport)
	require.Contains(t, d.Reason, "resolves outside")
	require.NotContains(t, d.Reason, hash)
	require.NotRegexp(t, `\b`+size+`\b`, d.Reason, "the size of the file outside")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing written outside the library")
	require.NotEqual(t, acquisition.Completed, w.Plan(t, p.ID.String()).Status)
}

// A content path inside the download directory that is a symlink to a file
// elsewhere is not read: the import refuses it before opening it, and says
// nothing of that file's size or hash. A content path outside the download
// directory is refused when reported, and nothing is written.
func TestSymlinkCannotLeadTheImportToAnArbitraryFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	secret, size, hash := outsideFile(t, t.TempDir(), "secret")

	a := apptest.NewAsset("payload.mkv", 5000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	w.Drive(t)

	before := counts(t, w.Pool)
	var fe *port.FieldError
	require.ErrorAs(t, apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, id, secret)), &fe)
	require.Equal(t, "content_path", fe.Field)
	require.Contains(t, fe.Reason, "not inside the download directory")
	require.Equal(t, before, counts(t, w.Pool), "a refused report writes nothing")

	w.FinishDownload(t, p, a)
	link := filepath.Join(w.DownloadDir, id, "link.mkv")
	require.NoError(t, os.Symlink(secret, link))
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, id, link))
	w.Drive(t)

	d := openDecision(t, w, workflows.KindAssetImport)
	require.Contains(t, d.Reason, "content path")
	require.Contains(t, d.Reason, "resolves outside")
	require.NotContains(t, d.Reason, hash)
	require.NotRegexp(t, `\b`+size+`\b`, d.Reason, "the size of the file outside")
	require.Empty(t, w.LibraryFiles(t), "nothing imported")
}
