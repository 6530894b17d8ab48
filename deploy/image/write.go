package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Where Write puts the two outputs under its directory.
const (
	LayoutDir   = "oci"
	TarballName = "taskport.tar"
)

// Write replaces dir's OCI layout and `docker load` tarball with img,
// tagged tag (the layout records the tag as the image's ref name).
func Write(img v1.Image, dir, tag string) (Outputs, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return Outputs{}, fmt.Errorf("tag %q: %w", tag, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Outputs{}, err
	}
	out := Outputs{Layout: filepath.Join(dir, LayoutDir), Tarball: filepath.Join(dir, TarballName), Tag: ref.String(), Digest: digest}
	// A layout is appended to: start from an empty one, so the directory
	// holds this image only.
	if err := os.RemoveAll(out.Layout); err != nil {
		return Outputs{}, err
	}
	p, err := layout.Write(out.Layout, empty.Index)
	if err != nil {
		return Outputs{}, fmt.Errorf("oci layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref.String()})); err != nil {
		return Outputs{}, fmt.Errorf("oci layout: %w", err)
	}
	if err := tarball.WriteToFile(out.Tarball, ref, img); err != nil {
		return Outputs{}, fmt.Errorf("docker tarball: %w", err)
	}
	return out, nil
}

// Walk calls fn for every entry of img's file system (its layers
// flattened, as a runtime unpacks them), in order; fn reads the entry's
// content from r.
func Walk(img v1.Image, fn func(h *tar.Header, r io.Reader) error) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("image file system: %w", err)
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}
