package alerts

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// sloIdentity are the labels that name an SLO and never change while it
// exists. Everything else on its series (owner, alerting.labels) may
// change with the configuration, so rules that read an SLO's history
// aggregate by these and set the rest anew.
var sloIdentity = []string{labelSlothID, labelSlothService, labelSlothSLO}

// sloClass is the SLOs of one SLO window. Their recordings are written
// once for all of them: range windows must be literals, and everything
// else that differs between SLOs (Sloth's labels, the owner, the
// objective) the rules read from the SLOs' objective series, which the
// prober exports (slo.SLO.ObjectiveSeries). So the recording rules do
// not grow with the pipelines.
type sloClass struct {
	window      time.Duration
	rateWindows []time.Duration
	scope       slo.Scope
	// burn are the burn alerts of every SLO of the window.
	burn []slo.BurnAlert
	// match are further label pairs of the objective series that pick
	// the class's SLOs (a burn class's interval and stall threshold).
	match []string
}

// sloClasses are the model's SLO windows, in the order the SLOs first
// name them.
func sloClasses(m *slo.Model) []sloClass {
	var out []sloClass
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			if !slices.ContainsFunc(out, func(c sloClass) bool { return c.window == s.Window }) {
				out = append(out, sloClass{window: s.Window, rateWindows: s.RateWindows(), burn: s.Burn, scope: m.Scope})
			}
		}
	}
	return out
}

// objectives selects the objective series of the class's SLOs, in its
// scope.
func (c sloClass) objectives() string {
	return selector(slo.MetricSLOObjective, append(append([]string{slo.LabelSLOWindow, slo.PromDuration(c.window)}, c.match...), c.scope.Pairs()...)...)
}

// one is one objective series per SLO, whatever the number of prober
// replicas that export it: a join's one side must be one series, and
// replicas whose configuration differs for a while (a rollout) must not
// make every recording of the class fail.
func (c sloClass) one() string {
	return "topk by (" + joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment) + ") (1, " + c.objectives() + ")"
}

// sloSeries is an instant vector of one series per SLO of the class, with
// the labels of its recordings (sloLabels) and its objective as the value.
func (c sloClass) sloSeries(extra ...string) string {
	return "max " + c.scope.ByClause(append(slices.Clone(sloRecordLabels), extra...)...) + " (" + c.one() + ")"
}

// sloRecordLabels are the labels an SLO's recordings carry (sloLabels).
var sloRecordLabels = []string{labelSlothID, labelSlothService, labelSlothSLO, slo.LabelPipeline, slo.LabelSegment, slo.LabelOwner}

// errorBudget is the error budget of the class's SLOs, by their identity
// or by the labels given.
func (c sloClass) errorBudget(by ...string) string {
	if len(by) == 0 {
		by = sloIdentity
	}
	return "(1 - max " + c.scope.ByClause(by...) + " (" + c.one() + "))"
}

// relabel gives the series of expr, by the SLOs' identity, the labels
// their recordings carry now (the pipeline, the segment, the owner), for
// the SLOs of the class only. Rules that read an SLO's history aggregate
// it by the identity: after an owner or alerting.labels change the window
// holds its series under two label sets, and the rule's own labels would
// otherwise make them collide ("vector contains metrics with the same
// labelset after applying rule labels") for a whole window.
func (c sloClass) relabel(expr string) string {
	return lines(
		"(",
		indentText(expr),
		")",
		"* "+c.onIdentity()+" group_left ("+slo.LabelPipeline+", "+slo.LabelSegment+", "+slo.LabelOwner+")",
		"("+c.one()+" ^ 0)",
	)
}

func (c sloClass) onIdentity() string {
	return "on (" + strings.Join(c.scope.By(sloIdentity...), ", ") + ")"
}

func indentText(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ")
}

