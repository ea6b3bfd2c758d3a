// Package alerts turns the SLO model into Prometheus rules: Sloth-compatible
// recording rules per pipeline and segment, multiwindow multi-burn-rate
// alerts, and the alerts beyond the SLOs (stall, dead man, backlog,
// replication slot, long transactions, clock skew).
//
// It writes our own structs with gopkg.in/yaml.v3: no Prometheus server or
// Kubernetes modules. Validity is proven by promtool in the tests.
package alerts

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/slo"
)

// RuleFile is a Prometheus rule file (and a PrometheusRule's spec).
type RuleFile struct {
	Groups []Group `yaml:"groups"`
}

// Group is a rule group; its rules are evaluated in order.
type Group struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is a recording rule (Record set) or an alerting rule (Alert set).
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Alert names. Each has a section in docs/alerts.md whose anchor is the
// lower-cased name (see Anchor).
const (
	AlertErrorBudgetBurn       = "OutboxCanaryErrorBudgetBurn"
	AlertStalled               = "OutboxCanaryStalled"
	AlertInsertsFailing        = "OutboxCanaryInsertsFailing"
	AlertProberAbsent          = "OutboxCanaryProberAbsent"
	AlertClockSkewSuspected    = "OutboxCanaryClockSkewSuspected"
	AlertOldestUnpublished     = "OutboxOldestUnpublishedTooOld"
	AlertBacklogGrowing        = "OutboxBacklogGrowing"
	AlertSlotInactive          = "OutboxReplicationSlotInactive"
	AlertSlotRetainedWALGrowth = "OutboxReplicationSlotRetainedWALGrowing"
	AlertSlotWALAtRisk         = "OutboxReplicationSlotWALAtRisk"
	AlertLongTransaction       = "OutboxLongTransaction"
)

// AlertNames lists every alert the generator can emit, in the order of
// docs/alerts.md.
func AlertNames() []string {
	return []string{
		AlertErrorBudgetBurn, AlertStalled, AlertInsertsFailing, AlertProberAbsent,
		AlertOldestUnpublished, AlertBacklogGrowing,
		AlertSlotInactive, AlertSlotRetainedWALGrowth, AlertSlotWALAtRisk,
		AlertLongTransaction, AlertClockSkewSuspected,
	}
}

// Anchor is the docs/alerts.md anchor of an alert: GitHub lower-cases the
// heading.
func Anchor(alert string) string { return strings.ToLower(alert) }

// Label names the rules set besides slo.Label*.
const (
	labelSeverity      = "severity"
	labelSlothID       = "sloth_id"
	labelSlothService  = "sloth_service"
	labelSlothSLO      = "sloth_slo"
	labelSlothWindow   = "sloth_window"
	labelSlothSeverity = "sloth_severity"
	labelBurnWindow    = "burn_window"
	labelJob           = "job"
	labelWALStatus     = "wal_status"
)

// Generate builds the rules of a model: per SLO the Sloth-compatible
// recordings and burn-rate alerts, per pipeline the watcher alerts, and the
// prober's dead man.
func Generate(m *slo.Model) (*RuleFile, error) {
	g := generator{m: m}
	var rf RuleFile
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			// One group per SLO, unlike Sloth's three: rules of a group run
			// in order, so the alerts read this evaluation's ratios rather
			// than the previous one's, whatever order groups run in.
			grp := Group{Name: "outbox-canary-slo-" + s.ID}
			grp.Rules = append(grp.Rules, g.sliRecordings(s)...)
			grp.Rules = append(grp.Rules, g.metaRecordings(s)...)
			grp.Rules = append(grp.Rules, g.burnAlerts(s)...)
			rf.Groups = append(rf.Groups, grp)
		}
		rf.Groups = append(rf.Groups, g.pipelineAlerts(p))
	}
	rf.Groups = append(rf.Groups, g.proberAlerts())
	seen := map[string]bool{}
	for _, grp := range rf.Groups {
		if seen[grp.Name] {
			return nil, fmt.Errorf("rule group %q generated twice: pipeline and segment names collide", grp.Name)
		}
		seen[grp.Name] = true
	}
	return &rf, nil
}

type generator struct{ m *slo.Model }

// labels merges the configured extra labels (alerting.labels) under the
// rule's own; validation keeps the two apart.
func (g generator) labels(own map[string]string) map[string]string {
	out := maps.Clone(g.m.Alerting.Labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, own)
	return out
}

func (g generator) runbook(alert string) string {
	return g.m.Alerting.RunbookURL + "#" + Anchor(alert)
}

// selector renders a PromQL selector; matchers are name, value pairs.
func selector(metric string, matchers ...string) string {
	var b strings.Builder
	b.WriteString(metric)
	b.WriteString("{")
	for i := 0; i+1 < len(matchers); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", matchers[i], matchers[i+1])
	}
	b.WriteString("}")
	return b.String()
}

// seconds prints a duration in seconds for PromQL, without noise.
func seconds(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", d.Seconds()), "0"), ".")
}

// lines joins expression lines with newlines, so yaml.v3 writes a literal
// block a human can read.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
