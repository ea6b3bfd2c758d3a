package dashboards

import (
	"math/big"
	"sort"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/table"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// sloOverview is the dashboard the team reviews budgets on: per segment of
// the chosen pipeline, the objective, the SLI and the error budget left
// over the SLO window, how fast the budget burns over each alert window,
// and which alerts are pending or firing.
func sloOverview(m *slo.Model) (dashboard.Dashboard, error) {
	b := newDashboard(m, UIDSLOOverview, "outbox-canary / SLO overview",
		"Objectives, error budget and burn rates of each segment of a pipeline, from the recording rules of `outbox-canary rules`.",
		"now-7d")

	windows := rateWindows(m)
	burnCells := []cell{
		{burnRateTable(m, windows), 10, 8},
		{timeSeries("Current burn rate",
			"Burn rate over the last "+slo.PromDuration(slo.CurrentBurnWindow)+": 1 spends exactly the error budget over the SLO window; above 1 the budget runs out early.",
			"short",
			query(sumBy(sel(slo.RecordCurrentBurnRate), slo.LabelSegment), "{{segment}}")).
			Thresholds(burnThresholds(m)).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed)).
			Min(0), 14, 8},
	}

	sections := []section{
		{title: "Objectives over the SLO window", cells: []cell{
			{statPanel("Objective",
				"Share of canaries that must cross the segment within its budget, over the SLO window.",
				"percentunit",
				instant(sumBy(sel(slo.RecordObjective), slo.LabelSegment), "{{segment}}")).
				Decimals(3), 6, 6},
			{statPanel("SLI over the SLO window",
				"Share of canaries that crossed the segment within its budget over the whole SLO window: 1 - period burn rate x error budget.",
				"percentunit",
				instant("1 - ("+sumBy(sel(slo.RecordPeriodBurnRate), slo.LabelSegment)+" * "+sumBy(sel(slo.RecordErrorBudget), slo.LabelSegment)+")", "{{segment}}")).
				Decimals(3), 6, 6},
			{gaugePanel("Error budget remaining",
				"Share of the SLO window's error budget not yet spent. Negative: the objective is already missed for this window.",
				"percentunit",
				instant(sumBy(sel(slo.RecordPeriodErrorBudgetRemaining), slo.LabelSegment), "{{segment}}")).
				Min(0).Max(1).Decimals(1).
				Thresholds(thresholds(step{nil, "red"}, step{at(0.25), "orange"}, step{at(0.5), "green"})), 8, 6},
			{statPanel("Alerts firing",
				"outbox-canary alerts of this pipeline firing now: burn rate, stall, backlog, replication slot, long transactions.",
				"short",
				instant("count("+alertSelector(`alertstate="firing"`)+") or vector(0)", "")).
				ColorMode(common.BigValueColorModeBackground).
				Thresholds(thresholds(step{nil, "green"}, step{at(1), "red"})), 4, 6},
		}},
		{title: "Burn rate", cells: burnCells},
		{title: "Error budget over time", cells: []cell{
			{timeSeries("Error budget remaining",
				"How the SLO window's error budget was spent over time.",
				"percentunit",
				query(sumBy(sel(slo.RecordPeriodErrorBudgetRemaining), slo.LabelSegment), "{{segment}}")), 12, 8},
			{timeSeries("Period burn rate",
				"Burn rate over the whole SLO window: above 1 the objective is missed for the window.",
				"short",
				query(sumBy(sel(slo.RecordPeriodBurnRate), slo.LabelSegment), "{{segment}}")).
				Thresholds(thresholds(step{nil, "green"}, step{at(1), "red"})).
				ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed)).
				Min(0), 12, 8},
		}},
		{title: "Alerts", cells: []cell{
			{tablePanel("Pending and firing alerts",
				"outbox-canary alerts of this pipeline that are pending or firing now, with their labels (severity and owner route them in Alertmanager).",
				instantTable(alertSelector())).
				WithTransformation(organize([]string{"Time", "Value", "__name__"}, nil)), 14, 8},
			{timeSeries("Firing alerts over time",
				"Which outbox-canary alerts fired when.",
				"short",
				query(sumBy(alertSelector(`alertstate="firing"`), "alertname", slo.LabelSegment), "{{alertname}} {{segment}}")).
				DrawStyle(common.GraphDrawStyleBars).
				Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).
				Decimals(0), 10, 8},
			{tablePanel("SLOs",
				"The SLOs the rules were generated for (sloth_slo_info).",
				instantTable(sel(slo.RecordSLOInfo))).
				WithTransformation(organize([]string{"Time", "Value", "__name__"}, nil)), 24, 6},
		}},
	}
	return finish(b, sections)
}

// burnRateTable shows the burn rate of every segment over every window the
// rules record, one column per window: which window a burn shows up in
// tells a fast burn from a slow one.
func burnRateTable(m *slo.Model, windows []time.Duration) *table.PanelBuilder {
	qs := make([]*prometheus.DataqueryBuilder, len(windows))
	rename := map[string]string{}
	for i, w := range windows {
		qs[i] = instantTable(burnRate(w))
		rename["Value #"+string(rune('A'+i))] = slo.PromDuration(w)
	}
	return tablePanel("Burn rate per window",
		"Burn rate of each segment over each window the rules record, now. Yellow: faster than the error budget allows; red: at least the lowest paging burn rate.",
		qs...).
		Unit("short").
		Decimals(2).
		CellOptions(common.TableCellOptions{TableColoredBackgroundCellOptions: &common.TableColoredBackgroundCellOptions{
			Type: common.TableCellDisplayModeColorBackground,
		}}).
		Thresholds(burnThresholds(m)).
		// One frame per window, joined on the segment into one row.
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(organize([]string{"Time"}, rename))
}

// burnThresholds colors a burn rate: green while the budget lasts the
// window, yellow above 1, red from the lowest burn rate any SLO pages at.
func burnThresholds(m *slo.Model) *dashboard.ThresholdsConfigBuilder {
	steps := []step{{nil, "green"}, {at(1), "yellow"}}
	var lowest *big.Rat
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			for _, a := range s.Burn {
				if a.Severity == config.SeverityPage && (lowest == nil || a.Factor.Cmp(lowest) < 0) {
					lowest = a.Factor
				}
			}
		}
	}
	if lowest != nil {
		f, _ := lowest.Float64()
		steps = append(steps, step{at(f), "red"})
	}
	return thresholds(steps...)
}

// rateWindows lists every window any SLO of the model records an error
// ratio for, shortest first.
func rateWindows(m *slo.Model) []time.Duration {
	seen := map[time.Duration]bool{}
	var out []time.Duration
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			for _, w := range s.RateWindows() {
				if !seen[w] {
					seen[w] = true
					out = append(out, w)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// organize hides fields and renames others in a table.
func organize(exclude []string, rename map[string]string) dashboard.DataTransformerConfig {
	ex := map[string]bool{}
	for _, f := range exclude {
		ex[f] = true
	}
	if rename == nil {
		rename = map[string]string{}
	}
	return dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
		"excludeByName": ex,
		"renameByName":  rename,
		"indexByName":   map[string]int{},
	}}
}