// SLIErrorExpr is the SLI of every SLO of the class over a window: the
// share of the segment's SLI events that were bad.
//
// Quiet case: with no events at all the ratio would be 0/0 = NaN, which
// poisons the period average; the denominator is filtered with "> 0" so a
// window without events records nothing instead. Canaries keep events
// flowing through a quiet pipeline, so this only happens when the prober
// is gone (the dead-man alert's job). Stalled case: canaries resolve bad at
// their deadline, so a stall produces bad events and the ratio rises.
// A missing bad series (the prober creates it at zero, but a relabelling
// could drop it) counts as no bad events rather than no data. Summed
// over the prober replicas too, whose series differ only in the labels of
// their scrape targets.
func (c sloClass) SLIErrorExpr(w time.Duration) string {
	rng := "[" + slo.PromDuration(w) + "]"
	bad := selector(slo.MetricSLIEvents, append([]string{slo.LabelOutcome, slo.OutcomeBad}, c.scope.Pairs()...)...)
	all := selector(slo.MetricSLIEvents, c.scope.Pairs()...)
	by := "sum by (" + joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment) + ") "
	return lines(
		"(",
		"  (",
		"    "+by+"(rate("+bad+rng+"))",
		"    or",
		"    0 * "+by+"(rate("+all+rng+"))",
		"  )",
		"  /",
		"  ("+by+"(rate("+all+rng+")) > 0)",
		")",
		"* on ("+joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment)+") group_left ("+labelSlothID+", "+labelSlothService+", "+labelSlothSLO+", "+slo.LabelOwner+")",
		"("+c.one()+" ^ 0)",
	)
}

func (g generator) sliRecordings(c sloClass) []Rule {
	var rules []Rule
	for _, w := range c.rateWindows {
		rules = append(rules, Rule{Record: slo.RecordSLIError(w), Expr: c.SLIErrorExpr(w), Labels: g.labels(map[string]string{labelSlothWindow: slo.PromDuration(w)})})
	}
	var seen []time.Duration
	for _, a := range c.burn {
		for _, w := range a.Windows() {
			if !slices.Contains(seen, w) {
				seen = append(seen, w)
			}
		}
	}
	for _, w := range seen {
		rules = append(rules, Rule{Record: RecordBadEventsSeen(w), Expr: lines(
			"(",
			indentText(c.badEventsSeenExpr(w)),
			")",
			"and on ("+joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment)+")",
			c.one(),
		), Labels: g.labels(nil)})
	}
	base := selector(slo.RecordSLIError(slo.CurrentBurnWindow), c.scope.Pairs()...)
	rng := "[" + slo.PromDuration(c.window) + "]"
	byIdentity := c.scope.ByClause(sloIdentity...)
	return append(rules,
		// When the data starts: the base ratio was just recorded in this
		// group, so its timestamp is this evaluation's.
		Rule{
			Record: slo.RecordSLIDataTimestamp,
			Expr:   c.relabel("max " + byIdentity + " (timestamp(" + base + "))"),
			Labels: g.labels(nil),
		},
		// The period ratio averages the 5m ratios, as Sloth does: cheap
		// over 30 days, and windows without events (no sample) do not
		// count.
		Rule{
			Record: slo.RecordSLIError(c.window),
			Expr: c.relabel(lines(
				"sum "+byIdentity+" (sum_over_time("+base+rng+"))",
				"/",
				"sum "+byIdentity+" (count_over_time("+base+rng+"))",
			)),
			Labels: g.labels(map[string]string{labelSlothWindow: slo.PromDuration(c.window)}),
		},
	)
}

func (g generator) metaRecordings(c sloClass) []Rule {
	days := new(big.Rat).SetFrac64(int64(c.window), int64(24*time.Hour))
	rec := func(name, expr string) Rule { return Rule{Record: name, Expr: expr, Labels: g.labels(nil)} }
	sel := func(metric string) string { return selector(metric, c.scope.Pairs()...) }
	return []Rule{
		rec(slo.RecordObjective, c.sloSeries()),
		rec(slo.RecordErrorBudget, "1 - "+c.sloSeries()),
		rec(slo.RecordTimePeriodDays, "0 * "+c.sloSeries()+" + "+slo.FormatRat(days)),
		// The share of the window Prometheus holds data for: a fresh
		// Prometheus, or one whose retention is shorter than the window,
		// holds less than all of it.
		rec(slo.RecordPeriodCoverage, c.relabel(lines(
			"clamp_max(",
			"  (time() - min "+c.scope.ByClause(sloIdentity...)+" (min_over_time("+sel(slo.RecordSLIDataTimestamp)+"["+slo.PromDuration(c.window)+"])))",
			"  / "+seconds(c.window)+",",
			"  1",
			")",
		))),
		rec(slo.RecordCurrentBurnRate, lines(
			sel(slo.RecordSLIError(slo.CurrentBurnWindow)),
			"/ "+c.onIdentity()+" group_left ()",
			c.errorBudget(),
		)),
		// The period's burn rate counts the part of the window without
		// data as good: after 80 minutes of data holding a 20-minute
		// stall, the budget spent is what those 20 minutes cost a 30-day
		// window, not a 25% error ratio extrapolated to the whole of it.
		// With the whole window held (coverage 1) it is Sloth's.
		rec(slo.RecordPeriodBurnRate, lines(
			sel(slo.RecordSLIError(c.window)),
			"* "+c.onIdentity()+" group_left ()",
			sel(slo.RecordPeriodCoverage),
			"/ "+c.onIdentity()+" group_left ()",
			c.errorBudget(),
		)),
		rec(slo.RecordPeriodErrorBudgetRemaining, lines(
			"1 - (",
			"  "+sel(slo.RecordPeriodBurnRate),
			"  and "+c.onIdentity(),
			"  "+c.errorBudget(),
			")",
		)),
		{Record: slo.RecordSLOInfo, Expr: c.sloSeries(slo.LabelSlothObjective) + " ^ 0", Labels: g.labels(map[string]string{"sloth_mode": "cli-gen-prom", "sloth_spec": "prometheus/v1"})},
	}
}

