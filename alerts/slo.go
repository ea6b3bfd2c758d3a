package alerts

import (
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/outbox-canary/outbox-canary/slo"
)

// sloLabels are the identity of an SLO's series: Sloth's three labels,
// plus ours for routing and for people.
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

// sloSelector selects an SLO's recorded series by Sloth's labels.
func sloSelector(metric string, s slo.SLO) string {
	return selector(metric, labelSlothID, s.ID, labelSlothService, s.Pipeline, labelSlothSLO, s.Segment)
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
	bad := selector(slo.MetricSLIEvents, slo.LabelPipeline, s.Pipeline, slo.LabelSegment, s.Segment, slo.LabelOutcome, slo.OutcomeBad)
	all := selector(slo.MetricSLIEvents, slo.LabelPipeline, s.Pipeline, slo.LabelSegment, s.Segment)
	return lines(
		"(",
		"  sum(rate("+bad+rng+"))",
		"  or",
		"  0 * sum(rate("+all+rng+"))",
		")",
		"/",
		"(sum(rate("+all+rng+")) > 0)",
	)
}

func (g generator) sliRecordings(s slo.SLO) []Rule {
	var rules []Rule
	for _, w := range s.RateWindows() {
		l := withLabel(sloLabels(s), labelSlothWindow, slo.PromDuration(w))
		rules = append(rules, Rule{Record: slo.RecordSLIError(w), Expr: SLIErrorExpr(s, w), Labels: g.labels(l)})
	}
	// The period ratio averages the 5m ratios, as Sloth does: cheap over
	// 30 days, and windows without events (no sample) do not count.
	base := sloSelector(slo.RecordSLIError(slo.CurrentBurnWindow), s)
	rng := "[" + slo.PromDuration(s.Window) + "]"
	return append(rules, Rule{
		Record: slo.RecordSLIError(s.Window),
		Expr: lines(
			"sum_over_time("+base+rng+")",
			"/ ignoring ("+labelSlothWindow+")",
			"count_over_time("+base+rng+")",
		),
		// The full identity, not just the window as Sloth writes it: the
		// same labels come through the expression, and promtool's lint
		// would otherwise see every SLO's period rule as one duplicate.
		Labels: g.labels(withLabel(sloLabels(s), labelSlothWindow, slo.PromDuration(s.Window))),
	})
}

func (g generator) metaRecordings(s slo.SLO) []Rule {
	days := new(big.Rat).SetFrac64(int64(s.Window), int64(24*time.Hour))
	on := "/ on (" + labelSlothID + ", " + labelSlothSLO + ", " + labelSlothService + ") group_left"
	rec := func(name, expr string) Rule { return Rule{Record: name, Expr: expr, Labels: g.labels(sloLabels(s))} }
	info := sloLabels(s)
	info["sloth_mode"] = "cli-gen-prom"
	info["sloth_spec"] = "prometheus/v1"
	info["sloth_objective"] = strconv.FormatFloat(s.Objective, 'f', -1, 64)
	return []Rule{
		rec(slo.RecordObjective, "vector("+s.ObjectiveExpr()+")"),
		rec(slo.RecordErrorBudget, "vector"+s.ErrorBudgetExpr()),
		rec(slo.RecordTimePeriodDays, "vector("+slo.FormatRat(days)+")"),
		rec(slo.RecordCurrentBurnRate, lines(
			sloSelector(slo.RecordSLIError(slo.CurrentBurnWindow), s),
			on,
			sloSelector(slo.RecordErrorBudget, s),
		)),
		rec(slo.RecordPeriodBurnRate, lines(
			sloSelector(slo.RecordSLIError(s.Window), s),
			on,
			sloSelector(slo.RecordErrorBudget, s),
		)),
		rec(slo.RecordPeriodErrorBudgetRemaining, "1 - "+sloSelector(slo.RecordPeriodBurnRate, s)),
		{Record: slo.RecordSLOInfo, Expr: "vector(1)", Labels: g.labels(info)},
	}
}

// BurnAlertExpr is one multiwindow burn-rate condition: the error ratio is
// over the threshold on the long window (the value, so $value reads as the
// long window's ratio) and still is on the short window.
func BurnAlertExpr(s slo.SLO, a slo.BurnAlert) string {
	thr := a.ThresholdExpr(s)
	return lines(
		sloSelector(slo.RecordSLIError(a.Long), s)+" > "+thr,
		"and ignoring ("+labelSlothWindow+")",
		sloSelector(slo.RecordSLIError(a.Short), s)+" > "+thr,
	)
}

func (g generator) burnAlerts(s slo.SLO) []Rule {
	var rules []Rule
	for _, a := range s.Burn {
		window := slo.PromDuration(a.Long) + "/" + slo.PromDuration(a.Short)
		l := sloLabels(s)
		l[labelSeverity] = a.Severity
		l[labelSlothSeverity] = a.Severity
		l[labelBurnWindow] = window
		rules = append(rules, Rule{
			Alert:  AlertErrorBudgetBurn,
			Expr:   BurnAlertExpr(s, a),
			Labels: g.labels(l),
			Annotations: map[string]string{
				"summary": fmt.Sprintf("Pipeline %s, segment %s: error budget burning at over %sx (%s).",
					s.Pipeline, s.Segment, slo.FormatRat(a.Factor), window),
				"description": fmt.Sprintf("{{ $value | humanizePercentage }} of the canaries of pipeline %s took longer than the %s budget of segment %s over the last %s, and still do over the last %s. "+
					"The objective is %s%% over %s; at this rate %s%% of that error budget goes in %s (threshold %s x (1 - %s)). Owner: %s.",
					s.Pipeline, slo.PromDuration(s.Budget), s.Segment, slo.PromDuration(a.Long), slo.PromDuration(a.Short),
					strconv.FormatFloat(s.Objective, 'f', -1, 64), slo.PromDuration(s.Window),
					slo.FormatRat(a.BudgetPercent), slo.PromDuration(a.Long), slo.FormatRat(a.Factor), s.ObjectiveExpr(), s.Owner),
				"runbook_url": g.runbook(AlertErrorBudgetBurn),
			},
		})
	}
	return rules
}

func withLabel(l map[string]string, name, value string) map[string]string {
	l[name] = value
	return l
}
