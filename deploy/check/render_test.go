package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/release"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	chartDir    = "../helm/outbox-canary"
	releaseName = "canary"
	namespace   = "observability"
)

// chartValues is what a user passes to helm: -f files, --set and --set-file.
type chartValues struct {
	files     []string
	set       []string
	fileValue []string
}

// fullValues is ci/full-values.yaml with the generated rules and dashboards
// passed the way the chart's README tells users to.
var fullValues = chartValues{
	files: []string{chartDir + "/ci/full-values.yaml"},
	fileValue: []string{
		"prometheusRule.rules=../../examples/rules/outbox-canary.rules.yml",
		"dashboards.files.slo-overview=../../examples/dashboards/outbox-canary-slo-overview.json",
		"dashboards.files.segment-latency=../../examples/dashboards/outbox-canary-segment-latency.json",
		"dashboards.files.pipeline-health=../../examples/dashboards/outbox-canary-pipeline-health.json",
	},
}

// valueSets are the configurations every chart test runs on. fleet marks
// the modes that run StatefulSets instead of the one Deployment.
var valueSets = []struct {
	name   string
	golden string
	values chartValues
	fleet  bool
}{
	{name: "the default values", golden: "default", values: chartValues{}},
	{name: "every optional object turned on", golden: "full", values: fullValues},
	{
		name:   "a Secret made by the chart and the state on an emptyDir",
		golden: "inline-secret",
		values: chartValues{set: []string{
			"secret.create=true",
			"secret.data.signing-key=test-signing-key",
			"secret.data.orders-dsn=postgres://canary@db:5432/orders",
			"persistence.enabled=false",
		}},
	},
	{name: "redundant: two probers of every pipeline", golden: "redundant", values: redundantValues, fleet: true},
	{name: "sharded: three shards of two probers, every optional object on", golden: "sharded", values: shardedValues, fleet: true},
}

// redundantValues and shardedValues are the fleet modes (docs/fleet.md).
var (
	redundantValues = chartValues{set: []string{"fleet.replicas=2"}}
	shardedValues   = chartValues{files: fullValues.files, fileValue: fullValues.fileValue,
		set: []string{"fleet.shards=3", "fleet.replicas=2"}}
)

func (v chartValues) merge() (map[string]any, error) {
	opts := values.Options{ValueFiles: v.files, Values: v.set, FileValues: v.fileValue}
	return opts.MergeValues(getter.Providers{})
}

// renderChart renders the chart as `helm template` does (Helm's install
// action in client-only dry-run mode, so the values schema, kubeVersion and
// the manifest sort order are Helm's own) and returns the manifest.
func renderChart(v chartValues) (string, error) {
	rel, err := renderRelease(v)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// renderRelease renders the chart as `helm install --dry-run=client`
// does: the manifest, and the NOTES Helm prints after an install.
func renderRelease(v chartValues) (*release.Release, error) {
	vals, err := v.merge()
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.DryRunOption = "client"
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = releaseName
	install.Namespace = namespace
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return rel, nil
}

// object is one rendered document, decoded.
type object struct {
	kind, name string
	raw        []byte
	obj        runtime.Object
}

func (o object) String() string { return o.kind + "/" + o.name }

// strictDecoder decodes into the Kubernetes and Prometheus Operator types and
// fails on unknown and duplicate fields, as the API server's strict field
// validation does.
var strictDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err) // a scheme that cannot be built is a broken build, not a test result
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// decodeManifest splits a manifest into documents and decodes each strictly.
func decodeManifest(manifest string) ([]object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var objects []object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split manifest: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		o, err := decodeObject(doc)
		if err != nil {
			return nil, err
		}
		objects = append(objects, o)
	}
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

func decodeObject(doc []byte) (object, error) {
	var head struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := sigsyaml.Unmarshal(doc, &head); err != nil {
		return object{}, fmt.Errorf("document %q: %w", firstLine(doc), err)
	}
	o := object{kind: head.Kind, name: head.Metadata.Name, raw: doc}
	if head.APIVersion == externalSecretAPIVersion && head.Kind == "ExternalSecret" {
		var es externalSecret
		if err := sigsyaml.UnmarshalStrict(doc, &es); err != nil {
			return object{}, fmt.Errorf("%s: %w", o, err)
		}
		o.obj = &es
		return o, nil
	}
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		return object{}, fmt.Errorf("%s (%s): %w", o, head.APIVersion, err)
	}
	o.obj = obj
	return o, nil
}

func firstLine(doc []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(doc), []byte("\n"))
	return string(line)
}

// renderObjects renders and decodes, failing the test on any error.
func renderObjects(t *testing.T, v chartValues) []object {
	t.Helper()
	manifest, err := renderChart(v)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := decodeManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	return objects
}

// only returns the single object of type T, failing when there is not
// exactly one.
func only[T runtime.Object](t *testing.T, objects []object) T {
	t.Helper()
	found := all[T](objects)
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T, rendered %d", zero, len(found))
	}
	return found[0]
}

func all[T runtime.Object](objects []object) []T {
	var found []T
	for _, o := range objects {
		if typed, ok := o.obj.(T); ok {
			found = append(found, typed)
		}
	}
	return found
}
