package dashboards

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// noDataYet is what a budget or burn figure reads when the rules have
// recorded none, instead of Grafana's "No data" or an empty cell.
const noDataYet = "no data yet"

// Column names of the fleet table.
const (
	colBudget    = "Budget remaining"
	colObjective = "Objective"
	colWindow    = "Window"
	burnColumn   = "Burn "
)

// sloOverview is the dashboard the team reviews budgets on, the whole
// fleet first: every SLO of every pipeline the chosen probers measure,
// least error budget left first, with its owner, objective, window and
// burn rates; then each burn-rate alert's windows against its threshold,
// the budget over the window, and the alerts pending or firing. Its
// default time range is the SLO window, and its pipeline variable takes
// several values (All by default), so one dashboard serves the monthly
// review and the zoom on one pipeline.
func sloOverview(m *slo.Model) (dashboard.Dashboard, error) {
	q := newQueries(m)
	b := newDashboard(m, dashboardSpec{
		uid:   UIDSLOOverview,
		title: "outbox-canary / SLO overview",
		about: "Every SLO of every pipeline, least error budget left first, with its owner; burn rates against each alert's threshold; error budget over the SLO window. Read from the recording rules of `outbox-canary rules`.",
		from:  reviewRange(m),
		// The whole fleet by default.
		multiPipeline: true,
	})

	groups := windowGroups(m)
	fleet := []cell{
		{statPanel("Alerts firing",
			"outbox-canary alerts firing now for the chosen pipelines, and the instance-wide ones that have no pipeline (OutboxCanaryProberAbsent, the dead man: with the prober gone no other alert can fire).",
			"short",
			instant(q.alertsFiring(), "")).
			ColorMode(common.BigValueColorModeBackground).
			Thresholds(thresholds(step{nil, "green"}, step{at(1), "red"})), 4, 5},
		{statPanel("Least error budget left",
			"The SLO with the least of its error budget left, and its owner. "+budgetAbout(m),
			"percentunit",
			instant("bottomk(1, "+q.perSLO(slo.RecordPeriodErrorBudgetRemaining)+")", sloLegend)).
			TextMode(common.BigValueTextModeValueAndName).
			ColorMode(common.BigValueColorModeBackground).
			Decimals(1).
			NoValue(noDataYet).
			Thresholds(budgetThresholds()), 20, 5},
	}
	for _, g := range groups {
		fleet = append(fleet, cell{fleetTable(m, g, groups), gridWidth, tableHeight(g.slos)})
	}

	kinds := burnAlertKinds(m)
	burnWidth := uint32(gridWidth)
	if len(kinds) > 0 {
		burnWidth = max(gridWidth/uint32(len(kinds)), 6)
	}
	var burnCells []cell
	for _, a := range kinds {
		burnCells = append(burnCells, cell{burnAlertPanel(m, a), burnWidth, 8})
	}

	sections := []section{
		{title: "Every SLO, least error budget left first", cells: fleet},
		{title: "Burn rate against the alert thresholds", cells: burnCells},
		{title: "Error budget over the SLO window", cells: []cell{
			{timeSeries("Error budget remaining",
				"How each SLO's error budget was spent over its window. "+budgetAbout(m),
				"percentunit",
				query(q.perSLO(slo.RecordPeriodErrorBudgetRemaining), sloLegend)).
				NoValue(noDataYet), 12, 8},
			{timeSeries("Period burn rate",
				"Burn rate over each SLO's whole window: above 1 the objective is missed for the window, whatever the window's length. "+budgetAbout(m),
				"short",
				query(q.perSLO(slo.RecordPeriodBurnRate), sloLegend)).
				NoValue(noDataYet).
				Thresholds(thresholds(step{nil, "green"}, step{at(1), "red"})).
				ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed)).
				Min(0), 12, 8},
		}},
		{title: "Alerts", cells: []cell{
			{tablePanel("Pending and firing alerts",
				"outbox-canary alerts of the chosen pipelines that are pending or firing now, and the instance-wide ones (the dead man), with their labels: severity and owner route them in Alertmanager.",
				instantTable(q.alertSelector())).
				WithTransformation(organize([]string{"Time", "Value", "__name__"}, nil, nil)), 14, 8},
			{timeSeries("Firing alerts over time",
				"Which outbox-canary alerts fired when, and for whom.",
				"short",
				query(q.sumBy(q.alertSelector(`alertstate="firing"`), "alertname", slo.LabelPipeline, slo.LabelSegment, slo.LabelOwner), "{{alertname}} {{pipeline}} {{segment}} {{owner}}")).
				DrawStyle(common.GraphDrawStyleBars).
				Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).
				Decimals(0), 10, 8},
			{tablePanel("SLOs",
				"The SLOs the rules were generated for (sloth_slo_info), with their owners.",
				instantTable(q.recorded(slo.RecordSLOInfo))).
				WithTransformation(organize([]string{"Time", "Value", "__name__"}, nil, nil)), 24, 6},
		}},
	}
	return finish(b, sections)
}

