// The manifests are built with kustomize's own library (the same code as
// `kubectl kustomize`) and decoded strictly into the typed Kubernetes API
// objects, so a misspelled field, a wrong type or a broken overlay fails
// here instead of at `kubectl apply` time. Then the invariants this project
// relies on are checked: selectors match, every container is bounded and
// non-root, probes exist, the grace period outlasts the worker's graceful
// stop, every command is a real taskport subcommand, the download path is
// the shared volume's mount path, the migration Job is named per image,
// drains are never blocked, the network policies allow exactly what the
// processes need, and the connection pools fit Postgres.
package kubernetes_test

import (
	"bytes"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/taskport/taskport/deploy/image"
	"github.com/taskport/taskport/deploy/kubernetes"
)

// subcommands are the taskport subcommands a manifest may run
// (cmd/taskport registers them).
var subcommands = []string{"migrate", "worker", "admin"}

// build renders an overlay or fails the test.
func build(t *testing.T, dir string) *kubernetes.Objects {
	t.Helper()
	b, err := kubernetes.Render(dir)
	require.NoError(t, err)
	return b
}

// overlays are every overlay the repository ships.
var overlays = []struct {
	dir            string
	workerReplicas int32
	// externalSecret: the overlay expects taskport-secrets to exist in
	// the cluster (managed outside the repository).
	externalSecret bool
	// qbittorrent: the overlay runs the example qBittorrent.
	qbittorrent bool
}{
	{dir: "overlays/dev", workerReplicas: 1},
	{dir: "overlays/prod", workerReplicas: 3, externalSecret: true},
	{dir: "overlays/media", workerReplicas: 1, qbittorrent: true},
}

func TestOverlays(t *testing.T) {
	for _, tc := range overlays {
		t.Run(tc.dir, func(t *testing.T) {
			b := build(t, tc.dir)
			worker := b.Deployments["taskport-worker"]
			require.NotNil(t, worker)
			require.Equal(t, tc.workerReplicas, *worker.Spec.Replicas)
			require.NotNil(t, b.Deployments["taskport-admin"])
			migrate := migrationJob(t, b)

			for name, d := range b.Deployments {
				sel, err := metav1LabelSelector(d.Spec.Selector.MatchLabels)
				require.NoError(t, err)
				require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "%s: selector does not match its pod template", name)
				require.False(t, ptrTrue(d.Spec.Template.Spec.AutomountServiceAccountToken, true), "%s mounts an API token it never uses", name)
				if isTaskport(d.Spec.Template.Spec) {
					checkPod(t, name, d.Spec.Template.Spec, true, b, tc.externalSecret)
				}
			}
			for name, j := range b.Jobs {
				require.False(t, ptrTrue(j.Spec.Template.Spec.AutomountServiceAccountToken, true), name)
				checkPod(t, name, j.Spec.Template.Spec, false, b, tc.externalSecret)
			}
			for name, sa := range b.ServiceAccounts {
				require.False(t, ptrTrue(sa.AutomountServiceAccountToken, true), "service account %s", name)
			}

			stop := flagDuration(t, worker.Spec.Template.Spec.Containers[0].Args, "--stop-timeout")
			grace := time.Duration(*worker.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			require.Greater(t, grace, stop, "the grace period must outlast the worker's graceful stop, or SIGKILL cuts in-flight steps")

			for _, svc := range b.Services {
				require.True(t, selectsSome(svc.Spec.Selector, b), "service %s selects no deployment", svc.Name)
			}
			for _, h := range b.HPAs {
				require.NotNil(t, b.Deployments[h.Spec.ScaleTargetRef.Name], "hpa %s targets a missing deployment", h.Name)
				require.GreaterOrEqual(t, h.Spec.MaxReplicas, *h.Spec.MinReplicas)
			}

			// The Job's name ends with its image tag, so a new release
			// creates a new Job instead of editing an immutable template.
			tag := imageTag(t, migrate.Spec.Template.Spec.Containers[0].Image)
			require.Equal(t, "taskport-migrate-"+tag, migrate.Name)
			require.Empty(t, validation.IsDNS1123Subdomain(migrate.Name), "the image tag must be usable in a Job name")
			require.Equal(t, worker.Spec.Template.Spec.Containers[0].Image, migrate.Spec.Template.Spec.Containers[0].Image)
			require.NotNil(t, migrate.Spec.TTLSecondsAfterFinished, "finished migration Jobs must go away")

			checkVolumes(t, b, worker)
			checkDrain(t, b, worker)
			checkNetworkPolicies(t, b, tc.qbittorrent)
			if tc.qbittorrent {
				checkQBittorrent(t, b, worker)
			}
		})
	}
}

