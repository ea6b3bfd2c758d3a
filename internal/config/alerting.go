package config

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Alerting shapes the generated Prometheus rules.
type Alerting struct {
	// RunbookURL is the base of each alert's runbook_url annotation; the
	// alert's anchor is appended.
	RunbookURL string `yaml:"runbook_url"`
	// StallIntervals is how many canary intervals without a delivery make
	// a stall.
	StallIntervals int `yaml:"stall_intervals"`
	// Labels are added to every rule (and to the PrometheusRule metadata).
	Labels map[string]string `yaml:"labels"`
	// OldestUnpublishedAge pages when the oldest unpublished row is older.
	OldestUnpublishedAge Duration `yaml:"oldest_unpublished_age"`
	// BacklogGrowthFor is how long the backlog must keep growing to alert.
	BacklogGrowthFor Duration `yaml:"backlog_growth_for"`
	// LongTransactionAge alerts on an open transaction older than this.
	LongTransactionAge Duration `yaml:"long_transaction_age"`
	// WALGrowthFor is how long a replication slot's retained WAL must keep
	// growing to alert. Longer than the backlog's: retained WAL moves in
	// checkpoint-sized steps even when the connector is healthy.
	WALGrowthFor Duration `yaml:"wal_growth_for"`
	// ProberJob is the Prometheus job label the prober is scraped under;
	// the dead-man alert watches outbox_canary_build_info in that job.
	ProberJob string `yaml:"prober_job"`
	// ProberAbsentFor is how long the prober's series may be missing
	// before the dead-man alert fires.
	ProberAbsentFor Duration `yaml:"prober_absent_for"`
	// ProberOwner is the owner label of the alerts about the prober itself
	// (dead man); empty leaves the label out.
	ProberOwner string `yaml:"prober_owner"`
	// BurnWindows replaces the built-in multiwindow, multi-burn-rate
	// alert windows (the SRE Workbook's) when set.
	BurnWindows []BurnWindow `yaml:"burn_windows"`
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
	// Severity is page or ticket.
	Severity string `yaml:"severity"`
	// BudgetPercent is the share of the whole window's error budget spent
	// in LongWindow at the threshold burn rate, e.g. 2 (%).
	BudgetPercent Decimal `yaml:"budget_percent"`
	// LongWindow is the window the burn is judged over, e.g. 1h.
	LongWindow Duration `yaml:"long_window"`
	// ShortWindow confirms the burn is still going on (and lets the alert
	// resolve soon after it stops), e.g. 5m: by convention LongWindow/12.
	ShortWindow Duration `yaml:"short_window"`
}

// Validate checks one burn window.
func (w BurnWindow) Validate() error {
	switch w.Severity {
	case SeverityPage, SeverityTicket:
	default:
		return fmt.Errorf("severity: %q must be %q or %q", w.Severity, SeverityPage, SeverityTicket)
	}
	if w.BudgetPercent.Rat() == nil {
		return errors.New("budget_percent: required, e.g. 2")
	}
	if w.BudgetPercent.Rat().Sign() <= 0 || w.BudgetPercent.Rat().Cmp(big.NewRat(100, 1)) > 0 {
		return fmt.Errorf("budget_percent: %s must be more than 0 and at most 100", w.BudgetPercent)
	}
	if w.ShortWindow <= 0 || w.LongWindow <= 0 {
		return errors.New("long_window and short_window: both required and positive")
	}
	if w.ShortWindow >= w.LongWindow {
		return fmt.Errorf("short_window: %s must be shorter than long_window %s", w.ShortWindow, w.LongWindow)
	}
	return nil
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

// UnmarshalYAML reads the scalar's text, not a float64, so 0.1 stays 0.1.
func (d *Decimal) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a number", node.Line)
	}
	v, err := ParseDecimal(node.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", node.Line, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes the decimal back as a number.
func (d Decimal) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: d.text}, nil
}

// DefaultRunbookURL points at the alert documentation in this repository.
const DefaultRunbookURL = "https://github.com/outbox-canary/outbox-canary/blob/main/docs/alerts.md"

// DefaultProberJob is the job label the dead-man alert expects by default.
const DefaultProberJob = "outbox-canary"

func (a *Alerting) setDefaults() {
	setIfEmpty(&a.RunbookURL, DefaultRunbookURL)
	setIfEmpty(&a.ProberJob, DefaultProberJob)
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
}

// reservedLabels are set by the generator on the rules; alerting.labels
// must not override them or Alertmanager routing would break.
var reservedLabels = []string{"pipeline", "segment", "owner", "severity", "alertname", "job"}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func (a *Alerting) validate() error {
	if a.StallIntervals < 1 {
		return errors.New("stall_intervals: must be at least 1")
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
			return fmt.Errorf("%s: must be positive", d.name)
		}
	}
	if strings.ContainsAny(a.ProberJob, "\"\\\n") {
		return fmt.Errorf("prober_job: %q must not contain quotes, backslashes or newlines", a.ProberJob)
	}
	for _, k := range sortedKeys(a.Labels) {
		if !labelNameRE.MatchString(k) {
			return fmt.Errorf("labels.%s: not a Prometheus label name (letters, digits and _, not starting with a digit)", k)
		}
		if slices.Contains(reservedLabels, k) || strings.HasPrefix(k, "sloth_") || strings.HasPrefix(k, "__") {
			return fmt.Errorf("labels.%s: reserved: the generator sets it (reserved: %s, sloth_*, __*)", k, strings.Join(reservedLabels, ", "))
		}
	}
	for i, w := range a.BurnWindows {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("burn_windows[%d]: %w", i, err)
		}
	}
	return nil
}
