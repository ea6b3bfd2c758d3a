package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/gauge"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Grafana's dashboard grid is 24 columns wide.
const gridWidth = 24

// datasource is where every panel and variable query goes: the dashboard's
// datasource variable, so one import serves any Prometheus.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + varDatasource + "}")}
}

// query is a range query drawn over the dashboard's time range.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Range().Datasource(datasource())
	if legend != "" {
		q = q.LegendFormat(legend)
	}
	return q
}

// instant is a query evaluated once, at the end of the time range: what
// stat, gauge and table panels show.
func instant(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Instant().Datasource(datasource())
	if legend != "" {
		q = q.LegendFormat(legend)
	}
	return q
}

// instantTable is an instant query whose labels become table columns.
func instantTable(expr string) *prometheus.DataqueryBuilder {
	return instant(expr, "").Format(prometheus.PromQueryFormatTable)
}

// withRefIDs names the queries of a panel A, B, C... in order, so the output
// does not depend on Grafana filling them in on load.
func withRefIDs(qs []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		out[i] = q.RefId(string(rune('A' + i)))
	}
	return out
}

func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		ShowLegend(true).
		DisplayMode(common.LegendDisplayModeList).
		Placement(common.LegendPlacementBottom).
		Calcs([]string{})
}

func tooltip() *common.VizTooltipOptionsBuilder {
	return common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)
}

// lastValue reduces a series to its last non-null value.
func lastValue() *common.ReduceDataOptionsBuilder {
	return common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)
}

// step is one threshold step: from value (nil is -Infinity) on, color.
type step struct {
	from  *float64
	color string
}

func at(v float64) *float64 { return &v }

func thresholds(steps ...step) *dashboard.ThresholdsConfigBuilder {
	out := make([]dashboard.Threshold, len(steps))
	for i, s := range steps {
		out[i] = dashboard.Threshold{Value: s.from, Color: s.color}
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(out)
}

// neutral colors a value that is neither good nor bad by itself.
func neutral() *dashboard.ThresholdsConfigBuilder {
	return thresholds(step{nil, "blue"})
}

func timeSeries(title, description, unit string, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Targets(withRefIDs(qs)).
		Unit(unit).
		Legend(legend()).
		Tooltip(tooltip()).
		LineWidth(1).
		FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).
		Thresholds(neutral())
}

func statPanel(title, description, unit string, qs ...*prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Targets(withRefIDs(qs)).
		Unit(unit).
		ReduceOptions(lastValue()).
		Orientation(common.VizOrientationAuto).
		GraphMode(common.BigValueGraphModeNone).
		ColorMode(common.BigValueColorModeValue).
		TextMode(common.BigValueTextModeAuto).
		Thresholds(neutral())
}

func gaugePanel(title, description, unit string, qs ...*prometheus.DataqueryBuilder) *gauge.PanelBuilder {
	return gauge.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Targets(withRefIDs(qs)).
		Unit(unit).
		ReduceOptions(lastValue()).
		Orientation(common.VizOrientationAuto).
		ShowThresholdMarkers(true)
}

func tablePanel(title, description string, qs ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Targets(withRefIDs(qs)).
		ShowHeader(true).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{}))
}

// heatmapPanel shows a classic histogram as Prometheus stores it: the
// query returns per-bucket increases in heatmap format, so Grafana must not
// re-bucket them (Calculate(false)).
func heatmapPanel(title, description, unit string, qs ...*prometheus.DataqueryBuilder) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Targets(withRefIDs(qs)).
		Calculate(false).
		Color(heatmap.NewHeatmapColorOptionsBuilder().
			Mode(heatmap.HeatmapColorModeScheme).
			Scheme("Oranges").
			Scale(heatmap.HeatmapColorScaleExponential).
			Exponent(0.5).
			Fill("dark-orange").
			Steps(64)).
		RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(common.HeatmapCellLayoutLe)).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit(unit)).
		CellValues(heatmap.NewCellValuesBuilder().Unit("short")).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
		ShowLegend()
}

