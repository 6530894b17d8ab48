package qbittorrent

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testdata/torrents_info_4.5.2.json is a verbatim torrents/info answer of
// qbittorrent-nox 4.5.2: a paused .torrent upload and a magnet still
// fetching metadata (size 0, no content path, total_size -1).
func TestDecodeRealAnswer(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/torrents_info_4.5.2.json")
	require.NoError(t, err)
	ts, err := DecodeTorrents(body)
	require.NoError(t, err)
	require.Equal(t, []Torrent{
		{
			Hash: "210a466f2e1ff4d20be015239bb91f3fd974bb49", Name: "p.bin", State: "pausedDL",
			Size: 100000, AmountLeft: 100000, SavePath: "/tmp/qbtx/dl", ContentPath: "/tmp/qbtx/dl/p.bin", Tags: "tp-plan-1",
		},
		{
			Hash: "0123456789abcdef0123456789abcdef01234567", Name: "Some name", State: "metaDL",
			SavePath: "/tmp/qbtx/dl", Tags: "tp-plan-2",
		},
	}, ts)
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"not json":       `<html>`,
		"object":         `{"hash":"x"}`,
		"missing hash":   `[{"name":"a","progress":0}]`,
		"hash all":       `[{"hash":"all"}]`,
		"progress > 1":   `[{"hash":"0123456789abcdef0123456789abcdef01234567","progress":1.5}]`,
		"negative prog":  `[{"hash":"0123456789abcdef0123456789abcdef01234567","progress":-0.1}]`,
		"string size":    `[{"hash":"0123456789abcdef0123456789abcdef01234567","size":"12"}]`,
		"fractional int": `[{"hash":"0123456789abcdef0123456789abcdef01234567","size":1.5}]`,
	} {
		_, err := DecodeTorrents([]byte(body))
		require.Error(t, err, name)
	}
	ts, err := DecodeTorrents([]byte(`[]`))
	require.NoError(t, err)
	require.Empty(t, ts)
}

func TestHasTag(t *testing.T) {
	t.Parallel()
	tr := Torrent{Tags: "other, tp-plan-1"}
	require.True(t, tr.HasTag("tp-plan-1"))
	require.True(t, tr.HasTag("other"))
	require.False(t, tr.HasTag("tp-plan"))
	require.False(t, Torrent{}.HasTag("tp-plan-1"))
}

func TestAddOutcome(t *testing.T) {
	t.Parallel()
	require.NoError(t, addOutcome([]byte("Ok.")))
	require.ErrorIs(t, addOutcome([]byte("Fails.")), ErrAddRejected)
	require.NoError(t, addOutcome([]byte(`{"success_count":1,"failure_count":0,"pending_count":0}`)))
	require.NoError(t, addOutcome([]byte(`{"success_count":0,"failure_count":0,"pending_count":1}`)))
	require.ErrorIs(t, addOutcome([]byte(`{"success_count":0,"failure_count":1,"pending_count":0}`)), ErrAddRejected)
	require.Error(t, addOutcome([]byte(`{"unexpected":true}`)))
	require.Error(t, addOutcome([]byte(`Forbidden`)))
}

func TestVersionAtLeast(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"2.8.19": false, "2.11.0": true, "2.11.4": true, "3.0": true, "2.10": false, "": false, "x.y": false, "5.0-custom": false,
	} {
		require.Equal(t, want, versionAtLeast(v, 2, 11), v)
	}
}

