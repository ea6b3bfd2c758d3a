package dashboards

import (
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/debezium"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	// alertsMetric is Prometheus' own series of pending and firing alerts.
	alertsMetric = "ALERTS"
	// alertNames matches every alert package alerts writes: OutboxCanary*
	// for what the canaries see, Outbox* for what the watchers see (backlog,
	// slot, transactions); OutboxCanary.* alone would hide the latter.
	alertNames = "Outbox.*"
	// labelJob and labelInstance are the target labels Prometheus adds to
	// every scraped series.
	labelJob      = "job"
	labelInstance = "instance"
)

// Every matcher on the pipeline variable is a regex match: it serves the
// multi-value pipeline variable of the SLO overview (Grafana writes the
// chosen values as "(a|b)") and the single-value one of the other
// dashboards alike, since a pipeline name has no regex metacharacter
// (configuration validation allows [a-zA-Z0-9_-] only).
var pipelineMatcher = slo.LabelPipeline + `=~"$` + varPipeline + `"`

// queries writes the dashboards' PromQL in the model's scope
// (alerting.selector): every selector matches the scope's labels and every
// aggregation keeps them, so a dashboard of one environment never shows
// another's pipelines of the same name. With no scope the queries are
// what they were before scopes existed.
type queries struct{ scope slo.Scope }

func newQueries(m *slo.Model) queries { return queries{scope: m.Scope} }

// scoped appends the scope's matchers to a selector's.
func (q queries) scoped(matchers []string) []string {
	return append(matchers, q.scope.Matchers()...)
}

// sel selects a metric the prober exports: on the job and instance
// variables (the target labels Prometheus adds when it scrapes the
// prober), the pipeline variable, and more matchers.
func (q queries) sel(name string, matchers ...string) string {
	all := append([]string{
		labelJob + `=~"$` + varJob + `"`,
		labelInstance + `=~"$` + varInstance + `"`,
		pipelineMatcher,
	}, matchers...)
	return name + "{" + strings.Join(q.scoped(all), ",") + "}"
}

// recorded selects a series the generated rules record. Recording rules
// aggregate the prober's series away from their job and instance labels,
// so a job or instance matcher would select nothing: the job and instance
// variables reach these series through the pipeline variable, whose values
// are the pipelines the chosen job and instances export.
func (q queries) recorded(name string, matchers ...string) string {
	all := append([]string{pipelineMatcher}, matchers...)
	return name + "{" + strings.Join(q.scoped(all), ",") + "}"
}

// debezium selects one of Debezium's series (internal/debezium) on the
// debezium_server variable and the scope. Not on job, instance or
// pipeline: the Kafka Connect worker's exporter, not the prober, exports
// them, and Debezium knows no pipeline.
func (q queries) debezium(name string) string {
	all := []string{debezium.LabelServer + `=~"$` + varDebeziumServer + `"`}
	return name + "{" + strings.Join(q.scoped(all), ",") + "}"
}

// debeziumServerValues lists the connectors the worker's exporter reports.
func (q queries) debeziumServerValues() string {
	if len(q.scope) == 0 {
		return fmt.Sprintf("label_values(%s, %s)", debezium.MetricConnected, debezium.LabelServer)
	}
	return fmt.Sprintf("label_values(%s{%s}, %s)", debezium.MetricConnected, strings.Join(q.scope.Matchers(), ","), debezium.LabelServer)
}

// segmentSel selects name on the pipeline and the (repeated) segment
// variable.
func (q queries) segmentSel(name string) string {
	return q.sel(name, slo.LabelSegment+`="$`+varSegment+`"`)
}

// rate is the per-second rate of a counter over Grafana's rate interval,
// which is never shorter than four scrape intervals.
func rate(selector string) string {
	return "rate(" + selector + "[$__rate_interval])"
}

// aggregate applies op by labels and the scope's (none: over everything).
func (q queries) aggregate(op, expr string, labels ...string) string {
	labels = q.scope.By(labels...)
	if len(labels) == 0 {
		return op + "(" + expr + ")"
	}
	return op + " by (" + strings.Join(labels, ", ") + ") (" + expr + ")"
}

