package alerts_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

func TestGeneratedRules(t *testing.T) {
	cfg, m := loadModel(t, exampleConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	data, err := alerts.Marshal(rf, alerts.FormatRules, cfg.Alerting.RuleObjectLabels())
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	t.Run("thresholds are PromQL expressions, never floats with noise", func(t *testing.T) {
		if noise := regexp.MustCompile(`\d\.\d{7,}`).FindString(text); noise != "" {
			t.Errorf("float noise in the rules: %s", noise)
		}
		for _, want := range []string{"group_left () (14.4 * (1 - max by", "group_left () (13.44 * (1 - max by", "group_left () ((14 / 15) * (1 - max by"} {
			if !strings.Contains(text, want) {
				t.Errorf("rules lack %q", want)
			}
		}
	})
	t.Run("the 28d pipeline records its period under Sloth's name for 28d", func(t *testing.T) {
		if !strings.Contains(text, "record: slo:sli_error:ratio_rate4w") || !strings.Contains(text, `outbox_canary_slo_objective_ratio{slo_window="4w"})) + 28`) {
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
	// The burn alerts of every SLO are one rule per class: the pipeline,
	// segment and owner they route by come from the SLO's objective
	// series (through its recordings), and the rule sets only the
	// severity, so nothing it sets can override them. The promtool
	// scenarios prove the routing on series (c-broker-slow pages
	// team-kafka for publish_to_consume).
	t.Run("burn alerts route by severity, and by the pipeline, segment and owner of the SLO's series", func(t *testing.T) {
		found := false
		for _, p := range m.Pipelines {
			for _, s := range p.SLOs {
				if l, _ := s.ObjectiveSeries(); s.Pipeline == "payments" && s.Segment == "publish_to_consume" {
					found = true
					if l["pipeline"] != "payments" || l["segment"] != "publish_to_consume" || l["owner"] != "team-kafka" {
						t.Errorf("payments publish_to_consume objective series labels: %v", l)
					}
				}
			}
		}
		if !found {
			t.Error("no SLO for payments publish_to_consume")
		}
		burns := 0
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != alerts.AlertErrorBudgetBurn {
					continue
				}
				burns++
				if sev := r.Labels["severity"]; (sev != "page" && sev != "ticket") || r.Labels["sloth_severity"] != sev {
					t.Errorf("%s: burn alert severity labels: %v", g.Name, r.Labels)
				}
				for _, l := range []string{"pipeline", "segment", "owner", "sloth_id"} {
					if v, ok := r.Labels[l]; ok {
						t.Errorf("%s: a burn alert sets %s=%q, which must come from the SLO's series", g.Name, l, v)
					}
				}
			}
		}
		if burns == 0 {
			t.Error("no burn alerts")
		}
	})
	// The pipelines' alerts are written for every pipeline of a class,
	// and each family selects, by the pipeline's facts on its objective
	// series, the pipelines it is for.
	t.Run("polling pipelines get backlog alerts, CDC pipelines on PostgreSQL slot alerts and on MySQL binlog alerts, never the other way", func(t *testing.T) {
		facts := map[string][]string{
			"polling":          {`relay_kind="polling"`},
			"postgres capture": {`relay_kind="cdc"`, `database_family="postgres"`},
			"mysql capture":    {`relay_kind="cdc"`, `database_family="mysql"`},
		}
		want := map[string]string{
			alerts.AlertBacklogGrowing: "polling", alerts.AlertOldestUnpublished: "polling",
			alerts.AlertSlotInactive: "postgres capture", alerts.AlertSlotRetainedWALGrowth: "postgres capture", alerts.AlertSlotWALAtRisk: "postgres capture",
			alerts.AlertBinlogConnectorBehind: "mysql capture", alerts.AlertBinlogFileAtRisk: "mysql capture",
		}
		seen := map[string]bool{}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				kind, ok := want[r.Alert]
				if r.Alert == alerts.AlertConnectorTaskFailed {
					ok, kind = true, "postgres capture"
					if strings.Contains(r.Expr, `database_family="mysql"`) {
						kind = "mysql capture"
					}
				}
				if !ok {
					continue
				}
				seen[r.Alert+" "+kind] = true
				for _, f := range facts[kind] {
					if !strings.Contains(r.Expr, f) {
						t.Errorf("%s: does not select the pipelines with %s:\n%s", r.Alert, f, r.Expr)
					}
				}
			}
		}
		for alert, kind := range want {
			if !seen[alert+" "+kind] {
				t.Errorf("no %s for the %s pipelines", alert, kind)
			}
		}
		for _, kind := range []string{"postgres capture", "mysql capture"} {
			if !seen[alerts.AlertConnectorTaskFailed+" "+kind] {
				t.Errorf("no %s for the %s pipelines", alerts.AlertConnectorTaskFailed, kind)
			}
		}
	})
	t.Run("a configuration without polling relays gets no backlog alert", func(t *testing.T) {
		_, m := loadModel(t, exampleConfig)
		m.Pipelines = slices.DeleteFunc(m.Pipelines, func(p slo.Pipeline) bool { return p.RelayKind == config.RelayPolling })
		rf, err := alerts.Generate(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == alerts.AlertBacklogGrowing || r.Alert == alerts.AlertOldestUnpublished {
					t.Errorf("%s generated without a polling pipeline", r.Alert)
				}
			}
		}
	})
}