// The info hash of the file mktorrent made is the one qbittorrent-nox 4.5.2
// reported for it (see the real answer above).
func TestParseTorrentFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/mktorrent_webseed.torrent")
	require.NoError(t, err)
	tf, err := ParseTorrentFile(b)
	require.NoError(t, err)
	require.Equal(t, TorrentFile{InfoHash: "210a466f2e1ff4d20be015239bb91f3fd974bb49", Name: "p.bin", Size: 100000}, tf)

	multi := "d4:infod5:filesld6:lengthi3e4:pathl1:aeed6:lengthi4e4:pathl1:beee4:name3:dir12:piece lengthi16384e6:pieces0:ee"
	tf, err = ParseTorrentFile([]byte(multi))
	require.NoError(t, err)
	require.Equal(t, int64(7), tf.Size)
	require.Equal(t, "dir", tf.Name)

	for name, bad := range map[string]string{
		"empty":         "",
		"not a dict":    "li1ee",
		"no info":       "d4:spami1ee",
		"trailing":      string(b) + "x",
		"no name":       "d4:infod6:lengthi1eee",
		"no length":     "d4:infod4:name1:aee",
		"short string":  "d4:info5:abce",
		"deep":          strings.Repeat("l", 100) + strings.Repeat("e", 100),
		"overflow":      "d4:infod5:filesld6:lengthi9223372036854775807eed6:lengthi1eee4:name1:aee",
		"negative":      "d4:infod6:lengthi-1e4:name1:aee",
		"bad int":       "d4:infod6:lengthi1x2e4:name1:aee",
		"key not str":   "di1ei2ee",
		"unterminated":  "d4:infod",
		"huge strlen":   "d4:info99999999999999999999:e",
		"lone e":        "e",
		"no colon":      "d4",
		"unterm int":    "i12",
		"unterm list":   "l",
		"unterm in key": "d3:ab",
	} {
		_, err := ParseTorrentFile([]byte(bad))
		require.Error(t, err, name)
	}
}

// FuzzDecodeTorrents feeds torrents/info decoding arbitrary bytes. Beyond
// not panicking, whatever it accepts must satisfy what callers rely on
// (valid lowercase hash, progress in [0, 1]) and survive a round trip.
func FuzzDecodeTorrents(f *testing.F) {
	sample, err := os.ReadFile("testdata/torrents_info_4.5.2.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample)
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[{"hash":"0123456789ABCDEF0123456789abcdef01234567","progress":1,"amount_left":0,"size":1,"tags":"a, b"}]`))
	f.Add([]byte(`[{"hash":"` + strings.Repeat("ab", 32) + `","progress":0.25,"state":"stoppedDL","content_path":"/x/\u00e9"}]`))
	f.Add([]byte(`[{"hash":"all"}]`))
	f.Add([]byte(`[{"hash":"0123456789abcdef0123456789abcdef01234567","progress":1e400}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ts, err := DecodeTorrents(body)
		if err != nil {
			return
		}
		for _, tr := range ts {
			if tr.Hash != strings.ToLower(tr.Hash) {
				t.Fatalf("hash %q not lowercased", tr.Hash)
			}
			if _, err := hex.DecodeString(tr.Hash); err != nil || (len(tr.Hash) != 40 && len(tr.Hash) != 64) {
				t.Fatalf("accepted hash %q", tr.Hash)
			}
			if tr.Progress < 0 || tr.Progress > 1 {
				t.Fatalf("accepted progress %v", tr.Progress)
			}
		}
		again, err := json.Marshal(ts)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := DecodeTorrents(again)
		if err != nil {
			t.Fatalf("decode own encoding %s: %v", again, err)
		}
		if len(ts) > 0 && !reflect.DeepEqual(ts, back) {
			t.Fatalf("round trip changed %+v into %+v", ts, back)
		}
	})
}

// FuzzParseTorrentFile guards the bencode reader used on uploaded and
// downloaded .torrent files.
func FuzzParseTorrentFile(f *testing.F) {
	b, err := os.ReadFile("testdata/mktorrent_webseed.torrent")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("d4:infod5:filesld6:lengthi3e4:pathl1:aeee4:name3:diree"))
	f.Add([]byte("d4:infod6:lengthi-1e4:name1:aee"))
	f.Add([]byte(strings.Repeat("l", 40)))
	f.Fuzz(func(t *testing.T, b []byte) {
		tf, err := ParseTorrentFile(b)
		if err != nil {
			return
		}
		if len(tf.InfoHash) != 40 || tf.Size < 0 || tf.Name == "" {
			t.Fatalf("accepted %+v", tf)
		}
	})
}