// budgetAbout says over what a budget figure is computed, what that asks
// of Prometheus, and what "no data yet" means.
func budgetAbout(m *slo.Model) string {
	longest := windowText(longestWindow(m))
	return fmt.Sprintf("Computed over each SLO's window (%s here), so Prometheus must keep at least %s of data: set --storage.tsdb.retention.time to %s or more (Prometheus keeps 15d by default, and silently computes a longer window over what it kept). %q: the rules have recorded no figure for the SLO (a Prometheus that has only just started, or one without the rules of outbox-canary rules loaded), rather than an empty panel or a figure that means nothing.",
		windowsText(m), longest, longest, noDataYet)
}

// budgetThresholds color an error budget: red under a quarter left, green
// from half.
func budgetThresholds() *dashboard.ThresholdsConfigBuilder {
	return thresholds(step{nil, "red"}, step{at(0.25), "orange"}, step{at(0.5), "green"})
}

// fleetTable lists every SLO of a window group, one row each, least error
// budget left first: pipeline, segment and owner, objective and window,
// budget remaining and the burn rate over every recorded window, each
// burn column colored at its own thresholds (burnSteps).
func fleetTable(m *slo.Model, g windowGroup, groups []windowGroup) *table.PanelBuilder {
	q := newQueries(m)
	matchers := g.matchers(groups)
	qs := []*prometheus.DataqueryBuilder{
		instantTable(q.perSLO(slo.RecordPeriodErrorBudgetRemaining, matchers...)),
		instantTable(q.perSLO(slo.RecordObjective, matchers...)),
		instantTable(q.perSLO(slo.RecordTimePeriodDays, matchers...)),
	}
	columns := []string{colBudget, colObjective, colWindow}
	for _, w := range g.rateWindows {
		qs = append(qs, instantTable(q.burnRate(w, matchers...)))
		columns = append(columns, burnColumn+slo.PromDuration(w))
	}
	rename := map[string]string{}
	for i, c := range columns {
		rename["Value #"+string(rune('A'+i))] = c
	}
	order := append(append([]string{}, sloLabels...), colObjective, colWindow, colBudget)
	order = append(order, columns[3:]...)

	title := "Every SLO"
	if len(groups) > 1 {
		title = fmt.Sprintf("SLOs with a %s window (%s)", windowText(g.window), strings.Join(g.pipelines, ", "))
	}
	description := fmt.Sprintf("One row per SLO, least error budget left first; click a pipeline to see it alone, a segment for its latency. Burn rates are over each window the rules record; the color of each column follows the alerts that read that window (%s): yellow above 1 (the budget would not last the window), orange from a ticket's threshold, red from a page's. %s",
		burnLegend(g), budgetAbout(m))

	p := tablePanel(title, description, qs...).
		Unit("short").
		Decimals(2).
		NoValue(noDataYet).
		SortBy([]cog.Builder[common.TableSortByFieldState]{sortAscending(colBudget)}).
		// One frame per query, joined on pipeline, segment and owner into
		// one row per SLO.
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(organize([]string{"Time"}, rename, order)).
		OverrideByName(slo.LabelPipeline, []dashboard.DynamicConfigValue{dataLink(
			"Only pipeline ${__value.text}",
			"/d/"+UIDSLOOverview+"/?var-"+varPipeline+"=${__value.raw}&${"+varJob+":queryparam}&${"+varInstance+":queryparam}&${"+varDatasource+":queryparam}&${__url_time_range}")}).
		OverrideByName(slo.LabelSegment, []dashboard.DynamicConfigValue{dataLink(
			"Latency of ${__data.fields.pipeline} ${__value.text}",
			"/d/"+UIDSegmentLatency+"/?var-"+varPipeline+"=${__data.fields.pipeline}&var-"+varSegment+"=${__value.raw}&${"+varJob+":queryparam}&${"+varInstance+":queryparam}&${"+varDatasource+":queryparam}")}).
		OverrideByName(colObjective, []dashboard.DynamicConfigValue{unit("percentunit")}).
		OverrideByName(colWindow, []dashboard.DynamicConfigValue{unit("suffix:d"), decimals(0)}).
		OverrideByName(colBudget, []dashboard.DynamicConfigValue{
			unit("percentunit"), decimals(1), coloredBackground(), thresholdsValue(budgetThresholds()),
		})
	for _, w := range g.rateWindows {
		p = p.OverrideByName(burnColumn+slo.PromDuration(w), []dashboard.DynamicConfigValue{
			coloredBackground(), thresholdsValue(thresholds(burnSteps(g.alerts, w)...)),
		})
	}
	return p
}

