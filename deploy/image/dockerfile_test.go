package image_test

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/buildkit/util/system"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/deploy/image"
	"github.com/taskport/taskport/deploy/internal/deploytest"
)

// dockerImage is what the Dockerfile's final stage declares, with
// REVISION expanded.
type dockerImage struct {
	base       string
	user       string
	entrypoint []string
	workdir    string
	labels     map[string]string
	files      map[string]string // destination -> source (stage:path or context path)
	goVersion  string
	buildEnv   []string // assignments before `go build`
	buildFlags []string // between `go build` and `-o`
	buildPkg   string
}

// The Dockerfile at the repository root, parsed with BuildKit's own parser
// and linter, builds the same image as the Go build: same base (none), same
// binary build flags and toolchain, same files at the same paths, same
// user, entrypoint, working directory and labels, and BuildKit's default
// PATH, which the Go build declares too. Docker is not run here (no daemon).
func TestDockerfileMatchesGoBuild(t *testing.T) {
	const revision = "0123456789abcdef0123456789abcdef01234567"
	d := parseDockerfile(t, filepath.Join(deploytest.RepoRoot(t), "Dockerfile"), revision)

	img, _ := buildImage(t, image.Revision{ID: revision, Time: time.Unix(0, 0)})
	cf, err := img.ConfigFile()
	require.NoError(t, err)

	require.Equal(t, "scratch", d.base, "the final stage starts from nothing, as the Go build does")
	require.Equal(t, cf.Config.User, d.user)
	require.Equal(t, cf.Config.Entrypoint, d.entrypoint)
	require.Equal(t, cf.Config.WorkingDir, d.workdir)
	require.Equal(t, cf.Config.Labels, d.labels)
	require.Equal(t, []string{"PATH=" + system.DefaultPathEnv("linux")}, cf.Config.Env,
		"BuildKit declares this PATH in every image; the Go build must too")

	require.Equal(t, strings.TrimPrefix(runtime.Version(), "go"), d.goVersion,
		"the Dockerfile's Go must be the toolchain `make image` builds with, or the binaries differ")
	require.Contains(t, d.buildEnv, "CGO_ENABLED=0")
	require.Contains(t, d.buildEnv, "GOFLAGS=")
	require.Equal(t, image.GoBuildFlags(revision), d.buildFlags)
	require.Equal(t, image.Package, d.buildPkg)

	require.Equal(t, map[string]string{
		"/etc/passwd":      "deploy/image/rootfs/etc/passwd",
		"/etc/group":       "deploy/image/rootfs/etc/group",
		image.CABundlePath: "build:" + image.CABundlePath, // Debian's ca-certificates in the golang bookworm image
		image.BinaryPath:   "build:/out/taskport",
	}, d.files)
	for _, src := range []string{"deploy/image/rootfs/etc/passwd", "deploy/image/rootfs/etc/group"} {
		require.FileExists(t, filepath.Join(deploytest.RepoRoot(t), src), "the Dockerfile copies it from the build context")
	}
}

func parseDockerfile(t *testing.T, path, revision string) dockerImage {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ast, err := parser.Parse(f)
	require.NoError(t, err)
	require.Empty(t, ast.Warnings, "Dockerfile parser warnings")
	var lintWarnings []string
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, _ []parser.Range) {
		lintWarnings = append(lintWarnings, rule+": "+msg)
	}})
	stages, metaArgs, err := instructions.Parse(ast.AST, lint)
	require.NoError(t, err)
	require.Empty(t, lintWarnings, "BuildKit's linter")
	require.Len(t, stages, 2, "a build stage and the final stage")

	d := dockerImage{labels: map[string]string{}, files: map[string]string{}}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Key == "GO_VERSION" {
				d.goVersion = kv.ValueString()
			}
		}
	}
	lex := shell.NewLex(parser.DefaultEscapeToken)
	env := shell.EnvsFromSlice([]string{"REVISION=" + revision, "GO_VERSION=" + d.goVersion})
	expand := func(s string) string {
		r, _, err := lex.ProcessWord(s, env)
		require.NoError(t, err)
		return r
	}

	build := stages[0]
	require.Equal(t, "build", build.Name)
	require.True(t, strings.HasPrefix(expand(build.BaseName), "golang:"+d.goVersion+"-bookworm"), build.BaseName)
	for _, c := range build.Commands {
		run, ok := c.(*instructions.RunCommand)
		if !ok || !strings.Contains(run.CmdLine[0], "go build") {
			continue
		}
		require.True(t, run.PrependShell)
		words, err := lex.ProcessWords(run.CmdLine[0], env)
		require.NoError(t, err)
		i := slices.Index(words, "go")
		require.Positive(t, i)
		require.Equal(t, "build", words[i+1])
		d.buildEnv = words[:i]
		rest := words[i+2:]
		o := slices.Index(rest, "-o")
		require.Positive(t, o)
		d.buildFlags = rest[:o]
		require.Equal(t, "/out/taskport", rest[o+1])
		require.Len(t, rest, o+3, "one package after -o")
		d.buildPkg = rest[o+2]
	}
	require.NotEmpty(t, d.buildFlags, "no RUN ... go build in the build stage")

	final := stages[1]
	d.base = final.BaseName
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.ArgCommand:
		case *instructions.CopyCommand:
			require.Len(t, c.SourcePaths, 1, c.String())
			src := c.SourcePaths[0]
			if c.From != "" {
				src = c.From + ":" + src
			}
			d.files[c.DestPath] = src
			require.Empty(t, c.Chown, "files stay owned by root, as in the Go build")
			require.Empty(t, c.Chmod)
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				d.labels[kv.Key] = expand(kv.Value)
			}
		case *instructions.UserCommand:
			d.user = c.User
		case *instructions.WorkdirCommand:
			d.workdir = c.Path
		case *instructions.EntrypointCommand:
			require.False(t, c.PrependShell, "exec form: no shell in the image")
			d.entrypoint = c.CmdLine
		default:
			t.Fatalf("final stage: %s has no counterpart in the Go build; add it to both", c.Name())
		}
	}
	return d
}
