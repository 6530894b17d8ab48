// Command image builds the taskport image offline (see package image) and
// writes an OCI layout and a `docker load` tarball: `make image`.
//
// The revision and its time come from git; SOURCE_DATE_EPOCH, when set,
// overrides the time (the reproducible-builds convention).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"

	"github.com/taskport/taskport/deploy/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	repo := flag.String("repo", "..", "the taskport repository (main module) to build")
	out := flag.String("out", "../build/image", "directory for the OCI layout and the docker tarball")
	tag := flag.String("tag", "", "image tag; default "+image.DefaultRepository+":<first 12 characters of the commit>")
	ca := flag.String("ca-bundle", image.CABundlePath, "CA bundle to ship (Debian's ca-certificates)")
	flag.Parse()

	rev, err := image.GitRevision(ctx, *repo)
	if err != nil {
		return err
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		secs, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		rev.Time = time.Unix(secs, 0).UTC()
	}
	if *tag == "" {
		*tag = image.DefaultTag(rev.ID)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(*out, "taskport")
	if err := image.BuildBinary(ctx, image.BinaryConfig{RepoRoot: *repo, Out: bin, Revision: rev.ID, Env: os.Environ()}); err != nil {
		return err
	}
	img, err := image.Build(image.Options{Binary: bin, CABundle: *ca, Revision: rev})
	if err != nil {
		return err
	}
	o, err := image.Write(img, *out, *tag)
	if err != nil {
		return err
	}
	fmt.Printf("image %s\n  digest   %s\n  revision %s (%s)\n  layout   %s\n  tarball  %s\n",
		o.Tag, o.Digest, rev.ID, rev.Time.Format(time.RFC3339), o.Layout, o.Tarball)
	return nil
}
