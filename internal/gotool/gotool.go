// Package gotool finds what `go install` and `go mod download` put outside
// the clone: binaries in $(go env GOPATH)/bin and module sources in
// $(go env GOMODCACHE). The tools the tests and `make run` need (the
// Temporal CLI, temporal-server, temporal-sql-tool) are built there once by
// `make tools` and reused by every later run.
package gotool

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Env returns the value of `go env key`.
func Env(key string) (string, error) {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", key, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("go env %s is empty", key)
	}
	return v, nil
}

// ErrNotFound is returned when a binary or a module source is missing.
var ErrNotFound = errors.New("not found")

// Binary returns the path of the executable name: $(go env GOPATH)/bin
// first, then $PATH.
func Binary(name string) (string, error) {
	if gopath, err := Env("GOPATH"); err == nil {
		p := filepath.Join(filepath.SplitList(gopath)[0], "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s: %w in $(go env GOPATH)/bin or $PATH", name, ErrNotFound)
}

// ModuleDir returns the extracted source of module@version in
// $(go env GOMODCACHE).
func ModuleDir(module, version string) (string, error) {
	cache, err := Env("GOMODCACHE")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, filepath.FromSlash(escape(module))+"@"+version)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("source of %s@%s: %w in %s (go mod download %s@%s)", module, version, ErrNotFound, cache, module, version)
	}
	return dir, nil
}

// escape spells a module path the way the module cache stores it: each
// capital letter as '!' and its lower case, so that case-insensitive file
// systems keep paths apart.
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
