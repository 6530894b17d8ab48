package qbittorrent

import (
	"crypto/sha1" // BitTorrent v1 info hashes are SHA-1 by definition
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// TorrentFile is what the pipeline needs from a .torrent file: the info hash
// to find the torrent again in qBittorrent (after an add whose answer was
// lost, for instance), its name and its total size.
type TorrentFile struct {
	InfoHash string // v1, lowercase hex SHA-1 of the bencoded info dictionary
	Name     string
	Size     int64 // sum of the file lengths
}

// maxBencodeDepth bounds nesting so that a hostile file cannot exhaust the
// stack; real metainfo nests four levels deep.
const maxBencodeDepth = 32

var errBencode = errors.New("malformed bencode")

// ParseTorrentFile reads a v1 (or hybrid) .torrent file.
func ParseTorrentFile(b []byte) (TorrentFile, error) {
	d := bdecoder{b: b}
	v, end, err := d.value(0, 0)
	if err != nil {
		return TorrentFile{}, fmt.Errorf("parse torrent file: %w", err)
	}
	if end != len(b) {
		return TorrentFile{}, fmt.Errorf("parse torrent file: %w: %d trailing bytes", errBencode, len(b)-end)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return TorrentFile{}, fmt.Errorf("parse torrent file: %w: top level is not a dictionary", errBencode)
	}
	info, ok := top["info"].(map[string]any)
	if !ok || d.infoEnd == 0 {
		return TorrentFile{}, fmt.Errorf("parse torrent file: no info dictionary")
	}
	name, _ := info["name"].(string)
	if name == "" {
		return TorrentFile{}, fmt.Errorf("parse torrent file: info has no name")
	}
	var size int64
	if l, ok := info["length"].(int64); ok {
		size = l
	} else if files, ok := info["files"].([]any); ok {
		for i, f := range files {
			fd, _ := f.(map[string]any)
			l, ok := fd["length"].(int64)
			if !ok || l < 0 || size+l < size {
				return TorrentFile{}, fmt.Errorf("parse torrent file: file %d has no valid length", i)
			}
			size += l
		}
	} else {
		return TorrentFile{}, fmt.Errorf("parse torrent file: info has neither length nor files")
	}
	if size < 0 {
		return TorrentFile{}, fmt.Errorf("parse torrent file: negative length %d", size)
	}
	sum := sha1.Sum(b[d.infoStart:d.infoEnd])
	return TorrentFile{InfoHash: hex.EncodeToString(sum[:]), Name: name, Size: size}, nil
}

// bdecoder decodes bencode into string, int64, []any and map[string]any,
// and records where the top-level "info" value lies: the info hash is taken
// over those exact bytes, not over a re-encoding.
type bdecoder struct {
	b                  []byte
	infoStart, infoEnd int
}

func (d *bdecoder) value(i, depth int) (any, int, error) {
	if depth > maxBencodeDepth {
		return nil, 0, fmt.Errorf("%w: nested deeper than %d", errBencode, maxBencodeDepth)
	}
	if i >= len(d.b) {
		return nil, 0, fmt.Errorf("%w: unexpected end at %d", errBencode, i)
	}
	switch c := d.b[i]; {
	case c == 'i':
		j := i + 1
		for j < len(d.b) && d.b[j] != 'e' {
			j++
		}
		if j >= len(d.b) {
			return nil, 0, fmt.Errorf("%w: unterminated integer at %d", errBencode, i)
		}
		n, err := strconv.ParseInt(string(d.b[i+1:j]), 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: integer at %d: %w", errBencode, i, err)
		}
		return n, j + 1, nil
	case c >= '0' && c <= '9':
		return d.str(i)
	case c == 'l':
		var list []any
		j := i + 1
		for {
			if j >= len(d.b) {
				return nil, 0, fmt.Errorf("%w: unterminated list at %d", errBencode, i)
			}
			if d.b[j] == 'e' {
				return list, j + 1, nil
			}
			v, end, err := d.value(j, depth+1)
			if err != nil {
				return nil, 0, err
			}
			list = append(list, v)
			j = end
		}
	case c == 'd':
		dict := map[string]any{}
		j := i + 1
		for {
			if j >= len(d.b) {
				return nil, 0, fmt.Errorf("%w: unterminated dictionary at %d", errBencode, i)
			}
			if d.b[j] == 'e' {
				return dict, j + 1, nil
			}
			k, end, err := d.str(j)
			if err != nil {
				return nil, 0, err
			}
			key := k.(string)
			v, vend, err := d.value(end, depth+1)
			if err != nil {
				return nil, 0, err
			}
			if depth == 0 && key == "info" {
				d.infoStart, d.infoEnd = end, vend
			}
			dict[key] = v
			j = vend
		}
	default:
		return nil, 0, fmt.Errorf("%w: unexpected byte %q at %d", errBencode, c, i)
	}
}

// str decodes a byte string "<len>:<bytes>".
func (d *bdecoder) str(i int) (any, int, error) {
	j := i
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	if j == i || j >= len(d.b) || d.b[j] != ':' {
		return nil, 0, fmt.Errorf("%w: bad string length at %d", errBencode, i)
	}
	n, err := strconv.Atoi(string(d.b[i:j]))
	if err != nil || n > len(d.b)-(j+1) {
		return nil, 0, fmt.Errorf("%w: string at %d runs past the end", errBencode, i)
	}
	return string(d.b[j+1 : j+1+n]), j + 1 + n, nil
}
