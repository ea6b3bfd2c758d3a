package alerts

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// sloLabels are the labels of an SLO's series: Sloth's three identity
// labels, plus ours for routing and for people.
func sloLabels(s slo.SLO) map[string]string {
	return map[string]string{
		labelSlothID:      s.ID,
		labelSlothService: s.Pipeline,
		labelSlothSLO:     s.Segment,
		slo.LabelPipeline: s.Pipeline,
		slo.LabelSegment:  s.Segment,
		slo.LabelOwner:    s.Owner,
	}
}

// sloIdentity are the labels that name an SLO and never change while it
// exists. Everything else on its series (owner, alerting.labels) may
// change with the configuration, so rules that read an SLO's history
// aggregate by these and set the rest anew.
var sloIdentity = []string{labelSlothID, labelSlothService, labelSlothSLO}

// byIdentity is "by (sloth_id, sloth_service, sloth_slo)" and the
// scope's labels, which never change for a rule set either.
func byIdentity(s slo.SLO) string { return s.Scope.ByClause(sloIdentity...) }

// onIdentity is "on (sloth_id, sloth_service, sloth_slo)" and the scope's
// labels.
func onIdentity(s slo.SLO) string {
	return "on (" + strings.Join(s.Scope.By(sloIdentity...), ", ") + ")"
}

// sloSelector selects an SLO's recorded series by Sloth's labels, in its
// scope.
func sloSelector(metric string, s slo.SLO) string {
	return selector(metric, append([]string{labelSlothID, s.ID, labelSlothService, s.Pipeline, labelSlothSLO, s.Segment}, s.Scope.Pairs()...)...)
}

// sliSelector selects the SLO's raw SLI event counters, of one outcome
// when outcome is set, in its scope.
func sliSelector(s slo.SLO, outcome string) string {
	m := []string{slo.LabelPipeline, s.Pipeline, slo.LabelSegment, s.Segment}
	if outcome != "" {
		m = append(m, slo.LabelOutcome, outcome)
	}
	return selector(slo.MetricSLIEvents, append(m, s.Scope.Pairs()...)...)
}

// sumScoped is sum(expr), by the scope's labels when there is a scope:
// over the prober replicas too, whose series differ only in the labels
// of their scrape targets.
func sumScoped(scope slo.Scope, expr string) string { return aggregateScoped("sum", scope, expr) }

// aggregateScoped is op(expr), by the scope's labels when there is a
// scope.
func aggregateScoped(op string, scope slo.Scope, expr string) string {
	if by := scope.ByClause(); by != "" {
		return op + " " + by + " (" + expr + ")"
	}
	return op + "(" + expr + ")"
}

// SLIErrorExpr is the SLI over a window: the share of the segment's SLI
// events that were bad.
//
// Quiet case: with no events at all the ratio would be 0/0 = NaN, which
// poisons the period average; the denominator is filtered with "> 0" so a
// window without events records nothing instead. Canaries keep events
// flowing through a quiet pipeline, so this only happens when the prober
// is gone (the dead-man alert's job). Stalled case: canaries resolve bad at
// their deadline, so a stall produces bad events and the ratio rises.
// A missing bad series (the prober creates it at zero, but a relabelling
// could drop it) counts as no bad events rather than no data.
func SLIErrorExpr(s slo.SLO, w time.Duration) string {
	rng := "[" + slo.PromDuration(w) + "]"
	bad, all := sliSelector(s, slo.OutcomeBad), sliSelector(s, "")
	return lines(
		"(",
		"  "+sumScoped(s.Scope, "rate("+bad+rng+")"),
		"  or",
		"  0 * "+sumScoped(s.Scope, "rate("+all+rng+")"),
		")",
		"/",
		"("+sumScoped(s.Scope, "rate("+all+rng+")")+" > 0)",
	)
}

func (g generator) sliRecordings(s slo.SLO) []Rule {
	var rules []Rule
	for _, w := range s.RateWindows() {
		l := withLabel(sloLabels(s), labelSlothWindow, slo.PromDuration(w))
		rules = append(rules, Rule{Record: slo.RecordSLIError(w), Expr: SLIErrorExpr(s, w), Labels: g.labels(l)})
	}
	base := sloSelector(slo.RecordSLIError(slo.CurrentBurnWindow), s)
	rng := "[" + slo.PromDuration(s.Window) + "]"
	return append(rules,
		// When the data starts: the base ratio was just recorded in this
		// group, so its timestamp is this evaluation's.
		Rule{
			Record: slo.RecordSLIDataTimestamp,
			Expr:   "max " + byIdentity(s) + " (timestamp(" + base + "))",
			Labels: g.labels(sloLabels(s)),
		},
		// The period ratio averages the 5m ratios, as Sloth does: cheap
		// over 30 days, and windows without events (no sample) do not
		// count. It sums by the SLO's identity, not by every label: after
		// an owner or alerting.labels change the window holds the base
		// series under two label sets, and the rule's own labels would
		// otherwise make them collide ("vector contains metrics with the
		// same labelset after applying rule labels") for a whole window.
		Rule{
			Record: slo.RecordSLIError(s.Window),
			Expr: lines(
				"sum "+byIdentity(s)+" (sum_over_time("+base+rng+"))",
				"/",
				"sum "+byIdentity(s)+" (count_over_time("+base+rng+"))",
			),
			Labels: g.labels(withLabel(sloLabels(s), labelSlothWindow, slo.PromDuration(s.Window))),
		},
	)
}

