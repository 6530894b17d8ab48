package fileimport_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/fileimport"
)

// crashHelperEnv makes the test binary act as an importer that gets killed
// mid-copy (see TestCrashedAttemptLeavesTempThatIsCleanedUp).
const crashHelperEnv = "FILEIMPORT_CRASH_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		os.Exit(crashHelper())
	}
	os.Exit(m.Run())
}

// crashHelper imports $SRC to $DST and, once the first chunk is written,
// says "copying" and blocks until it is killed.
func crashHelper() int {
	size, err := strconv.ParseInt(os.Getenv("SIZE"), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	calls := 0
	block := make(chan struct{})
	_, err = fileimport.Import(context.Background(), fileimport.Request{
		Source: os.Getenv("SRC"), Target: os.Getenv("DST"), ExpectedSize: size, ExpectedSHA256: os.Getenv("SHA"),
		ChunkSize: 64 << 10,
		ShouldStop: func(context.Context) error {
			if calls++; calls == 2 {
				fmt.Println("copying")
				<-block
			}
			return nil
		},
	})
	fmt.Fprintln(os.Stderr, "import returned:", err)
	return 1
}

type fixture struct {
	dir, src string
	data     []byte
	sum      string
}

func newFixture(t testing.TB, size int) fixture {
	t.Helper()
	dir := t.TempDir()
	data := make([]byte, size)
	_, _ = mrand.NewChaCha8([32]byte{byte(size)}).Read(data)
	src := filepath.Join(dir, "download", "movie.mkv")
	require.NoError(t, os.MkdirAll(filepath.Dir(src), 0o755))
	require.NoError(t, os.WriteFile(src, data, 0o644))
	sum := sha256.Sum256(data)
	return fixture{dir: dir, src: src, data: data, sum: hex.EncodeToString(sum[:])}
}

func (f fixture) request(target string) fileimport.Request {
	return fileimport.Request{Source: f.src, Target: target, ExpectedSize: int64(len(f.data)), ExpectedSHA256: f.sum, ChunkSize: 1 << 20}
}

// dirNames lists a directory, so tests can assert no temporary file is left.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestImportCopiesInChunksAndVerifies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 5<<20+777)
	target := filepath.Join(f.dir, "library", "Movies", "Title (2020)", "movie.mkv")
	req := f.request(target)
	var progress [][2]int64
	stops := 0
	req.Progress = func(copied, total int64) { progress = append(progress, [2]int64{copied, total}) }
	req.ShouldStop = func(context.Context) error { stops++; return nil }

	res, err := fileimport.Import(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, fileimport.Result{Size: int64(len(f.data)), SHA256: f.sum}, res)

	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, f.data, got)
	st, err := os.Stat(target)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	require.Equal(t, []string{"movie.mkv"}, dirNames(t, filepath.Dir(target)), "no temporary file may remain")

	// Six chunks: five full MiB and the 777-byte tail, reported in order.
	require.Len(t, progress, 6)
	for i, p := range progress[:5] {
		require.Equal(t, [2]int64{int64(i+1) << 20, int64(len(f.data))}, p)
	}
	require.Equal(t, [2]int64{int64(len(f.data)), int64(len(f.data))}, progress[5])
	require.GreaterOrEqual(t, stops, 6, "the stop flag is checked before every chunk")
}

func TestImportEmptyFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 0)
	target := filepath.Join(f.dir, "empty")
	res, err := fileimport.Import(t.Context(), f.request(target))
	require.NoError(t, err)
	require.False(t, res.Reconciled)
	st, err := os.Stat(target)
	require.NoError(t, err)
	require.Zero(t, st.Size())
}

func TestImportReconcilesMatchingTarget(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3<<20)
	target := filepath.Join(f.dir, "movie.mkv")
	require.NoError(t, os.WriteFile(target, f.data, 0o644))
	before, err := os.Stat(target)
	require.NoError(t, err)
	stale := filepath.Join(f.dir, ".movie.mkv.tp-import-4242")
	require.NoError(t, os.WriteFile(stale, f.data[:100], 0o600))

	req := f.request(target)
	req.Progress = func(int64, int64) { t.Error("a reconciled import copies nothing") }
	res, err := fileimport.Import(t.Context(), req)
	require.NoError(t, err)
	require.True(t, res.Reconciled)
	require.Equal(t, f.sum, res.SHA256)

	after, err := os.Stat(target)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "the matching target must be left in place")
	require.NoFileExists(t, stale)
}