// burnLegend lists a group's alerts and the factor each fires at:
// "page 1h/5m at 14.4, page 6h/30m at 6, ticket 1d/2h at 3, ticket 3d/6h at 1".
func burnLegend(g windowGroup) string {
	var parts []string
	for _, a := range g.alerts {
		f, _ := a.Factor.Float64()
		parts = append(parts, fmt.Sprintf("%s %s/%s at %s", a.Severity, slo.PromDuration(a.Long), slo.PromDuration(a.Short), trimFloat(f)))
	}
	return strings.Join(parts, ", ")
}

// tableHeight fits a table of rows rows (and its header) on the grid: a
// grid unit is 30 px plus an 8 px gap, a row about 36 px, the title 40.
func tableHeight(rows int) uint32 {
	px := (rows+1)*36 + 40
	return uint32(min(max((px+37)/38, 5), 24))
}

// burnAlertPanel draws, for one kind of burn-rate alert, the burn rate of
// every SLO over the alert's long and short windows, and per pipeline the
// threshold the alert fires above when both are over it: budget share *
// window / long window, computed by Prometheus from the pipeline's
// recorded window (slo:time_period:days), so each pipeline's line is at
// its own factor.
func burnAlertPanel(m *slo.Model, a slo.BurnAlert) *timeseries.PanelBuilder {
	q := newQueries(m)
	long, short := slo.PromDuration(a.Long), slo.PromDuration(a.Short)
	description := fmt.Sprintf("Burn rate of each SLO over %s and %s. The %s alert fires while both are above the dashed line of their pipeline: the burn rate that spends %s%% of the SLO window's error budget in %s, %s. The %s window confirms the burn is still going on.",
		long, short, a.Severity, slo.FormatRat(a.BudgetPercent), long, factorsText(m, a), short)
	return timeSeries(burnAlertTitle(a), description, "short",
		query(q.burnRate(a.Long), sloLegend+" "+long),
		query(q.burnRate(a.Short), sloLegend+" "+short),
		query(q.burnThresholdExpr(a), "{{pipeline}} threshold")).
		NoValue(noDataYet).
		Min(0).
		OverrideByQuery("C", dashedRed())
}

// burnAlertTitle names a kind of burn alert by what it means: "Page
// 1h/5m: 2% of the error budget in 1h".
func burnAlertTitle(a slo.BurnAlert) string {
	severity := "Page"
	if a.Severity == config.SeverityTicket {
		severity = "Ticket"
	}
	long := slo.PromDuration(a.Long)
	return fmt.Sprintf("%s %s/%s: %s%% of the error budget in %s", severity, long, slo.PromDuration(a.Short), slo.FormatRat(a.BudgetPercent), long)
}

func sortAscending(displayName string) cog.Builder[common.TableSortByFieldState] {
	return sortBy{common.TableSortByFieldState{DisplayName: displayName, Desc: cog.ToPtr(false)}}
}

// sortBy is a ready-made sort state; the SDK has no builder for it.
type sortBy struct{ state common.TableSortByFieldState }

func (s sortBy) Build() (common.TableSortByFieldState, error) { return s.state, nil }

func unit(u string) dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "unit", Value: u}
}

func decimals(n int) dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "decimals", Value: n}
}

func coloredBackground() dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "custom.cellOptions", Value: map[string]any{"type": string(common.TableCellDisplayModeColorBackground)}}
}

// thresholdsValue is a thresholds builder as an override value. The
// builders of thresholds() record no error, so Build cannot fail.
func thresholdsValue(b *dashboard.ThresholdsConfigBuilder) dashboard.DynamicConfigValue {
	t, _ := b.Build()
	return dashboard.DynamicConfigValue{Id: "thresholds", Value: t}
}

// dataLink links a table cell to a dashboard.
func dataLink(title, url string) dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "links", Value: []map[string]any{{"title": title, "url": url, "targetBlank": false}}}
}

// organize hides fields, renames others and orders them in a table; the
// fields not in order keep theirs after those that are.
func organize(exclude []string, rename map[string]string, order []string) dashboard.DataTransformerConfig {
	ex := map[string]bool{}
	for _, f := range exclude {
		ex[f] = true
	}
	if rename == nil {
		rename = map[string]string{}
	}
	// indexByName keys are the names before renaming.
	original := map[string]string{}
	for from, to := range rename {
		original[to] = from
	}
	index := map[string]int{}
	for i, name := range order {
		if from, ok := original[name]; ok {
			name = from
		}
		index[name] = i
	}
	return dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
		"excludeByName": ex,
		"renameByName":  rename,
		"indexByName":   index,
	}}
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
	slices.Sort(out)
	return out
}
