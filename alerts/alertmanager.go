package alerts

import (
	"bytes"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// AlertmanagerOptions shape the generated Alertmanager configuration.
type AlertmanagerOptions struct {
	// GroupWait, GroupInterval and RepeatInterval are set on the
	// outbox-canary route; zero leaves Alertmanager's defaults (30s, 5m,
	// 4h) or those of the route you hang it under.
	GroupWait, GroupInterval, RepeatInterval time.Duration
	// WebhookURL, when set, gives every receiver a webhook at the URL it
	// returns for the receiver's name. Unset, receivers have no
	// integration: fill in your PagerDuty, Slack or e-mail configs.
	WebhookURL func(receiver string) string
}

// ReceiverName is the Alertmanager receiver of an owner's alerts of one
// severity (a value of the severity label): "team-relay-page".
func ReceiverName(owner, severity string) string { return owner + "-" + severity }

// UnownedReceiver receives the alerts that carry no owner (the dead man
// when alerting.prober_owner is unset).
const UnownedReceiver = "outbox-canary"

// AlertmanagerConfig generates an Alertmanager configuration from the
// model: one route per owner and severity under a route that takes every
// outbox-canary alert, grouped by pipeline, and the inhibit rules that
// make one incident one page for the team whose stage failed.
//
// It is a complete configuration that `amtool check-config` accepts; to
// use it beside your own alerts, hang its route.routes[0] under your
// route and append its inhibit_rules and receivers (filling the receivers
// in).
func AlertmanagerConfig(m *slo.Model, opts AlertmanagerOptions) ([]byte, error) {
	c := amBuilder{m: m, sev: m.Alerting.Severities}
	cfg := amConfig{
		Route: amRoute{
			Receiver: UnownedReceiver,
			Routes:   []amRoute{c.route(opts)},
		},
		InhibitRules: c.inhibitRules(),
		Receivers:    c.receivers(opts),
	}
	var doc yaml.Node
	if err := doc.Encode(cfg); err != nil {
		return nil, fmt.Errorf("alertmanager config: %w", err)
	}
	commentInhibitRules(&doc, cfg.InhibitRules)
	var buf bytes.Buffer
	buf.WriteString(Header)
	buf.WriteString("# Alertmanager routes and inhibit rules for the alerts of `outbox-canary rules`.\n")
	buf.WriteString("# Fill in the receivers; to keep your own configuration, hang route.routes[0]\n")
	buf.WriteString("# under your route and append inhibit_rules and receivers (docs/alerts.md).\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("alertmanager config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("alertmanager config: %w", err)
	}
	return buf.Bytes(), nil
}

type amConfig struct {
	Route        amRoute         `yaml:"route"`
	InhibitRules []amInhibitRule `yaml:"inhibit_rules"`
	Receivers    []amReceiver    `yaml:"receivers"`
}

type amRoute struct {
	Receiver       string    `yaml:"receiver,omitempty"`
	Matchers       []string  `yaml:"matchers,omitempty"`
	GroupBy        []string  `yaml:"group_by,omitempty"`
	GroupWait      string    `yaml:"group_wait,omitempty"`
	GroupInterval  string    `yaml:"group_interval,omitempty"`
	RepeatInterval string    `yaml:"repeat_interval,omitempty"`
	Routes         []amRoute `yaml:"routes,omitempty"`
}

type amInhibitRule struct {
	SourceMatchers []string `yaml:"source_matchers"`
	TargetMatchers []string `yaml:"target_matchers"`
	Equal          []string `yaml:"equal,omitempty"`
	// why becomes the rule's comment in the file.
	why string
}

type amReceiver struct {
	Name           string            `yaml:"name"`
	WebhookConfigs []amWebhookConfig `yaml:"webhook_configs,omitempty"`
}

type amWebhookConfig struct {
	URL string `yaml:"url"`
}

type amBuilder struct {
	m   *slo.Model
	sev config.Severities
}

// owners lists every owner an alert can carry, sorted.
func (c amBuilder) owners() []string {
	set := map[string]bool{}
	for _, p := range c.m.Pipelines {
		set[p.DefaultOwner] = true
		for _, o := range p.Owners {
			set[o] = true
		}
		for _, s := range p.SLOs {
			set[s.Owner] = true
		}
	}
	if o := c.m.Alerting.ProberOwner; o != "" {
		set[o] = true
	}
	delete(set, "")
	return slices.Sorted(maps.Keys(set))
}

// deploymentLabels are the alerting.labels keys and the scope's labels
// (alerting.selector): they tell this deployment's alerts from another's
// in one Alertmanager, so groups and inhibitions never mix two.
func (c amBuilder) deploymentLabels() []string {
	keys := append(slices.Collect(maps.Keys(c.m.Alerting.Labels)), c.m.Scope.Labels()...)
	slices.Sort(keys)
	return keys
}

func (c amBuilder) route(opts AlertmanagerOptions) amRoute {
	r := amRoute{
		Receiver: UnownedReceiver,
		Matchers: []string{matchRegexp(labelAlertname, regexp.QuoteMeta(alertNamePrefix)+".+")},
		// One group per pipeline for each owner and severity, and one per
		// stall incident: a stall's page (OutboxCanaryStalled, named by
		// its stalled_since label) is a group of its own, so a second one
		// notifies after group_wait as a new group (a new incident for a
		// pager that deduplicates by group key) even while the first
		// stall's burn pages, or its own resolved alert that Prometheus
		// resends for 15 minutes, keep the first's groups alive. The
		// rules hold back the alerts a stall sets off (its burn, backlog,
		// slot and connector alerts) while it lasts, so the stall is one
		// notification. Every other alert has no stalled_since and
		// groups by pipeline.
		GroupBy:        append([]string{slo.LabelPipeline, LabelStalledSince}, c.deploymentLabels()...),
		GroupWait:      promDuration(opts.GroupWait),
		GroupInterval:  promDuration(opts.GroupInterval),
		RepeatInterval: promDuration(opts.RepeatInterval),
	}
	for _, o := range c.owners() {
		for _, level := range []string{config.SeverityPage, config.SeverityTicket} {
			sev := c.sev.Name(level)
			r.Routes = append(r.Routes, amRoute{
				Receiver: ReceiverName(o, sev),
				Matchers: []string{match(slo.LabelOwner, o), match(labelSeverity, sev)},
			})
		}
	}
	return r
}

func (c amBuilder) receivers(opts AlertmanagerOptions) []amReceiver {
	names := []string{UnownedReceiver}
	for _, o := range c.owners() {
		names = append(names, ReceiverName(o, c.sev.Page), ReceiverName(o, c.sev.Ticket))
	}
	out := make([]amReceiver, 0, len(names))
	for _, n := range names {
		r := amReceiver{Name: n}
		if opts.WebhookURL != nil {
			r.WebhookConfigs = []amWebhookConfig{{URL: opts.WebhookURL(n)}}
		}
		out = append(out, r)
	}
	return out
}

// watcherAlertSet is a watcher and the alerts that read its gauges.
type watcherAlertSet struct {
	watcher string
	alerts  []string
}

// watcherAlerts are the alerts that read each watcher's gauges.
var watcherAlerts = []watcherAlertSet{
	{slo.WatcherBacklog, []string{AlertOldestUnpublished, AlertBacklogGrowing}},
	{slo.WatcherTransactions, []string{AlertLongTransaction}},
	{slo.WatcherReplicationSlots, []string{AlertSlotInactive, AlertSlotRetainedWALGrowth, AlertSlotWALAtRisk}},
	{slo.WatcherConsumerLag, []string{AlertConsumerLag}},
	{slo.WatcherConnector, []string{AlertConnectorTaskFailed}},
}

// stallConsequences are the alerts a stall sets off by itself: with
// nothing published, the burns, the backlog and the slot and connector
// symptoms of the same stop.
var stallConsequences = []string{
	AlertErrorBudgetBurn, AlertOldestUnpublished, AlertBacklogGrowing,
	AlertConnectorTaskFailed, AlertSlotInactive, AlertSlotRetainedWALGrowth,
}

func (c amBuilder) inhibitRules() []amInhibitRule {
	keys := c.deploymentLabels()
	withPipeline := append([]string{slo.LabelPipeline}, keys...)
	ours := matchRegexp(labelAlertname, regexp.QuoteMeta(alertNamePrefix)+".+")
	var pipelines []string
	for _, p := range c.m.Pipelines {
		pipelines = append(pipelines, regexp.QuoteMeta(p.Name))
	}
	rules := []amInhibitRule{{
		why:            "The prober is gone: what it last saw is no news, and an incident it can no longer see must not read as resolved.",
		SourceMatchers: []string{match(labelAlertname, AlertProberAbsent)},
		TargetMatchers: []string{ours, matchNot(labelAlertname, AlertProberAbsent), matchRegexp(slo.LabelPipeline, strings.Join(pipelines, "|"))},
		Equal:          keys,
	}, {
		why:            "The prober is gone: a shard's pipelines, unmeasured before the rest went, are part of that outage, and their alert, kept firing, must not read as resolved.",
		SourceMatchers: []string{match(labelAlertname, AlertProberAbsent)},
		TargetMatchers: []string{match(labelAlertname, AlertPipelinesUnmeasured)},
		Equal:          append([]string{labelJob}, keys...),
	}, {
		why:            "The prober has lost its own database connection: the pipeline is not measured, so its other alerts wait.",
		SourceMatchers: []string{match(labelAlertname, AlertDependencyDown)},
		TargetMatchers: []string{ours, matchNot(labelAlertname, AlertDependencyDown)},
		Equal:          withPipeline,
	}}
	for _, k := range kafkaClusters(c.m) {
		rules = append(rules, amInhibitRule{
			why:            fmt.Sprintf("The prober has lost Kafka (%s): its pipelines are not measured, so their other alerts wait.", k.Brokers),
			SourceMatchers: []string{match(labelAlertname, AlertDependencyDown), match(slo.LabelDependency, slo.DependencyKafka), match(LabelBrokers, k.Brokers), match(slo.LabelOwner, k.Owner)},
			TargetMatchers: []string{ours, matchNot(labelAlertname, AlertDependencyDown), matchAny(slo.LabelPipeline, k.Pipelines)},
			Equal:          keys,
		})
	}
	watchers := watcherAlerts
	if c.m.CapturesBinlog() {
		// Only with a binlog pipeline, so a configuration without one
		// keeps its Alertmanager configuration as it was.
		watchers = append(append([]watcherAlertSet{}, watcherAlerts...),
			watcherAlertSet{slo.WatcherBinlogConnector, []string{AlertBinlogConnectorBehind, AlertBinlogFileAtRisk}})
	}
	for _, w := range watchers {
		rules = append(rules, amInhibitRule{
			why:            fmt.Sprintf("The %s watcher is failing and has withdrawn its gauges: the alerts that read them are blind, not resolved.", w.watcher),
			SourceMatchers: []string{match(labelAlertname, AlertWatcherFailing), match(slo.LabelWatcher, w.watcher)},
			TargetMatchers: []string{matchAny(labelAlertname, w.alerts)},
			Equal:          withPipeline,
		})
	}
	for _, p := range c.m.Pipelines {
		consequences := stallConsequences
		if p.CapturesBinlog() {
			consequences = append(append([]string{}, stallConsequences...), AlertBinlogConnectorBehind)
		}
		seen := map[string]bool{}
		for _, seg := range p.StallBlameSegments() {
			o := p.Owner(seg)
			if seen[o] {
				continue
			}
			seen[o] = true
			rules = append(rules, amInhibitRule{
				why: fmt.Sprintf("Pipeline %s is stalled in a stage of %s, who is paged for it: the stall's consequences that other teams own wait.", p.Name, o),
				SourceMatchers: []string{
					match(labelAlertname, AlertStalled), match(slo.LabelPipeline, p.Name),
					match(slo.LabelOwner, o), matchNot(slo.LabelSegment, config.SegmentEndToEnd),
				},
				TargetMatchers: []string{matchAny(labelAlertname, consequences), match(slo.LabelPipeline, p.Name), matchNot(slo.LabelOwner, o)},
				Equal:          keys,
			}, amInhibitRule{
				why: fmt.Sprintf("A stall of pipeline %s blamed on a stage of %s replaces the unblamed one.", p.Name, o),
				SourceMatchers: []string{
					match(labelAlertname, AlertStalled), match(slo.LabelPipeline, p.Name),
					match(slo.LabelOwner, o), matchNot(slo.LabelSegment, config.SegmentEndToEnd),
				},
				TargetMatchers: []string{match(labelAlertname, AlertStalled), match(slo.LabelPipeline, p.Name), match(slo.LabelSegment, config.SegmentEndToEnd), matchNot(slo.LabelOwner, o)},
				Equal:          keys,
			})
		}
	}
	rules = append(rules, amInhibitRule{
		why:            "A segment's burn page names the stage at fault; the end-to-end burn of the same pipeline is the same incident.",
		SourceMatchers: []string{match(labelAlertname, AlertErrorBudgetBurn), match(labelSeverity, c.sev.Page), matchNotRegexp(slo.LabelSegment, config.SegmentEndToEnd+"|"+config.SegmentInsertToCommit)},
		TargetMatchers: []string{match(labelAlertname, AlertErrorBudgetBurn), match(slo.LabelSegment, config.SegmentEndToEnd)},
		Equal:          withPipeline,
	}, amInhibitRule{
		why:            "While a team is paged for a pipeline, its tickets for that pipeline wait until the page resolves.",
		SourceMatchers: []string{ours, match(labelSeverity, c.sev.Page)},
		TargetMatchers: []string{ours, match(labelSeverity, c.sev.Ticket)},
		Equal:          append([]string{slo.LabelPipeline, slo.LabelOwner}, keys...),
	})
	return rules
}

// commentInhibitRules puts each rule's reason above it in the file.
func commentInhibitRules(doc *yaml.Node, rules []amInhibitRule) {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "inhibit_rules" {
			continue
		}
		for j, item := range doc.Content[i+1].Content {
			if j < len(rules) {
				item.HeadComment = rules[j].why
			}
		}
	}
}

const labelAlertname = "alertname"

func match(name, value string) string       { return name + "=" + quoteMatcher(value) }
func matchNot(name, value string) string    { return name + "!=" + quoteMatcher(value) }
func matchRegexp(name, re string) string    { return name + "=~" + quoteMatcher(re) }
func matchNotRegexp(name, re string) string { return name + "!~" + quoteMatcher(re) }

// matchAny matches one of the values exactly.
func matchAny(name string, values []string) string {
	if len(values) == 1 {
		return match(name, values[0])
	}
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = regexp.QuoteMeta(v)
	}
	return matchRegexp(name, strings.Join(quoted, "|"))
}

// quoteMatcher quotes a matcher value as Alertmanager's parser reads it.
func quoteMatcher(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

func promDuration(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return model.Duration(d).String()
}
