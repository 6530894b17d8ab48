package qbittorrent

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Torrent is one entry of torrents/info, reduced to what the pipeline reads.
type Torrent struct {
	Hash        string  `json:"hash"`  // lowercase hex info hash
	Name        string  `json:"name"`  //
	State       string  `json:"state"` // e.g. downloading, uploading, pausedUP, stoppedUP, error
	Progress    float64 `json:"progress"`
	Size        int64   `json:"size"`        // bytes selected for download
	AmountLeft  int64   `json:"amount_left"` // bytes still to download
	SavePath    string  `json:"save_path"`
	ContentPath string  `json:"content_path"` // file (single-file torrent) or root folder
	Tags        string  `json:"tags"`         // comma-separated, as qBittorrent sends them
}

// Complete reports whether every selected byte is downloaded.
func (t Torrent) Complete() bool { return t.Progress >= 1 && t.AmountLeft == 0 }

// HasTag reports whether tag is among t.Tags.
func (t Torrent) HasTag(tag string) bool {
	for _, x := range strings.Split(t.Tags, ",") {
		if strings.TrimSpace(x) == tag {
			return true
		}
	}
	return false
}

// DecodeTorrents decodes a torrents/info answer. It rejects entries the rest
// of the pipeline could not trust: a missing or malformed hash (the key every
// reconcile uses) and a progress outside [0, 1]. Hashes are lowercased.
func DecodeTorrents(body []byte) ([]Torrent, error) {
	var ts []Torrent
	if err := json.Unmarshal(body, &ts); err != nil {
		return nil, fmt.Errorf("decode torrents/info: %w", err)
	}
	for i := range ts {
		t := &ts[i]
		t.Hash = strings.ToLower(t.Hash)
		if err := checkHash(t.Hash); err != nil {
			return nil, fmt.Errorf("decode torrents/info: entry %d: %w", i, err)
		}
		if !(t.Progress >= 0 && t.Progress <= 1) {
			return nil, fmt.Errorf("decode torrents/info: entry %d (%s): progress %v outside [0, 1]", i, t.Hash, t.Progress)
		}
	}
	return ts, nil
}

// addOutcome interprets a 200 answer of torrents/add: "Ok." / "Fails." up
// to qBittorrent 5.0, a JSON summary from 5.1 on.
func addOutcome(body []byte) error {
	s := strings.TrimSpace(string(body))
	switch {
	case s == "Ok.":
		return nil
	case s == "Fails.":
		return ErrAddRejected
	case strings.HasPrefix(s, "{"):
		var sum struct {
			Success *int `json:"success_count"`
			Pending int  `json:"pending_count"`
			Failure int  `json:"failure_count"`
		}
		if err := json.Unmarshal(body, &sum); err != nil || sum.Success == nil {
			return fmt.Errorf("unexpected answer %q", truncate(body))
		}
		if *sum.Success+sum.Pending == 0 {
			return fmt.Errorf("%w (%d failed)", ErrAddRejected, sum.Failure)
		}
		return nil
	}
	return fmt.Errorf("unexpected answer %q", truncate(body))
}

// checkHash accepts a v1 (SHA-1, 40 hex digits) or v2 (SHA-256, 64) info
// hash. It keeps "all" and "|" out of hashes= parameters, where they would
// select every torrent.
func checkHash(h string) error {
	if len(h) != 40 && len(h) != 64 {
		return invalidArg("info hash %q: want 40 or 64 hex digits", h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return invalidArg("info hash %q: not hexadecimal", h)
		}
	}
	return nil
}

func checkHashes(hs []string) error {
	if len(hs) == 0 {
		return invalidArg("no info hash given")
	}
	for _, h := range hs {
		if err := checkHash(h); err != nil {
			return err
		}
	}
	return nil
}

// versionAtLeast compares a dotted API version such as "2.11.4" with
// major.minor. An unparsable version counts as old: the pause fallback
// corrects a wrong guess.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
