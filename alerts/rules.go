// Package alerts turns the SLO model into Prometheus rules: Sloth-compatible
// recording rules per pipeline and segment, one multiwindow multi-burn-rate
// page and ticket per SLO (both written once per SLO window, reading each
// SLO from the series the prober exports for it), and the alerts beyond
// the SLOs (stall, dead man,
// blind watchers and dependencies, backlog, replication slot, connector,
// consumer lag, long transactions, clock skew, forged canaries); and into
// the Alertmanager routes and inhibit rules that turn them into one page
// per incident, to the team that owns the failing stage.
//
// It writes our own structs with gopkg.in/yaml.v3: no Prometheus server or
// Kubernetes modules. Validity is proven by promtool in the tests.
package alerts

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/slo"
)

// RuleFile is a Prometheus rule file (and a PrometheusRule's spec).
type RuleFile struct {
	Groups []Group `yaml:"groups" json:"groups"`
}

// Group is a rule group; its rules are evaluated in order.
type Group struct {
	Name  string `yaml:"name" json:"name"`
	Rules []Rule `yaml:"rules" json:"rules"`
	// EveryPipeline marks the groups that read and record the series of
	// every pipeline (the SLOs', the pipelines' classes'), as against the
	// prober's own and the Kafka clusters', which record no pipeline's.
	// Not part of the rule file.
	EveryPipeline bool `yaml:"-" json:"-"`
}

// Rule is a recording rule (Record set) or an alerting rule (Alert set).
type Rule struct {
	Record string `yaml:"record,omitempty" json:"record,omitempty"`
	Alert  string `yaml:"alert,omitempty" json:"alert,omitempty"`
	Expr   string `yaml:"expr" json:"expr"`
	For    string `yaml:"for,omitempty" json:"for,omitempty"`
	// KeepFiringFor (Prometheus 2.42+) keeps an alert firing after its
	// condition clears: long enough for the dead man or a blind watcher
	// to fire and inhibit it, so losing sight of an incident never reads
	// as its end.
	KeepFiringFor string            `yaml:"keep_firing_for,omitempty" json:"keep_firing_for,omitempty"`
	Labels        map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Annotations   map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
}

// Alert names. Each has a section in docs/alerts.md whose anchor is the
// lower-cased name (see Anchor).
const (
	AlertErrorBudgetBurn       = "OutboxCanaryErrorBudgetBurn"
	AlertStalled               = "OutboxCanaryStalled"
	AlertInsertsFailing        = "OutboxCanaryInsertsFailing"
	AlertProberAbsent          = "OutboxCanaryProberAbsent"
	AlertPipelinesUnmeasured   = "OutboxCanaryPipelinesUnmeasured"
	AlertRedundancyLost        = "OutboxCanaryRedundancyLost"
	AlertRulesOutdated         = "OutboxCanaryRulesOutdated"
	AlertClockSkewSuspected    = "OutboxCanaryClockSkewSuspected"
	AlertOldestUnpublished     = "OutboxOldestUnpublishedTooOld"
	AlertBacklogGrowing        = "OutboxBacklogGrowing"
	AlertSlotInactive          = "OutboxReplicationSlotInactive"
	AlertSlotRetainedWALGrowth = "OutboxReplicationSlotRetainedWALGrowing"
	AlertSlotWALAtRisk         = "OutboxReplicationSlotWALAtRisk"
	AlertBinlogConnectorBehind = "OutboxBinlogConnectorFallingBehind"
	AlertBinlogFileAtRisk      = "OutboxBinlogUnreadFileAtRisk"
	AlertLongTransaction       = "OutboxLongTransaction"
	AlertWatcherFailing        = "OutboxCanaryWatcherFailing"
	AlertDependencyDown        = "OutboxCanaryDependencyDown"
	AlertBadSignatures         = "OutboxCanaryBadSignatures"
	AlertConnectorTaskFailed   = "OutboxConnectorTaskFailed"
	AlertConsumerLag           = "OutboxConsumerGroupLagOverBudget"
)