func migrationJob(t *testing.T, b *kubernetes.Objects) *batchv1.Job {
	t.Helper()
	require.Len(t, b.Jobs, 1)
	for _, j := range b.Jobs {
		require.Equal(t, []string{"migrate", "up"}, j.Spec.Template.Spec.Containers[0].Args)
		return j
	}
	return nil
}

func imageTag(t *testing.T, ref string) string {
	t.Helper()
	i := strings.LastIndex(ref, ":")
	require.Positive(t, i, "image %s has no tag", ref)
	return ref[i+1:]
}

// isTaskport tells taskport's pods from the others an overlay may run
// (qBittorrent).
func isTaskport(spec corev1.PodSpec) bool {
	return strings.HasPrefix(spec.Containers[0].Image, image.DefaultRepository+":")
}

func ptrTrue(b *bool, unset bool) bool {
	if b == nil {
		return unset
	}
	return *b
}

var imageWithTag = regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+$`)

func checkPod(t *testing.T, owner string, spec corev1.PodSpec, longRunning bool, b *kubernetes.Objects, externalSecret bool) {
	t.Helper()
	require.NotNil(t, spec.SecurityContext, owner)
	require.True(t, spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot, "%s must run as non-root", owner)
	// The image's nonroot user (deploy/image.User).
	require.Equal(t, image.User, fmt.Sprintf("%d:%d", *spec.SecurityContext.RunAsUser, *spec.SecurityContext.RunAsUser), owner)
	if spec.ServiceAccountName != "" {
		require.Contains(t, b.ServiceAccounts, spec.ServiceAccountName, owner)
	}
	for _, c := range spec.Containers {
		where := fmt.Sprintf("%s/%s", owner, c.Name)
		require.Regexp(t, imageWithTag, c.Image, "%s: image needs an explicit tag", where)
		require.NotEmpty(t, c.Args, where)
		require.Empty(t, c.Command, "%s: the image's entrypoint is the binary", where)
		require.Contains(t, subcommands, c.Args[0], "%s runs an unknown subcommand", where)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: memory limit", where)
		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: cpu request", where)
		require.NotNil(t, c.SecurityContext, where)
		require.False(t, *c.SecurityContext.AllowPrivilegeEscalation, where)
		require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, where)
		if longRunning {
			require.NotNil(t, c.LivenessProbe, "%s: liveness probe", where)
			require.NotNil(t, c.ReadinessProbe, "%s: readiness probe", where)
			require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, where)
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, where)
		}
		for _, from := range c.EnvFrom {
			switch {
			case from.ConfigMapRef != nil:
				require.Contains(t, b.ConfigMaps, from.ConfigMapRef.Name, "%s: config map", where)
			case from.SecretRef != nil && !externalSecret:
				require.Contains(t, b.Secrets, from.SecretRef.Name, "%s: secret", where)
			}
		}
	}
}

// setting is what the process sees for a flag with an environment
// fallback: the flag in args, else the container's env, else its
// ConfigMaps.
func setting(c corev1.Container, b *kubernetes.Objects, flag, env string) (string, bool) {
	for i, a := range c.Args {
		if a == flag && i+1 < len(c.Args) {
			return c.Args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return b.Env(c, env)
}

func mountOf(c corev1.Container, volume string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath, true
		}
	}
	return "", false
}

func claimVolume(spec corev1.PodSpec, claim string) string {
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return v.Name
		}
	}
	return ""
}

// The worker writes where it mounts writable volumes: the library and the
// downloads (DOWNLOAD_DIR, shared with qBittorrent) are ReadWriteMany
// claims at the configured paths; the root file system is read-only.
func checkVolumes(t *testing.T, b *kubernetes.Objects, worker *appsv1.Deployment) {
	t.Helper()
	spec := worker.Spec.Template.Spec
	c := spec.Containers[0]
	for _, v := range []struct{ flag, env, claim string }{
		{"--download-dir", "DOWNLOAD_DIR", "media-downloads"},
		{"--library-root", "LIBRARY_ROOT", "media-library"},
	} {
		dir, ok := setting(c, b, v.flag, v.env)
		require.True(t, ok, "%s is not set: the default may not be mounted", v.env)
		vol := claimVolume(spec, v.claim)
		require.NotEmpty(t, vol, "the worker does not mount claim %s", v.claim)
		path, ok := mountOf(c, vol)
		require.True(t, ok)
		require.Equal(t, dir, path, "%s must be the mount path of claim %s", v.env, v.claim)
		pvc := b.Claims[v.claim]
		require.NotNil(t, pvc, "claim %s is not defined", v.claim)
		require.Contains(t, pvc.Spec.AccessModes, corev1.ReadWriteMany, "%s is shared between pods", v.claim)
	}
	_, ok := mountOf(c, "tmp")
	require.True(t, ok, "a read-only root needs a writable /tmp")
	for _, p := range []*corev1.PodSpec{&spec} {
		for _, v := range p.Volumes {
			if v.PersistentVolumeClaim != nil {
				require.Contains(t, b.Claims, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
}

// A PodDisruptionBudget never blocks a node drain: at the fewest replicas
// the overlay runs, at least one pod may be evicted.
func checkDrain(t *testing.T, b *kubernetes.Objects, worker *appsv1.Deployment) {
	t.Helper()
	fewest := *worker.Spec.Replicas
	for _, h := range b.HPAs {
		fewest = min(fewest, *h.Spec.MinReplicas)
	}
	if lo, _, ok := scaledBounds(b, worker.Name); ok {
		fewest = min(fewest, int32(lo))
	}
	require.NotEmpty(t, b.PDBs)
	for _, p := range b.PDBs {
		require.True(t, selectsSome(p.Spec.Selector.MatchLabels, b), "pdb %s selects no deployment", p.Name)
		var allowed int
		switch {
		case p.Spec.MaxUnavailable != nil:
			n, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, int(fewest), true)
			require.NoError(t, err)
			allowed = n
		case p.Spec.MinAvailable != nil:
			n, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, int(fewest), true)
			require.NoError(t, err)
			allowed = int(fewest) - n
		}
		require.GreaterOrEqual(t, allowed, 1, "pdb %s blocks every drain at %d replica(s)", p.Name, fewest)
		require.NotNil(t, p.Spec.UnhealthyPodEvictionPolicy)
		require.Equal(t, policyv1.AlwaysAllow, *p.Spec.UnhealthyPodEvictionPolicy, "a pod that is not ready must not block a drain")
	}
}

type portKey struct {
	port  string
	proto corev1.Protocol
}

func ports(ps []networkingv1.NetworkPolicyPort) []portKey {
	var out []portKey
	for _, p := range ps {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		out = append(out, portKey{p.Port.String(), proto})
	}
	return out
}

// peerSelects reports whether a policy peer admits pods with these labels
// (any namespace selector is taken to match: the overlays run in one
// namespace or name the other one explicitly).
func peerSelects(p networkingv1.NetworkPolicyPeer, podLabels map[string]string) bool {
	if p.PodSelector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
	return err == nil && sel.Matches(labels.Set(podLabels))
}

// Every taskport pod is selected by exactly one policy that lists both
// directions; the worker may reach DNS, Postgres, Temporal and qBittorrent
// only, the migration Job DNS and Postgres only; the admin is reached only
// from the ingress controller and Prometheus, the worker only from
// Prometheus.
func checkNetworkPolicies(t *testing.T, b *kubernetes.Objects, qbittorrent bool) {
	t.Helper()
	dns := []portKey{{"53", corev1.ProtocolUDP}, {"53", corev1.ProtocolTCP}}
	pg, temporal, qbt := portKey{"5432", corev1.ProtocolTCP}, portKey{"7233", corev1.ProtocolTCP}, portKey{"8080", corev1.ProtocolTCP}
	want := map[string]struct {
		egress  []portKey
		ingress []string // app.kubernetes.io/name of the allowed sources
	}{
		"taskport-worker":  {egress: append(slices.Clone(dns), pg, temporal, qbt), ingress: []string{"prometheus"}},
		"taskport-admin":   {egress: append(slices.Clone(dns), pg, temporal), ingress: []string{"ingress-nginx", "prometheus"}},
		"taskport-migrate": {egress: append(slices.Clone(dns), pg)},
	}
	// Tracing, when configured, exports to the collector from the worker
	// and the admin: their policies must let them reach it.
	collectors := map[string]*url.URL{}
	for _, name := range []string{"taskport-worker", "taskport-admin"} {
		c := b.Deployments[name].Spec.Template.Spec.Containers[0]
		if ep, _ := setting(c, b, "--otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT"); ep != "" {
			u, err := url.Parse(ep)
			require.NoError(t, err, "%s: --otlp-endpoint", name)
			collectors[name] = u
			w := want[name]
			w.egress = append(w.egress, portKey{u.Port(), corev1.ProtocolTCP})
			want[name] = w
		}
	}
	pods := map[string]map[string]string{}
	for _, d := range b.Deployments {
		pods[d.Name] = d.Spec.Template.Labels
	}
	for _, j := range b.Jobs {
		pods["taskport-migrate"] = j.Spec.Template.Labels
	}
	for name, w := range want {
		var selecting []*networkingv1.NetworkPolicy
		for _, p := range b.Policies {
			sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
			require.NoError(t, err)
			if sel.Matches(labels.Set(pods[name])) {
				selecting = append(selecting, p)
			}
		}
		require.Len(t, selecting, 1, "%s: exactly one network policy", name)
		p := selecting[0]
		require.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, p.Spec.PolicyTypes, name)
		var egress []portKey
		for _, r := range p.Spec.Egress {
			require.NotEmpty(t, r.Ports, "%s: an egress rule without ports allows everything", name)
			require.NotEmpty(t, r.To, "%s: an egress rule without peers allows every address", name)
			egress = append(egress, ports(r.Ports)...)
		}
		require.ElementsMatch(t, w.egress, egress, "%s egress", name)
		var sources []string
		for _, r := range p.Spec.Ingress {
			require.NotEmpty(t, r.From, "%s: an ingress rule without peers admits everyone", name)
			for _, f := range r.From {
				require.NotNil(t, f.PodSelector, name)
				sources = append(sources, f.PodSelector.MatchLabels["app.kubernetes.io/name"])
			}
		}
		require.ElementsMatch(t, w.ingress, sources, "%s ingress", name)
		if u := collectors[name]; u != nil {
			ns, ok := serviceNamespace(u.Hostname(), p.Namespace)
			require.True(t, ok, "%s: the OTLP endpoint %s is not a cluster service (<service>.<namespace>.svc): "+
				"a collector outside the cluster needs an ipBlock rule, which this check does not know", name, u)
			require.True(t, reachesNamespace(p, portKey{u.Port(), corev1.ProtocolTCP}, ns),
				"%s: no egress rule reaches the OTLP collector %s (namespace %s)", name, u, ns)
		}
	}
	if !qbittorrent {
		return
	}
	// The worker's qBittorrent rule reaches the example's pods, and the
	// example's policy admits the workers on its WebUI port.
	var reaches bool
	for _, p := range b.Policies {
		if p.Name != "taskport-worker" {
			continue
		}
		for _, r := range p.Spec.Egress {
			for _, to := range r.To {
				reaches = reaches || (slices.Contains(ports(r.Ports), qbt) && peerSelects(to, pods["qbittorrent"]))
			}
		}
	}
	require.True(t, reaches, "the worker's egress does not reach qBittorrent's pods")
	var admitted bool
	for _, p := range b.Policies {
		if p.Name != "qbittorrent" {
			continue
		}
		for _, r := range p.Spec.Ingress {
			for _, from := range r.From {
				admitted = admitted || peerSelects(from, pods["taskport-worker"])
			}
		}
	}
	require.True(t, admitted, "qBittorrent's policy does not admit the workers")
}

// serviceNamespace is the namespace a cluster DNS name points into:
// <service>.<namespace>.svc[.<cluster domain>], or a bare <service> in the
// pod's own namespace; ok is false for any other name (outside the
// cluster).
func serviceNamespace(host, own string) (ns string, ok bool) {
	labels := strings.Split(host, ".")
	switch {
	case len(labels) == 1:
		return own, true
	case len(labels) >= 3 && labels[2] == "svc":
		return labels[1], true
	}
	return "", false
}

// reachesNamespace reports whether a policy has an egress rule on port k
// whose peers include pods of namespace ns (a namespace selector naming
// it, or selecting every namespace).
func reachesNamespace(p *networkingv1.NetworkPolicy, k portKey, ns string) bool {
	for _, r := range p.Spec.Egress {
		if !slices.Contains(ports(r.Ports), k) {
			continue
		}
		for _, to := range r.To {
			if to.NamespaceSelector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(to.NamespaceSelector)
			if err == nil && sel.Matches(labels.Set{"kubernetes.io/metadata.name": ns}) {
				return true
			}
		}
	}
	return false
}

// qBittorrent saves where the worker imports from (the same claim at the
// same path) and, on finish, runs the taskport binary of the workers' own
// image with the workers' settings.
func checkQBittorrent(t *testing.T, b *kubernetes.Objects, worker *appsv1.Deployment) {
	t.Helper()
	q := b.Deployments["qbittorrent"]
	require.NotNil(t, q)
	spec := q.Spec.Template.Spec
	c := spec.Containers[0]
	wc := worker.Spec.Template.Spec.Containers[0]

	downloads, _ := setting(wc, b, "--download-dir", "DOWNLOAD_DIR")
	path, ok := mountOf(c, claimVolume(spec, "media-downloads"))
	require.True(t, ok, "qBittorrent does not mount the downloads claim")
	require.Equal(t, downloads, path, "qBittorrent and the worker must see the downloads at the same path")

	var ref string
	for _, v := range spec.Volumes {
		if v.Image != nil {
			ref = v.Image.Reference
			hook, ok := mountOf(c, v.Name)
			require.True(t, ok)
			conf := b.ConfigMaps["qbittorrent-seed"].Data["qBittorrent.conf"]
			require.Contains(t, conf, "[AutoRun]\nenabled=true\nprogram="+hook+image.BinaryPath+` plan complete %I --content-path \"%F\"`+"\n",
				"the on-finish hook runs the mounted taskport binary")
			require.Contains(t, conf, `Session\DefaultSavePath=`+downloads+"\n")
		}
	}
	require.Equal(t, wc.Image, ref, "the hook's binary comes from the workers' image")

	var envFrom []string
	for _, f := range c.EnvFrom {
		switch {
		case f.ConfigMapRef != nil:
			envFrom = append(envFrom, f.ConfigMapRef.Name)
		case f.SecretRef != nil:
			envFrom = append(envFrom, f.SecretRef.Name)
		}
	}
	require.ElementsMatch(t, []string{"taskport-config", "taskport-secrets"}, envFrom, "the hook needs the workers' settings")
	url, _ := setting(wc, b, "--qbittorrent-url", "QBITTORRENT_URL")
	require.Contains(t, url, "//qbittorrent."+q.Namespace+".svc")
	require.NotNil(t, b.Services["qbittorrent"])
}

