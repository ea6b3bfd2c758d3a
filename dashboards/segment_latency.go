package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/outbox-canary/outbox-canary/slo"
)

// segmentLatency is where a burn is traced to a segment: one row per
// segment with its latency quantiles against its budget, the latency
// distribution and its SLI events, then the fate of the pipeline's
// canaries (late, lost, duplicated, out of order, skipped, skewed).
func segmentLatency(m *slo.Model) (dashboard.Dashboard, error) {
	q := newQueries(m)
	b := newDashboard(m, dashboardSpec{
		uid:   UIDSegmentLatency,
		title: "outbox-canary / segment latency",
		about: "Latency of each segment of a pipeline against its budget, and what became of the canaries.",
		from:  "now-6h",
	}).
		WithVariable(dashboard.NewQueryVariableBuilder(varSegment).
			Label("Segment").
			Description("Segments of the pipeline, between two stamps of a canary; end_to_end is commit to consume.").
			Datasource(datasource()).
			Query(dashboard.StringOrMap{String: cog.ToPtr(q.segmentValues())}).
			Definition(q.segmentValues()).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			Current(option("All", "$__all")))

	bucket := q.segmentSel(slo.MetricSegmentLatency + "_bucket")
	latency := timeSeries("Latency vs budget",
		"Quantiles of the segment's latency over canaries that arrived (late ones included), and the segment's budget. Canaries that never arrive are not in the quantiles: see lost canaries below.",
		"s",
		query(q.quantile("0.5", bucket), "p50"),
		query(q.quantile("0.9", bucket), "p90"),
		query(q.quantile("0.99", bucket), "p99"),
		query(q.maxBy(q.segmentSel(slo.MetricSegmentBudget), slo.LabelSegment), "budget")).
		Min(0).
		OverrideByQuery("D", dashedRed())

	sections := []section{
		{title: "Segment $" + varSegment, repeat: varSegment, cells: []cell{
			{latency, 10, 8},
			{heatmapPanel("Latency distribution",
				"Canary arrivals per latency bucket. The buckets are 0.1x to 10x of the segment's budget (of end_to_end's for a segment without one).",
				"s",
				query(q.sumBy("increase("+bucket+"[$__rate_interval])", "le"), "{{le}}").
					Format(prometheus.PromQueryFormatHeatmap)), 8, 8},
			{timeSeries("SLI events",
				"Good and bad SLI events of the segment. A canary is bad as soon as its budget runs out, so a stall shows here before any canary is lost.",
				"cps",
				query(q.sumBy(rate(q.segmentSel(slo.MetricSLIEvents)), slo.LabelOutcome), "{{outcome}}"),
				query(q.sumBy(rate(q.segmentSel(slo.MetricClockSkew))), "clock skew suspected")).
				OverrideByName(slo.OutcomeBad, []dashboard.DynamicConfigValue{fixedColor("red")}).
				OverrideByName(slo.OutcomeGood, []dashboard.DynamicConfigValue{fixedColor("green")}), 6, 8},
		}},
		{title: "Canary outcomes", cells: []cell{
			{q.countStat("Sent", "Canary inserts committed over the time range.", slo.MetricCanariesSent, nil), 3, 4},
			{q.countStat("Received", "First arrivals of canaries over the time range.", slo.MetricCanariesReceived, nil), 3, 4},
			{q.countStat("Late", "Canaries that arrived after their end_to_end deadline (already counted bad at the deadline, not again).", slo.MetricCanariesLate, at(1)), 2, 4},
			{q.countStat("Lost", "Canaries that never arrived within canary.lost_after.", slo.MetricCanariesLost, at(1)), 2, 4},
			{q.countStat("Duplicates", "Second and later arrivals of a canary (at-least-once delivery); never counted twice as SLI events.", slo.MetricCanariesDuplicate, nil), 3, 4},
			{q.countStat("Out of order", "Canaries that arrived after a later canary of the same key.", slo.MetricCanariesOutOfOrder, at(1)), 2, 4},
			{q.countStat("Skipped messages", "Messages on the canary topic that were not this instance's canaries (other instances, garbage, forgeries).", slo.MetricMessagesSkipped, nil), 3, 4},
			{statPanel("In flight", "Canaries sent that have neither arrived nor been declared lost.", "short",
				instant(q.sumBy(q.sel(slo.MetricCanariesInFlight)), "")), 3, 4},
			{statPanel("Since last good canary",
				"Time since the last canary that crossed the whole pipeline within its end-to-end budget; empty until the first.",
				"s",
				instant("time() - ("+q.maxBy(q.sel(slo.MetricLastSuccessTimestamp))+" > 0)", "")).
				Decimals(0), 3, 4},
			{timeSeries("Canaries",
				"Canaries sent, received (late ones among them) and lost, and inserts that failed (those are not SLI events: the pipeline was not exercised).",
				"cps",
				query(q.sumBy(rate(q.sel(slo.MetricCanariesSent))), "sent"),
				query(q.sumBy(rate(q.sel(slo.MetricCanariesReceived))), "received"),
				query(q.sumBy(rate(q.sel(slo.MetricCanariesLate))), "late"),
				query(q.sumBy(rate(q.sel(slo.MetricCanariesLost))), "lost"),
				query(q.sumBy(rate(q.sel(slo.MetricCanaryInsertFailures))), "insert failed")), 12, 8},
			{timeSeries("Duplicates and out of order",
				"At-least-once delivery shows as duplicates; reordering per key as out of order.",
				"cps",
				query(q.sumBy(rate(q.sel(slo.MetricCanariesDuplicate))), "duplicate"),
				query(q.sumBy(rate(q.sel(slo.MetricCanariesOutOfOrder))), "out of order")), 12, 8},
			{timeSeries("SLI events by segment",
				"Good and bad SLI events of every budgeted segment.",
				"cps",
				query(q.sumBy(rate(q.sel(slo.MetricSLIEvents)), slo.LabelSegment, slo.LabelOutcome), "{{segment}} {{outcome}}")), 8, 8},
			{timeSeries("Skipped messages by reason",
				"Messages on the canary topic skipped, by reason: foreign_instance, malformed, bad_signature (a forgery, or a key mismatch), unknown_canary, unknown_pipeline.",
				"cps",
				query(q.sumBy(rate(q.sel(slo.MetricMessagesSkipped)), slo.LabelReason), "{{reason}}")), 8, 8},
			{timeSeries("Suspected clock skew by segment",
				"Segments measured negative: their two stamps come from clocks that disagree by more than the segment lasted. They are counted, never clamped to zero.",
				"cps",
				query(q.sumBy(rate(q.sel(slo.MetricClockSkew)), slo.LabelSegment), "{{segment}}")), 8, 8},
		}},
	}
	return finish(b, sections)
}

// segmentValues lists the segments of the chosen pipeline that have a
// latency histogram.
func (q queries) segmentValues() string {
	return "label_values(" + q.sel(slo.MetricSegmentLatency+"_count") + ", " + slo.LabelSegment + ")"
}

// countStat shows how many times a counter counted over the time range;
// from, when set, is where the count turns red.
func (q queries) countStat(title, description, metric string, redFrom *float64) cog.Builder[dashboard.Panel] {
	steps := []step{{nil, "blue"}}
	if redFrom != nil {
		steps = []step{{nil, "green"}, {redFrom, "red"}}
	}
	return statPanel(title, description, "short", instant(q.inRange(metric), "")).
		Decimals(0).
		Thresholds(thresholds(steps...))
}

func fixedColor(color string) dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": color}}
}
