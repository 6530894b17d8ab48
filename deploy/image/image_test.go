package image_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/deploy/image"
	"github.com/taskport/taskport/deploy/internal/deploytest"
)

// buildImage builds the binary into its own directory and the image from
// it, as `make image` does.
func buildImage(t *testing.T, rev image.Revision) (v1.Image, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "taskport")
	require.NoError(t, image.BuildBinary(ctx, image.BinaryConfig{RepoRoot: deploytest.RepoRoot(t), Out: bin, Revision: rev.ID, Env: os.Environ()}))
	img, err := image.Build(image.Options{Binary: bin, Revision: rev})
	require.NoError(t, err)
	return img, bin
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// The same commit gives the same image digest and byte-identical outputs;
// another revision gives another digest. Both builds share the Go build
// cache (a cold build takes minutes on two cores); what they do not share is
// every file's time on disk, the output directories, and the moment of the
// build, which is what a non-reproducible layer or config would pick up.
// The binary itself is reproducible because of the flags (GoBuildFlags):
// Go's toolchain gives identical output for identical inputs and flags.
func TestReproducible(t *testing.T) {
	rev, err := image.GitRevision(context.Background(), deploytest.RepoRoot(t))
	require.NoError(t, err)
	tag := image.DefaultTag(rev.ID)

	var digests []v1.Hash
	var tarballs, indexes []string
	for range 2 {
		img, bin := buildImage(t, rev)
		// A different modification time on the binary must not leak in.
		require.NoError(t, os.Chtimes(bin, time.Now(), time.Now()))
		out, err := image.Write(img, t.TempDir(), tag)
		require.NoError(t, err)
		digests = append(digests, out.Digest)
		tarballs = append(tarballs, sha256File(t, out.Tarball))
		indexes = append(indexes, sha256File(t, filepath.Join(out.Layout, "index.json")))

		// The layout on disk holds the image with that digest.
		p, err := layout.FromPath(out.Layout)
		require.NoError(t, err)
		fromDisk, err := p.Image(out.Digest)
		require.NoError(t, err)
		d, err := fromDisk.Digest()
		require.NoError(t, err)
		require.Equal(t, out.Digest, d)
	}
	t.Logf("revision %s: digest %s, docker tarball sha256 %s", rev.ID, digests[0], tarballs[0])
	require.Equal(t, digests[0], digests[1], "same commit, different digest: the build is not reproducible")
	require.Equal(t, tarballs[0], tarballs[1], "docker tarballs differ")
	require.Equal(t, indexes[0], indexes[1], "OCI layout index differs")

	other := rev
	other.ID = strings.Repeat("0", 40)
	img, _ := buildImage(t, other)
	d, err := img.Digest()
	require.NoError(t, err)
	require.NotEqual(t, digests[0], d, "another revision must give another image")
}

// The image holds exactly the static binary, the CA bundle and the
// passwd/group files, owned by root, stamped with the commit time, and is
// configured to run the binary as 65532 with the OCI labels.
func TestImageContents(t *testing.T) {
	rev := image.Revision{ID: "0123456789abcdef0123456789abcdef01234567", Time: time.Unix(1_700_000_000, 0).UTC()}
	img, bin := buildImage(t, rev)

	// Static: no program interpreter, no shared libraries.
	f, err := elf.Open(bin)
	require.NoError(t, err)
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "the binary asks for a dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
	require.NoError(t, f.Close())

	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), rev.ID, "the revision is stamped into the binary")

	cf, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, image.User, cf.Config.User)
	require.Equal(t, []string{image.BinaryPath}, cf.Config.Entrypoint)
	require.Equal(t, image.Labels(rev.ID), cf.Config.Labels)
	require.Equal(t, rev.Time, cf.Created.UTC())
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, runtime.GOARCH, cf.Architecture)
	for _, h := range cf.History {
		require.Equal(t, rev.Time, h.Created.UTC())
	}

	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	require.NoError(t, image.Walk(img, func(h *tar.Header, r io.Reader) error {
		require.Equal(t, 0, h.Uid, h.Name)
		require.Equal(t, 0, h.Gid, h.Name)
		require.Empty(t, h.Uname, h.Name)
		require.Equal(t, rev.Time, h.ModTime.UTC(), h.Name)
		if h.Typeflag == tar.TypeReg {
			files["/"+h.Name] = h
			b, err := io.ReadAll(r)
			require.NoError(t, err)
			contents["/"+h.Name] = b
		}
		return nil
	}))
	require.ElementsMatch(t, []string{image.BinaryPath, image.CABundlePath, "/etc/passwd", "/etc/group"}, keys(files))
	require.Equal(t, int64(0o755), files[image.BinaryPath].Mode)
	require.Contains(t, string(contents["/etc/passwd"]), "nonroot:x:65532:65532:")
	require.Contains(t, string(contents["/etc/group"]), "nonroot:x:65532:")
	ca, err := os.ReadFile(image.CABundlePath)
	require.NoError(t, err)
	require.Equal(t, ca, contents[image.CABundlePath])
	require.Contains(t, string(ca), "BEGIN CERTIFICATE")
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
