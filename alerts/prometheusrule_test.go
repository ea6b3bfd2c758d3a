package alerts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/slo"
)

// dnsSubdomain is what Kubernetes accepts as a resource's name.
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// decodePrometheusRules reads every YAML document of the prometheusrule
// format, and each one's size as the JSON kubectl would store in its
// last-applied-configuration annotation.
func decodePrometheusRules(t *testing.T, data []byte) ([]alerts.PrometheusRule, []int) {
	t.Helper()
	var objects []alerts.PrometheusRule
	var sizes []int
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		asJSON, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var pr alerts.PrometheusRule
		if err := json.Unmarshal(asJSON, &pr); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, pr)
		sizes = append(sizes, len(asJSON))
	}
	return objects, sizes
}

func TestPrometheusRuleIsOneAndHoldsEveryGroupOnce(t *testing.T) {
	_, m := loadModel(t, exampleConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := alerts.Render(m, alerts.FormatPrometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	objects, _ := decodePrometheusRules(t, out)
	// The rules are written for every pipeline at once (no group is a
	// pipeline's), so they are one resource, whatever the
	// number of pipelines.
	var names []string
	want := []string{alerts.PrometheusRuleName}
	var groups []string
	for _, pr := range objects {
		names = append(names, pr.Metadata.Name)
		if !dnsSubdomain.MatchString(pr.Metadata.Name) {
			t.Errorf("%q is not a Kubernetes name", pr.Metadata.Name)
		}
		if !maps.Equal(pr.Metadata.Labels, m.Alerting.RuleObjectLabels()) {
			t.Errorf("%s: metadata labels %v, want %v", pr.Metadata.Name, pr.Metadata.Labels, m.Alerting.RuleObjectLabels())
		}
		for _, g := range pr.Spec.Groups {
			groups = append(groups, g.Name)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("resources %v, want %v", names, want)
	}
	var generated []string
	for _, g := range rf.Groups {
		generated = append(generated, g.Name)
	}
	if !slices.Equal(groups, generated) {
		t.Errorf("the resources hold groups %v, want each generated group once, in order: %v", groups, generated)
	}
}

// TestEveryPrometheusRuleFitsKubectlApply keeps each resource under what a
// client-side `kubectl apply` can store: one resource for the example's
// three pipelines weighed about 360 KB and was refused.
func TestEveryPrometheusRuleFitsKubectlApply(t *testing.T) {
	_, example := loadModel(t, exampleConfig)
	// Twelve extra stamps, every segment budgeted (fifteen SLOs): a
	// pipeline whose rules alone passed the limit while they were written
	// per SLO (continued in a second resource). Written once per SLO
	// window, they fit in one.
	var stamps, budgets strings.Builder
	for i := range 12 {
		fmt.Fprintf(&stamps, "      - {name: s%d, header: x-s%d}\n", i, i)
	}
	budgets.WriteString("end_to_end: 30s, commit_to_s0: 1s, s11_to_publish: 1s, publish_to_consume: 1s")
	for i := range 11 {
		fmt.Fprintf(&budgets, ", s%d_to_s%d: 1s", i, i+1)
	}
	many := modelOf(t, minimalConfig+`  - name: Many_Stamps
    database: {dsn: {env: DSN}}
    kafka: {brokers: ["k:9092"]}
    canary: {schedule: "@every 10s"}
    relay:
      stamps:
`+stamps.String()+`    budgets: {`+budgets.String()+`}
    owners: {default: team-many}
`)
	for _, tc := range []struct {
		name string
		m    *slo.Model
		// continued are resources that must exist: a pipeline's, or the one its
		// rules continue in when they pass the limit.
		continued []string
	}{
		{"the example", example, nil},
		{"a pipeline of fifteen SLOs", many, []string{alerts.PrometheusRuleName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := alerts.Render(tc.m, alerts.FormatPrometheusRule)
			if err != nil {
				t.Fatal(err)
			}
			objects, sizes := decodePrometheusRules(t, out)
			seen := map[string]bool{}
			for i, pr := range objects {
				t.Logf("%s: %d groups, %d bytes of JSON", pr.Metadata.Name, len(pr.Spec.Groups), sizes[i])
				if sizes[i] > alerts.KubectlApplyLimit {
					t.Errorf("%s weighs %d bytes as JSON, over kubectl apply's %d", pr.Metadata.Name, sizes[i], alerts.KubectlApplyLimit)
				}
				if seen[pr.Metadata.Name] || !dnsSubdomain.MatchString(pr.Metadata.Name) {
					t.Errorf("resource name %q is repeated or not a Kubernetes name", pr.Metadata.Name)
				}
				seen[pr.Metadata.Name] = true
			}
			for _, name := range tc.continued {
				if !seen[name] {
					t.Errorf("no resource %s: the pipeline's rules were not continued", name)
				}
			}
		})
	}
}