// burnClass is the SLOs of one SLO window whose pipelines have the same
// canary interval and stall threshold: their burn alerts are written once
// for all of them, since a burn page's minimum count of bad canaries is
// in canary intervals and its for is the stall threshold's, and neither
// can be read from a series.
type burnClass struct {
	sloClass
	interval, stallThreshold time.Duration
}

// burnClasses are the model's burn classes of an SLO window, in the order
// the SLOs first name them.
func burnClasses(m *slo.Model, c sloClass) []burnClass {
	var out []burnClass
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			if s.Window != c.window || slices.ContainsFunc(out, func(b burnClass) bool {
				return b.interval == s.CanaryInterval && b.stallThreshold == s.StallThreshold
			}) {
				continue
			}
			b := burnClass{sloClass: c, interval: s.CanaryInterval, stallThreshold: s.StallThreshold}
			b.match = []string{slo.LabelCanaryInterval, slo.PromDuration(s.CanaryInterval), slo.LabelStallThreshold, slo.PromDuration(s.StallThreshold)}
			out = append(out, b)
		}
	}
	return out
}

// RecordBadEventsSeen is the count of an SLO's bad canaries in a window
// as Prometheus saw them (badEventsSeenExpr), by pipeline and segment:
// recorded once per window, for every burn class that reads it.
func RecordBadEventsSeen(w time.Duration) string {
	return "outbox_canary:sli_bad_events:seen" + slo.PromDuration(w)
}

// badEventsSeenExpr counts each SLO's bad canaries in a window as
// Prometheus saw them: the last sample less the lowest, per series. Not
// increase(), which extrapolates to the window's ends: on a fresh
// Prometheus it reads one bad canary between its first two scrapes as up
// to 2.6, and one bad canary must count as one. After a counter reset (a
// prober restart) it counts from the reset, a lower bound; on a full
// window it misses only bad canaries of the window's first scrape
// interval, which leave the window a moment later anyway.
//
// With several prober replicas it is the fewest any replica saw, each
// counting its own canaries: a burn pages only when every replica sees
// it, as a stall does, so one replica whose own consumer is stuck (its
// canaries late, the others' on time) pages no one, and the count stays
// one prober's, as slo.BurnAlert.MinBadEvents counts it, however many
// replicas there are. A replica that has lost its database or Kafka
// connection is blind, not healthy, and has no say while another can see;
// when none can, all count, as the single prober always does.
func (c sloClass) badEventsSeenExpr(w time.Duration) string {
	bad := selector(slo.MetricSLIEvents, append([]string{slo.LabelOutcome, slo.OutcomeBad}, c.scope.Pairs()...)...)
	seen := bad + " - min_over_time(" + bad + "[" + slo.PromDuration(w) + "])"
	blind := "(" + selector(slo.MetricDependencyUp, c.scope.Pairs()...) + " == 0)"
	by := "min by (" + joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment) + ") "
	return lines(
		by+"(",
		"  "+seen,
		"  unless ignoring ("+slo.LabelSegment+", "+slo.LabelOutcome+", "+slo.LabelDependency+")",
		"  "+blind,
		")",
		"or",
		by+"("+seen+")",
	)
}

