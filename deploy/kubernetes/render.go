// Package kubernetes renders the kustomize overlays of this folder into
// typed Kubernetes objects, with kustomize's own library (what `kubectl
// kustomize` runs) and strict decoding: a misspelled field, a wrong type or
// an unknown kind is an error. The manifests test and the pod rehearsal
// read the manifests through it.
package kubernetes

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Objects are an overlay's objects by kind (and name).
type Objects struct {
	Deployments     map[string]*appsv1.Deployment
	Jobs            map[string]*batchv1.Job
	Services        map[string]*corev1.Service
	ConfigMaps      map[string]*corev1.ConfigMap
	Secrets         map[string]*corev1.Secret
	ServiceAccounts map[string]*corev1.ServiceAccount
	Claims          map[string]*corev1.PersistentVolumeClaim
	Namespaces      []*corev1.Namespace
	Policies        []*networkingv1.NetworkPolicy
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	// Custom holds the objects of custom resource kinds (KEDA,
	// temporal-worker-controller) as decoded JSON: their schemas are their
	// CRDs', against which the manifests test validates them.
	Custom []map[string]any
}

// Render builds the kustomization at dir and decodes every object.
func Render(dir string) (*Objects, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	o := &Objects{Deployments: map[string]*appsv1.Deployment{}, Jobs: map[string]*batchv1.Job{},
		Services: map[string]*corev1.Service{}, ConfigMaps: map[string]*corev1.ConfigMap{}, Secrets: map[string]*corev1.Secret{},
		ServiceAccounts: map[string]*corev1.ServiceAccount{}, Claims: map[string]*corev1.PersistentVolumeClaim{}}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		name, kind := r.GetName(), r.GetKind()
		var derr error
		decode := func(into any) {
			if err := yaml.UnmarshalStrict(y, into); err != nil {
				derr = fmt.Errorf("%s %s: strict decode: %w", kind, name, err)
			}
		}
		switch kind {
		case "Deployment":
			o.Deployments[name] = decoded[appsv1.Deployment](decode)
		case "Job":
			o.Jobs[name] = decoded[batchv1.Job](decode)
		case "Service":
			o.Services[name] = decoded[corev1.Service](decode)
		case "ConfigMap":
			o.ConfigMaps[name] = decoded[corev1.ConfigMap](decode)
		case "Secret":
			o.Secrets[name] = decoded[corev1.Secret](decode)
		case "ServiceAccount":
			o.ServiceAccounts[name] = decoded[corev1.ServiceAccount](decode)
		case "PersistentVolumeClaim":
			o.Claims[name] = decoded[corev1.PersistentVolumeClaim](decode)
		case "Namespace":
			o.Namespaces = append(o.Namespaces, decoded[corev1.Namespace](decode))
		case "NetworkPolicy":
			o.Policies = append(o.Policies, decoded[networkingv1.NetworkPolicy](decode))
		case "PodDisruptionBudget":
			o.PDBs = append(o.PDBs, decoded[policyv1.PodDisruptionBudget](decode))
		case "HorizontalPodAutoscaler":
			o.HPAs = append(o.HPAs, decoded[autoscalingv2.HorizontalPodAutoscaler](decode))
		case "ScaledObject", "TriggerAuthentication", "WorkerDeployment", "Connection":
			var m map[string]any
			if err := yaml.Unmarshal(y, &m); err != nil {
				return nil, fmt.Errorf("%s %s: %w", kind, name, err)
			}
			o.Custom = append(o.Custom, m)
		default:
			return nil, fmt.Errorf("%s: unexpected kind %s; teach kubernetes.Render to decode it", name, kind)
		}
		if derr != nil {
			return nil, derr
		}
	}
	return o, nil
}

// decoded decodes a resource strictly into a new T.
func decoded[T any](decode func(any)) *T {
	v := new(T)
	decode(v)
	return v
}

// CustomOf returns the custom objects of a kind.
func (o *Objects) CustomOf(kind string) []map[string]any {
	var out []map[string]any
	for _, m := range o.Custom {
		if m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// Env is what a container's process sees for an environment variable set
// by the container (env) or by its ConfigMaps (envFrom); Secrets are not
// read (they are per environment).
func (o *Objects) Env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			if cm := o.ConfigMaps[from.ConfigMapRef.Name]; cm != nil {
				if v, ok := cm.Data[name]; ok {
					return v, true
				}
			}
		}
	}
	return "", false
}