// A different file at the target is someone else's: the import refuses it,
// before copying and again just before placing its copy, and leaves it as it is.
func TestImportNeverReplacesADifferentFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	target := filepath.Join(f.dir, "movie.mkv")
	theirs := []byte("a different, older file")
	require.NoError(t, os.WriteFile(target, theirs, 0o644))
	_, err := fileimport.Import(t.Context(), f.request(target))
	require.ErrorIs(t, err, fileimport.ErrTargetTaken)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, theirs, got)

	// Appearing while the copy runs.
	other := filepath.Join(f.dir, "late.mkv")
	req := f.request(other)
	req.ChunkSize = 64 << 10
	req.Progress = func(copied, _ int64) {
		if copied == int64(req.ChunkSize) {
			require.NoError(t, os.WriteFile(other, theirs, 0o644))
		}
	}
	_, err = fileimport.Import(t.Context(), req)
	require.ErrorIs(t, err, fileimport.ErrTargetTaken)
	got, err = os.ReadFile(other)
	require.NoError(t, err)
	require.Equal(t, theirs, got)
	entries, err := os.ReadDir(f.dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotContains(t, e.Name(), ".tp-import-", "no temp file left")
	}
}

func TestImportStopsBetweenChunks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 4<<20)
	target := filepath.Join(f.dir, "movie.mkv")
	errCancel := errors.New("plan 7 cancel requested")
	req := f.request(target)
	var copiedAtStop int64
	req.Progress = func(copied, _ int64) { copiedAtStop = copied }
	req.ShouldStop = func(context.Context) error {
		if copiedAtStop >= 2<<20 {
			return errCancel
		}
		return nil
	}

	_, err := fileimport.Import(t.Context(), req)
	require.ErrorIs(t, err, errCancel)
	require.Equal(t, int64(2<<20), copiedAtStop)
	require.NoFileExists(t, target)
	require.Equal(t, []string{"download"}, dirNames(t, f.dir), "the temporary file must be removed")
}

func TestImportHonoursContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2<<20)
	target := filepath.Join(f.dir, "movie.mkv")
	ctx, cancel := context.WithCancelCause(t.Context())
	errShutdown := errors.New("worker shutting down")
	req := f.request(target)
	req.Progress = func(int64, int64) { cancel(errShutdown) }

	_, err := fileimport.Import(ctx, req)
	require.ErrorIs(t, err, errShutdown)
	require.NoFileExists(t, target)
	require.Equal(t, []string{"download"}, dirNames(t, f.dir))
}

func TestImportMismatchLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20+5)
	target := filepath.Join(f.dir, "movie.mkv")

	t.Run("hash", func(t *testing.T) {
		req := f.request(target)
		req.ExpectedSHA256 = strings.Repeat("ab", 32)
		_, err := fileimport.Import(t.Context(), req)
		var me *fileimport.MismatchError
		require.ErrorAs(t, err, &me)
		require.ErrorIs(t, err, fileimport.ErrMismatch)
		require.Equal(t, f.src, me.Path)
		require.Equal(t, f.sum, me.GotSHA256)
		require.NoFileExists(t, target)
		require.Equal(t, []string{"download"}, dirNames(t, f.dir))
	})
	t.Run("size is checked before copying", func(t *testing.T) {
		req := f.request(target)
		req.ExpectedSize++
		req.Progress = func(int64, int64) { t.Error("no chunk may be copied") }
		_, err := fileimport.Import(t.Context(), req)
		var me *fileimport.MismatchError
		require.ErrorAs(t, err, &me)
		require.Equal(t, int64(len(f.data)), me.GotSize)
		require.Empty(t, me.GotSHA256)
		require.NoFileExists(t, target)
	})
}

func TestImportRefusesBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 10)
	good := f.request(filepath.Join(f.dir, "t"))
	for name, mutate := range map[string]func(*fileimport.Request){
		"relative source":   func(r *fileimport.Request) { r.Source = "download/movie.mkv" },
		"relative target":   func(r *fileimport.Request) { r.Target = "library/movie.mkv" },
		"empty target":      func(r *fileimport.Request) { r.Target = "" },
		"same file":         func(r *fileimport.Request) { r.Target = r.Source + "/." },
		"directory target":  func(r *fileimport.Request) { r.Target = f.dir + "/" },
		"negative size":     func(r *fileimport.Request) { r.ExpectedSize = -1 },
		"short hash":        func(r *fileimport.Request) { r.ExpectedSHA256 = "abc" },
		"non-hex hash":      func(r *fileimport.Request) { r.ExpectedSHA256 = strings.Repeat("zz", 32) },
		"missing hash":      func(r *fileimport.Request) { r.ExpectedSHA256 = "" },
		"negative chunk":    func(r *fileimport.Request) { r.ChunkSize = -1 },
		"huge chunk":        func(r *fileimport.Request) { r.ChunkSize = 1 << 30 },
		"existing dir":      func(r *fileimport.Request) { r.Target = filepath.Join(f.dir, "download") },
		"source is a dir":   func(r *fileimport.Request) { r.Source = f.dir },
		"uppercase is fine": nil,
	} {
		req := good
		if mutate == nil {
			req.Target = filepath.Join(f.dir, "upper")
			req.ExpectedSHA256 = strings.ToUpper(req.ExpectedSHA256)
			_, err := fileimport.Import(t.Context(), req)
			require.NoError(t, err, name)
			continue
		}
		mutate(&req)
		_, err := fileimport.Import(t.Context(), req)
		require.ErrorIs(t, err, fileimport.ErrInvalidRequest, name)
	}
	_, err := fileimport.Import(t.Context(), fileimport.Request{
		Source: filepath.Join(f.dir, "absent"), Target: filepath.Join(f.dir, "t2"), ExpectedSHA256: f.sum,
	})
	require.ErrorIs(t, err, fs.ErrNotExist)
}

// verify is fileimport.Verify without a deadline or progress.
func verify(path string, size int64, sum string) error {
	return fileimport.Verify(context.Background(), path, size, sum, nil)
}

// Verify reports its progress chunk by chunk, so that a step can heartbeat
// while it hashes a big file, and stops when its context ends.
func TestVerifyReportsProgressAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3<<20+5)
	size := int64(len(f.data))
	var seen []int64
	require.NoError(t, fileimport.Verify(t.Context(), f.src, size, f.sum, func(n int64) { seen = append(seen, n) }))
	require.Equal(t, []int64{1 << 20, 2 << 20, 3 << 20, size}, seen)

	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("stop")
	err := fileimport.Verify(ctx, f.src, size, f.sum, func(n int64) {
		if n >= 1<<20 {
			cancel(stop)
		}
	})
	require.ErrorIs(t, err, stop)
}

func TestVerify(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1000)
	size := int64(len(f.data))
	require.NoError(t, verify(f.src, size, f.sum))
	require.NoError(t, verify(f.src, size, strings.ToUpper(f.sum)))

	var me *fileimport.MismatchError
	require.ErrorAs(t, verify(f.src, size+1, f.sum), &me)
	require.Equal(t, fileimport.MismatchError{Path: f.src, WantSize: size + 1, GotSize: size, WantSHA256: f.sum}, *me)
	require.ErrorAs(t, verify(f.src, size, strings.Repeat("00", 32)), &me)
	require.Equal(t, f.sum, me.GotSHA256)

	require.ErrorIs(t, verify(filepath.Join(f.dir, "absent"), size, f.sum), fs.ErrNotExist)
	require.ErrorIs(t, verify(f.dir, size, f.sum), fileimport.ErrInvalidRequest)
	require.ErrorIs(t, verify(f.src, -1, f.sum), fileimport.ErrInvalidRequest)
	require.ErrorIs(t, verify(f.src, size, "xyz"), fileimport.ErrInvalidRequest)
}

