package qbittorrent_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtfake"
)

const magnetHash = "0123456789abcdef0123456789abcdef01234567"

func newClient(t *testing.T, fake *qbtfake.Server, timeout time.Duration) *qbittorrent.Client {
	t.Helper()
	c, err := qbittorrent.New(qbittorrent.Config{BaseURL: fake.URL, Username: "admin", Password: "adminadmin", Timeout: timeout})
	require.NoError(t, err)
	return c
}

func TestAddInfoPauseDelete(t *testing.T) {
	t.Parallel()
	torrentFile, err := os.ReadFile("testdata/mktorrent_webseed.torrent")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, apiVersion, pausePath, pausedState string
	}{
		{"qBittorrent 4", "2.8.19", qbittorrent.PathPause, "pausedDL"},
		{"qBittorrent 5", "2.11.4", qbittorrent.PathStop, "stoppedDL"},
		// An unparsable version makes the client guess pause; the 404 makes
		// it fall back to stop.
		{"unparsable version", "5.0-custom", qbittorrent.PathStop, "stoppedDL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			fake := qbtfake.Start(t, qbtfake.Options{APIVersion: tc.apiVersion})
			c := newClient(t, fake, 5*time.Second)
			tag := qbittorrent.ManagedTag("plan-1")

			require.NoError(t, c.Add(ctx, qbittorrent.AddRequest{
				URLs:     []string{"magnet:?xt=urn:btih:" + magnetHash + "&dn=Some%20name&xl=1000"},
				Torrent:  torrentFile,
				SavePath: "/library/incoming",
				Tags:     []string{tag, "other"},
			}))
			require.NoError(t, c.Add(ctx, qbittorrent.AddRequest{URLs: []string{"http://example.invalid/x.torrent"}, Tags: []string{"not-ours"}}))

			mine, err := c.Torrents(ctx, qbittorrent.Filter{Tag: tag})
			require.NoError(t, err)
			require.Len(t, mine, 2)
			byHash := map[string]qbittorrent.Torrent{}
			for _, x := range mine {
				byHash[x.Hash] = x
				require.True(t, x.HasTag(tag))
				require.Equal(t, "/library/incoming", x.SavePath)
			}
			require.Equal(t, int64(1000), byHash[magnetHash].Size)
			fileTorrent := byHash["210a466f2e1ff4d20be015239bb91f3fd974bb49"]
			require.Equal(t, "p.bin", fileTorrent.Name)
			require.Equal(t, "/library/incoming/p.bin", fileTorrent.ContentPath)

			all, err := c.Torrents(ctx, qbittorrent.Filter{})
			require.NoError(t, err)
			require.Len(t, all, 3)

			require.NoError(t, fake.SetProgress(magnetHash, 0.5))
			one, err := c.Torrents(ctx, qbittorrent.Filter{Hashes: []string{magnetHash}})
			require.NoError(t, err)
			require.Len(t, one, 1)
			require.Equal(t, 0.5, one[0].Progress)
			require.Equal(t, int64(500), one[0].AmountLeft)
			require.False(t, one[0].Complete())
			require.NoError(t, fake.Complete(fileTorrent.Hash))
			one, err = c.Torrents(ctx, qbittorrent.Filter{Hashes: []string{fileTorrent.Hash}})
			require.NoError(t, err)
			require.True(t, one[0].Complete())
			require.Equal(t, "uploading", one[0].State)

			require.NoError(t, c.Pause(ctx, magnetHash))
			require.True(t, fake.Paused(magnetHash))
			require.Equal(t, 1, fake.Calls(tc.pausePath))
			one, err = c.Torrents(ctx, qbittorrent.Filter{Hashes: []string{magnetHash}})
			require.NoError(t, err)
			require.Equal(t, tc.pausedState, one[0].State)
			// The endpoint is remembered: a second pause goes straight there.
			require.NoError(t, c.Pause(ctx, magnetHash))
			require.Equal(t, 2, fake.Calls(tc.pausePath))

			require.NoError(t, c.Delete(ctx, true, magnetHash))
			deleted, withFiles := fake.Deleted(magnetHash)
			require.True(t, deleted)
			require.True(t, withFiles)
			left, err := c.Torrents(ctx, qbittorrent.Filter{Tag: tag})
			require.NoError(t, err)
			require.Len(t, left, 1)
		})
	}
}

func TestLoginRefusedThenBanned(t *testing.T) {
	t.Parallel()
	fake := qbtfake.Start(t, qbtfake.Options{MaxAuthFailures: 2})
	c, err := qbittorrent.New(qbittorrent.Config{BaseURL: fake.URL, Username: "admin", Password: "nope"})
	require.NoError(t, err)
	for range 2 {
		err := c.Login(t.Context())
		require.ErrorIs(t, err, qbittorrent.ErrUnauthorized)
		require.NotErrorIs(t, err, qbittorrent.ErrBanned)
	}
	require.ErrorIs(t, c.Login(t.Context()), qbittorrent.ErrBanned)
	// An API call logs in first and reports the ban too.
	_, err = c.Torrents(t.Context(), qbittorrent.Filter{})
	require.ErrorIs(t, err, qbittorrent.ErrBanned)
	require.Equal(t, 0, fake.Calls(qbittorrent.PathInfo))
}

