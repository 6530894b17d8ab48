package kubernetes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskport/taskport/deploy/kubernetes"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// moduleDir downloads a Go module through the module proxy (the go
// command's cache) and returns its directory: where the CRDs a Go project
// ships with its source are read from.
func moduleDir(t *testing.T, path, version string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", path+"@"+version).Output()
	require.NoError(t, err, "go mod download %s@%s", path, version)
	var m struct{ Dir, Error string }
	require.NoError(t, json.Unmarshal(out, &m))
	require.Empty(t, m.Error)
	return m.Dir
}

// crd validates custom objects the way the API server does on create with
// strict field validation: unknown fields are errors (the server would
// prune them), defaults are applied, then the OpenAPI schema and the CEL
// rules (x-kubernetes-validations) are checked.
type crd struct {
	group, kind string
	versions    map[string]*apiextensions.JSONSchemaProps
}

func loadCRD(t *testing.T, file string) *crd {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var v1 apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(b, &v1), file)
	c := &crd{group: v1.Spec.Group, kind: v1.Spec.Names.Kind, versions: map[string]*apiextensions.JSONSchemaProps{}}
	for _, v := range v1.Spec.Versions {
		if !v.Served || v.Schema == nil {
			continue
		}
		var s apiextensions.JSONSchemaProps
		require.NoError(t, apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &s, nil))
		c.versions[v.Name] = &s
	}
	return c
}

func (c *crd) validate(t *testing.T, obj map[string]any) {
	t.Helper()
	require.Empty(t, c.problems(t, obj), "%s %v: refused by the %s CRD", obj["kind"], obj["metadata"].(map[string]any)["name"], c.kind)
}

// problems is what the API server would refuse obj for: its kind, group
// or version; fields the CRD does not know (strict field validation
// refuses them, where the server would otherwise prune them); the OpenAPI
// schema, once defaults are applied; the CEL rules.
func (c *crd) problems(t *testing.T, obj map[string]any) []string {
	t.Helper()
	var out []string
	if obj["kind"] != c.kind {
		return append(out, fmt.Sprintf("kind %v, the CRD defines %s", obj["kind"], c.kind))
	}
	apiVersion, _ := obj["apiVersion"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	if group != c.group {
		return append(out, fmt.Sprintf("group %s, the CRD defines %s", group, c.group))
	}
	schema := c.versions[version]
	if schema == nil {
		return append(out, fmt.Sprintf("version %s is not served by the CRD", version))
	}
	structural, err := structuralschema.NewStructural(schema)
	require.NoError(t, err)

	// A round trip through the API machinery's JSON gives the types the
	// API server decodes to (int64 for integers, as CEL expects).
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	var u map[string]any
	require.NoError(t, utiljson.Unmarshal(b, &u))

	for _, f := range pruning.PruneWithOptions(u, structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		out = append(out, "unknown field "+f)
	}
	defaulting.Default(u, structural)
	validator, _, err := validation.NewSchemaValidator(schema)
	require.NoError(t, err)
	for _, e := range validation.ValidateCustomResource(nil, u, validator) {
		out = append(out, "schema: "+e.Error())
	}
	errs, _ := cel.NewValidator(structural, true, celconfig.PerCallLimit).Validate(context.Background(), nil, structural, u, nil, celconfig.RuntimeCELCostBudget)
	for _, e := range errs {
		out = append(out, "CEL: "+e.Error())
	}
	return out
}

// scalerParams reads a KEDA scaler's parameters from the `keda:"..."` tags
// of its metadata struct in the KEDA source: name -> (order, required).
func scalerParams(t *testing.T, file, typeName string) map[string]scalerParam {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	require.NoError(t, err)
	params := map[string]scalerParam{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != typeName {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			require.NoError(t, err)
			var p scalerParam
			var name string
			for _, part := range strings.Split(reflect.StructTag(tag).Get("keda"), ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
				switch k {
				case "name":
					name = v
				case "order":
					p.order = v
				case "optional", "default", "deprecated":
					p.optional = true
				}
			}
			if name != "" {
				p.required = !p.optional
				params[name] = p
			}
		}
		return false
	})
	require.NotEmpty(t, params, "no %s in %s", typeName, file)
	return params
}

type scalerParam struct {
	order              string // triggerMetadata, authParams, resolvedEnv (; separated)
	optional, required bool
}

func (p scalerParam) from(source string) bool {
	return strings.Contains(p.order, source)
}