// sumBy sums expr by labels (none: a plain sum). Counters and counts of
// the canaries add up across the chosen instances (each prober replica
// sends and judges its own); gauges that do not (ages, 0/1 states, and
// every watcher's reading, which each replica takes of the same database
// or Connect) use maxBy or minBy, as the rules do.
func (q queries) sumBy(expr string, labels ...string) string {
	return q.aggregate("sum", expr, labels...)
}

// maxBy keeps the largest value by labels: the oldest age of several
// instances, not their sum.
func (q queries) maxBy(expr string, labels ...string) string {
	return q.aggregate("max", expr, labels...)
}

// minBy keeps the smallest value by labels: a 0/1 health state is healthy
// only when every chosen instance says so.
func (q queries) minBy(expr string, labels ...string) string {
	return q.aggregate("min", expr, labels...)
}

// inRange is how many events a counter counted over the dashboard's time
// range.
func (q queries) inRange(metric string) string {
	return q.sumBy("increase(" + q.sel(metric) + "[$__range])")
}

// quantile is the q-quantile of the segment latency histogram, per segment.
func (q queries) quantile(quantile string, selector string) string {
	return fmt.Sprintf("histogram_quantile(%s, %s)", quantile, q.sumBy(rate(selector), "le", slo.LabelSegment))
}

// sloLabels identify one SLO in a dashboard and name who owns it: every
// budget and burn query keeps them, so tables show the owner beside each
// figure and legends can name it.
var sloLabels = []string{slo.LabelPipeline, slo.LabelSegment, slo.LabelOwner}

// sloLegend names an SLO and its owner in a legend.
const sloLegend = "{{pipeline}}/{{segment}} ({{owner}})"

// perSLO is a recorded series per SLO (summed over the labels that are not
// the SLO's, such as sloth_window).
func (q queries) perSLO(name string, matchers ...string) string {
	return q.sumBy(q.recorded(name, matchers...), sloLabels...)
}

// burnRate is the burn rate of every SLO over one recorded window: the
// error ratio over the window divided by the error budget.
func (q queries) burnRate(window time.Duration, matchers ...string) string {
	return q.perSLO(slo.RecordSLIError(window), matchers...) + " / " + q.perSLO(slo.RecordErrorBudget, matchers...)
}

// burnThresholdExpr is, per pipeline, the burn rate at which the alert
// fires, computed by Prometheus from the recorded SLO window in days:
// budget_percent/100 * window/long, the model's BurnFactor. Read from the
// rules' own record, the line is right for each pipeline's window (14.4
// for 30d, 13.44 for 28d on the 1h page) where a fixed number could only
// be right for one.
//
// It is written as one division of two exact integers, days * 86400 *
// num / (100 * den * long_seconds) with budget_percent = num/den, so
// Prometheus rounds once and draws exactly the float of the factor (14/15
// on a 28d window's 3d ticket, not 0.9333333333333335).
func (q queries) burnThresholdExpr(a slo.BurnAlert) string {
	pct := a.BudgetPercent
	den := "100"
	if pct.Denom().Cmp(big.NewInt(1)) != 0 {
		den += " * " + pct.Denom().String()
	}
	return fmt.Sprintf("%s * 86400 * %s / (%s * %d)",
		q.maxBy(q.recorded(slo.RecordTimePeriodDays), slo.LabelPipeline),
		pct.Num().String(), den, int64(a.Long/time.Second))
}

// alertSelector selects outbox-canary's alerts of the chosen pipelines,
// jobs and instances, and the instance-wide ones (the dead man,
// OutboxCanaryProberAbsent, has no pipeline label). Each matcher also
// accepts an absent label ("|" matches the empty value): burn-rate alerts
// come from recorded series and carry no job or instance, the dead man
// carries its job but no instance.
func (q queries) alertSelector(matchers ...string) string {
	all := append([]string{
		`alertname=~"` + alertNames + `"`,
		labelJob + `=~"$` + varJob + `|"`,
		labelInstance + `=~"$` + varInstance + `|"`,
		slo.LabelPipeline + `=~"$` + varPipeline + `|"`,
	}, matchers...)
	return alertsMetric + "{" + strings.Join(q.scoped(all), ",") + "}"
}

// alertsFiring counts the firing alerts alertSelector sees, 0 when none.
func (q queries) alertsFiring() string {
	return q.aggregate("count", q.alertSelector(`alertstate="firing"`)) + " or vector(0)"
}
