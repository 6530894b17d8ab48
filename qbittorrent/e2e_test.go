package qbittorrent_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtnox"
)

// TestRealQBittorrent drives a real qbittorrent-nox: local files made into
// torrents whose only source is a web seed on loopback are added as an
// uploaded .torrent and by URL and downloaded with their hashes intact; a
// magnet is added paused; then everything is paused and deleted with its
// files.
//
// qbittorrent-nox 4.5.2 starts as root with neither refusal nor warning
// (checked on the CI machine kind), so the test runs it as the current user;
// --profile keeps it out of that user's own configuration.
func TestRealQBittorrent(t *testing.T) {
	qbt := requireBinary(t, "qbittorrent-nox")
	mktorrent := requireBinary(t, "mktorrent")
	ctx := t.Context()
	dir := t.TempDir()

	// The payloads and their web seed. http.FileServer answers Range
	// requests, which qBittorrent's web seed support needs.
	seedDir := filepath.Join(dir, "seed")
	require.NoError(t, os.Mkdir(seedDir, 0o755))
	seed := httptest.NewServer(http.FileServer(http.Dir(seedDir)))
	t.Cleanup(seed.Close) // registered first, so it runs after qbittorrent-nox has stopped
	// Sizes are not multiples of the piece size (256 KiB).
	uploaded := makeTorrent(t, mktorrent, seed.URL, seedDir, "payload.bin", 8<<20+12345)
	byURL := makeTorrent(t, mktorrent, seed.URL, seedDir, "second.bin", 1<<20+7)

	const user, password = "taskport", "e2e-secret-password"
	base := startQBittorrent(t, qbt, dir, user, password)

	// A wrong password is refused with the typed error (one failure stays
	// far below qBittorrent's ban threshold of 5).
	bad, err := qbittorrent.New(qbittorrent.Config{BaseURL: base, Username: user, Password: "wrong", Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.ErrorIs(t, bad.Login(ctx), qbittorrent.ErrUnauthorized)

	c, err := qbittorrent.New(qbittorrent.Config{BaseURL: base, Username: user, Password: password, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, c.Login(ctx))
	v, err := c.APIVersion(ctx)
	require.NoError(t, err)
	t.Logf("qBittorrent Web API %s at %s", v, base)

	saveDir := filepath.Join(dir, "downloads")
	tag := qbittorrent.ManagedTag("plan-e2e")
	added := time.Now()
	require.NoError(t, c.Add(ctx, qbittorrent.AddRequest{Torrent: uploaded.file, SavePath: saveDir, Tags: []string{tag}}))
	// The same torrent again is refused: this is what a retried add sees.
	require.ErrorIs(t, c.Add(ctx, qbittorrent.AddRequest{Torrent: uploaded.file, SavePath: saveDir, Tags: []string{tag}}), qbittorrent.ErrAddRejected)
	urlTag := qbittorrent.ManagedTag("plan-url")
	require.NoError(t, c.Add(ctx, qbittorrent.AddRequest{URLs: []string{seed.URL + "/second.bin.torrent"}, SavePath: saveDir, Tags: []string{urlTag}}))
	// A magnet nobody seeds stays without metadata; added paused it shows
	// the paused state qBittorrent 4 reports for an unfinished torrent.
	magnetTag := qbittorrent.ManagedTag("plan-magnet")
	const magnetHash = "0123456789abcdef0123456789abcdef01234567"
	require.NoError(t, c.Add(ctx, qbittorrent.AddRequest{
		URLs: []string{"magnet:?xt=urn:btih:" + magnetHash + "&dn=nobody-seeds-this"}, SavePath: saveDir, Tags: []string{magnetTag}, Paused: true,
	}))

	// Conditions never call require: Eventually runs them on another
	// goroutine. A failing poll is kept for the failure message instead.
	var (
		last    qbittorrent.Torrent
		pollErr error
	)
	poll := func(f qbittorrent.Filter) bool {
		ts, err := c.Torrents(ctx, f)
		switch {
		case err != nil:
			pollErr = err
		case len(ts) != 1:
			pollErr = fmt.Errorf("want 1 torrent, got %d", len(ts))
		default:
			pollErr, last = nil, ts[0]
			return true
		}
		return false
	}
	require.Eventually(t, func() bool {
		return poll(qbittorrent.Filter{Tag: magnetTag}) && last.State == "pausedDL"
	}, 30*time.Second, 100*time.Millisecond, "magnet not listed as paused; last seen %+v, last error %v", &last, &pollErr)
	require.Equal(t, magnetHash, last.Hash)
	require.Equal(t, "nobody-seeds-this", last.Name)
	require.NoError(t, c.Delete(ctx, false, magnetHash))

	for _, want := range []struct {
		p   payload
		tag string
	}{{uploaded, tag}, {byURL, urlTag}} {
		require.Eventually(t, func() bool {
			return poll(qbittorrent.Filter{Tag: want.tag}) && last.Complete()
		}, 2*time.Minute, 200*time.Millisecond, "%s did not complete; last seen %+v, last error %v", want.p.name, &last, &pollErr)
		require.Equal(t, want.p.meta.InfoHash, last.Hash)
		require.Equal(t, want.p.meta.Size, last.Size)
		require.True(t, last.HasTag(want.tag), "tags %q", last.Tags)
		require.Equal(t, saveDir, filepath.Clean(last.SavePath))
		downloaded := filepath.Join(saveDir, want.p.name)
		require.Equal(t, downloaded, filepath.Clean(last.ContentPath))
		got, err := os.ReadFile(downloaded)
		require.NoError(t, err)
		require.Equal(t, want.p.sha256, sha256.Sum256(got), "%s differs from the source", want.p.name)
		t.Logf("%s (%d bytes, %s) downloaded from the web seed, sha256 intact, %s after the adds",
			want.p.name, want.p.meta.Size, want.p.meta.InfoHash, time.Since(added).Round(time.Millisecond))
	}
	meta := uploaded.meta
	downloaded := filepath.Join(saveDir, uploaded.name)

	byHash, err := c.Torrents(ctx, qbittorrent.Filter{Hashes: []string{meta.InfoHash, byURL.meta.InfoHash}})
	require.NoError(t, err)
	require.Len(t, byHash, 2)
	other, err := c.Torrents(ctx, qbittorrent.Filter{Tag: qbittorrent.ManagedTag("another-plan")})
	require.NoError(t, err)
	require.Empty(t, other)

	require.NoError(t, c.Pause(ctx, meta.InfoHash))
	require.Eventually(t, func() bool {
		return poll(qbittorrent.Filter{Hashes: []string{meta.InfoHash}}) &&
			(last.State == "pausedUP" || last.State == "stoppedUP")
	}, 30*time.Second, 100*time.Millisecond, "torrent not paused; last seen %+v, last error %v", &last, &pollErr)

	require.NoError(t, c.Delete(ctx, true, meta.InfoHash, byURL.meta.InfoHash))
	require.Eventually(t, func() bool {
		ts, err := c.Torrents(ctx, qbittorrent.Filter{})
		_, statErr := os.Stat(downloaded)
		_, statErr2 := os.Stat(filepath.Join(saveDir, byURL.name))
		pollErr = err
		return err == nil && len(ts) == 0 && errors.Is(statErr, fs.ErrNotExist) && errors.Is(statErr2, fs.ErrNotExist)
	}, 30*time.Second, 100*time.Millisecond, "torrents or their files still present after delete (last error %v)", &pollErr)
}

// payload is a seeded file and its torrent.
type payload struct {
	name   string
	sha256 [32]byte
	file   []byte // the .torrent, also served as <seed>/<name>.torrent
	meta   qbittorrent.TorrentFile
}

// makeTorrent writes size pseudo-random bytes to seedDir/name and makes a
// torrent whose only source is the web seed <seedURL>/<name>.
func makeTorrent(t *testing.T, mktorrent, seedURL, seedDir, name string, size int) payload {
	t.Helper()
	data := make([]byte, size)
	_, _ = mrand.NewChaCha8([32]byte{byte(size)}).Read(data)
	require.NoError(t, os.WriteFile(filepath.Join(seedDir, name), data, 0o644))
	torrentPath := filepath.Join(seedDir, name+".torrent")
	mk := exec.CommandContext(t.Context(), mktorrent, "-w", seedURL+"/"+name, "-o", torrentPath, name)
	mk.Dir = seedDir
	out, err := mk.CombinedOutput()
	require.NoError(t, err, "mktorrent: %s", out)
	file, err := os.ReadFile(torrentPath)
	require.NoError(t, err)
	meta, err := qbittorrent.ParseTorrentFile(file)
	require.NoError(t, err)
	require.Equal(t, int64(size), meta.Size)
	return payload{name: name, sha256: sha256.Sum256(data), file: file, meta: meta}
}

// requireBinary finds a tool, failing in CI (where it is installed with apt)
// and skipping with the package to install elsewhere.
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found in CI: apt-get install %s (%v)", name, name, err)
	}
	t.Skipf("%s not installed: apt-get install %s to run this end-to-end test", name, name)
	return ""
}

// startQBittorrent runs qbittorrent-nox with a private profile until the
// test ends and returns the WebUI base URL.
func startQBittorrent(t *testing.T, bin, dir, user, password string) string {
	t.Helper()
	srv, err := qbtnox.Start(t.Context(), qbtnox.Options{Bin: bin, Dir: dir, Username: user, Password: password})
	require.NoError(t, err)
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			t.Logf("qbittorrent-nox output:\n%s", srv.Log())
		}
	})
	return srv.BaseURL
}