func (g generator) metaRecordings(s slo.SLO) []Rule {
	days := new(big.Rat).SetFrac64(int64(s.Window), int64(24*time.Hour))
	groupLeft := "/ " + onIdentity(s) + " group_left"
	rec := func(name, expr string) Rule { return Rule{Record: name, Expr: expr, Labels: g.labels(sloLabels(s))} }
	info := sloLabels(s)
	info["sloth_mode"] = "cli-gen-prom"
	info["sloth_spec"] = "prometheus/v1"
	info["sloth_objective"] = strconv.FormatFloat(s.Objective, 'f', -1, 64)
	return []Rule{
		rec(slo.RecordObjective, "vector("+s.ObjectiveExpr()+")"),
		rec(slo.RecordErrorBudget, "vector"+s.ErrorBudgetExpr()),
		rec(slo.RecordTimePeriodDays, "vector("+slo.FormatRat(days)+")"),
		// The share of the window Prometheus holds data for: a fresh
		// Prometheus, or one whose retention is shorter than the window,
		// holds less than all of it.
		rec(slo.RecordPeriodCoverage, lines(
			"clamp_max(",
			"  (time() - min "+byIdentity(s)+" (min_over_time("+sloSelector(slo.RecordSLIDataTimestamp, s)+"["+slo.PromDuration(s.Window)+"])))",
			"  / "+seconds(s.Window)+",",
			"  1",
			")",
		)),
		rec(slo.RecordCurrentBurnRate, lines(
			sloSelector(slo.RecordSLIError(slo.CurrentBurnWindow), s),
			groupLeft,
			sloSelector(slo.RecordErrorBudget, s),
		)),
		// The period's burn rate counts the part of the window without
		// data as good: after 80 minutes of data holding a 20-minute
		// stall, the budget spent is what those 20 minutes cost a 30-day
		// window, not a 25% error ratio extrapolated to the whole of it.
		// With the whole window held (coverage 1) it is Sloth's.
		rec(slo.RecordPeriodBurnRate, lines(
			sloSelector(slo.RecordSLIError(s.Window), s),
			"* "+onIdentity(s)+" group_left",
			sloSelector(slo.RecordPeriodCoverage, s),
			groupLeft,
			sloSelector(slo.RecordErrorBudget, s),
		)),
		rec(slo.RecordPeriodErrorBudgetRemaining, "1 - "+sloSelector(slo.RecordPeriodBurnRate, s)),
		{Record: slo.RecordSLOInfo, Expr: "vector(1)", Labels: g.labels(info)},
	}
}

// BurnAlertExpr is one multiwindow burn-rate condition: the error ratio is
// over the threshold on the long window (the value, so $value reads as the
// long window's ratio) and still is on the short window, and the long
// window holds more bad canaries than slo.BurnAlert.MinBadEvents: the
// long window is judged as bad / max(events, Long / interval), so on a
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
// outage, whose late canaries are its consequence. The window label is dropped, so alerts of different window
// pairs are one alert.
func BurnAlertExpr(s slo.SLO, a slo.BurnAlert, interval time.Duration) string {
	thr := a.ThresholdExpr(s)
	onScope := "  and on (" + strings.Join(s.Scope.Labels(), ", ") + ")"
	count := []string{
		onScope,
		"  " + BadEventsSeenExpr(s, a.Long) + " > " + a.MinBadEventsExpr(s, interval),
	}
	if a.Severity == config.SeverityPage {
		count = append(count,
			onScope,
			"  "+BadEventsSeenExpr(s, a.Short)+" > "+a.MinBadEventsExpr(s, interval))
	}
	stall := selector(RecordStall, append([]string{slo.LabelPipeline, s.Pipeline}, s.Scope.Pairs()...)...)
	return lines(append(append([]string{
		"(",
		"  max without (" + labelSlothWindow + ") (",
		"    " + sloSelector(slo.RecordSLIError(a.Long), s) + " > " + thr,
		"    and ignoring (" + labelSlothWindow + ")",
		"    " + sloSelector(slo.RecordSLIError(a.Short), s) + " > " + thr,
		"  )",
	}, count...),
		")",
		"unless on ("+strings.Join(s.Scope.By(slo.LabelPipeline), ", ")+") max_over_time("+stall+"["+slo.PromDuration(a.Short+stallBlameMargin)+"])",
		UnlessKafkaOutage(s.Scope, s.Pipeline, a.Short+stallBlameMargin),
	)...)
}