// BurnAlertExpr is one multiwindow burn-rate condition for the SLOs of
// the class whose segments the matchers select (all, when none): the
// error ratio is over the
// threshold on the long window (the value, so $value reads as the long
// window's ratio) and still is on the short window, and the long window
// holds more bad canaries than slo.BurnAlert.MinBadEvents: the long
// window is judged as bad / max(events, Long / interval), so on a
// Prometheus younger than the long window a late canary or two cannot
// page, and a full stall pages after as many bad canaries as on a full
// window. A page's short window must hold that many too: it confirms that
// a burn fast enough to page still goes on, not that something small
// happened since, so a blip that would not page on its own neither keeps
// an earlier burn's page firing nor pages on the bad canaries an earlier
// burn left in the long window. (A ticket's short window holds a slow
// burn's few canaries by design, and keeps the ratio alone.)
//
// While a stall of the pipeline is within the short window (and a
// margin), the stall alert is the incident's page and the burn is its
// consequence: the condition is false, so that an Alertmanager that
// groups by alert name is not paged a second time for the same incident,
// neither during the stall nor after it, while its bad canaries fill the
// short window. So, too, while the prober could not reach Kafka within
// that span: OutboxCanaryDependencyDown pages the brokers' owner for the
// outage, whose late canaries are its consequence. The window label is
// dropped, so alerts of different window pairs are one alert.
func (b burnClass) BurnAlertExpr(a slo.BurnAlert, segments []string) string {
	threshold := func(by ...string) string {
		return slo.FormatRat(a.Factor) + " * " + b.errorBudget(by...)
	}
	ratio := func(w time.Duration) string {
		return selectorOf(slo.RecordSLIError(w), append(slices.Clone(segments), b.scope.Matchers()...)...)
	}
	onSLO := "on (" + joinLabels(b.scope, slo.LabelPipeline, slo.LabelSegment) + ")"
	minBad := b.minBadEvents(a)
	seen := func(w time.Duration) string { return selector(RecordBadEventsSeen(w), b.scope.Pairs()...) }
	count := []string{
		"  and " + onSLO,
		"  " + seen(a.Long) + " > " + onSLO + " group_left () " + minBad,
	}
	if a.Severity == config.SeverityPage {
		count = append(count,
			"  and "+onSLO,
			"  "+seen(a.Short)+" > "+onSLO+" group_left () "+minBad)
	}
	stall := selector(RecordStall, b.scope.Pairs()...)
	return lines(append(append([]string{
		"(",
		"  max without (" + labelSlothWindow + ") (",
		"    " + ratio(a.Long) + " > " + b.onIdentity() + " group_left () (" + threshold(sloIdentity...) + ")",
		"    and ignoring (" + labelSlothWindow + ")",
		"    " + ratio(a.Short) + " > " + b.onIdentity() + " group_left () (" + threshold(sloIdentity...) + ")",
		"  )",
	}, count...),
		")",
		"unless on ("+joinLabels(b.scope, slo.LabelPipeline)+") max_over_time("+stall+"["+slo.PromDuration(a.Short+stallBlameMargin)+"])",
		UnlessKafkaOutage(b.scope, "", a.Short+stallBlameMargin),
	)...)
}

// minBadEvents is slo.BurnAlert.MinBadEventsExpr for the class's SLOs, by
// pipeline and segment.
func (b burnClass) minBadEvents(a slo.BurnAlert) string {
	return "(" + slo.FormatRat(a.Factor) + " * " + b.errorBudget(slo.LabelPipeline, slo.LabelSegment) + " * " +
		slo.FormatRat(new(big.Rat).SetFrac64(int64(a.Long), int64(b.interval))) + ")"
}

