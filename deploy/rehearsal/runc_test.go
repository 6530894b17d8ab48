package rehearsal_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/taskport/taskport/deploy/image"
	"github.com/taskport/taskport/internal/syncbuf"
)

// unpack writes the image's file system (its layers flattened) into dir:
// the bundle's rootfs, as a container runtime would.
func unpack(img v1.Image, dir string) error {
	return image.Walk(img, func(h *tar.Header, r io.Reader) error {
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unpack: %s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		return os.Lchown(p, h.Uid, h.Gid)
	})
}

// runtime runs containers from one unpacked image with Debian's runc, the
// way the kubelet's runtime would run the pod's containers: the image's
// entrypoint and the container's args, the pod's user, the container's
// security context, the pod's volumes as bind mounts of host directories
// (emptyDir and claims alike), on the host's network.
type runtime struct {
	rootfs   string
	imageCfg v1.Config
	state    string // runc --root
	bundles  string
	volumes  map[string]string // volume name -> host directory
	seq      atomic.Int32
}

// container is one runc container.
type container struct {
	id  string
	rt  *runtime
	cmd *exec.Cmd
	out *syncbuf.Buffer // stdout and stderr
	// stdout alone: what a CLI command prints (its logs go to stderr).
	stdout *syncbuf.Buffer
	done   chan struct{}
	err    error
}

// spec renders the OCI runtime config of a container of pod spec ps.
func (r *runtime) spec(t *testing.T, ps corev1.PodSpec, c corev1.Container, env []string) *specs.Spec {
	t.Helper()
	sc, psc := c.SecurityContext, ps.SecurityContext
	require.NotNil(t, psc.RunAsUser, "runAsUser")
	uid := uint32(*psc.RunAsUser)
	gid := uid
	if psc.RunAsGroup != nil {
		gid = uint32(*psc.RunAsGroup)
	}
	var extra []uint32
	if psc.FSGroup != nil {
		extra = append(extra, uint32(*psc.FSGroup))
	}
	caps := &specs.LinuxCapabilities{} // drop: [ALL] and nothing added
	require.NotNil(t, sc.Capabilities)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Empty(t, sc.Capabilities.Add)

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		// Host network: sysfs cannot be mounted afresh, so it is bound.
		{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
	}
	for _, m := range c.VolumeMounts {
		host, ok := r.volumes[m.Name]
		require.True(t, ok, "volume %s has no host directory in the rehearsal", m.Name)
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.MountPath, Type: "bind", Source: host, Options: opts})
	}
	args := append(append([]string{}, r.imageCfg.Entrypoint...), c.Args...)
	if len(c.Command) > 0 {
		args = append(append([]string{}, c.Command...), c.Args...)
	}
	s := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:            specs.User{UID: uid, GID: gid, AdditionalGids: extra},
			Args:            args,
			Env:             env,
			Cwd:             r.imageCfg.WorkingDir,
			Capabilities:    caps,
			NoNewPrivileges: sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		},
		Root:     &specs.Root{Path: r.rootfs, Readonly: sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem},
		Hostname: "rehearsal",
		Mounts:   mounts,
		Linux: &specs.Linux{
			// No network namespace: host networking, as asked.
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}},
			MaskedPaths: []string{"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
				"/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if s.Process.Cwd == "" {
		s.Process.Cwd = "/"
	}
	if lim := c.Resources.Limits.Memory(); !lim.IsZero() {
		v := lim.Value()
		s.Linux.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &v}}
	}
	return s
}

// start runs a container of pod spec ps with env in the background.
func (r *runtime) start(t *testing.T, name string, ps corev1.PodSpec, c corev1.Container, env []string) *container {
	t.Helper()
	id := fmt.Sprintf("%s-%d", name, r.seq.Add(1))
	bundle := filepath.Join(r.bundles, id)
	require.NoError(t, os.MkdirAll(bundle, 0o700))
	cfg, err := json.MarshalIndent(r.spec(t, ps, c, env), "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600))

	ct := &container{id: id, rt: r, out: &syncbuf.Buffer{}, stdout: &syncbuf.Buffer{}, done: make(chan struct{})}
	ct.cmd = exec.Command("runc", "--root", r.state, "run", "--bundle", bundle, id)
	ct.cmd.Stdout, ct.cmd.Stderr = io.MultiWriter(ct.out, ct.stdout), ct.out
	// runc's own process group: a test interrupted mid-way kills it.
	ct.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, ct.cmd.Start(), "runc run %s", id)
	go func() { ct.err = ct.cmd.Wait(); close(ct.done) }()
	t.Cleanup(func() {
		select {
		case <-ct.done:
		default:
			_ = exec.Command("runc", "--root", r.state, "kill", id, "KILL").Run()
			<-ct.done
		}
		_ = exec.Command("runc", "--root", r.state, "delete", "--force", id).Run()
	})
	return ct
}

// run starts a container and waits for it, failing the test unless it
// exits 0 within d; it returns what the container printed on stdout.
func (r *runtime) run(t *testing.T, name string, ps corev1.PodSpec, c corev1.Container, env []string, d time.Duration) string {
	t.Helper()
	ct := r.start(t, name, ps, c, env)
	code, ok := ct.wait(d)
	require.True(t, ok, "%s did not exit within %s:\n%s", ct.id, d, ct.out.String())
	require.Equal(t, 0, code, "%s %v exited %d:\n%s", ct.id, c.Args, code, ct.out.String())
	return ct.stdout.String()
}

// signal sends sig to the container's process, as the kubelet's runtime
// does on a pod's deletion (SIGTERM) and at the end of its grace period.
func (ct *container) signal(sig string) error {
	out, err := exec.Command("runc", "--root", ct.rt.state, "kill", ct.id, sig).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runc kill %s %s: %w: %s", ct.id, sig, err, out)
	}
	return nil
}

// wait waits up to d for the container to exit and returns its exit code.
func (ct *container) wait(d time.Duration) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	select {
	case <-ct.done:
	case <-ctx.Done():
		return 0, false
	}
	var exit *exec.ExitError
	if errors.As(ct.err, &exit) {
		return exit.ExitCode(), true
	}
	if ct.err != nil {
		return -1, true
	}
	return 0, true
}

func (ct *container) exited() bool {
	select {
	case <-ct.done:
		return true
	default:
		return false
	}
}

// lastLines is the end of what a container printed, for failure messages.
func (ct *container) lastLines(n int) string {
	lines := strings.Split(strings.TrimSpace(ct.out.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