func TestRemoveTempsTouchesOnlyThisTargetsTemps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "movie.mkv")
	names := map[string]bool{ // name -> removed
		".movie.mkv.tp-import-1":               true,
		".movie.mkv.tp-import-3916589616":      true,
		".movie.mkv.tp-import-":                false,
		".movie.mkv.tp-import-12x":             false,
		".movie.mkv.tp-import-1.tp-import-123": false, // a temp of target "movie.mkv.tp-import-1"
		".other.mkv.tp-import-5":               false,
		"movie.mkv":                            false,
	}
	for n := range names {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	n, err := fileimport.RemoveTemps(target)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for name, removed := range names {
		_, err := os.Stat(filepath.Join(dir, name))
		require.Equal(t, removed, errors.Is(err, fs.ErrNotExist), name)
	}

	n, err = fileimport.RemoveTemps(filepath.Join(dir, "no", "such", "dir", "x"))
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = fileimport.RemoveTemps("relative/x")
	require.ErrorIs(t, err, fileimport.ErrInvalidRequest)
}

// TestCrashedAttemptLeavesTempThatIsCleanedUp kills a real importing process
// (SIGKILL) mid-copy, checks it left a partial temporary file and no target,
// then imports again.
func TestCrashedAttemptLeavesTempThatIsCleanedUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	target := filepath.Join(f.dir, "library", "movie.mkv")

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1", "SRC="+f.src, "DST="+target,
		"SIZE="+strconv.Itoa(len(f.data)), "SHA="+f.sum)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "copying\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	t.Logf("killed importer pid %d mid-copy: %v", cmd.Process.Pid, err)

	temps, err := filepath.Glob(filepath.Join(filepath.Dir(target), ".movie.mkv.tp-import-*"))
	require.NoError(t, err)
	require.Len(t, temps, 1, "the killed attempt must have left its temporary file")
	st, err := os.Stat(temps[0])
	require.NoError(t, err)
	require.Equal(t, int64(64<<10), st.Size(), "one chunk was written before the kill")
	require.NoFileExists(t, target)

	res, err := fileimport.Import(t.Context(), f.request(target))
	require.NoError(t, err)
	require.False(t, res.Reconciled)
	require.Equal(t, []string{"movie.mkv"}, dirNames(t, filepath.Dir(target)))
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, f.data, got)
}

// A file created at the target after the last check, in the instant before
// the temporary file is put in place, survives: the import fails with
// ErrTargetTaken, or reconciles when that file is the expected one.
func TestImportNeverReplacesAFileRacedInBeforeTheRename(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	theirs := []byte("someone else's file, written in the window")

	target := filepath.Join(f.dir, "raced.mkv")
	_, err := fileimport.ImportRacing(t.Context(), f.request(target), func() {
		require.NoError(t, os.WriteFile(target, theirs, 0o644))
	})
	require.ErrorIs(t, err, fileimport.ErrTargetTaken)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, theirs, got, "the foreign file was replaced")
	require.Equal(t, []string{"download", "raced.mkv"}, dirNames(t, f.dir), "no temporary file left")

	same := filepath.Join(f.dir, "same.mkv")
	res, err := fileimport.ImportRacing(t.Context(), f.request(same), func() {
		require.NoError(t, os.WriteFile(same, f.data, 0o644))
	})
	require.NoError(t, err)
	require.True(t, res.Reconciled)
	require.NotContains(t, strings.Join(dirNames(t, f.dir), " "), ".tp-import-")
}

// The fallback for filesystems that refuse RENAME_NOREPLACE never replaces
// either, and moves the file when the target is free.
func TestLinkNoReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tmp, target := filepath.Join(dir, ".t.tp-import-1"), filepath.Join(dir, "t")
	require.NoError(t, os.WriteFile(tmp, []byte("new"), 0o644))
	require.NoError(t, os.WriteFile(target, []byte("theirs"), 0o644))
	require.ErrorIs(t, fileimport.LinkNoReplace(tmp, target), fs.ErrExist)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "theirs", string(got))

	require.NoError(t, os.Remove(target))
	require.NoError(t, fileimport.LinkNoReplace(tmp, target))
	got, err = os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "new", string(got))
	require.Equal(t, []string{"t"}, dirNames(t, dir))
}