// dashedRed draws a query's series as a dashed red line: a budget or a
// threshold drawn next to what is measured against it.
func dashedRed() []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{
		{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": "red"}},
		{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
		{Id: "custom.fillOpacity", Value: 0},
	}
}

// stateMapping shows a 0/1 gauge as words and colors.
func stateMapping(zero, one string, zeroColor, oneColor string) []dashboard.ValueMapping {
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{
		Type: dashboard.MappingTypeValueToText,
		Options: map[string]dashboard.ValueMappingResult{
			"0": {Text: cog.ToPtr(zero), Color: cog.ToPtr(zeroColor), Index: cog.ToPtr(int32(0))},
			"1": {Text: cog.ToPtr(one), Color: cog.ToPtr(oneColor), Index: cog.ToPtr(int32(1))},
		},
	}}}
}

// cell is a panel and its size on the grid.
type cell struct {
	panel cog.Builder[dashboard.Panel]
	w, h  uint32
}

// section is a dashboard row and the panels under it. A collapsed section
// keeps its panels inside the row, as Grafana stores collapsed rows.
type section struct {
	title     string
	collapsed bool
	// repeat names a variable: Grafana repeats the row once per value.
	repeat string
	cells  []cell
}

// layout places the sections on the grid, top to bottom and each
// section's panels left to right, and numbers every panel. Positions and
// ids are computed here rather than left to the SDK or to Grafana so the
// same model always gives byte-identical JSON.
func layout(sections []section) ([]dashboard.PanelOrRowPanel, error) {
	var (
		out []dashboard.PanelOrRowPanel
		id  uint32
		y   uint32
	)
	for _, s := range sections {
		id++
		row := dashboard.NewRowBuilder(s.title).Id(id).Collapsed(s.collapsed).
			GridPos(dashboard.GridPos{X: 0, Y: y, W: gridWidth, H: 1})
		if s.repeat != "" {
			row = row.Repeat(s.repeat)
		}
		rowPanel, err := row.Build()
		if err != nil {
			return nil, fmt.Errorf("row %q: %w", s.title, err)
		}
		rowPanel.Panels = []dashboard.Panel{}
		y++

		var x, rowHeight uint32
		var panels []dashboard.Panel
		for _, c := range s.cells {
			if c.w > gridWidth {
				return nil, fmt.Errorf("row %q: a panel %d wide does not fit the %d-column grid", s.title, c.w, gridWidth)
			}
			if x+c.w > gridWidth {
				x, y, rowHeight = 0, y+rowHeight, 0
			}
			p, err := c.panel.Build()
			if err != nil {
				return nil, fmt.Errorf("row %q: panel: %w", s.title, err)
			}
			id++
			p.Id = cog.ToPtr(id)
			p.GridPos = &dashboard.GridPos{X: x, Y: y, W: c.w, H: c.h}
			panels = append(panels, p)
			x += c.w
			rowHeight = max(rowHeight, c.h)
		}
		y += rowHeight

		if s.collapsed {
			rowPanel.Panels = panels
			out = append(out, dashboard.PanelOrRowPanel{RowPanel: &rowPanel})
			// A collapsed row takes one grid line; its panels take none
			// until it is opened.
			y -= heightOf(panels)
			continue
		}
		out = append(out, dashboard.PanelOrRowPanel{RowPanel: &rowPanel})
		for i := range panels {
			out = append(out, dashboard.PanelOrRowPanel{Panel: &panels[i]})
		}
	}
	return out, nil
}

// heightOf is the number of grid lines a run of placed panels spans.
func heightOf(panels []dashboard.Panel) uint32 {
	if len(panels) == 0 {
		return 0
	}
	top, bottom := panels[0].GridPos.Y, uint32(0)
	for _, p := range panels {
		top = min(top, p.GridPos.Y)
		bottom = max(bottom, p.GridPos.Y+p.GridPos.H)
	}
	return bottom - top
}
