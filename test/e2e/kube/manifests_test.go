package kube

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

var manifestDir = filepath.Join(repoRoot, "deploy", "kubernetes")

// decodeStrict decodes one YAML document into the Kubernetes API type its
// apiVersion and kind name. A field the type does not have, a field given
// twice, or a kind not listed here is an error.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	default:
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

var (
	docSep = regexp.MustCompile(`(?m)^---\s*$`)
	// servedPaths are the paths a setting's help names ("/healthz").
	servedPaths = regexp.MustCompile(`/[A-Za-z0-9._-]+`)
)

// documents splits a YAML file into its documents, leaving out those with
// nothing but comments.
func documents(data []byte) [][]byte {
	var out [][]byte
	for _, d := range docSep.Split(string(data), -1) {
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, []byte(d))
				break
			}
		}
	}
	return out
}

// cluster is what deploy/kubernetes holds, decoded.
type cluster struct {
	sts      *appsv1.StatefulSet
	services []*corev1.Service
	configs  []*corev1.ConfigMap
	pdbs     []*policyv1.PodDisruptionBudget
}

// loadManifests decodes every document of every file in deploy/kubernetes
// strictly.
func loadManifests(t *testing.T) cluster {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	var c cluster
	for _, f := range files {
		if ext := filepath.Ext(f); ext != ".yaml" {
			t.Errorf("%s: every file of %s is a manifest (.yaml)", f, manifestDir)
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documents(data) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s, document %d: %v", filepath.Base(f), i+1, err)
				continue
			}
			switch o := obj.(type) {
			case *appsv1.StatefulSet:
				if c.sts != nil {
					t.Errorf("%s: a second StatefulSet %s", filepath.Base(f), o.Name)
				}
				c.sts = o
			case *corev1.Service:
				c.services = append(c.services, o)
			case *corev1.ConfigMap:
				c.configs = append(c.configs, o)
			case *policyv1.PodDisruptionBudget:
				c.pdbs = append(c.pdbs, o)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if c.sts == nil || len(c.configs) == 0 || len(c.pdbs) != 1 || len(c.services) == 0 {
		t.Fatalf("want a StatefulSet, a ConfigMap, Services and a PodDisruptionBudget; got %v %d %d %d",
			c.sts != nil, len(c.configs), len(c.services), len(c.pdbs))
	}
	if n := len(c.sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the StatefulSet has %d containers, want 1", n)
	}
	return c
}

// TestManifestsDecodeStrictly: every manifest decodes into its Kubernetes
// API type with no field left over, and the same decoder refuses a field
// the type lacks (one misspelled in a copy of the StatefulSet).
func TestManifestsDecodeStrictly(t *testing.T) {
	loadManifests(t)

	data, err := os.ReadFile(filepath.Join(manifestDir, "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	planted := bytes.Replace(data, []byte("terminationGracePeriodSeconds:"), []byte("terminationGracePeriod:"), 1)
	if bytes.Equal(planted, data) {
		t.Fatal("statefulset.yaml has no terminationGracePeriodSeconds to misspell")
	}
	_, err = decodeStrict(documents(planted)[0])
	if err == nil || !strings.Contains(err.Error(), `unknown field "terminationGracePeriod"`) {
		t.Fatalf("a misspelled field decoded with error %v, want it refused by name", err)
	}
}

// pod is the StatefulSet's pod as serve sees it: its settings (defaults
// from serve --help, then the configuration file the pod reads, then its
// environment: serve's own order) and where its volumes are mounted.
type pod struct {
	c         cluster
	container corev1.Container
	fs        flags
	settings  map[string]string // flag name -> value
	file      []byte            // the configuration file (ECHOPUBSUB_CONFIG)
	env       map[string]corev1.EnvVar
}

// readPod resolves the pod's settings from the manifests.
func readPod(t *testing.T, c cluster, fs flags) *pod {
	t.Helper()
	p := &pod{c: c, container: c.sts.Spec.Template.Spec.Containers[0], fs: fs,
		settings: map[string]string{}, env: map[string]corev1.EnvVar{}}
	for name, f := range fs.byName {
		p.settings[name] = f.def
	}
	for _, e := range p.container.Env {
		p.env[e.Name] = e
	}
	if cfg, ok := p.env["ECHOPUBSUB_CONFIG"]; ok {
		p.file = p.configMapFile(t, cfg.Value)
		var doc map[string]any
		if err := yaml.Unmarshal(p.file, &doc); err != nil {
			t.Fatalf("the configuration file %s: %v", cfg.Value, err)
		}
		keys := map[string]string{}
		flatten("", doc, keys)
		for key, v := range keys {
			if _, ok := fs.byName[flagOf(key)]; !ok || key == "config" {
				t.Errorf("the configuration file %s: key %q is not one of serve's settings", cfg.Value, key)
				continue
			}
			p.settings[flagOf(key)] = v
		}
	}
	for _, e := range p.container.Env {
		if name, ok := fs.byEnv[e.Name]; ok {
			p.settings[name] = e.Value
		}
	}
	return p
}

// flatten turns a decoded YAML document into dotted keys: lists
// comma-joined, as a flag spells them.
func flatten(prefix string, m map[string]any, out map[string]string) {
	for k, v := range m {
		if prefix != "" {
			k = prefix + "." + k
		}
		switch x := v.(type) {
		case map[string]any:
			flatten(k, x, out)
		case []any:
			var parts []string
			for _, e := range x {
				parts = append(parts, fmt.Sprint(e))
			}
			out[k] = strings.Join(parts, ",")
		default:
			out[k] = fmt.Sprint(x)
		}
	}
}

// mountOf is the container's volume mount that holds path, and its volume.
func (p *pod) mountOf(path string) (corev1.VolumeMount, *corev1.Volume, bool) {
	for _, m := range p.container.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			for i := range p.c.sts.Spec.Template.Spec.Volumes {
				if v := &p.c.sts.Spec.Template.Spec.Volumes[i]; v.Name == m.Name {
					return m, v, true
				}
			}
			return m, nil, true // a volume claim template's
		}
	}
	return corev1.VolumeMount{}, nil, false
}

// configMapFile is the file at path as the pod sees it: a key of a
// ConfigMap of the manifests, mounted there.
func (p *pod) configMapFile(t *testing.T, path string) []byte {
	t.Helper()
	m, v, ok := p.mountOf(path)
	if !ok || v == nil || v.ConfigMap == nil {
		t.Fatalf("%s is not in a ConfigMap volume of the StatefulSet", path)
	}
	key := strings.TrimPrefix(strings.TrimPrefix(path, m.MountPath), "/")
	for _, cm := range p.c.configs {
		if cm.Name == v.ConfigMap.Name {
			data, ok := cm.Data[key]
			if !ok {
				t.Fatalf("ConfigMap %s has no key %q (%s)", cm.Name, key, path)
			}
			return []byte(data)
		}
	}
	t.Fatalf("ConfigMap %s (volume %s) is not in the manifests", v.ConfigMap.Name, v.Name)
	return nil
}

// containerPort finds a container port by number or name.
func (p *pod) containerPort(port intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range p.container.Ports {
		if port.Type == intstr.String && cp.Name == port.StrVal || port.Type == intstr.Int && cp.ContainerPort == port.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// podLabels match a selector's labels.
func (p *pod) selects(sel map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if p.c.sts.Spec.Template.Labels[k] != v {
			return false
		}
	}
	return true
}

// TestManifestsMatchServe checks the manifests against what serve
// exposes, read off `serve --help` of the binary deploy/Dockerfile builds:
// the container runs the image's entry point as serve; every ECHOPUBSUB_
// variable and every key of the configuration file is one of serve's
// settings; the probes ask paths serve's http.listen serves, on that
// listener's port; the Services reach the gateway, admin and node ports
// serve listens on; membership is DNS against the headless Service, which
// lists pods before they are ready; the store is on the pod's volume
// claim; the admin token is a mounted Secret; the PodDisruptionBudget
// selects the pods and leaves some up; and the termination grace period is
// longer than shutdown.timeout, the bound of serve's whole stop (the
// library's drain takes at most three quarters of it).
func TestManifestsMatchServe(t *testing.T) {
	c := loadManifests(t)
	bin := serveBinary(t)
	fs := serveFlags(t, bin)
	p := readPod(t, c, fs)
	spec := c.sts.Spec.Template.Spec

	// The container runs serve through the image's entry point.
	stages, err := parseDockerfile(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entry, cmd []string
	for _, in := range stages[len(stages)-1].instrs {
		switch in.cmd {
		case "ENTRYPOINT":
			entry = in.exec
		case "CMD":
			cmd = in.exec
		}
	}
	argv := append(slices.Clone(entry), cmd...)
	if p.container.Command != nil {
		argv = slices.Clone(p.container.Command)
	}
	if p.container.Args != nil {
		argv = append(argv[:len(entry)], p.container.Args...)
	}
	if len(argv) < 2 || argv[1] != "serve" {
		t.Errorf("the container runs %q, want the image's echopubsub serve", argv)
	}

	// Every variable is serve's, or one a later value refers to as $(NAME).
	for i, e := range p.container.Env {
		if _, ok := fs.byEnv[e.Name]; ok {
			continue
		}
		used := false
		for _, later := range p.container.Env[i+1:] {
			used = used || strings.Contains(later.Value, "$("+e.Name+")")
		}
		if !used {
			t.Errorf("variable %s is neither one of serve's (serve --help) nor used by a later one", e.Name)
		}
	}

	// Ports: what serve listens on is what the pod declares.
	ports := map[string]int{}
	for _, key := range []string{"node.listen", "http.listen", "admin.listen"} {
		ports[key] = portOf(t, key, p.settings[flagOf(key)])
		if _, ok := p.containerPort(intstr.FromInt32(int32(ports[key]))); !ok {
			t.Errorf("%s %q: port %d is not a container port (%v)", key, p.settings[flagOf(key)], ports[key], p.container.Ports)
		}
	}
	// Probes: paths serve serves on http.listen, on its port.
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"liveness", p.container.LivenessProbe}, {"readiness", p.container.ReadinessProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("no %s probe by HTTP GET", pr.name)
			continue
		}
		g := pr.probe.HTTPGet
		if cp, ok := p.containerPort(g.Port); !ok || int(cp.ContainerPort) != ports["http.listen"] {
			t.Errorf("%s probe port %s: want http.listen's port %d", pr.name, g.Port.String(), ports["http.listen"])
		}
		if !slices.Contains(servedPaths.FindAllString(fs.byName["http-listen"].usage, -1), g.Path) {
			t.Errorf("%s probe path %q: not one serve lists on http.listen (%q)", pr.name, g.Path, fs.byName["http-listen"].usage)
		}
	}
	if l, r := p.container.LivenessProbe, p.container.ReadinessProbe; l != nil && r != nil && l.HTTPGet != nil && r.HTTPGet != nil && l.HTTPGet.Path == r.HTTPGet.Path {
		t.Errorf("liveness and readiness probe the same path %q", l.HTTPGet.Path)
	}

	// Services: a headless one for membership, and the gateway and admin
	// ports reachable through a Service.
	headless := p.headless(t)
	reached := map[int]bool{}
	for _, svc := range c.services {
		if !p.selects(svc.Spec.Selector) {
			t.Errorf("Service %s selects %v, not the StatefulSet's pods %v", svc.Name, svc.Spec.Selector, c.sts.Spec.Template.Labels)
		}
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			cp, ok := p.containerPort(target)
			if !ok {
				t.Errorf("Service %s port %s targets %s, which is no container port", svc.Name, sp.Name, target.String())
				continue
			}
			if svc == headless {
				continue
			}
			reached[int(cp.ContainerPort)] = true
		}
	}
	for _, key := range []string{"http.listen", "admin.listen"} {
		if !reached[ports[key]] {
			t.Errorf("no Service port reaches %s's port %d", key, ports[key])
		}
	}

	p.checkMembership(t, headless, ports["node.listen"])
	p.checkStore(t)
	p.checkAdmin(t)

	// Disruptions: the budget selects the pods and leaves some running.
	pdb := c.pdbs[0]
	if pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchExpressions) > 0 || !p.selects(pdb.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget %s selects %v, not the pods", pdb.Name, pdb.Spec.Selector)
	}
	replicas := int32(1)
	if c.sts.Spec.Replicas != nil {
		replicas = *c.sts.Spec.Replicas
	}
	switch mu, ma := pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable; {
	case mu != nil && mu.Type == intstr.Int:
		if mu.IntVal < 1 || mu.IntVal >= replicas {
			t.Errorf("PodDisruptionBudget maxUnavailable %d with %d replicas: want 1..%d", mu.IntVal, replicas, replicas-1)
		}
	case ma != nil && ma.Type == intstr.Int:
		if ma.IntVal < 1 || ma.IntVal >= replicas {
			t.Errorf("PodDisruptionBudget minAvailable %d with %d replicas: want 1..%d", ma.IntVal, replicas, replicas-1)
		}
	default:
		t.Errorf("PodDisruptionBudget: want maxUnavailable or minAvailable as a number")
	}
	if sel := c.sts.Spec.Selector; sel == nil || len(sel.MatchExpressions) > 0 || !p.selects(sel.MatchLabels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods' labels", sel)
	}

	// The grace period outlasts serve's stop.
	stop, err := time.ParseDuration(p.settings["shutdown-timeout"])
	if err != nil {
		t.Fatalf("shutdown.timeout %q: %v", p.settings["shutdown-timeout"], err)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= stop {
		t.Errorf("terminationGracePeriodSeconds %v: want more than shutdown.timeout %v", derefOr(g, 30), stop)
	}
}

func derefOr(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

// headless is the StatefulSet's governing Service: headless, listing pods
// before they are ready (a node is ready once it tried the members listed).
func (p *pod) headless(t *testing.T) *corev1.Service {
	t.Helper()
	for _, svc := range p.c.services {
		if svc.Name != p.c.sts.Spec.ServiceName {
			continue
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service %s (the StatefulSet's serviceName) has clusterIP %q, want None", svc.Name, svc.Spec.ClusterIP)
		}
		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s: want publishNotReadyAddresses (nodes find one another before they are ready)", svc.Name)
		}
		return svc
	}
	t.Fatalf("no Service named %q (the StatefulSet's serviceName)", p.c.sts.Spec.ServiceName)
	return nil
}

// checkMembership: DNS membership resolves the headless Service, and each
// node advertises its pod IP and node port (A records carry no port).
func (p *pod) checkMembership(t *testing.T, headless *corev1.Service, nodePort int) {
	t.Helper()
	s := p.settings
	if s["membership-kind"] != "dns" {
		t.Errorf("membership.kind %q, want dns", s["membership-kind"])
		return
	}
	if name := s["membership-dns-name"]; name != headless.Name && !strings.HasPrefix(name, headless.Name+".") {
		t.Errorf("membership.dns.name %q is not the headless Service %s", name, headless.Name)
	}
	if s["membership-dns-srv"] == "true" {
		t.Errorf("membership.dns.srv: the manifests advertise pod IPs (A records)")
	}
	adv := p.env["ECHOPUBSUB_NODE_ADVERTISE"]
	host, port, ok := strings.Cut(adv.Value, ":")
	ref := strings.TrimSuffix(strings.TrimPrefix(host, "$("), ")")
	ip, isVar := p.env[ref]
	if !ok || !isVar || ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("ECHOPUBSUB_NODE_ADVERTISE %q: want $(VAR):port with VAR the pod's status.podIP", adv.Value)
	}
	if dnsPort := s["membership-dns-port"]; port != fmt.Sprint(nodePort) || (dnsPort != "0" && dnsPort != port) {
		t.Errorf("advertised port %q, membership.dns.port %q: want node.listen's port %d", port, dnsPort, nodePort)
	}
	found := false
	for _, sp := range headless.Spec.Ports {
		cp, _ := p.containerPort(sp.TargetPort)
		found = found || int(cp.ContainerPort) == nodePort
	}
	if !found {
		t.Errorf("the headless Service %s has no port for the node port %d", headless.Name, nodePort)
	}
}

// checkStore: a node-local store lives on the pod's volume claim.
func (p *pod) checkStore(t *testing.T) {
	t.Helper()
	kind, path := p.settings["store-kind"], p.settings["store-path"]
	if kind == "postgres" {
		return
	}
	if !filepath.IsAbs(path) {
		t.Errorf("store.path %q: want an absolute path on the volume claim", path)
		return
	}
	m, v, ok := p.mountOf(path)
	if !ok || v != nil {
		t.Errorf("store.path %q (store.kind %s) is not on a volume claim template's mount", path, kind)
		return
	}
	for _, vc := range p.c.sts.Spec.VolumeClaimTemplates {
		if vc.Name == m.Name {
			if _, ok := vc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
				t.Errorf("volume claim %s requests no storage", vc.Name)
			}
			return
		}
	}
	t.Errorf("store.path %q is on mount %s, which is no volume claim template", path, m.Name)
}

// checkAdmin: the admin endpoint, when on, takes its token from a mounted
// Secret, named by the variable the echopubsub commands read too.
func (p *pod) checkAdmin(t *testing.T) {
	t.Helper()
	if p.settings["admin-listen"] == "" {
		return
	}
	if p.settings["admin-token"] != "" {
		t.Errorf("admin.token is in the manifests: keep it in a Secret (admin.token_file)")
	}
	file := p.env["ECHOPUBSUB_ADMIN_TOKEN_FILE"].Value
	if _, v, ok := p.mountOf(file); !ok || v == nil || v.Secret == nil {
		t.Errorf("ECHOPUBSUB_ADMIN_TOKEN_FILE %q is not in a Secret volume", file)
	}
}