func flagDuration(t *testing.T, args []string, flag string) time.Duration {
	t.Helper()
	i := slices.Index(args, flag)
	require.GreaterOrEqual(t, i, 0, "%s not set in %v", flag, args)
	d, err := time.ParseDuration(args[i+1])
	require.NoError(t, err)
	return d
}

func metav1LabelSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

func selectsSome(sel map[string]string, b *kubernetes.Objects) bool {
	for _, d := range b.Deployments {
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
			return true
		}
	}
	return false
}

// maxConnections is the Postgres max_connections each overlay is sized
// for (the README's connection budget states them), less what Postgres
// reserves for superusers (superuser_reserved_connections, default 3) and
// room kept for operators (psql, backups, a second migration).
var maxConnections = map[string]struct{ max, reserved, operators int }{
	"overlays/dev":  {max: 100, reserved: 3, operators: 10}, // Postgres' default
	"overlays/prod": {max: 300, reserved: 3, operators: 20},
}

// TestConnectionBudget adds up the connections every process of an overlay
// can open at its most replicas (autoscaler maximum plus the rolling
// update's surge) and checks the sum fits the stated max_connections. Per
// process (cmd/taskport): the business pool (DB_POOL_SIZE), the engine's
// pool (ENGINE_DB_POOL_SIZE), plus the connections taken out of a pool for
// good: the outbox dispatcher's LISTEN (hijacked from the business pool)
// and, on the lease engine, the worker's own LISTEN connection. The
// migration opens the business pool only.
func TestConnectionBudget(t *testing.T) {
	for dir, limit := range maxConnections {
		t.Run(dir, func(t *testing.T) {
			b := build(t, dir)
			for _, s := range b.Secrets {
				require.NotContains(t, string(s.Data["DATABASE_URL"])+s.StringData["DATABASE_URL"], "pool_max_conns",
					"pool_max_conns in the URL would override the pool sizes counted here")
			}
			total := 0
			var lines []string
			count := func(name string, c corev1.Container, processes int, engine bool) {
				pools := 0
				for _, s := range []struct{ flag, env string }{{"--db-pool-size", "DB_POOL_SIZE"}, {"--engine-db-pool-size", "ENGINE_DB_POOL_SIZE"}} {
					if !engine && s.env == "ENGINE_DB_POOL_SIZE" {
						continue
					}
					v, ok := setting(c, b, s.flag, s.env)
					require.True(t, ok, "%s: %s must be set explicitly for the budget to hold", name, s.env)
					n, err := strconv.Atoi(v)
					require.NoError(t, err)
					pools += n
				}
				extra := 0
				if c.Args[0] == "worker" {
					if d, _ := setting(c, b, "--dispatch", ""); d != "false" {
						extra++ // the dispatcher's LISTEN connection
					}
					if e, _ := setting(c, b, "--engine", "ENGINE"); e == "lease" {
						extra++ // the lease worker's LISTEN connection
					}
				}
				per := pools + extra
				total += per * processes
				lines = append(lines, fmt.Sprintf("%-18s %2d process(es) x %2d = %3d", name, processes, per, per*processes))
			}
			for name, d := range b.Deployments {
				if !isTaskport(d.Spec.Template.Spec) {
					continue
				}
				count(name, d.Spec.Template.Spec.Containers[0], mostPods(t, b, d), true)
			}
			for name, j := range b.Jobs {
				parallel := int32(1)
				if j.Spec.Parallelism != nil {
					parallel = *j.Spec.Parallelism
				}
				count(name, j.Spec.Template.Spec.Containers[0], int(parallel), false)
			}
			budget := limit.max - limit.reserved - limit.operators
			t.Logf("%s connection budget (max_connections %d - %d reserved - %d operators = %d):\n%s\n%-18s %29d",
				dir, limit.max, limit.reserved, limit.operators, budget, strings.Join(lines, "\n"), "total", total)
			require.LessOrEqual(t, total, budget, "the pools at maximum replicas exceed Postgres max_connections")
		})
	}
}

// mostPods is the most pods a Deployment can have at once: its autoscaler's
// maximum (or its replicas) plus the rolling update's surge.
func mostPods(t *testing.T, b *kubernetes.Objects, d *appsv1.Deployment) int {
	t.Helper()
	most := int(*d.Spec.Replicas)
	for _, h := range b.HPAs {
		if h.Spec.ScaleTargetRef.Name == d.Name {
			most = max(most, int(h.Spec.MaxReplicas))
		}
	}
	if _, hi, ok := scaledBounds(b, d.Name); ok {
		most = max(most, hi)
	}
	surge := intstr.FromString("25%") // the Deployment default
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		surge = *ru.MaxSurge
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&surge, most, true)
	require.NoError(t, err)
	return most + n
}

// The dev overlay's output is what `kubectl apply -k` sends; printing it on
// failure helps, and checking it is non-trivial guards the build itself.
func TestDevOverlayRendersYAML(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "overlays/dev")
	require.NoError(t, err)
	out, err := res.AsYaml()
	require.NoError(t, err)
	require.True(t, bytes.Contains(out, []byte("namespace: taskport-dev")))
	require.False(t, strings.Contains(string(out), "image: taskport\n"), "the base image name must be rewritten")
}