func TestReloginOnceWhenSessionExpires(t *testing.T) {
	t.Parallel()
	fake := qbtfake.Start(t, qbtfake.Options{})
	c := newClient(t, fake, 5*time.Second)
	_, err := c.Torrents(t.Context(), qbittorrent.Filter{})
	require.NoError(t, err)
	require.Equal(t, 1, fake.Calls(qbittorrent.PathLogin))

	fake.ExpireSessions()
	require.NoError(t, c.Add(t.Context(), qbittorrent.AddRequest{URLs: []string{"magnet:?xt=urn:btih:" + magnetHash}}))
	require.Equal(t, 2, fake.Calls(qbittorrent.PathLogin))
	// The refused add was resent with its whole body after the re-login.
	require.Equal(t, 2, fake.AddRequests())
	require.Len(t, fake.Torrents(), 1)
}

func TestServerErrorIsTyped(t *testing.T) {
	t.Parallel()
	fake := qbtfake.Start(t, qbtfake.Options{})
	c := newClient(t, fake, 5*time.Second)
	require.NoError(t, c.Login(t.Context()))

	fake.FailNext(1, http.StatusServiceUnavailable)
	err := c.Add(t.Context(), qbittorrent.AddRequest{URLs: []string{"magnet:?xt=urn:btih:" + magnetHash}})
	var he *qbittorrent.HTTPError
	require.ErrorAs(t, err, &he)
	require.Equal(t, http.StatusServiceUnavailable, he.Status)
	require.Equal(t, qbittorrent.PathAdd, he.Path)
	require.ErrorIs(t, err, qbittorrent.ErrServer)
	require.Empty(t, fake.Torrents(), "a 5xx add must not have added anything")

	// The next request goes through.
	require.NoError(t, c.Add(t.Context(), qbittorrent.AddRequest{URLs: []string{"magnet:?xt=urn:btih:" + magnetHash}}))
	require.Len(t, fake.Torrents(), 1)
}

func TestSlowAnswerHitsTheTimeout(t *testing.T) {
	t.Parallel()
	fake := qbtfake.Start(t, qbtfake.Options{})
	c := newClient(t, fake, 50*time.Millisecond)
	require.NoError(t, c.Login(t.Context()))
	fake.SetDelay(time.Hour)

	_, err := c.Torrents(t.Context(), qbittorrent.Filter{})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// The caller's context is honoured as well as the client's timeout.
	slow := newClient(t, fake, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = slow.Torrents(ctx, qbittorrent.Filter{})
	require.ErrorIs(t, err, context.Canceled)
}

// TestDroppedAddIsFoundByTag is the fault the ADR names: qBittorrent accepts
// the add and the connection drops before the answer. The client reports a
// transport error, the torrent is there, a blind retry is refused, and the
// managed tag finds it.
func TestDroppedAddIsFoundByTag(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fake := qbtfake.Start(t, qbtfake.Options{})
	c := newClient(t, fake, 5*time.Second)
	tag := qbittorrent.ManagedTag("plan-drop")
	req := qbittorrent.AddRequest{URLs: []string{"magnet:?xt=urn:btih:" + magnetHash}, Tags: []string{tag}}

	fake.DropNextAdds(1)
	err := c.Add(ctx, req)
	require.Error(t, err)
	var he *qbittorrent.HTTPError
	require.False(t, errors.As(err, &he), "a dropped connection is not an HTTP answer: %v", err)

	require.ErrorIs(t, c.Add(ctx, req), qbittorrent.ErrAddRejected)
	found, err := c.Torrents(ctx, qbittorrent.Filter{Tag: tag})
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, magnetHash, found[0].Hash)
	require.Equal(t, 2, fake.AddRequests())
	require.Len(t, fake.Torrents(), 1)
}

func TestInvalidArgumentsSendNothing(t *testing.T) {
	t.Parallel()
	fake := qbtfake.Start(t, qbtfake.Options{})
	c := newClient(t, fake, 5*time.Second)
	ctx := t.Context()
	for name, err := range map[string]error{
		"pause all":     c.Pause(ctx, "all"),
		"no hash":       c.Delete(ctx, true),
		"pipe in hash":  c.Delete(ctx, false, magnetHash+"|"+magnetHash),
		"empty add":     c.Add(ctx, qbittorrent.AddRequest{}),
		"comma tag":     c.Add(ctx, qbittorrent.AddRequest{URLs: []string{"magnet:?"}, Tags: []string{"a,b"}}),
		"multiline url": c.Add(ctx, qbittorrent.AddRequest{URLs: []string{"magnet:?\nx"}}),
		"short hash":    func() error { _, err := c.Torrents(ctx, qbittorrent.Filter{Hashes: []string{"abc"}}); return err }(),
		"non-hex hash":  c.Pause(ctx, "z123456789abcdef0123456789abcdef01234567"),
		"62 digits":     c.Pause(ctx, magnetHash+"0123456789abcdefXXXXXX"),
	} {
		require.ErrorIs(t, err, qbittorrent.ErrInvalidArgument, name)
	}
	require.Equal(t, 0, fake.Calls(qbittorrent.PathLogin), "nothing may reach the server")

	for _, cfg := range []qbittorrent.Config{
		{},
		{BaseURL: "127.0.0.1:8080"},
		{BaseURL: "ftp://127.0.0.1"},
		{BaseURL: "http://127.0.0.1", Timeout: -time.Second},
	} {
		_, err := qbittorrent.New(cfg)
		require.ErrorIs(t, err, qbittorrent.ErrInvalidArgument, "%+v", cfg)
	}
}