// The slot alerts read the watched slot from the pipeline's facts: with
// watch.slot its objective series carries it and the alerts keep that
// slot's series; without, every slot of the pipeline
// (h-slot-of-another-pipeline proves it on series).
func TestSlotAlertsSelectTheConfiguredSlot(t *testing.T) {
	_, m := loadModel(t, exampleConfig)
	for _, p := range m.Pipelines {
		if p.Name != "shipments" {
			continue
		}
		if l, _ := p.SLOs[0].ObjectiveSeries(); l[slo.LabelSlot] != "demo_shipments" {
			t.Errorf("shipments' objective series carry slot %q, want demo_shipments (watch.slot)", l[slo.LabelSlot])
		}
	}
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			switch r.Alert {
			case alerts.AlertSlotInactive, alerts.AlertSlotRetainedWALGrowth, alerts.AlertSlotWALAtRisk:
				n++
				for _, want := range []string{`and on (pipeline, slot) topk by (pipeline) (1, outbox_canary_slo_objective_ratio{`, `slot!=""`, `slot=""`} {
					if !strings.Contains(r.Expr, want) {
						t.Errorf("%s does not select the watched slot (%s):\n%s", r.Alert, want, r.Expr)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("no slot alerts")
	}
}

func TestMarshalRejectsAnUnknownFormat(t *testing.T) {
	_, err := alerts.Marshal(&alerts.RuleFile{}, "jsonnet", nil)
	if err == nil || !strings.Contains(err.Error(), `format "jsonnet"`) {
		t.Fatalf("error = %v, want one naming the format", err)
	}
}

// minimalConfig is a one-pipeline configuration to vary the alerting
// section of.
const minimalConfig = `
instance_id: test
signing_key: {env: KEY}
pipelines:
  - name: orders
    database: {dsn: {env: DSN}}
    kafka: {brokers: ["k:9092"]}
    canary: {schedule: "@every 10s"}
    budgets: {end_to_end: 2s, commit_to_publish: 1s}
    owners: {default: team-orders, commit_to_publish: team-relay}
`

func modelOf(t *testing.T, yaml string) *slo.Model {
	t.Helper()
	cfg, err := config.Load([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOnePageAndOneTicketPerSLO(t *testing.T) {
	for _, path := range []string{exampleConfig, testConfig} {
		_, m := loadModel(t, path)
		rf, err := alerts.Generate(m)
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				for _, l := range []string{"sloth_window", "burn_window"} {
					if _, ok := r.Labels[l]; ok {
						t.Errorf("%s: alert %s carries the per-window label %s", path, r.Alert, l)
					}
				}
				if r.Alert != alerts.AlertErrorBudgetBurn {
					continue
				}
				for _, p := range m.Pipelines {
					for _, s := range p.SLOs {
						if burnRuleSelects(t, r, s) {
							count[s.ID+" "+r.Labels["severity"]]++
						}
					}
				}
			}
		}
		for _, p := range m.Pipelines {
			for _, s := range p.SLOs {
				for _, sev := range []string{"page", "ticket"} {
					if n := count[s.ID+" "+sev]; n != 1 {
						t.Errorf("%s: SLO %s has %d %s alerts, want 1", path, s.ID, n, sev)
					}
				}
			}
		}
	}
}

func TestEveryAlertSaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name          string
		config        string
		wantDashboard bool
	}{
		{"With alerting.dashboard_url every alert links its dashboard.", testConfig, true},
		{"Without alerting.dashboard_url no alert links a dashboard.", exampleConfig, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m := loadModel(t, tc.config)
			rf, err := alerts.Generate(m)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range rf.Groups {
				for _, r := range g.Rules {
					if r.Alert == "" {
						continue
					}
					for _, a := range []string{"summary", "description", "runbook_url", "diagnose"} {
						if r.Annotations[a] == "" {
							t.Errorf("%s in %s: no %s annotation", r.Alert, g.Name, a)
						}
					}
					if !strings.HasPrefix(r.Annotations["diagnose"], "outbox-canary diagnose --config.file=") {
						t.Errorf("%s: diagnose annotation %q", r.Alert, r.Annotations["diagnose"])
					}
					if _, scoped := r.Labels["pipeline"]; scoped && !strings.HasSuffix(r.Annotations["diagnose"], " --pipeline {{ $labels.pipeline }}") {
						t.Errorf("%s: diagnose annotation %q does not name the pipeline", r.Alert, r.Annotations["diagnose"])
					}
					if _, ok := r.Annotations["dashboard_url"]; ok != tc.wantDashboard {
						t.Errorf("%s: dashboard_url %q, want one: %v", r.Alert, r.Annotations["dashboard_url"], tc.wantDashboard)
					}
				}
			}
		})
	}
}

