package qbtfake_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtfake"
)

// TestSpeaksTheWireProtocol checks the fake with plain HTTP, without the
// client, against what qbittorrent-nox 4.5.2 answers: the client tests would
// not notice a fake that shares the client's misunderstanding.
func TestSpeaksTheWireProtocol(t *testing.T) {
	t.Parallel()
	fake := qbtfake.Start(t, qbtfake.Options{APIVersion: "2.11.2"})
	hc := &http.Client{}
	post := func(path string, form url.Values, cookie *http.Cookie) (*http.Response, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	resp, _ := post(qbittorrent.PathInfo, nil, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no session")

	resp, body := post(qbittorrent.PathLogin, url.Values{"username": {"admin"}, "password": {"bad"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "Fails.", body)
	require.Empty(t, resp.Cookies())

	resp, body = post(qbittorrent.PathLogin, url.Values{"username": {"admin"}, "password": {"adminadmin"}}, nil)
	require.Equal(t, "Ok.", body)
	require.Len(t, resp.Cookies(), 1)
	sid := resp.Cookies()[0]
	require.Equal(t, "SID", sid.Name)

	resp, body = post(qbittorrent.PathAdd, url.Values{"urls": {"magnet:?xt=urn:btih:0123456789ABCDEF0123456789abcdef01234567&dn=x"}, "stopped": {"true"}}, sid)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "Ok.", body)
	_, body = post(qbittorrent.PathAdd, url.Values{"urls": {"magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567"}}, sid)
	require.Equal(t, "Fails.", body, "duplicate add")
	_, body = post(qbittorrent.PathAdd, url.Values{"urls": {"not a magnet"}}, sid)
	require.Equal(t, "Fails.", body)

	// API 2.11 (qBittorrent 5): pause is gone, the magnet waits for
	// metadata and was added stopped.
	resp, _ = post(qbittorrent.PathPause, url.Values{"hashes": {"all"}}, sid)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	_, body = post(qbittorrent.PathInfo, nil, sid)
	ts, err := qbittorrent.DecodeTorrents([]byte(body))
	require.NoError(t, err)
	require.Len(t, ts, 1)
	require.Equal(t, "stoppedDL", ts[0].State)
	require.Empty(t, ts[0].ContentPath, "no content path before metadata")

	fake.DropNextAdds(1)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+qbittorrent.PathAdd,
		strings.NewReader(url.Values{"urls": {"magnet:?xt=urn:btih:1123456789abcdef0123456789abcdef01234567"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(sid)
	_, err = hc.Do(req)
	require.Error(t, err, "the connection must drop without an answer")
	require.Len(t, fake.Torrents(), 2, "yet the torrent is added")
}
