package alerts_test

import (
	"os"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/alerts"
)

// runbookHeadings are the parts of every alert's runbook, in order: the
// shape of the Prometheus Operator's runbooks.
var runbookHeadings = []string{"### Meaning", "### Impact", "### Diagnosis", "### Mitigation"}

// TestEveryAlertHasARunbookSection keeps runbook_url anchors and
// docs/alerts.md in step, and every runbook whole: its four parts in
// order, each saying something, and a Diagnosis with exact queries or
// commands.
func TestEveryAlertHasARunbookSection(t *testing.T) {
	data, err := os.ReadFile("../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	var current string
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			current = strings.ToLower(strings.TrimSpace(h))
			sections[current] = ""
			continue
		}
		if current != "" {
			sections[current] += line + "\n"
		}
	}
	for _, name := range alerts.AlertNames() {
		body, ok := sections[alerts.Anchor(name)]
		if !ok {
			t.Errorf("docs/alerts.md has no section \"## %s\" for the anchor #%s", name, alerts.Anchor(name))
			continue
		}
		parts := map[string]string{}
		last := -1
		for i, h := range runbookHeadings {
			at := strings.Index(body, "\n"+h+"\n")
			if at < 0 {
				t.Errorf("## %s: no %q", name, h)
				continue
			}
			if at < last {
				t.Errorf("## %s: %q out of order", name, h)
			}
			last = at
			end := len(body)
			if i+1 < len(runbookHeadings) {
				if next := strings.Index(body, "\n"+runbookHeadings[i+1]+"\n"); next > at {
					end = next
				}
			}
			parts[h] = body[at+len(h)+2 : end]
		}
		for h, text := range parts {
			if len(strings.Fields(text)) < 15 {
				t.Errorf("## %s: %q says almost nothing: %q", name, h, strings.TrimSpace(text))
			}
		}
		if d := parts["### Diagnosis"]; d != "" && !strings.Contains(d, "```") {
			t.Errorf("## %s: the Diagnosis has no query or command block (PromQL, SQL, Connect REST)", name)
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