// TestAlertsOutliveTheirEvidence checks keep_firing_for: every alert on
// the prober's series keeps firing past the dead man (prober_absent_for
// plus its 1m grace) and the blind-watcher alerts; the alerts that inhibit
// another team's keep firing longer than those they inhibit (the stall's,
// 9m, is also longer than the 5m a stall incident lasts after its last
// stall, so it fires through the incident).
func TestAlertsOutliveTheirEvidence(t *testing.T) {
	_, m := loadModel(t, testConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	deadMan := time.Duration(m.Alerting.ProberAbsentFor) + time.Minute
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Alert == alerts.AlertProberAbsent {
				if r.KeepFiringFor != "" {
					t.Errorf("the dead man keeps firing for %s after the prober is back", r.KeepFiringFor)
				}
				continue
			}
			keep, err := model.ParseDuration(r.KeepFiringFor)
			if err != nil {
				t.Errorf("%s %v: keep_firing_for %q: %v", r.Alert, r.Labels, r.KeepFiringFor, err)
				continue
			}
			if time.Duration(keep) <= deadMan {
				t.Errorf("%s %v: keep_firing_for %s, not past the dead man's %s", r.Alert, r.Labels, r.KeepFiringFor, deadMan)
			}
			// A burn page inhibits when its SLOs' segment is one a canary
			// crosses (the rule selects commit_to_publish, not end_to_end).
			source := r.Alert == alerts.AlertStalled || (r.Alert == alerts.AlertErrorBudgetBurn && r.Labels["severity"] == "page" &&
				burnRuleSelectsSegment(t, r, "commit_to_publish") && !burnRuleSelectsSegment(t, r, "end_to_end"))
			if want := 7 * time.Minute; !source && time.Duration(keep) != want {
				t.Errorf("%s %v: keep_firing_for %s, want %s", r.Alert, r.Labels, r.KeepFiringFor, want)
			}
			if want := 9 * time.Minute; source && time.Duration(keep) != want {
				t.Errorf("%s %v inhibits other teams' alerts: keep_firing_for %s, want %s", r.Alert, r.Labels, r.KeepFiringFor, want)
			}
		}
	}
}

