package check

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	sigsyaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden object lists in testdata/")

func TestChartLintsClean(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals, err := vs.values.merge()
			if err != nil {
				t.Fatal(err)
			}
			linter := lint.All(chartDir, vals, namespace, false)
			for _, msg := range linter.Messages {
				if msg.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", msg)
				} else {
					t.Logf("helm lint: %s", msg)
				}
			}
		})
	}
}

// TestChartRendersTheExpectedObjects pins the rendered object list (kind
// and name, in Helm's install order) and, by rendering at all, that every
// object decodes strictly into its Go type.
func TestChartRendersTheExpectedObjects(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			var list strings.Builder
			for _, o := range renderObjects(t, vs.values) {
				list.WriteString(o.String() + "\n")
			}
			golden := filepath.Join("testdata", "objects-"+vs.golden+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(list.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if list.String() != string(want) {
				t.Errorf("rendered objects differ from %s (go test -update rewrites it)\ngot:\n%swant:\n%s", golden, list.String(), want)
			}
		})
	}
}

func TestStrictDecodingRejectsAnUnknownField(t *testing.T) {
	cases := []struct {
		name string
		doc  string
	}{
		{
			name: "A misspelt field of a Deployment's container is rejected.",
			doc: `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: x, image: x, readinesProbe: {}}]
`,
		},
		{
			name: "An unknown field of a ServiceMonitor endpoint is rejected.",
			doc: `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: x}
spec:
  selector: {}
  endpoints: [{port: http, scrapeInterval: 15s}]
`,
		},
		{
			name: "An unknown field of an ExternalSecret is rejected.",
			doc: `apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: x}
spec:
  secretStoreRef: {name: vault}
  target: {name: x}
  data: [{secretKey: k, remoteRef: {key: k, propety: p}}]
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeObject([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), "unknown field") {
				t.Errorf("decodeObject = %v, want an unknown field error", err)
			}
		})
	}
}

// podTemplates returns the pod templates of the rendered Deployment and
// StatefulSets, by their object's name.
func podTemplates(objects []object) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, d := range all[*appsv1.Deployment](objects) {
		out["Deployment/"+d.Name] = &d.Spec.Template
	}
	for _, s := range all[*appsv1.StatefulSet](objects) {
		out["StatefulSet/"+s.Name] = &s.Spec.Template
	}
	return out
}

func TestPodsPassPodSecurityRestricted(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			pods := podTemplates(renderObjects(t, vs.values))
			if len(pods) == 0 {
				t.Fatal("no Deployment or StatefulSet rendered")
			}
			for name, pod := range pods {
				result := policy.AggregateCheckResults(evaluator.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec))
				if !result.Allowed {
					t.Errorf("%s: Pod Security %s: %s: %s", name, restricted, result.ForbiddenReason(), result.ForbiddenDetail())
				}
			}
		})
	}
}

func TestDeploymentRunsOneProberAtATime(t *testing.T) {
	for _, vs := range valueSets {
		if vs.fleet {
			continue // StatefulSets: TestFleetModes
		}
		t.Run(vs.name, func(t *testing.T) {
			d := only[*appsv1.Deployment](t, renderObjects(t, vs.values))
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("replicas = %v, want 1", d.Spec.Replicas)
			}
			if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("strategy = %q, want Recreate", d.Spec.Strategy.Type)
			}
			c := d.Spec.Template.Spec.Containers[0]
			if got := c.LivenessProbe.HTTPGet.Path; got != "/healthz" {
				t.Errorf("liveness probe path = %q, want /healthz", got)
			}
			if got := c.ReadinessProbe.HTTPGet.Path; got != "/readyz" {
				t.Errorf("readiness probe path = %q, want /readyz", got)
			}
			if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
				t.Errorf("image %q is not pinned to a tag", c.Image)
			}
			for _, want := range []string{"run", "--config.file=/etc/outbox-canary/config/outbox-canary.yml", "--web.listen-address=:9465", "--state.dir=/var/lib/outbox-canary"} {
				if !slices.Contains(c.Args, want) {
					t.Errorf("args %q lack %q", c.Args, want)
				}
			}
		})
	}
}

// Basic auth covers /healthz and /readyz too, and a kubelet sends no
// credentials: with basic_auth_users the probes go to --web.probe-address,
// which serves them without TLS or auth. Without it they stay on the HTTP
// port, in HTTPS when the web config turns TLS on.
func TestProbesWorkBehindBasicAuth(t *testing.T) {
	// A bcrypt hash, as exporter-toolkit's web config takes.
	const hash = "$2y$10$X0h1J6Y2LrHj2ZxZ3bU9Xu7bKQm4C1d3s0aBvH9o9s8yZqQW1e7yW"
	cases := []struct {
		name             string
		values           chartValues
		port             string
		scheme           corev1.URIScheme
		probeAddressFlag bool
	}{
		{"No web config: the probes use the HTTP port.", chartValues{}, "http", corev1.URISchemeHTTP, false},
		{"TLS only: the probes use the HTTP port in HTTPS.", fullValues, "http", corev1.URISchemeHTTPS, false},
		{"Basic auth: the probes use the probe port, in plain HTTP.",
			chartValues{set: []string{"webConfig.basic_auth_users.prometheus=" + hash}}, "probes", corev1.URISchemeHTTP, true},
		{"Basic auth and TLS: still the probe port, in plain HTTP.",
			chartValues{files: fullValues.files, fileValue: fullValues.fileValue, set: []string{"webConfig.basic_auth_users.prometheus=" + hash}}, "probes", corev1.URISchemeHTTP, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := only[*appsv1.Deployment](t, renderObjects(t, tc.values)).Spec.Template.Spec.Containers[0]
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if got := p.HTTPGet.Port.String(); got != tc.port {
					t.Errorf("%s probe port = %s, want %s", name, got, tc.port)
				}
				if p.HTTPGet.Scheme != tc.scheme {
					t.Errorf("%s probe scheme = %s, want %s", name, p.HTTPGet.Scheme, tc.scheme)
				}
			}
			if got := slices.Contains(c.Args, "--web.probe-address=:9466"); got != tc.probeAddressFlag {
				t.Errorf("args %q: --web.probe-address=:9466 there = %t, want %t", c.Args, got, tc.probeAddressFlag)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			want := map[string]int32{"http": 9465}
			if tc.probeAddressFlag {
				want["probes"] = 9466
			}
			if !maps.Equal(ports, want) {
				t.Errorf("container ports %v, want %v", ports, want)
			}
		})
	}
}

func TestImageIsPinnedByDigestWhenOneIsGiven(t *testing.T) {
	d := only[*appsv1.Deployment](t, renderObjects(t, fullValues))
	want := "ghcr.io/outbox-canary/outbox-canary:0.1.0@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("image = %q, want %q", got, want)
	}
}

func TestGOMEMLIMITFollowsTheMemoryLimit(t *testing.T) {
	cases := []struct {
		name string
		set  []string
		want string // "" = not set
	}{
		{name: "128Mi at the default ratio of 0.9 gives 90% of 134217728 bytes.", want: "120795955"},
		{name: "1Gi gives 90% of 1073741824 bytes.", set: []string{"resources.limits.memory=1Gi"}, want: "966367641"},
		{name: "A decimal unit (500M) is 500000000 bytes.", set: []string{"resources.limits.memory=500M"}, want: "450000000"},
		{name: "A bare number is bytes.", set: []string{"resources.limits.memory=200000000"}, want: "180000000"},
		{name: "A ratio of 1 gives the whole limit.", set: []string{"goMemLimit.ratio=1"}, want: "134217728"},
		{name: "A ratio of 0 leaves GOMEMLIMIT unset.", set: []string{"goMemLimit.ratio=0"}},
		{name: "No memory limit leaves GOMEMLIMIT unset.", set: []string{"resources.limits.memory=null"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := only[*appsv1.Deployment](t, renderObjects(t, chartValues{set: tc.set}))
			got := ""
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "GOMEMLIMIT" {
					got = e.Value
				}
			}
			if got != tc.want {
				t.Errorf("GOMEMLIMIT = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConfigChangeRollsThePod(t *testing.T) {
	checksum := func(set ...string) string {
		d := only[*appsv1.Deployment](t, renderObjects(t, chartValues{set: set}))
		return d.Spec.Template.Annotations["checksum/config"]
	}
	base := checksum()
	if base == "" {
		t.Fatal("the pod template has no checksum/config annotation")
	}
	if again := checksum(); again != base {
		t.Errorf("the same values gave checksums %s and %s", base, again)
	}
	if changed := checksum("config.instance_id=production-2"); changed == base {
		t.Errorf("changing config.instance_id left checksum/config at %s: the pod would keep the old config", base)
	}
}

// TestChartConfigLoads loads every rendered configuration with the
// service's own loader, and checks that each secret file it reads is a key
// of the Secret the pod mounts.
func TestChartConfigLoads(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objects := renderObjects(t, vs.values)
			var text string
			for _, cm := range all[*corev1.ConfigMap](objects) {
				if data, ok := cm.Data["outbox-canary.yml"]; ok {
					text = data
				}
			}
			if text == "" {
				t.Fatal("no ConfigMap holds outbox-canary.yml")
			}
			if _, err := config.Load([]byte(text)); err != nil {
				t.Fatalf("the rendered config does not load: %v\n%s", err, text)
			}
			vals, err := vs.values.merge()
			if err != nil {
				t.Fatal(err)
			}
			keys := secretKeys(t, objects)
			if keys == nil {
				return // the Secret is made outside the chart; NOTES.txt names the keys
			}
			mountPath := "/etc/outbox-canary/secrets"
			if s, ok := vals["secret"].(map[string]any); ok && s["mountPath"] != nil {
				mountPath = s["mountPath"].(string)
			}
			for _, path := range secretFiles(t, text) {
				dir, key := filepath.Split(path)
				if filepath.Clean(dir) == mountPath && !slices.Contains(keys, key) {
					t.Errorf("the config reads %s, but the mounted Secret has no key %q (it has %v)", path, key, keys)
				}
			}
		})
	}
}

// secretKeys lists the keys of the Secret the chart makes, directly or
// through the ExternalSecret; nil when it makes none.
func secretKeys(t *testing.T, objects []object) []string {
	t.Helper()
	var keys []string
	for _, s := range all[*corev1.Secret](objects) {
		for k := range s.Data {
			keys = append(keys, k)
		}
	}
	for _, es := range all[*externalSecret](objects) {
		for _, d := range es.Spec.Data {
			keys = append(keys, d.SecretKey)
		}
	}
	return keys
}

// secretFiles returns every `file:` of a secret in the config text.
func secretFiles(t *testing.T, text string) []string {
	t.Helper()
	var doc any
	if err := sigsyaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	var files []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if f, ok := v["file"].(string); ok {
				files = append(files, f)
			}
			for _, child := range v {
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(doc)
	return files
}

func TestPrometheusRuleHoldsTheGeneratedGroupsUnderItsOwnLabels(t *testing.T) {
	// Three groups an object: the example's five groups (the SLOs', the
	// pipelines', the measured pipelines', Kafka's and the prober's) in
	// two.
	values := fullValues
	values.set = append(slices.Clone(values.set), "prometheusRule.groupsPerObject=3")
	rules := all[*monitoringv1.PrometheusRule](renderObjects(t, values))
	if len(rules) < 2 {
		t.Fatalf("rendered %d PrometheusRules, want the example's groups in objects of at most 3", len(rules))
	}
	rule := &monitoringv1.PrometheusRule{}
	for i, r := range rules {
		if got := r.Labels["release"]; got != "kube-prometheus-stack" {
			t.Errorf("%s: label release = %q, want kube-prometheus-stack (from prometheusRule.labels)", r.Name, got)
		}
		if want := rules[0].Name + "-" + strconv.Itoa(i+1); i > 0 && r.Name != want {
			t.Errorf("PrometheusRule %d is named %s, want %s", i, r.Name, want)
		}
		if n := len(r.Spec.Groups); n > 3 || n == 0 {
			t.Errorf("%s holds %d groups, want 1 to prometheusRule.groupsPerObject (3)", r.Name, n)
		}
		rule.Spec.Groups = append(rule.Spec.Groups, r.Spec.Groups...)
	}
	data, err := os.ReadFile("../../examples/rules/outbox-canary.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var generated struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := sigsyaml.UnmarshalStrict(data, &generated); err != nil {
		t.Fatal(err)
	}
	if len(rule.Spec.Groups) != len(generated.Groups) {
		t.Fatalf("PrometheusRule has %d groups, the rule file %d", len(rule.Spec.Groups), len(generated.Groups))
	}
	for i, g := range rule.Spec.Groups {
		want := generated.Groups[i]
		if g.Name != want.Name || len(g.Rules) != len(want.Rules) {
			t.Errorf("group %d = %s with %d rules, want %s with %d", i, g.Name, len(g.Rules), want.Name, len(want.Rules))
			continue
		}
		for j, r := range g.Rules {
			if r.Expr.String() != want.Rules[j].Expr.String() || r.Alert != want.Rules[j].Alert || r.Record != want.Rules[j].Record {
				t.Errorf("group %s rule %d differs from the rule file", g.Name, j)
			}
			if _, ok := r.Labels["release"]; ok {
				t.Errorf("group %s rule %d carries the object's release label", g.Name, j)
			}
		}
	}
}

func TestServiceMonitorScrapesUnderTheProberJob(t *testing.T) {
	cases := []struct {
		name    string
		values  chartValues
		job     string
		release string
	}{
		{name: "Without alerting.prober_job the job is outbox-canary.", values: chartValues{set: []string{"serviceMonitor.enabled=true"}}, job: "outbox-canary"},
		{name: "The config's alerting.prober_job names the job, and serviceMonitor.labels label the object.", values: fullValues, job: "outbox-canary-prod", release: "kube-prometheus-stack"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sm := only[*monitoringv1.ServiceMonitor](t, renderObjects(t, tc.values))
			if got := sm.Labels["release"]; got != tc.release {
				t.Errorf("label release = %q, want %q", got, tc.release)
			}
			relabel := sm.Spec.Endpoints[0].RelabelConfigs
			if len(relabel) == 0 || relabel[0].TargetLabel != "job" || relabel[0].Replacement == nil || *relabel[0].Replacement != tc.job {
				t.Errorf("first relabeling = %+v, want job set to %q", relabel, tc.job)
			}
		})
	}
}

func TestDashboardsAreConfigMapsForTheGrafanaSidecar(t *testing.T) {
	var dashboards []*corev1.ConfigMap
	for _, cm := range all[*corev1.ConfigMap](renderObjects(t, fullValues)) {
		if cm.Labels["grafana_dashboard"] == "1" {
			dashboards = append(dashboards, cm)
		}
	}
	if len(dashboards) != 3 {
		t.Fatalf("%d ConfigMaps labelled grafana_dashboard=1, want 3", len(dashboards))
	}
	for _, cm := range dashboards {
		if cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "Outbox" {
			t.Errorf("%s: namespace %q, folder %q; want monitoring and Outbox", cm.Name, cm.Namespace, cm.Annotations["grafana_folder"])
		}
		for key, text := range cm.Data {
			want, err := os.ReadFile(filepath.Join("../../examples/dashboards", key))
			if err != nil {
				t.Fatal(err)
			}
			if text != strings.TrimRight(string(want), "\n") {
				t.Errorf("%s: %s differs from the generated dashboard", cm.Name, key)
			}
		}
	}
}

func TestNetworkPolicyOpensOnlyTheNamedPorts(t *testing.T) {
	np := only[*networkingv1.NetworkPolicy](t, renderObjects(t, chartValues{}))
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "http" {
		t.Errorf("ingress = %+v, want the http port only", np.Spec.Ingress)
	}
	var egressPorts []string
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			egressPorts = append(egressPorts, string(*p.Protocol)+"/"+p.Port.String())
		}
	}
	want := []string{"UDP/53", "TCP/53", "TCP/9092", "TCP/9093", "TCP/9094", "TCP/8083", "TCP/5432"}
	if !slices.Equal(egressPorts, want) {
		t.Errorf("egress ports = %v, want %v", egressPorts, want)
	}
}

func TestChartRefusesBadValues(t *testing.T) {
	cases := []struct {
		name  string
		set   []string
		files []string
		want  string
	}{
		{name: "The latest tag is refused.", set: []string{"image.tag=latest"}, want: `image.tag: "latest" is refused`},
		{name: "A digest that is not sha256 hex is refused.", set: []string{"image.digest=sha256:abc"}, want: "image.digest"},
		{name: "A chart-made Secret without data is refused.", set: []string{"secret.create=true"}, want: "secret.data is empty"},
		{name: "A Secret made both by the chart and by an ExternalSecret is refused.", set: []string{"secret.create=true", "secret.data.k=v", "externalSecret.enabled=true", "externalSecret.secretStoreRef.name=vault", "externalSecret.data[0].secretKey=k", "externalSecret.data[0].remoteRef.key=k"}, want: "choose one"},
		{name: "An ExternalSecret without a store is refused.", set: []string{"externalSecret.enabled=true"}, want: "externalSecret.secretStoreRef.name"},
		{name: "A PrometheusRule without rules is refused.", set: []string{"prometheusRule.enabled=true"}, want: "prometheusRule.rules: no rule groups"},
		{name: "A dashboard that is not dashboard JSON is refused.", set: []string{"dashboards.files.x=not json"}, want: "dashboards.files.x: not a Grafana dashboard"},
		{name: "A memory limit GOMEMLIMIT cannot be derived from is refused.", set: []string{"resources.limits.memory=0.5Gi"}, want: "resources.limits.memory"},
		{name: "A misspelt top-level value is refused by the values schema.", set: []string{"serviceMonitr.enabled=true"}, want: "serviceMonitr"},
		{name: "An empty configuration is refused.", set: []string{"config=null"}, want: "config: the outbox-canary configuration is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(chartValues{set: tc.set, files: tc.files})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
