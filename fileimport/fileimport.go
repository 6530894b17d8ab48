// Package fileimport copies a downloaded file into the library so that the
// target either does not exist or holds exactly the expected bytes, whatever
// happens to the process on the way.
//
// An import copies the source in chunks into a temporary file beside the
// target, named ".<target base name>.tp-import-<digits>", fsyncs it, renames
// it to the target (never over an existing file), fsyncs the directory, and
// reads the target back to check its size and SHA-256. Between chunks it asks the caller whether to
// stop (the business cancel flag) and reports progress (the caller
// heartbeats). A retried import finds a target that already matches and
// returns at once (Reconciled); one whose predecessor crashed removes the
// temporary file that attempt left. A target that holds a different file is
// never replaced (ErrTargetTaken): it is someone else's. The temporary file
// is put in place with renameat2(RENAME_NOREPLACE), or, on a filesystem that
// refuses that flag, with link then unlink: either fails when a name exists
// at the target, so a file that appears there after the last check is not
// replaced either; the import then checks it like any target found there.
//
// Two attempts overlapping on one target (a timed-out attempt still running
// beside its retry) are safe: the later one removes the earlier one's
// temporary file as stale, which makes the earlier one's rename fail, and a
// rename only ever puts a complete, checked copy in place.
package fileimport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultChunkSize is the copy chunk when Request.ChunkSize is zero: large
// enough for sequential throughput, small enough that a cancel is seen
// within milliseconds.
const DefaultChunkSize = 4 << 20

// maxChunkSize keeps one chunk's buffer reasonable.
const maxChunkSize = 256 << 20

// tempMarker separates the target's base name from the random digits in a
// temporary file name.
const tempMarker = ".tp-import-"

// MaxTargetName is the longest target base name, in bytes, whose temporary
// file name ("." + name + tempMarker + up to 10 digits of os.CreateTemp's
// random uint32) still fits the 255-byte name limit of Linux filesystems.
const MaxTargetName = 255 - len(".") - len(tempMarker) - 10

var (
	// ErrInvalidRequest: the request was refused before touching any file.
	ErrInvalidRequest = errors.New("fileimport: invalid request")
	// ErrMismatch: a file's size or SHA-256 is not the expected one. The
	// concrete error is a *MismatchError.
	ErrMismatch = errors.New("fileimport: size or SHA-256 mismatch")
	// ErrTargetTaken: the target holds a different file, which an import
	// never replaces. Nothing was written to it.
	ErrTargetTaken = errors.New("fileimport: the target holds a different file")
)

// MismatchError says which file differs from the expectation and how.
type MismatchError struct {
	Path       string
	WantSize   int64
	GotSize    int64
	WantSHA256 string
	GotSHA256  string // empty when the size already differed and the file was not hashed
}

func (e *MismatchError) Error() string {
	if e.GotSize != e.WantSize {
		return fmt.Sprintf("%s: size %d, want %d", e.Path, e.GotSize, e.WantSize)
	}
	return fmt.Sprintf("%s: sha256 %s, want %s", e.Path, e.GotSHA256, e.WantSHA256)
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// Request describes one import.
type Request struct {
	// Source and Target are absolute paths. Missing directories above Target
	// are created (0o755); Target appears atomically and is never replaced.
	Source, Target string
	// ExpectedSize in bytes (zero is a valid, empty file) and ExpectedSHA256
	// as 64 hex digits: both are required, they are what makes a retry safe.
	ExpectedSize   int64
	ExpectedSHA256 string
	// ChunkSize in bytes; default DefaultChunkSize.
	ChunkSize int
	// ShouldStop, when set, is called before each chunk; a non-nil error
	// stops the copy, removes the temporary file and is returned wrapped.
	ShouldStop func(ctx context.Context) error
	// Progress, when set, is called after each chunk with the bytes copied
	// so far and ExpectedSize.
	Progress func(copied, total int64)
}

// Result describes the target after a successful import.
type Result struct {
	Size   int64
	SHA256 string
	// Reconciled: the target already held the expected bytes, nothing was
	// copied.
	Reconciled bool
}

// Import puts the expected content of req.Source at req.Target (see the
// package documentation for the steps). A size or hash mismatch is a
// *MismatchError, after which neither a temporary file nor a wrong target is
// left behind.
func Import(ctx context.Context, req Request) (Result, error) {
	return importFile(ctx, req, nil)
}

// importFile is Import; beforePlace, when set, runs between the last check of
// the target and the no-replace rename (tests race a file into that window).
func importFile(ctx context.Context, req Request, beforePlace func()) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	want := strings.ToLower(req.ExpectedSHA256)
	res := Result{Size: req.ExpectedSize, SHA256: want}

	if done, err := inPlace(ctx, req.Target, req.ExpectedSize, want); err != nil || done {
		res.Reconciled = done
		return res, err
	}

	if err := mkdirAllSynced(filepath.Dir(req.Target)); err != nil {
		return Result{}, fmt.Errorf("import %s: %w", req.Target, err)
	}
	if _, err := RemoveTemps(req.Target); err != nil {
		return Result{}, fmt.Errorf("import %s: %w", req.Target, err)
	}
	tmp, err := copyToTemp(ctx, req, want)
	if err != nil {
		return Result{}, fmt.Errorf("import %s to %s: %w", req.Source, req.Target, err)
	}
	// Something may have appeared at the target while copying (an
	// overlapping attempt of the same import, or someone else's file).
	if done, err := inPlace(ctx, req.Target, req.ExpectedSize, want); err != nil || done {
		_ = os.Remove(tmp)
		res.Reconciled = done
		return res, err
	}
	if beforePlace != nil {
		beforePlace()
	}
	if err := placeNoReplace(tmp, req.Target); err != nil {
		_ = os.Remove(tmp)
		if !errors.Is(err, fs.ErrExist) {
			return Result{}, fmt.Errorf("import %s: place temporary file: %w", req.Target, err)
		}
		// A file appeared after the last check: judge it as any target
		// found in place (the same import's copy, or someone else's file).
		done, err := inPlace(ctx, req.Target, req.ExpectedSize, want)
		if err != nil {
			return Result{}, err
		}
		if !done {
			return Result{}, fmt.Errorf("import %s: a file appeared at the target and vanished again while placing it", req.Target)
		}
		res.Reconciled = true
		return res, nil
	}
	if err := syncDir(filepath.Dir(req.Target)); err != nil {
		return Result{}, fmt.Errorf("import %s: %w", req.Target, err)
	}
	// Read back what the disk holds now, not what was written: this is the
	// verification the ledger records.
	if err := Verify(ctx, req.Target, req.ExpectedSize, want, nil); err != nil {
		if errors.Is(err, ErrMismatch) {
			_ = os.Remove(req.Target)
		}
		return Result{}, fmt.Errorf("import %s: verify after rename: %w", req.Target, err)
	}
	return res, nil
}