func crdFile(dir, name string) string { return filepath.Join(dir, "config", "crd", "bases", name) }

// kedaVersion is the KEDA release the prod overlay's ScaledObject is
// written for: its CRDs and its temporal scaler are read from this module.
const kedaVersion = "v2.21.0"

// The prod overlay's ScaledObject and TriggerAuthentication are valid for
// KEDA's CRDs, and the temporal trigger asks about the same frontend,
// namespace and task queue the workers poll, with parameters the temporal
// scaler of that release knows.
func TestKEDAScaledObject(t *testing.T) {
	b := build(t, "overlays/prod")
	dir := moduleDir(t, "github.com/kedacore/keda/v2", kedaVersion)
	scaledCRD := loadCRD(t, crdFile(dir, "keda.sh_scaledobjects.yaml"))
	authCRD := loadCRD(t, crdFile(dir, "keda.sh_triggerauthentications.yaml"))
	params := scalerParams(t, filepath.Join(dir, "pkg", "scalers", "temporal_scaler.go"), "temporalMetadata")

	sos := b.CustomOf("ScaledObject")
	require.Len(t, sos, 1)
	so := sos[0]
	scaledCRD.validate(t, so)
	require.Empty(t, b.HPAs, "KEDA creates the HPA; a second one would fight it")
	spec := so["spec"].(map[string]any)
	worker := b.Deployments[spec["scaleTargetRef"].(map[string]any)["name"].(string)]
	require.NotNil(t, worker, "the ScaledObject targets a missing deployment")
	require.Equal(t, "taskport-worker", worker.Name)
	lo, hi, ok := scaledBounds(b, worker.Name)
	require.True(t, ok)
	require.GreaterOrEqual(t, lo, 1, "the workers run the outbox dispatcher: scaling them to zero stops new work")
	require.GreaterOrEqual(t, hi, lo)

	wc := worker.Spec.Template.Spec.Containers[0]
	var temporal map[string]any
	for _, tr := range spec["triggers"].([]any) {
		if tr := tr.(map[string]any); tr["type"] == "temporal" {
			temporal = tr
		}
	}
	require.NotNil(t, temporal, "no temporal trigger")
	meta := temporal["metadata"].(map[string]any)
	for k := range meta {
		p, known := params[k]
		require.True(t, known && p.from("triggerMetadata"), "temporal scaler %s has no trigger parameter %q", kedaVersion, k)
	}
	for k, p := range params {
		if p.required && p.from("triggerMetadata") {
			require.Contains(t, meta, k, "the temporal scaler requires %q", k)
		}
	}
	for key, env := range map[string]string{"endpoint": "TEMPORAL_ADDRESS", "namespace": "TEMPORAL_NAMESPACE", "taskQueue": "TEMPORAL_TASK_QUEUE", "enableTLS": "TEMPORAL_TLS"} {
		v, _ := b.Env(wc, env)
		require.Equal(t, v, meta[key], "the scaler's %s must be the workers' %s", key, env)
	}

	ref := temporal["authenticationRef"].(map[string]any)["name"]
	var auth map[string]any
	for _, a := range b.CustomOf("TriggerAuthentication") {
		if a["metadata"].(map[string]any)["name"] == ref {
			auth = a
		}
	}
	require.NotNil(t, auth, "TriggerAuthentication %v is missing", ref)
	authCRD.validate(t, auth)
	for _, s := range auth["spec"].(map[string]any)["secretTargetRef"].([]any) {
		s := s.(map[string]any)
		p, known := params[s["parameter"].(string)]
		require.True(t, known && p.from("authParams"), "temporal scaler has no auth parameter %v", s["parameter"])
		require.Equal(t, "taskport-secrets", s["name"], "the scaler reads the workers' secret")
		require.Equal(t, "TEMPORAL_API_KEY", s["key"])
	}
}

// scaledBounds are the replica bounds a ScaledObject gives a Deployment.
func scaledBounds(b *kubernetes.Objects, deployment string) (lo, hi int, ok bool) {
	for _, so := range b.CustomOf("ScaledObject") {
		spec := so["spec"].(map[string]any)
		if spec["scaleTargetRef"].(map[string]any)["name"] != deployment {
			continue
		}
		return asInt(spec["minReplicaCount"]), asInt(spec["maxReplicaCount"]), true
	}
	return 0, 0, false
}

func asInt(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case int64:
		return int(n)
	case int:
		return n
	}
	return 0
}