// AlertNames lists every alert the generator can emit, in the order of
// docs/alerts.md.
func AlertNames() []string {
	return []string{
		AlertStalled, AlertErrorBudgetBurn, AlertInsertsFailing, AlertProberAbsent, AlertPipelinesUnmeasured, AlertRedundancyLost, AlertRulesOutdated,
		AlertDependencyDown, AlertWatcherFailing,
		AlertOldestUnpublished, AlertBacklogGrowing,
		AlertConnectorTaskFailed, AlertSlotInactive, AlertSlotRetainedWALGrowth, AlertSlotWALAtRisk,
		AlertBinlogConnectorBehind, AlertBinlogFileAtRisk,
		AlertConsumerLag, AlertLongTransaction, AlertClockSkewSuspected, AlertBadSignatures,
	}
}

// alertNamePrefix starts every alert name: the Alertmanager routes and
// inhibit rules select our alerts by it.
const alertNamePrefix = "Outbox"

// Anchor is the docs/alerts.md anchor of an alert: GitHub lower-cases the
// heading.
func Anchor(alert string) string { return strings.ToLower(alert) }

// Label names the rules set besides slo.Label*.
const (
	labelSeverity      = "severity"
	labelSlothID       = slo.LabelSlothID
	labelSlothService  = slo.LabelSlothService
	labelSlothSLO      = slo.LabelSlothSLO
	labelSlothWindow   = "sloth_window"
	labelSlothSeverity = "sloth_severity"
	labelJob           = "job"
	labelWALStatus     = "wal_status"
	labelConnector     = "connector"
)

