// Package image builds the taskport worker image from Go, with no daemon,
// no registry and no base image to pull: an empty image plus two layers
// written here (the system files, then the static binary) and a config.
//
// # Contents
//
//   - the static taskport binary (CGO_ENABLED=0, -trimpath, no VCS stamp,
//     the revision set by -ldflags), at BinaryPath;
//   - the build machine's CA bundle at CABundlePath (Debian's
//     ca-certificates), because the Temporal TLS and API-key modes verify
//     the frontend with the system roots;
//   - /etc/passwd and /etc/group naming uid/gid 65532 (nonroot), from
//     rootfs/ beside this file, which the Dockerfile copies too.
//
// No tzdata: taskport never loads a time zone (no time.LoadLocation, no TZ
// handling; timestamps are UTC or Postgres timestamptz), so the zoneinfo
// files would only add size.
//
// # Reproducibility
//
// The same revision gives the same digest: every time stamp in the layers
// and the config is the commit time (SOURCE_DATE_EPOCH), tar headers carry
// no owner names, the gzip stream has no name or time, and the binary is
// built with flags that remove paths, build ids and VCS state.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it runs. The Dockerfile at the repository
// root must agree; TestDockerfileMatchesGoBuild holds the two together.
const (
	BinaryPath   = "/usr/local/bin/taskport"
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// User is the nonroot uid:gid the manifests' runAsUser names.
	User = "65532:65532"
	// Package is the main package built into the image, relative to the
	// repository root.
	Package = "./cmd/taskport"
	// VersionVar is the variable -ldflags -X sets to the revision.
	VersionVar = "main.version"

	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	SourceURL     = "https://github.com/taskport/taskport"
)

// DefaultPath is the PATH the image declares: BuildKit gives every image
// built from a Dockerfile this one, so the Go build declares it too.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

//go:embed rootfs/etc/passwd rootfs/etc/group
var rootfs embed.FS

// GoBuildFlags are the `go build` flags of the image's binary, after
// CGO_ENABLED=0: no paths of the build machine, no build id, no VCS stamp
// (the revision is set explicitly, so a dirty tree does not change the
// binary behind the label's back), symbols stripped.
func GoBuildFlags(revision string) []string {
	return []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid= -X " + VersionVar + "=" + revision}
}

// BinaryConfig says how to build the binary.
type BinaryConfig struct {
	// RepoRoot is the main module's directory.
	RepoRoot string
	// Out is the file written.
	Out string
	// Revision is stamped into the binary (taskport --version).
	Revision string
	// Arch is GOARCH. Default runtime.GOARCH.
	Arch string
	// Env is the go command's environment (the caller's, usually);
	// CGO_ENABLED, GOOS, GOARCH and GOFLAGS are overridden.
	Env []string
}

// BuildBinary runs `go build` for the image's binary.
func BuildBinary(ctx context.Context, c BinaryConfig) error {
	if c.RepoRoot == "" || c.Out == "" || c.Revision == "" {
		return errors.New("build binary: repo root, output and revision are required")
	}
	if c.Arch == "" {
		c.Arch = runtime.GOARCH
	}
	out, err := filepath.Abs(c.Out) // go build runs in RepoRoot
	if err != nil {
		return err
	}
	args := append([]string{"build"}, GoBuildFlags(c.Revision)...)
	args = append(args, "-o", out, Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = c.RepoRoot
	// GOFLAGS is cleared so a developer's GOFLAGS (e.g. -race, -mod=mod)
	// cannot change the binary.
	cmd.Env = append(slices.Clone(c.Env), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+c.Arch, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Revision is the commit an image is built from and its time.
type Revision struct {
	// ID is the commit hash, with "-dirty" appended when the work tree has
	// changes, so a label never claims a commit the image does not hold.
	ID string
	// Time is the commit time: the image's only time stamp.
	Time time.Time
}

// GitRevision reads the revision of the checkout at dir.
func GitRevision(ctx context.Context, dir string) (Revision, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	id, err := git("rev-parse", "HEAD")
	if err != nil {
		return Revision{}, err
	}
	ct, err := git("log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return Revision{}, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return Revision{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return Revision{}, err
	}
	if status != "" {
		id += "-dirty"
	}
	return Revision{ID: id, Time: time.Unix(secs, 0).UTC()}, nil
}

// Options are the inputs of Build.
type Options struct {
	// Binary is the path of the built taskport binary (BuildBinary).
	Binary string
	// CABundle is the path of the CA bundle to ship. Default Debian's
	// /etc/ssl/certs/ca-certificates.crt on the build machine.
	CABundle string
	// Revision labels the image; its Time stamps every file and the config.
	Revision Revision
	// Arch is the config's architecture. Default runtime.GOARCH.
	Arch string
}

// Build assembles the image.
func Build(o Options) (v1.Image, error) {
	if o.Binary == "" || o.Revision.ID == "" {
		return nil, errors.New("build image: binary and revision are required")
	}
	if o.CABundle == "" {
		o.CABundle = CABundlePath
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle (Debian: apt-get install ca-certificates): %w", err)
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	passwd, _ := rootfs.ReadFile("rootfs/etc/passwd")
	group, _ := rootfs.ReadFile("rootfs/etc/group")
	at := o.Revision.Time.UTC()

	system, err := layer(at, []file{
		{path: "/etc/passwd", mode: 0o644, data: passwd},
		{path: "/etc/group", mode: 0o644, data: group},
		{path: CABundlePath, mode: 0o644, data: ca},
	})
	if err != nil {
		return nil, err
	}
	app, err := layer(at, []file{{path: BinaryPath, mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base,
		mutate.Addendum{Layer: system, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: at}, CreatedBy: "taskport image: passwd, group, CA bundle"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: at}, CreatedBy: "taskport image: " + BinaryPath}},
	)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: at}
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		Env:        []string{DefaultPath},
		WorkingDir: "/",
		Labels:     Labels(o.Revision.ID),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return img, nil
}

// Labels are the image's OCI labels for a revision.
func Labels(revision string) map[string]string {
	return map[string]string{LabelSource: SourceURL, LabelRevision: revision}
}

type file struct {
	path string
	mode int64
	data []byte
}

// layer writes files into a gzip-compressed tar with fixed owners and
// times, parent directories first, as a container runtime expects.
func layer(at time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, f := range files {
		var dirs []string
		for d := path.Dir(f.path); d != "/"; d = path.Dir(d) {
			dirs = append(dirs, d)
		}
		slices.Reverse(dirs)
		for _, d := range dirs {
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: at}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.path[1:], Mode: f.mode, Size: int64(len(f.data)), ModTime: at}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return l, nil
}

// Outputs are the files Write produced.
type Outputs struct {
	// Layout is the OCI image layout directory (crane/skopeo push it).
	Layout string
	// Tarball is the `docker load` archive, tagged Tag.
	Tarball string
	Tag     string
	Digest  v1.Hash
}

// DefaultRepository is the image name the manifests use.
const DefaultRepository = "ghcr.io/taskport/taskport"

// DefaultTag names an image by its revision: the repository, then the
// first 12 characters of the commit (and "-dirty").
func DefaultTag(revision string) string {
	id, dirty := strings.CutSuffix(revision, "-dirty")
	tag := id[:min(12, len(id))]
	if dirty {
		tag += "-dirty"
	}
	return DefaultRepository + ":" + tag
}
