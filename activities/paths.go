package activities

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/port"
)

// errOutside marks a path that lies outside the directory it must be in;
// retrying cannot change that.
var errOutside = errors.New("outside its directory")

// checkTarget refuses a plan whose library file would not lie inside the
// library root once symlinks are resolved: a symlink inside the root must
// not lead an import, a verify or a removal elsewhere. Nothing is opened
// before this check, so no error reports the size or hash of a file
// outside the root.
func (a *Activities) checkTarget(p acquisition.Plan) error {
	return refused(beneath(a.cfg.LibraryRoot, p.TargetPath), "plan %s: target path %s", p.ID, p.TargetPath)
}

// checkContent refuses a content path (reported at completion, or by the
// downloader) outside the download directory once symlinks are resolved:
// a completion report must not make the import read an arbitrary file.
func (a *Activities) checkContent(p acquisition.Plan, path string) error {
	return refused(beneath(a.cfg.DownloadDir, path), "plan %s: content path %s", p.ID, path)
}

// refused names what err is about; a path outside its directory is
// non-retryable (a decision), a file system error (a root not mounted
// yet) is retried.
func refused(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf(format+": %w", append(args, err)...)
	if errors.Is(err, errOutside) {
		return port.NonRetryable(err)
	}
	return err
}

// beneath fails unless path, with every symlink resolved, lies strictly
// inside root (also resolved). A path not created yet is resolved through
// its longest existing prefix. A symlink whose target does not exist is
// refused: it could be created later anywhere.
func beneath(root, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%w: not an absolute path", errOutside)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", root, err)
	}
	real, err := resolve(path)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(realRoot, real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%w: it resolves outside %s", errOutside, root)
	}
	return nil
}

// resolve is path with its symlinks resolved, for as much of it as exists.
func resolve(path string) (string, error) {
	path = filepath.Clean(path)
	rest := ""
	for {
		real, err := filepath.EvalSymlinks(path)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%w: %s is a symlink to nothing", errOutside, path)
		}
		parent := filepath.Dir(path)
		if parent == path {
			return filepath.Join(path, rest), nil
		}
		rest = filepath.Join(filepath.Base(path), rest)
		path = parent
	}
}