// Generate builds the rules of a model: per SLO window the Sloth-compatible
// recordings and burn-rate alerts of its SLOs, per pipeline the stall and
// watcher alerts, and the prober's dead man.
func Generate(m *slo.Model) (*RuleFile, error) {
	g := generator{m: m}
	var rf RuleFile
	// One group for every SLO, unlike Sloth's three per SLO: rules of a
	// group run in order, so the rules that read this evaluation's ratios
	// read them rather than the previous one's. Written per SLO window
	// and burn class, then merged where alike.
	slos := Group{Name: "outbox-canary-slo", EveryPipeline: true}
	for _, c := range sloClasses(m) {
		slos.Rules = append(slos.Rules, g.sliRecordings(c)...)
		slos.Rules = append(slos.Rules, g.metaRecordings(c)...)
		for _, b := range burnClasses(m, c) {
			slos.Rules = append(slos.Rules, g.burnAlerts(b)...)
		}
	}
	slos.Rules = mergeAlike(slos.Rules)
	if len(slos.Rules) > 0 {
		rf.Groups = append(rf.Groups, slos)
	}
	// The alerts beyond the SLOs: one group for every pipeline, written
	// per pipeline class and merged where alike, as the SLOs' are.
	pipelines := Group{Name: "outbox-canary-pipelines", EveryPipeline: true}
	for _, c := range pipelineClasses(m) {
		pipelines.Rules = append(pipelines.Rules, g.pipelineAlerts(c).Rules...)
	}
	pipelines.Rules = mergeAlike(pipelines.Rules)
	if len(pipelines.Rules) > 0 {
		rf.Groups = append(rf.Groups, pipelines)
	}
	rf.Groups = append(rf.Groups,
		Group{Name: "outbox-canary-pipelines-measured", EveryPipeline: true, Rules: []Rule{g.unmeasuredRecording()}},
		g.kafkaAlerts(), g.proberAlerts())
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

// mergeAlike merges the rules that differ in their expression alone (the
// same record or alert, labels, for, keep_firing_for and annotations)
// into one, the expressions OR-ed, at the first one's place: rules of
// several classes that read disjoint series. Two recording rules of one
// name and labels would write the same series (promtool check rules
// lints them as duplicates); alerts that differ in more (a burn page's
// for:, its text) stay apart.
func mergeAlike(rules []Rule) []Rule {
	var out []Rule
	index := map[string]int{}
	for _, r := range rules {
		key, _ := json.Marshal(Rule{Record: r.Record, Alert: r.Alert, For: r.For, KeepFiringFor: r.KeepFiringFor, Labels: r.Labels, Annotations: r.Annotations})
		i, ok := index[string(key)]
		if !ok {
			index[string(key)] = len(out)
			out = append(out, r)
			continue
		}
		// or binds loosest of PromQL's operators: what it joins needs no
		// parentheses; they only show where each part begins.
		out[i].Expr = lines(strings.TrimSuffix(out[i].Expr, "\n"), "or", "(", indentText(r.Expr), ")")
	}
	return out
}

// labels merges the configured extra labels (alerting.labels) under the
// rule's own; validation keeps the two apart.
//
// The scope's labels (alerting.selector) are set too: the expressions keep
// them, but a recording of a constant (vector(...)) has none of its own.
func (g generator) labels(own map[string]string) map[string]string {
	out := maps.Clone(g.m.Alerting.Labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, g.m.Scope)
	maps.Copy(out, own)
	return out
}

func (g generator) runbook(alert string) string {
	return g.m.Alerting.RunbookURL + "#" + Anchor(alert)
}

// severity is the severity label value of a level (config.SeverityPage
// or config.SeverityTicket), as alerting.severities names it.
func (g generator) severity(level string) string { return g.m.Alerting.Severities.Name(level) }

// annotations are what every alert says besides its summary and
// description: the runbook, the diagnose command to run first, and,
// with alerting.dashboard_url, the dashboard to open.
type annotations struct {
	alert, summary, description string
	// pipelineScoped alerts carry a pipeline label: diagnose and the
	// dashboard are narrowed to it.
	pipelineScoped bool
	// dashboard is the UID of the dashboard to link; segment adds the
	// segment variable.
	dashboard string
	segment   bool
}

func (g generator) annotate(a annotations) map[string]string {
	out := map[string]string{
		"summary":     a.summary,
		"description": a.description,
		"runbook_url": g.runbook(a.alert),
	}
	diagnose := "outbox-canary diagnose --config.file=" + g.m.Alerting.ProberConfigFile
	if a.pipelineScoped {
		diagnose += " --pipeline {{ $labels." + slo.LabelPipeline + " }}"
	}
	out["diagnose"] = diagnose
	if base := strings.TrimSuffix(g.m.Alerting.DashboardURL, "/"); base != "" && a.dashboard != "" {
		u := base + "/d/" + a.dashboard
		if a.pipelineScoped {
			u += "?var-pipeline={{ $labels." + slo.LabelPipeline + " }}"
			if a.segment {
				u += "&var-segment={{ $labels." + slo.LabelSegment + " }}"
			}
		}
		out["dashboard_url"] = u
	}
	return out
}

// keepFiringFor is how long an alert on the prober's series keeps firing
// after they vanish or clear: past the moment the alerts that explain a
// loss of sight (the dead man, a failing watcher, a lost dependency) have
// fired and reached Alertmanager, which then inhibits the stale alert so
// that its end is never sent as "resolved".
func (g generator) keepFiringFor() time.Duration {
	a := g.m.Alerting
	blind := max(time.Duration(a.ProberAbsentFor)+proberAbsentGrace, watcherFailingFor, dependencyDownFor)
	return blind + keepFiringMargin
}

// keepFiringForSource is keepFiringFor for the alerts that inhibit another
// team's alerts (the stall, the segments' pages): they must outlive what
// they inhibit, or a page whose cause was already handled surfaces when
// they resolve.
func (g generator) keepFiringForSource() time.Duration {
	return g.keepFiringFor() + inhibitSourceMargin
}

const (
	// keepFiringMargin lets the alert that explains a loss of sight reach
	// Alertmanager before the alert it inhibits resolves.
	keepFiringMargin = time.Minute
	// inhibitSourceMargin is how much longer an inhibiting alert keeps
	// firing than what it inhibits: more than the offset between two rule
	// groups' evaluations and a notification tick.
	inhibitSourceMargin = 2 * time.Minute
)

// selector renders a PromQL selector; matchers are name, value pairs.
func selector(metric string, matchers ...string) string {
	if len(matchers) == 0 {
		return metric
	}
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

// selectorOf renders a PromQL selector of matchers already written out
// (segment!~"a|b").
func selectorOf(metric string, matchers ...string) string {
	if len(matchers) == 0 {
		return metric
	}
	return metric + "{" + strings.Join(matchers, ", ") + "}"
}

// seconds prints a duration in seconds for PromQL, without noise.
func seconds(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", d.Seconds()), "0"), ".")
}

// lines joins expression lines with newlines, so yaml.v3 writes a literal
// block a human can read.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
