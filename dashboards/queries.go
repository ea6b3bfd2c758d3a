package dashboards

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	// alertsMetric is Prometheus' own series of pending and firing alerts.
	alertsMetric = "ALERTS"
	// alertNames matches every alert package alerts writes: OutboxCanary*
	// for what the canaries see, Outbox* for what the watchers see (backlog,
	// slot, transactions); OutboxCanary.* alone would hide the latter.
	alertNames = "Outbox.*"
)

// sel is a selector of name on the pipeline variable, plus matchers.
func sel(name string, matchers ...string) string {
	all := append([]string{slo.LabelPipeline + `="$` + varPipeline + `"`}, matchers...)
	return name + "{" + strings.Join(all, ",") + "}"
}

// segmentSel selects name on the pipeline and the (repeated) segment
// variable.
func segmentSel(name string) string {
	return sel(name, slo.LabelSegment+`="$`+varSegment+`"`)
}

// rate is the per-second rate of a counter over Grafana's rate interval,
// which is never shorter than four scrape intervals.
func rate(selector string) string {
	return "rate(" + selector + "[$__rate_interval])"
}

// sumBy aggregates expr by labels (none: a plain sum).
func sumBy(expr string, labels ...string) string {
	if len(labels) == 0 {
		return "sum(" + expr + ")"
	}
	return "sum by (" + strings.Join(labels, ", ") + ") (" + expr + ")"
}

// inRange is how many events a counter counted over the dashboard's time
// range.
func inRange(metric string) string {
	return sumBy("increase(" + sel(metric) + "[$__range])")
}

// quantile is the q-quantile of the segment latency histogram, per segment.
func quantile(q string, selector string) string {
	return fmt.Sprintf("histogram_quantile(%s, %s)", q, sumBy(rate(selector), "le", slo.LabelSegment))
}

// burnRate is the burn rate over one recorded window, per segment: the
// error ratio over the window divided by the error budget.
func burnRate(window time.Duration) string {
	return sumBy(sel(slo.RecordSLIError(window)), slo.LabelSegment) +
		" / " + sumBy(sel(slo.RecordErrorBudget), slo.LabelSegment)
}

// alertSelector selects outbox-canary's alerts of the pipeline.
func alertSelector(matchers ...string) string {
	return sel(alertsMetric, append([]string{`alertname=~"` + alertNames + `"`}, matchers...)...)
}
