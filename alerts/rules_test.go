package alerts_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/slo"
)

func TestGeneratedRules(t *testing.T) {
	cfg, m := loadModel(t, exampleConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	data, err := alerts.Marshal(rf, alerts.FormatRules, cfg.Alerting.Labels)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	t.Run("thresholds are PromQL expressions, never floats with noise", func(t *testing.T) {
		if noise := regexp.MustCompile(`\d\.\d{7,}`).FindString(text); noise != "" {
			t.Errorf("float noise in the rules: %s", noise)
		}
		for _, want := range []string{"> (14.4 * (1 - 0.999))", "> (13.44 * (1 - 0.995))", "> ((14 / 15) * (1 - 0.995))"} {
			if !strings.Contains(text, want) {
				t.Errorf("rules lack %q", want)
			}
		}
	})
	t.Run("the 28d pipeline records its period under Sloth's name for 28d", func(t *testing.T) {
		if !strings.Contains(text, "record: slo:sli_error:ratio_rate4w") || !strings.Contains(text, "expr: vector(28)") {
			t.Error("no slo:sli_error:ratio_rate4w or slo:time_period:days of 28 for the 28d pipeline")
		}
	})
	t.Run("every rule carries the configured labels", func(t *testing.T) {
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Labels["team"] != "platform" {
					t.Errorf("group %s rule %s%s: no team=platform label", g.Name, r.Record, r.Alert)
				}
			}
		}
	})
	t.Run("burn alerts route by severity, pipeline, segment and owner", func(t *testing.T) {
		found := false
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != alerts.AlertErrorBudgetBurn || r.Labels["segment"] != "publish_to_consume" || r.Labels["pipeline"] != "payments" {
					continue
				}
				found = true
				if r.Labels["owner"] != "team-kafka" || (r.Labels["severity"] != "page" && r.Labels["severity"] != "ticket") {
					t.Errorf("payments publish_to_consume burn alert labels: %v", r.Labels)
				}
			}
		}
		if !found {
			t.Error("no burn alert for payments publish_to_consume")
		}
	})
	t.Run("polling pipelines get backlog alerts and CDC pipelines slot alerts, never the other way", func(t *testing.T) {
		kinds := map[string]string{"orders": "polling", "payments": "polling", "shipments": "cdc"}
		seen := map[string]bool{}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				kind := kinds[r.Labels["pipeline"]]
				switch r.Alert {
				case alerts.AlertSlotInactive:
					seen["slot "+kind] = true
				case alerts.AlertBacklogGrowing:
					seen["backlog "+kind] = true
				}
			}
		}
		if !seen["slot cdc"] || !seen["backlog polling"] {
			t.Errorf("missing alerts: %v, want slot alerts on shipments and backlog alerts on orders and payments", seen)
		}
		if seen["slot polling"] || seen["backlog cdc"] {
			t.Errorf("alerts on the wrong relay kind: %v", seen)
		}
	})
}

func TestSlotAlertsSelectTheConfiguredSlot(t *testing.T) {
	slotAlerts := map[string]bool{alerts.AlertSlotInactive: true, alerts.AlertSlotRetainedWALGrowth: true, alerts.AlertSlotWALAtRisk: true}
	exprs := func(t *testing.T, m *slo.Model, pipeline string) map[string]string {
		t.Helper()
		rf, err := alerts.Generate(m)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if slotAlerts[r.Alert] && r.Labels["pipeline"] == pipeline {
					out[r.Alert] = r.Expr
				}
			}
		}
		if len(out) != len(slotAlerts) {
			t.Fatalf("pipeline %s has slot alerts %v, want all of %v", pipeline, out, slotAlerts)
		}
		return out
	}
	t.Run("With watch.slot every slot alert selects that slot of that pipeline.", func(t *testing.T) {
		_, m := loadModel(t, exampleConfig)
		for alert, expr := range exprs(t, m, "shipments") {
			if !strings.Contains(expr, `pipeline="shipments", slot="demo_shipments"`) {
				t.Errorf("%s: %s does not select slot demo_shipments", alert, expr)
			}
		}
	})
	t.Run("Without watch.slot the slot alerts take every slot of the pipeline.", func(t *testing.T) {
		_, m := loadModel(t, exampleConfig)
		for i := range m.Pipelines {
			m.Pipelines[i].Slot = ""
		}
		for alert, expr := range exprs(t, m, "shipments") {
			if strings.Contains(expr, "slot=") || !strings.Contains(expr, `pipeline="shipments"`) {
				t.Errorf("%s: %s, want a selector on the pipeline alone", alert, expr)
			}
		}
	})
}

func TestMarshalRejectsAnUnknownFormat(t *testing.T) {
	_, err := alerts.Marshal(&alerts.RuleFile{}, "jsonnet", nil)
	if err == nil || !strings.Contains(err.Error(), `format "jsonnet"`) {
		t.Fatalf("error = %v, want one naming the format", err)
	}
}
