// Package qbtnox runs a real qbittorrent-nox (the Debian package) as a child
// process with a private profile, its WebUI and peer port on loopback, and
// DHT, LSD, PeX and UPnP off, so that the only peers it can reach are web
// seeds on this machine. The end-to-end tests and the taskport-dev demo
// use it; production points the client at an operator's qBittorrent.
package qbtnox

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/taskport/taskport/internal/syncbuf"
	"github.com/taskport/taskport/qbittorrent"
)

// Options configure Start.
type Options struct {
	// Bin is the qbittorrent-nox executable; default looked up in $PATH.
	Bin string
	// Dir holds the profile and the default download directory. Required.
	Dir string
	// Username and Password of the WebUI. Required.
	Username, Password string
}

// Server is a running qbittorrent-nox.
type Server struct {
	// BaseURL of the WebUI, e.g. http://127.0.0.1:40123.
	BaseURL string
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *syncbuf.Buffer
	once    sync.Once
}

// Start writes a fresh profile under opts.Dir and starts qbittorrent-nox,
// returning once its WebUI answers. qbittorrent-nox 4.5.2 runs as root
// without refusal, so no user switch is needed.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" || opts.Username == "" || opts.Password == "" {
		return nil, errors.New("qbtnox: Dir, Username and Password are required")
	}
	bin := opts.Bin
	if bin == "" {
		p, err := exec.LookPath("qbittorrent-nox")
		if err != nil {
			return nil, fmt.Errorf("qbtnox: qbittorrent-nox not installed (apt-get install qbittorrent-nox): %w", err)
		}
		bin = p
	}
	profile := filepath.Join(opts.Dir, "profile")
	confDir := filepath.Join(profile, "qBittorrent", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, fmt.Errorf("qbtnox: profile: %w", err)
	}
	webPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	hash, err := passwordPBKDF2(opts.Password)
	if err != nil {
		return nil, err
	}
	// Option names as read by qBittorrent 4.5 (src/base/preferences.cpp,
	// src/base/bittorrent/sessionimpl.cpp).
	conf := fmt.Sprintf(`[LegalNotice]
Accepted=true

[BitTorrent]
Session\DHTEnabled=false
Session\LSDEnabled=false
Session\PeXEnabled=false
Session\Port=%d
Session\DefaultSavePath=%s

[Network]
PortForwardingEnabled=false

[Preferences]
WebUI\Address=127.0.0.1
WebUI\Port=%d
WebUI\UseUPnP=false
WebUI\LocalHostAuth=true
WebUI\Username=%s
WebUI\Password_PBKDF2="%s"
`, peerPort, filepath.Join(opts.Dir, "default-downloads"), webPort, opts.Username, hash)
	if err := os.WriteFile(filepath.Join(confDir, "qBittorrent.conf"), []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("qbtnox: write config: %w", err)
	}

	s := &Server{BaseURL: "http://127.0.0.1:" + strconv.Itoa(webPort), exited: make(chan struct{}), log: &syncbuf.Buffer{}}
	s.cmd = exec.Command(bin, "--profile="+profile, "--webui-port="+strconv.Itoa(webPort))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qbtnox: start %s: %w", bin, err)
	}
	var exitErr error
	go func() { exitErr = s.cmd.Wait(); close(s.exited) }()

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !s.answers(ctx) {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("qbtnox: qbittorrent-nox exited before its WebUI came up: %v\n%s", exitErr, s.Log())
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("qbtnox: WebUI did not come up: %w\n%s", ctx.Err(), s.Log())
		case <-tick.C:
		}
	}
	return s, nil
}

func (s *Server) answers(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.BaseURL+qbittorrent.PathAPIVersion, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return true
}

// Stop asks qbittorrent-nox to quit (SIGTERM), killing it after 15s. Safe to
// call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// Log returns what qbittorrent-nox printed.
func (s *Server) Log() string { return s.log.String() }

// passwordPBKDF2 renders WebUI\Password_PBKDF2 the way qBittorrent stores it:
// @ByteArray(base64(salt):base64(PBKDF2-HMAC-SHA512(password, salt, 100000
// iterations, 64 bytes))).
func passwordPBKDF2(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("qbtnox: salt: %w", err)
	}
	key, err := pbkdf2.Key(sha512.New, password, salt, 100000, 64)
	if err != nil {
		return "", fmt.Errorf("qbtnox: pbkdf2: %w", err)
	}
	return "@ByteArray(" + base64.StdEncoding.EncodeToString(salt) + ":" + base64.StdEncoding.EncodeToString(key) + ")", nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("qbtnox: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