// burnAlerts are, per severity, one alert for the class's SLOs: the
// window pairs of that severity OR-ed, fastest first, as Sloth does, so
// that an incident crossing two pairs is one alert with one label set, not
// one per window. A page of a segment that inhibits end_to_end's alerts
// keeps firing longer than they do, so those pages are a rule of their
// own.
//
// The page waits burnPageFor(stall threshold) before it fires: a relay
// that restarts with back-off makes bad canaries in short outages
// before its first stall (10, 20 and 40s down: seven bad canaries in 80s,
// a 1h/5m burn), and the stall that follows, the same incident's page,
// is seen within that time and holds the burn back.
func (g generator) burnAlerts(b burnClass) []Rule {
	var levels []string
	pairs := map[string][]slo.BurnAlert{}
	for _, a := range b.burn {
		if _, ok := pairs[a.Severity]; !ok {
			levels = append(levels, a.Severity)
		}
		pairs[a.Severity] = append(pairs[a.Severity], a)
	}
	notInhibiting := fmt.Sprintf("%q", config.SegmentEndToEnd+"|"+config.SegmentInsertToCommit)
	var rules []Rule
	for _, level := range levels {
		type part struct {
			segments []string
			keep     time.Duration
		}
		parts := []part{{nil, g.keepFiringFor()}}
		if level == config.SeverityPage {
			parts = []part{
				{[]string{slo.LabelSegment + "=~" + notInhibiting}, g.keepFiringFor()},
				{[]string{slo.LabelSegment + "!~" + notInhibiting}, g.keepFiringForSource()},
			}
		}
		for _, pt := range parts {
			var exprs []string
			for _, a := range pairs[level] {
				exprs = append(exprs, strings.TrimSuffix(b.BurnAlertExpr(a, pt.segments), "\n"))
			}
			var forDur string
			if level == config.SeverityPage {
				forDur = slo.PromDuration(burnPageFor(b.stallThreshold))
			}
			rules = append(rules, Rule{
				Alert:         AlertErrorBudgetBurn,
				Expr:          strings.Join(exprs, "\nor\n") + "\n",
				For:           forDur,
				KeepFiringFor: slo.PromDuration(pt.keep),
				Labels:        g.labels(map[string]string{labelSeverity: g.severity(level), labelSlothSeverity: g.severity(level)}),
				Annotations: g.annotate(annotations{
					alert:          AlertErrorBudgetBurn,
					summary:        fmt.Sprintf("Pipeline {{ $labels.%s }}, segment {{ $labels.%s }}: the error budget is burning (%s).", slo.LabelPipeline, slo.LabelSegment, g.severity(level)),
					description:    b.burnDescription(g.severity(level), pairs[level]),
					pipelineScoped: true,
					dashboard:      slo.DashboardSLOOverview,
					segment:        true,
				}),
			})
		}
	}
	return rules
}

// burnDescription says what a burn alert of the class measured, and the
// SLO it burns: its budget and objective are read from its objective
// series (the rule is the class's, not the SLO's).
func (b burnClass) burnDescription(severity string, pairs []slo.BurnAlert) string {
	described := func(objective string) string {
		var ds []string
		for _, a := range pairs {
			ds = append(ds, fmt.Sprintf("over %s x (1 - %s) for %s and still for %s (%s%% of the budget spent in %s)",
				slo.FormatRat(a.Factor), objective, slo.PromDuration(a.Long), slo.PromDuration(a.Short),
				slo.FormatRat(a.BudgetPercent), slo.PromDuration(a.Long)))
		}
		return strings.Join(ds, ", or ")
	}
	query := fmt.Sprintf("%s{%s=%%q%s}", slo.MetricSLOObjective, labelSlothID, scopeMatchers(b.scope))
	return fmt.Sprintf("{{ $value | humanizePercentage }} of the canaries of pipeline {{ $labels.%s }} took longer than the "+
		"{{ with printf `%s` $labels.%s | query }}{{ with first . }}"+
		"{{ .Labels.%s }} budget of segment {{ $labels.%s }} over the long window of the fastest burn that fires. "+
		"The objective is {{ .Labels.%s }}%% over %s; this %s fires when the error ratio is %s."+
		"{{ end }}{{ else }}"+
		"budget of segment {{ $labels.%s }} over the long window of the fastest burn that fires; this %s fires when the error ratio is %s (the SLO's objective series is gone)."+
		"{{ end }} Owner: {{ $labels.%s }}.",
		slo.LabelPipeline,
		query, labelSlothID,
		slo.LabelSLOBudget, slo.LabelSegment,
		slo.LabelSlothObjective, slo.PromDuration(b.window), severity, described("{{ .Value }}"),
		slo.LabelSegment, severity, described("the objective"),
		slo.LabelOwner)
}

// burnPageFor is a burn page's for: the longest a stall takes from the
// last delivery to its alert at 15s scrape and evaluation intervals, the
// stall threshold plus a scrape and an evaluation.
func burnPageFor(stallThreshold time.Duration) time.Duration {
	return stallThreshold + 30*time.Second
}