// inPlace reports whether target already holds the expected content (then
// the stale temporary files of earlier attempts are removed). A missing
// target is not in place; a different file there is ErrTargetTaken.
func inPlace(ctx context.Context, target string, size int64, want string) (bool, error) {
	err := Verify(ctx, target, size, want, nil)
	switch {
	case err == nil:
		if _, err := RemoveTemps(target); err != nil {
			return false, fmt.Errorf("import %s: %w", target, err)
		}
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, ErrMismatch), errors.Is(err, ErrInvalidRequest):
		return false, fmt.Errorf("import %s: %w (%w)", target, ErrTargetTaken, err)
	}
	return false, fmt.Errorf("import %s: %w", target, err)
}

// copyToTemp copies req.Source into a new temporary file beside the target,
// hashing on the way, and returns its path once it is complete, checked and
// synced. On any error the temporary file is removed.
func copyToTemp(ctx context.Context, req Request, want string) (_ string, err error) {
	src, err := os.Open(req.Source)
	if err != nil {
		return "", fmt.Errorf("open source: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return "", fmt.Errorf("stat source: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: source %s is not a regular file", ErrInvalidRequest, req.Source)
	}
	if st.Size() != req.ExpectedSize {
		return "", &MismatchError{Path: req.Source, WantSize: req.ExpectedSize, GotSize: st.Size(), WantSHA256: want}
	}

	tmp, err := os.CreateTemp(filepath.Dir(req.Target), "."+filepath.Base(req.Target)+tempMarker+"*")
	if err != nil {
		return "", fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes 0o600; library files are read by other services.
	if err := tmp.Chmod(0o644); err != nil {
		return "", fmt.Errorf("chmod temporary file: %w", err)
	}

	chunk := req.ChunkSize
	if chunk == 0 {
		chunk = DefaultChunkSize
	}
	buf := make([]byte, chunk)
	h := sha256.New()
	// Reading one byte past the expected size is enough to see that the
	// source grew while being copied.
	in := io.LimitReader(src, req.ExpectedSize+1)
	var copied int64
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("stopped after %d of %d bytes: %w", copied, req.ExpectedSize, context.Cause(ctx))
		}
		if req.ShouldStop != nil {
			if err := req.ShouldStop(ctx); err != nil {
				return "", fmt.Errorf("stopped after %d of %d bytes: %w", copied, req.ExpectedSize, err)
			}
		}
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if _, err := tmp.Write(buf[:n]); err != nil {
				return "", fmt.Errorf("write temporary file: %w", err)
			}
			h.Write(buf[:n])
			copied += int64(n)
			if req.Progress != nil {
				req.Progress(copied, req.ExpectedSize)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return "", fmt.Errorf("read source: %w", rerr)
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	if copied != req.ExpectedSize || got != want {
		return "", &MismatchError{Path: req.Source, WantSize: req.ExpectedSize, GotSize: copied, WantSHA256: want, GotSHA256: got}
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("fsync temporary file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("close temporary file: %w", err)
	}
	return tmp.Name(), nil
}

// Verify checks that path is a regular file of the given size and SHA-256
// (64 hex digits). A difference is a *MismatchError; a missing file is
// reported as fs.ErrNotExist. It hashes in chunks: progress, when set, is
// called with the bytes hashed so far after each chunk (a step heartbeats
// there, so a lost worker is noticed within a heartbeat timeout however big
// the file), and an ended ctx stops it with ctx's cause.
func Verify(ctx context.Context, path string, size int64, sha256Hex string, progress func(hashed int64)) error {
	if err := checkExpectation(size, sha256Hex); err != nil {
		return err
	}
	want := strings.ToLower(sha256Hex)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("verify: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("verify: %w: %s is not a regular file", ErrInvalidRequest, path)
	}
	if st.Size() != size {
		return &MismatchError{Path: path, WantSize: size, GotSize: st.Size(), WantSHA256: want}
	}
	h := sha256.New()
	buf := make([]byte, verifyChunk)
	var n int64
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("verify %s: %w", path, context.Cause(ctx))
		}
		k, err := f.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if k > 0 && progress != nil {
			progress(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("verify: read %s: %w", path, err)
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	if n != size || got != want {
		return &MismatchError{Path: path, WantSize: size, GotSize: n, WantSHA256: want, GotSHA256: got}
	}
	return nil
}

// verifyChunk is how much Verify hashes between two progress calls.
const verifyChunk = 1 << 20

// RemoveTemps deletes the temporary files of imports into target
// (".<base>.tp-import-<digits>" in target's directory) and returns how many
// it removed. A missing directory means there is nothing to remove.
func RemoveTemps(target string) (removed int, err error) {
	if !filepath.IsAbs(target) {
		return 0, fmt.Errorf("%w: target %q is not an absolute path", ErrInvalidRequest, target)
	}
	dir := filepath.Dir(target)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("remove temporary files of %s: %w", target, err)
	}
	prefix := "." + filepath.Base(target) + tempMarker
	for _, e := range entries {
		if !isTempOf(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		err := os.Remove(filepath.Join(dir, e.Name()))
		switch {
		case err == nil:
			removed++
		case errors.Is(err, fs.ErrNotExist):
			// Renamed or removed by a concurrent attempt meanwhile.
		default:
			return removed, fmt.Errorf("remove temporary files of %s: %w", target, err)
		}
	}
	return removed, nil
}

// isTempOf matches prefix followed by digits only (os.CreateTemp's random
// part), so that the temporary files of a target named "a.tp-import-1" are
// never taken for those of "a".
func isTempOf(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return false
		}
	}
	return true
}

func (r Request) validate() error {
	switch {
	case r.Source == "" || !filepath.IsAbs(r.Source):
		return fmt.Errorf("%w: source %q is not an absolute path", ErrInvalidRequest, r.Source)
	case r.Target == "" || !filepath.IsAbs(r.Target):
		return fmt.Errorf("%w: target %q is not an absolute path", ErrInvalidRequest, r.Target)
	case filepath.Clean(r.Source) == filepath.Clean(r.Target):
		return fmt.Errorf("%w: source and target are both %s", ErrInvalidRequest, r.Source)
	case strings.HasSuffix(r.Target, string(filepath.Separator)) || filepath.Base(r.Target) == string(filepath.Separator):
		return fmt.Errorf("%w: target %q names a directory", ErrInvalidRequest, r.Target)
	case r.ChunkSize < 0 || r.ChunkSize > maxChunkSize:
		return fmt.Errorf("%w: chunk size %d outside [0, %d]", ErrInvalidRequest, r.ChunkSize, maxChunkSize)
	}
	return checkExpectation(r.ExpectedSize, r.ExpectedSHA256)
}

func checkExpectation(size int64, sha256Hex string) error {
	if size < 0 {
		return fmt.Errorf("%w: expected size %d is negative", ErrInvalidRequest, size)
	}
	if b, err := hex.DecodeString(sha256Hex); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%w: expected SHA-256 %q is not 64 hex digits", ErrInvalidRequest, sha256Hex)
	}
	return nil
}

// mkdirAllSynced creates dir and its missing parents, and fsyncs the parent
// of each directory it created, so that a crash cannot lose the directory
// entries the renamed target hangs from.
func mkdirAllSynced(dir string) error {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat %s: %w", d, err)
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create target directory: %w", err)
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// placeNoReplace renames tmp to target unless a name exists at target, in
// which case the error wraps fs.ErrExist and nothing moved. Filesystems
// without RENAME_NOREPLACE (EINVAL) get a hard link then an unlink of tmp,
// which fails the same way on an existing name; a crash between the two
// leaves a temporary file that the next attempt removes.
func placeNoReplace(tmp, target string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, target, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		return linkNoReplace(tmp, target)
	}
	return &fs.PathError{Op: "renameat2", Path: target, Err: err}
}

// linkNoReplace is placeNoReplace's fallback: link(2) never replaces.
func linkNoReplace(tmp, target string) error {
	if err := os.Link(tmp, target); err != nil {
		return err
	}
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("remove temporary file after link: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
