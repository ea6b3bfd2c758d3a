package alerts_test

import (
	"os"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/alerts"
)

// TestEveryAlertHasARunbookSection keeps runbook_url anchors and
// docs/alerts.md in step.
func TestEveryAlertHasARunbookSection(t *testing.T) {
	data, err := os.ReadFile("../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	for _, name := range alerts.AlertNames() {
		if !headings[alerts.Anchor(name)] {
			t.Errorf("docs/alerts.md has no section \"## %s\" for the anchor #%s", name, alerts.Anchor(name))
		}
	}
	// And every alert the generator emits is one of AlertNames.
	_, m := loadModel(t, testConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, n := range alerts.AlertNames() {
		known[n] = true
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !known[r.Alert] {
				t.Errorf("alert %s is not in AlertNames (and so not checked against the docs)", r.Alert)
			}
			if r.Alert != "" && !strings.HasSuffix(r.Annotations["runbook_url"], "#"+alerts.Anchor(r.Alert)) {
				t.Errorf("alert %s: runbook_url %q does not end in its anchor", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
}