func TestAlertingOptionsShapeTheOutput(t *testing.T) {
	t.Run("Severity names from alerting.severities label the alerts and route them.", func(t *testing.T) {
		m := modelOf(t, minimalConfig+"alerting:\n  severities: {page: critical, ticket: warning}\n")
		rf, err := alerts.Generate(m)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					seen[r.Labels["severity"]] = true
				}
			}
		}
		if !seen["critical"] || !seen["warning"] || seen["page"] || seen["ticket"] {
			t.Errorf("severities in the rules: %v, want critical and warning only", seen)
		}
		am, err := alerts.AlertmanagerConfig(m, alerts.AlertmanagerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`severity="critical"`, `severity="warning"`, "receiver: team-relay-critical"} {
			if !strings.Contains(string(am), want) {
				t.Errorf("the Alertmanager configuration lacks %s", want)
			}
		}
		if strings.Contains(string(am), `severity="page"`) {
			t.Error("the Alertmanager configuration still matches severity=\"page\"")
		}
	})
	t.Run("prometheusrule_labels label the PrometheusRule and no alert.", func(t *testing.T) {
		m := modelOf(t, minimalConfig+"alerting:\n  labels: {env: prod}\n  prometheusrule_labels: {release: kube-prometheus-stack, app.kubernetes.io/part-of: outbox-canary}\n")
		out, err := alerts.Render(m, alerts.FormatPrometheusRule)
		if err != nil {
			t.Fatal(err)
		}
		objects, _ := decodePrometheusRules(t, out)
		for _, pr := range objects {
			if want := map[string]string{"release": "kube-prometheus-stack", "app.kubernetes.io/part-of": "outbox-canary"}; !maps.Equal(pr.Metadata.Labels, want) {
				t.Errorf("%s: metadata labels %v, want %v", pr.Metadata.Name, pr.Metadata.Labels, want)
			}
			for _, g := range pr.Spec.Groups {
				for _, r := range g.Rules {
					if _, ok := r.Labels["release"]; ok {
						t.Errorf("rule %s%s carries the resource's release label", r.Record, r.Alert)
					}
					if r.Labels["env"] != "prod" {
						t.Errorf("rule %s%s lacks alerting.labels' env", r.Record, r.Alert)
					}
				}
			}
		}
	})
	t.Run("Without prometheusrule_labels the PrometheusRule keeps alerting.labels, as before the field existed.", func(t *testing.T) {
		m := modelOf(t, minimalConfig+"alerting:\n  labels: {release: prom}\n")
		out, err := alerts.Render(m, alerts.FormatPrometheusRule)
		if err != nil {
			t.Fatal(err)
		}
		objects, _ := decodePrometheusRules(t, out)
		for _, pr := range objects {
			if pr.Metadata.Labels["release"] != "prom" {
				t.Errorf("%s: metadata labels %v, want release: prom", pr.Metadata.Name, pr.Metadata.Labels)
			}
		}
	})
	for _, tc := range []struct{ name, alerting, wantErr string }{
		{"Two severities with one name are refused.", "  severities: {page: x, ticket: x}\n", `severities: page and ticket are both "x"`},
		{"A PrometheusRule label that Kubernetes refuses is refused.", "  prometheusrule_labels: {\"-bad\": x}\n", "prometheusrule_labels.-bad: not a Kubernetes label key"},
		{"A dashboard URL that would break a template is refused.", "  dashboard_url: \"https://g/{{ x }}\"\n", "dashboard_url:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load([]byte(minimalConfig + "alerting:\n" + tc.alerting))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRenderRejectsAnUnknownFormat(t *testing.T) {
	_, m := loadModel(t, testConfig)
	_, err := alerts.Render(m, "jsonnet")
	if err == nil || !strings.Contains(err.Error(), `format "jsonnet": must be one of rules, prometheusrule, alertmanager`) {
		t.Fatalf("error = %v, want one naming the formats", err)
	}
}

// TestSLORulesRecordEachSeriesOnce: the rules written per SLO window and
// burn class are merged where alike, so no two recording rules of the
// SLOs' group write the same name and labels (promtool check rules lints
// those as duplicates: two rules writing one series).
func TestSLORulesRecordEachSeriesOnce(t *testing.T) {
	for _, path := range []string{exampleConfig, testConfig} {
		_, m := loadModel(t, path)
		rf, err := alerts.Generate(m)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, g := range rf.Groups {
			if !g.EveryPipeline {
				continue
			}
			for _, r := range g.Rules {
				if r.Record == "" {
					continue
				}
				key := r.Record + fmt.Sprint(r.Labels)
				if seen[key] {
					t.Errorf("%s: %s %v is recorded by two rules", path, r.Record, r.Labels)
				}
				seen[key] = true
			}
		}
		if len(seen) == 0 {
			t.Errorf("%s: no recording rules of every pipeline", path)
		}
	}
}
