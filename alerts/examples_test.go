package alerts_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/outbox-canary/outbox-canary/alerts"
)

var update = flag.Bool("update", false, "rewrite examples/rules from the generator")

// TestExampleRulesAreUpToDate fails when the checked-in example rules and
// Alertmanager configuration drift from what the generator makes of
// examples/outbox-canary.yml.
func TestExampleRulesAreUpToDate(t *testing.T) {
	_, m := loadModel(t, exampleConfig)
	for _, tc := range []struct{ name, format, path string }{
		{"the plain rule file matches the generator", alerts.FormatRules, "../examples/rules/outbox-canary.rules.yml"},
		{"the PrometheusRule matches the generator", alerts.FormatPrometheusRule, "../examples/rules/outbox-canary.prometheusrule.yml"},
		{"the Alertmanager configuration matches the generator", alerts.FormatAlertmanager, "../examples/rules/outbox-canary.alertmanager.yml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := alerts.Render(m, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.MkdirAll(filepath.Dir(tc.path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(tc.path, want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatalf("%v: run make generate", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s drifted from the generator: run make generate (or go test ./alerts -run TestExampleRulesAreUpToDate -update)", tc.path)
			}
			if !bytes.HasPrefix(got, []byte(alerts.Header)) {
				t.Errorf("%s does not start with %q", tc.path, alerts.Header)
			}
		})
	}
}
