package config

import (
	"errors"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Alerting shapes the generated Prometheus rules.
type Alerting struct {
	// The base of each alert's runbook_url annotation; the alert's anchor
	// (#outboxcanarystalled, ...) is appended.
	RunbookURL string `yaml:"runbook_url"`
	// How many canary intervals (the longest gap of canary.schedule) may
	// pass without a delivery before the stall alert fires.
	StallIntervals int `yaml:"stall_intervals"`
	// Labels added to every rule (and to the PrometheusRule's metadata),
	// e.g. for Alertmanager routing. Not pipeline, segment, owner,
	// severity, alertname, job, sloth_* or __*.
	Labels map[string]string `yaml:"labels"`
	// Scopes the rules and dashboards to one environment of a
	// Prometheus (or Thanos/Mimir ruler) that holds several: label name to
	// value, e.g. {env: prod, cluster: eu-1}, matched exactly in every
	// generated expression and kept on every recorded series and alert, so
	// two scopes with the same pipeline names never merge, and the dead man
	// is one per scope. The labels must be on the prober's series (target
	// labels of the scrape, or external labels in a Thanos/Mimir ruler).
	// Not a label alerting.labels sets, nor a reserved one.
	Selector map[string]string `yaml:"selector"`
	// The backlog alert fires when the oldest unpublished row is older
	// than this (polling relays).
	OldestUnpublishedAge Duration `yaml:"oldest_unpublished_age"`
	// How long the backlog must keep growing, without emptying, for the
	// backlog growth ticket (polling relays).
	BacklogGrowthFor Duration `yaml:"backlog_growth_for"`
	// The long transaction alert fires on an open transaction older than
	// this.
	LongTransactionAge Duration `yaml:"long_transaction_age"`
	// How long a replication slot's retained WAL must keep growing for the
	// WAL growth alert (cdc relays). Longer than backlog_growth_for:
	// retained WAL moves in checkpoint-sized steps even when the connector
	// is healthy.
	WALGrowthFor Duration `yaml:"wal_growth_for"`
	// The Prometheus job label the prober is scraped under; the dead-man
	// alert watches outbox_canary_build_info in that job, and the
	// unmeasured-pipelines page each pipeline's series in it.
	ProberJob string `yaml:"prober_job"`
	// How long the prober's series may be missing before the dead-man
	// alert fires (a minute more for the unmeasured-pipelines page and the
	// redundancy ticket).
	ProberAbsentFor Duration `yaml:"prober_absent_for"`
	// The owner label of the alerts about the prober itself (the dead
	// man, the unmeasured-pipelines page, the redundancy ticket); empty
	// leaves the label out.
	ProberOwner string `yaml:"prober_owner"`
	// How many prober replicas measure each pipeline (the chart's
	// replicaCount; with sharding, the replicas of each shard). The rules
	// aggregate across replicas whatever this says; above 1 they add a
	// ticket (OutboxCanaryRedundancyLost) when fewer are measuring.
	Replicas int `yaml:"replicas"`
	// Replaces the built-in multiwindow, multi-burn-rate alert windows
	// (the SRE Workbook's: page on 2% of the budget in 1h or 5% in 6h,
	// ticket on 10% in 1d or in 3d) when set.
	BurnWindows []BurnWindow `yaml:"burn_windows"`
	// PrometheusRuleLabels are the metadata labels of the generated
	// PrometheusRule (e.g. release: kube-prometheus-stack for the
	// Operator's ruleSelector); they go on no alert. Unset, the resource
	// keeps Labels as its metadata labels, as before this field existed,
	// so an existing ruleSelector still matches.
	PrometheusRuleLabels map[string]string `yaml:"prometheusrule_labels"`
	// Severities are the values of the severity label for the two levels
	// the rules know, e.g. critical and warning instead of page and ticket.
	Severities Severities `yaml:"severities"`
	// DashboardURL is the base URL of the Grafana that holds the
	// generated dashboards (e.g. https://grafana.example.com); each alert
	// then links its dashboard in a dashboard_url annotation. Empty
	// leaves the annotation out.
	DashboardURL string `yaml:"dashboard_url"`
	// ProberConfigFile is where the prober's configuration file lives on
	// the hosts the on-call engineer works from, for the diagnose command
	// each alert's annotations print.
	ProberConfigFile string `yaml:"prober_config_file"`
}

// Severities names the two alert levels in the severity label.
type Severities struct {
	// Page is the severity label of alerts that need someone now.
	Page string `yaml:"page"`
	// Ticket is the severity label of alerts that can wait for working hours.
	Ticket string `yaml:"ticket"`
}

// Name returns the severity label value of a level (SeverityPage or
// SeverityTicket).
func (s Severities) Name(level string) string {
	if level == SeverityTicket {
		return s.Ticket
	}
	return s.Page
}

// RuleObjectLabels are the metadata labels of the generated
// PrometheusRule: PrometheusRuleLabels, or Labels while that is unset.
func (a Alerting) RuleObjectLabels() map[string]string {
	if a.PrometheusRuleLabels != nil {
		return a.PrometheusRuleLabels
	}
	return a.Labels
}

// Burn-rate alert severities.
const (
	SeverityPage   = "page"
	SeverityTicket = "ticket"
)

// BurnWindow is one multiwindow burn-rate alert condition. Its burn factor
// is not written down but derived from the share of the error budget it
// spends and the SLO window, so one table serves a 30d and a 28d window:
// factor = budget_percent/100 * slo_window / long_window.
type BurnWindow struct {
	// "page" or "ticket": the severity label of the alert.
	Severity string `yaml:"severity"`
	// The share of the whole SLO window's error budget spent in
	// long_window at the alert's threshold burn rate, in percent, e.g. 2.
	// The burn factor is derived from it: budget_percent/100 *
	// slo.window / long_window.
	BudgetPercent Decimal `yaml:"budget_percent"`
	// The window the burn rate is judged over, e.g. 1h.
	LongWindow Duration `yaml:"long_window"`
	// The window that confirms the burn is still going on (and lets the
	// alert resolve soon after it stops), e.g. 5m: by convention
	// long_window/12.
	ShortWindow Duration `yaml:"short_window"`
}

// Validate checks one burn window; its error lists every problem, one
// per line.
func (w BurnWindow) Validate() error {
	var errs []error
	for _, p := range w.problems() {
		errs = append(errs, fmt.Errorf("%s: %s", p.field, p.msg))
	}
	return errors.Join(errs...)
}

type fieldProblem struct{ field, msg string }

func (w BurnWindow) problems() []fieldProblem {
	var out []fieldProblem
	add := func(field, format string, args ...any) {
		out = append(out, fieldProblem{field, fmt.Sprintf(format, args...)})
	}
	switch w.Severity {
	case SeverityPage, SeverityTicket:
	default:
		add("severity", "%q must be %q or %q", w.Severity, SeverityPage, SeverityTicket)
	}
	switch pct := w.BudgetPercent.Rat(); {
	case pct == nil:
		add("budget_percent", "required, e.g. 2")
	case pct.Sign() <= 0 || pct.Cmp(big.NewRat(100, 1)) > 0:
		add("budget_percent", "%s must be more than 0 and at most 100", w.BudgetPercent)
	}
	switch {
	case w.ShortWindow <= 0 || w.LongWindow <= 0:
		add("long_window", "long_window and short_window are both required and positive")
	case w.ShortWindow >= w.LongWindow:
		add("short_window", "%s must be shorter than long_window %s", w.ShortWindow, w.LongWindow)
	}
	return out
}

// Decimal is a number kept exactly as written ("2", "0.5"), so burn
// factors derived from it print without floating-point noise.
type Decimal struct {
	r    *big.Rat
	text string
}

// ParseDecimal parses a decimal number such as "2" or "0.5".
func ParseDecimal(s string) (Decimal, error) {
	s = strings.TrimSpace(s)
	if !decimalRE.MatchString(s) {
		return Decimal{}, fmt.Errorf("%q is not a decimal number (digits with an optional fraction, e.g. 2 or 0.5)", s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return Decimal{}, fmt.Errorf("%q is not a decimal number", s)
	}
	return Decimal{r: r, text: s}, nil
}

var decimalRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// Rat returns a copy of the exact value (nil when unset).
func (d Decimal) Rat() *big.Rat {
	if d.r == nil {
		return nil
	}
	return new(big.Rat).Set(d.r)
}

// String prints the number as written.
func (d Decimal) String() string { return d.text }

// decodeNode reads the scalar's text, not a float64, so 0.1 stays 0.1.
func (d *Decimal) decodeNode(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a number, got %s", describe(node))
	}
	v, err := ParseDecimal(node.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// UnmarshalYAML reads the number as written, for callers that decode with
// yaml.v3 directly; its errors carry the line.
func (d *Decimal) UnmarshalYAML(node *yaml.Node) error { return withLine(node, d.decodeNode(node)) }

// MarshalYAML writes the decimal back as a number.
func (d Decimal) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: d.text}, nil
}

// DefaultRunbookURL points at the alert documentation in this repository.
const DefaultRunbookURL = "https://github.com/outbox-canary/outbox-canary/blob/main/docs/alerts.md"

// DefaultProberJob is the job label the dead-man alert expects by default.
const DefaultProberJob = "outbox-canary"

// DefaultProberConfigFile is where the diagnose command in the alerts'
// annotations looks for the configuration by default.
const DefaultProberConfigFile = "/etc/outbox-canary/outbox-canary.yml"

func (a *Alerting) setDefaults() {
	setIfEmpty(&a.RunbookURL, DefaultRunbookURL)
	setIfEmpty(&a.ProberJob, DefaultProberJob)
	setIfEmpty(&a.ProberConfigFile, DefaultProberConfigFile)
	setIfEmpty(&a.Severities.Page, SeverityPage)
	setIfEmpty(&a.Severities.Ticket, SeverityTicket)
	if a.StallIntervals == 0 {
		a.StallIntervals = 2
	}
	if a.OldestUnpublishedAge == 0 {
		a.OldestUnpublishedAge = Duration(time.Minute)
	}
	if a.BacklogGrowthFor == 0 {
		a.BacklogGrowthFor = Duration(10 * time.Minute)
	}
	if a.LongTransactionAge == 0 {
		a.LongTransactionAge = Duration(5 * time.Minute)
	}
	if a.WALGrowthFor == 0 {
		a.WALGrowthFor = Duration(30 * time.Minute)
	}
	if a.ProberAbsentFor == 0 {
		a.ProberAbsentFor = Duration(5 * time.Minute)
	}
	if a.Replicas == 0 {
		a.Replicas = 1
	}
}

// reservedLabels are set by the generator on the rules; alerting.labels
// must not override them or Alertmanager routing would break.
func reservedLabels() []string {
	return []string{"pipeline", "segment", "owner", "severity", "alertname", "job"}
}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

var kubernetesLabelKeyRE = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

func (a *Alerting) validate(v *validator) {
	if a.StallIntervals < 1 {
		v.add("alerting.stall_intervals", "", "must be at least 1")
	}
	if a.Replicas < 1 {
		v.add("alerting.replicas", "", "must be at least 1")
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{
		{"oldest_unpublished_age", a.OldestUnpublishedAge},
		{"backlog_growth_for", a.BacklogGrowthFor},
		{"long_transaction_age", a.LongTransactionAge},
		{"wal_growth_for", a.WALGrowthFor},
		{"prober_absent_for", a.ProberAbsentFor},
	} {
		if d.v < 0 {
			v.add("alerting."+d.name, "", "must be positive")
		}
	}
	if strings.ContainsAny(a.ProberJob, "\"\\\n") {
		v.add("alerting.prober_job", "", "%q must not contain quotes, backslashes or newlines", a.ProberJob)
	}
	reserved := reservedLabels()
	for _, k := range slices.Sorted(maps.Keys(a.Labels)) {
		if !labelNameRE.MatchString(k) {
			v.add("alerting.labels."+k, "", "not a Prometheus label name (letters, digits and _, not starting with a digit)")
		} else if slices.Contains(reserved, k) || strings.HasPrefix(k, "sloth_") || strings.HasPrefix(k, "__") {
			v.add("alerting.labels."+k, "", "reserved: the generator sets it (reserved: %s, sloth_*, __*)", strings.Join(reserved, ", "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Selector)) {
		path := "alerting.selector." + k
		switch {
		case !labelNameRE.MatchString(k):
			v.add(path, "", "not a Prometheus label name (letters, digits and _, not starting with a digit)")
		case slices.Contains(reserved, k) || strings.HasPrefix(k, "sloth_") || strings.HasPrefix(k, "__") || k == "instance":
			v.add(path, "", "reserved: the generator or the scrape sets it (reserved: %s, instance, sloth_*, __*)", strings.Join(reserved, ", "))
		case a.Labels[k] != "":
			v.add(path, "", "also set by alerting.labels; a scope label comes from the series, so it cannot be set on them too")
		case a.Selector[k] == "":
			// PromQL's k="" matches series without the label: not a scope.
			v.add(path, "", "empty: a scope label needs a value")
		case strings.ContainsAny(a.Selector[k], "\n"):
			v.add(path, "", "%q must not contain newlines", a.Selector[k])
		}
	}
	for i, w := range a.BurnWindows {
		for _, p := range w.problems() {
			v.add(fmt.Sprintf("alerting.burn_windows[%d].%s", i, p.field), "", "%s", p.msg)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.PrometheusRuleLabels)) {
		if !kubernetesLabelKeyRE.MatchString(k) {
			v.add("alerting.prometheusrule_labels."+k, "", "not a Kubernetes label key (an optional DNS prefix and /, then letters, digits, -, _ and ., starting and ending alphanumeric)")
		}
	}
	if a.Severities.Page == a.Severities.Ticket {
		v.add("alerting.severities", "", "page and ticket are both %q; Alertmanager could not route them apart", a.Severities.Page)
	}
	for _, s := range []struct{ name, v string }{{"severities.page", a.Severities.Page}, {"severities.ticket", a.Severities.Ticket}, {"dashboard_url", a.DashboardURL}, {"prober_config_file", a.ProberConfigFile}} {
		if strings.ContainsAny(s.v, "\"\\\n{}") {
			v.add("alerting."+s.name, "", "%q must not contain quotes, backslashes, braces or newlines (it is written into rules and templates)", s.v)
		}
	}
}