// BadEventsSeenExpr counts the SLO's bad canaries in a window as
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
func BadEventsSeenExpr(s slo.SLO, w time.Duration) string {
	bad := sliSelector(s, slo.OutcomeBad)
	seen := bad + " - min_over_time(" + bad + "[" + slo.PromDuration(w) + "])"
	blind := "(" + selector(slo.MetricDependencyUp, append([]string{slo.LabelPipeline, s.Pipeline}, s.Scope.Pairs()...)...) + " == 0)"
	return "(" + aggregateScoped("min", s.Scope, seen+" unless ignoring ("+slo.LabelSegment+", "+slo.LabelOutcome+", "+slo.LabelDependency+") "+blind) +
		" or " + aggregateScoped("min", s.Scope, seen) + ")"
}

// burnAlerts are one alert per severity for the SLO: the window pairs of
// that severity OR-ed, fastest first, as Sloth does, so that an incident
// crossing two pairs is one alert with one label set, not one per window.
//
// The page waits burnPageFor(stall threshold) before it fires: a relay
// that restarts with back-off makes bad canaries in short outages
// before its first stall (10, 20 and 40s down: seven bad canaries in 80s,
// a 1h/5m burn), and the stall that follows, the same incident's page,
// is seen within that time and holds the burn back.
func (g generator) burnAlerts(s slo.SLO, interval, stallThreshold time.Duration) []Rule {
	var levels []string
	pairs := map[string][]slo.BurnAlert{}
	for _, a := range s.Burn {
		if _, ok := pairs[a.Severity]; !ok {
			levels = append(levels, a.Severity)
		}
		pairs[a.Severity] = append(pairs[a.Severity], a)
	}
	var rules []Rule
	for _, level := range levels {
		var exprs, described []string
		for _, a := range pairs[level] {
			exprs = append(exprs, strings.TrimSuffix(BurnAlertExpr(s, a, interval), "\n"))
			described = append(described, fmt.Sprintf("over %s for %s and still for %s (%s%% of the budget spent in %s)",
				thresholdText(s, a), slo.PromDuration(a.Long), slo.PromDuration(a.Short),
				slo.FormatRat(a.BudgetPercent), slo.PromDuration(a.Long)))
		}
		l := sloLabels(s)
		l[labelSeverity] = g.severity(level)
		l[labelSlothSeverity] = g.severity(level)
		keep := g.keepFiringFor()
		if level == config.SeverityPage && inhibitsEndToEnd(s.Segment) {
			keep = g.keepFiringForSource()
		}
		var forDur string
		if level == config.SeverityPage {
			forDur = slo.PromDuration(burnPageFor(stallThreshold))
		}
		rules = append(rules, Rule{
			Alert:         AlertErrorBudgetBurn,
			Expr:          strings.Join(exprs, "\nor\n") + "\n",
			For:           forDur,
			KeepFiringFor: slo.PromDuration(keep),
			Labels:        g.labels(l),
			Annotations: g.annotate(annotations{
				alert:   AlertErrorBudgetBurn,
				summary: fmt.Sprintf("Pipeline %s, segment %s: the error budget is burning (%s).", s.Pipeline, s.Segment, g.severity(level)),
				description: fmt.Sprintf("{{ $value | humanizePercentage }} of the canaries of pipeline %s took longer than the %s budget of segment %s over the long window of the fastest burn that fires. "+
					"The objective is %s%% over %s; this %s fires when the error ratio is %s. Owner: %s.",
					s.Pipeline, slo.PromDuration(s.Budget), s.Segment,
					strconv.FormatFloat(s.Objective, 'f', -1, 64), slo.PromDuration(s.Window), g.severity(level),
					strings.Join(described, ", or "), s.Owner),
				pipelineScoped: true,
				dashboard:      slo.DashboardSLOOverview,
				segment:        true,
			}),
		})
	}
	return rules
}

// burnPageFor is a burn page's for: the longest a stall takes from the
// last delivery to its alert at 15s scrape and evaluation intervals, the
// stall threshold plus a scrape and an evaluation.
func burnPageFor(stallThreshold time.Duration) time.Duration {
	return stallThreshold + 30*time.Second
}

// thresholdText is the threshold as the description prints it.
func thresholdText(s slo.SLO, a slo.BurnAlert) string {
	return slo.FormatRat(a.Factor) + " x (1 - " + s.ObjectiveExpr() + ")"
}

// inhibitsEndToEnd reports whether a segment's pages explain (and so
// inhibit) the end_to_end SLO's alerts of the pipeline: every segment a
// canary crosses between commit and consume.
func inhibitsEndToEnd(segment string) bool {
	return segment != config.SegmentEndToEnd && segment != config.SegmentInsertToCommit
}

func withLabel(l map[string]string, name, value string) map[string]string {
	l[name] = value
	return l
}
