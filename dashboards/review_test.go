package dashboards

import (
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/debezium"
	"github.com/outbox-canary/outbox-canary/slo"
)

// The properties the monthly budget review needs from the SLO overview,
// checked on the generated JSON: a fleet table per SLO window sorted by
// budget left, the SLO window as the default range, burn thresholds per
// window, the owner on every budget and burn figure, "no data yet" instead
// of an empty or misleading budget, and the job and instance variables
// reaching every query. review_promtool_test.go evaluates the same queries
// against the generated rules.

// fleetTables are the SLO overview's fleet tables, in dashboard order.
func fleetTables(d map[string]any) []map[string]any {
	var out []map[string]any
	for _, p := range panelsOf(d) {
		if p["type"] == "table" && fleetTitle.MatchString(p["title"].(string)) {
			out = append(out, p)
		}
	}
	return out
}

var (
	fleetTitle = regexp.MustCompile(`^(Every SLO|SLOs with a \S+ window \(.+\))$`)
	groupTitle = regexp.MustCompile(`^SLOs with a (\S+) window \((.+)\)$`)
)

// column is one value column of a table built from several instant
// queries: the name the organize transformation gives it, the query it
// comes from and its position.
type column struct {
	name, expr string
	index      int
}

// columnsOf lists a table's value columns and label columns (those with
// an empty expr), by their position.
func columnsOf(t *testing.T, p map[string]any) []column {
	t.Helper()
	var organize map[string]any
	for _, tr := range p["transformations"].([]any) {
		tr := tr.(map[string]any)
		if tr["id"] == "organize" {
			organize = tr["options"].(map[string]any)
		}
	}
	if organize == nil {
		t.Fatalf("%s: no organize transformation", p["title"])
	}
	rename := organize["renameByName"].(map[string]any)
	index := organize["indexByName"].(map[string]any)
	exprs := map[string]string{}
	for _, q := range p["targets"].([]any) {
		q := q.(map[string]any)
		exprs["Value #"+q["refId"].(string)] = q["expr"].(string)
	}
	var out []column
	for field, i := range index {
		c := column{name: field, expr: exprs[field], index: int(i.(float64))}
		if to, ok := rename[field].(string); ok {
			c.name = to
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].index < out[j].index })
	return out
}

// overrideOf is the value of property id in the override of a column.
func overrideOf(p map[string]any, columnName, id string) (any, bool) {
	fc := p["fieldConfig"].(map[string]any)
	overrides, _ := fc["overrides"].([]any)
	for _, o := range overrides {
		o := o.(map[string]any)
		m := o["matcher"].(map[string]any)
		if m["id"] != "byName" || m["options"] != columnName {
			continue
		}
		for _, prop := range o["properties"].([]any) {
			prop := prop.(map[string]any)
			if prop["id"] == id {
				return prop["value"], true
			}
		}
	}
	return nil, false
}

// slosOf lists the SLOs of a model as "pipeline/segment (owner)", with
// their window.
func slosOf(m *slo.Model) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			out[s.Pipeline+"/"+s.Segment+" ("+s.Owner+")"] = s.Window
		}
	}
	return out
}

// A reviewer sees every SLO of the configuration, least budget left
// first, with pipeline, segment, owner, objective, window, budget
// remaining and burn rates, in that order. Burn colors differ between SLO
// windows, so there is one table per window.
func TestFleetTableListsEverySLOLeastBudgetLeftFirst(t *testing.T) {
	tests := []struct {
		name, config string
		// wantTables maps each table's window to its pipelines.
		wantTables []string
	}{
		{"The example's 30d and 28d pipelines get a table each, longest window first.", exampleConfig,
			[]string{"SLOs with a 30d window (orders, shipments, invoices)", "SLOs with a 28d window (payments)"}},
		{"A configuration with one window gets one table of every SLO.", "testdata/cdc.yml", []string{"Every SLO"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := loadModel(t, tt.config)
			d := dashboardFiles(t, generate(t, tt.config))[UIDSLOOverview+".json"]
			tables := fleetTables(d)
			var titles []string
			for _, p := range tables {
				titles = append(titles, p["title"].(string))
			}
			if !slices.Equal(titles, tt.wantTables) {
				t.Fatalf("fleet tables %q, want %q", titles, tt.wantTables)
			}
			covered := map[string]bool{}
			for _, p := range tables {
				sortBy := p["options"].(map[string]any)["sortBy"].([]any)
				if len(sortBy) != 1 || fmt.Sprint(sortBy[0]) != fmt.Sprint(map[string]any{"displayName": colBudget, "desc": false}) {
					t.Errorf("%s: sorted by %v, want %q ascending (least budget left first)", p["title"], sortBy, colBudget)
				}
				cols := columnsOf(t, p)
				var names []string
				for _, c := range cols {
					names = append(names, c.name)
				}
				wantNames := []string{slo.LabelPipeline, slo.LabelSegment, slo.LabelOwner, colObjective, colWindow, colBudget}
				if !slices.Equal(names[:min(len(names), len(wantNames))], wantNames) {
					t.Errorf("%s: columns %q, want them to start with %q", p["title"], names, wantNames)
				}
				reads := map[string]string{colBudget: slo.RecordPeriodErrorBudgetRemaining, colObjective: slo.RecordObjective, colWindow: slo.RecordTimePeriodDays}
				for _, c := range cols {
					if want, ok := reads[c.name]; ok && !strings.Contains(c.expr, want+"{") {
						t.Errorf("%s: column %q reads %s, want %s", p["title"], c.name, c.expr, want)
					}
				}
				// Every query keeps one row per SLO (pipeline, segment,
				// owner), so the merge joins them into one row and the
				// owner stays beside every figure.
				for _, c := range cols {
					if c.expr == "" {
						continue
					}
					got, ok := resultLabels(t, c.expr)
					if !ok || !slices.Equal(got, []string{slo.LabelOwner, slo.LabelPipeline, slo.LabelSegment}) {
						t.Errorf("%s: column %q gives series labelled %v, want one per pipeline, segment and owner:\n%s", p["title"], c.name, got, c.expr)
					}
				}
				// The table's pipelines, from its title (a single
				// table holds them all), each in one table only and
				// with the table's window.
				pipelines, window := []string{}, ""
				if sm := groupTitle.FindStringSubmatch(p["title"].(string)); sm != nil {
					window, pipelines = sm[1], strings.Split(sm[2], ", ")
				} else {
					for _, pl := range m.Pipelines {
						pipelines = append(pipelines, pl.Name)
					}
				}
				for _, pl := range m.Pipelines {
					if !slices.Contains(pipelines, pl.Name) {
						continue
					}
					if covered[pl.Name] {
						t.Errorf("pipeline %s is in two fleet tables", pl.Name)
					}
					covered[pl.Name] = true
					for _, s := range pl.SLOs {
						if window != "" && windowText(s.Window) != window {
							t.Errorf("%s: holds %s, whose window is %s", p["title"], s.ID, windowText(s.Window))
						}
					}
				}
			}
			for _, pl := range m.Pipelines {
				if !covered[pl.Name] {
					t.Errorf("pipeline %s is in no fleet table", pl.Name)
				}
			}
		})
	}
}

// The dashboards a budget is reviewed on open on the SLO window, not a
// week: the graphs then cover what the budget is computed over.
func TestReviewDashboardOpensOnTheSLOWindow(t *testing.T) {
	tests := []struct {
		name   string
		config string
		window time.Duration // 0 keeps the configuration's
		want   string
	}{
		{"The example's longest window, 30d, beats its 28d one.", exampleConfig, 0, "now-30d"},
		{"A 7d SLO opens on 7 days.", "testdata/cdc.yml", 0, "now-7d"},
		{"A 28d window reads as days, not as Prometheus' 4w.", exampleConfig, 28 * 24 * time.Hour, "now-28d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := loadModel(t, tt.config)
			if tt.window != 0 {
				for i := range m.Pipelines {
					for j := range m.Pipelines[i].SLOs {
						m.Pipelines[i].SLOs[j].Window = tt.window
					}
				}
			}
			files, err := Generate(m, DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			for name, d := range dashboardFiles(t, files) {
				from := d["time"].(map[string]any)["from"]
				want := tt.want
				if name != UIDSLOOverview+".json" {
					// The on-call dashboards stay on recent hours.
					want = "now-6h"
				}
				if from != want {
					t.Errorf("%s opens from %v, want %s", name, from, want)
				}
			}
		})
	}
}

func TestBurnSteps(t *testing.T) {
	workbook30d := loadModel(t, exampleConfig).Pipelines[0].SLOs[0].Burn
	type s struct {
		at    string
		color string
	}
	tests := []struct {
		name   string
		alerts []slo.BurnAlert
		window time.Duration
		want   []s
	}{
		{"The 1h window of a 30d SLO pages at 14.4.", workbook30d, time.Hour, []s{{"-Inf", "green"}, {"1", "yellow"}, {"14.4", "red"}}},
		{"The 5m window confirms the 1h page: red at 14.4 too, not 6.", workbook30d, 5 * time.Minute, []s{{"-Inf", "green"}, {"1", "yellow"}, {"14.4", "red"}}},
		{"The 30m window confirms the 6h page: red at 6.", workbook30d, 30 * time.Minute, []s{{"-Inf", "green"}, {"1", "yellow"}, {"6", "red"}}},
		{"The 6h window is the 3d ticket's short window and the 6h page's long one: orange at 1, red at 6.", workbook30d, 6 * time.Hour, []s{{"-Inf", "green"}, {"1", "orange"}, {"6", "red"}}},
		{"The 1d ticket window turns orange at 3 and never red.", workbook30d, 24 * time.Hour, []s{{"-Inf", "green"}, {"1", "yellow"}, {"3", "orange"}}},
		{"The 3d ticket window turns orange at 1.", workbook30d, 72 * time.Hour, []s{{"-Inf", "green"}, {"1", "orange"}}},
		{"A window no alert reads is only yellow above 1.", workbook30d, 12 * time.Hour, []s{{"-Inf", "green"}, {"1", "yellow"}}},
		{"Below 1 a ticket comes before yellow, and yellow is dropped rather than lowering the color.",
			[]slo.BurnAlert{{Severity: config.SeverityTicket, Long: 72 * time.Hour, Short: 6 * time.Hour, Factor: big.NewRat(14, 15)}}, 72 * time.Hour,
			[]s{{"-Inf", "green"}, {"0.9333333333333333", "orange"}}},
		{"Two pages on one window turn red at the lower factor.",
			[]slo.BurnAlert{
				{Severity: config.SeverityPage, Long: time.Hour, Short: 5 * time.Minute, Factor: big.NewRat(20, 1)},
				{Severity: config.SeverityPage, Long: 2 * time.Hour, Short: time.Hour, Factor: big.NewRat(10, 1)},
			}, time.Hour,
			[]s{{"-Inf", "green"}, {"1", "yellow"}, {"10", "red"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []s
			for _, st := range burnSteps(tt.alerts, tt.window) {
				v := "-Inf"
				if st.from != nil {
					v = fmt.Sprint(*st.from)
				}
				got = append(got, s{v, st.color})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// Each burn column is colored at the factors of the alerts that read its
// window, for the SLO window of its table: 14.4 on the 1h column of 30d
// SLOs, 13.44 on that of 28d ones, never one number for every column.
func TestFleetBurnColumnsUseTheirOwnWindowsThresholds(t *testing.T) {
	// red and orange: where a column turns red and orange ("" never).
	type colors struct{ orange, red string }
	tests := []struct {
		name, config string
		want         map[string]map[string]colors // table -> column -> colors
	}{
		{"The example's 30d and 28d SLOs follow the Workbook's table.", exampleConfig, map[string]map[string]colors{
			"SLOs with a 30d window (orders, shipments, invoices)": {
				"Burn 5m": {"", "14.4"}, "Burn 30m": {"", "6"}, "Burn 1h": {"", "14.4"}, "Burn 2h": {"3", ""},
				"Burn 6h": {"1", "6"}, "Burn 1d": {"3", ""}, "Burn 3d": {"1", ""},
			},
			"SLOs with a 28d window (payments)": {
				"Burn 5m": {"", "13.44"}, "Burn 30m": {"", "5.6"}, "Burn 1h": {"", "13.44"}, "Burn 2h": {"2.8", ""},
				"Burn 6h": {"0.9333333333333333", "5.6"}, "Burn 1d": {"2.8", ""}, "Burn 3d": {"0.9333333333333333", ""},
			},
		}},
		{"Configured windows on a 7d SLO: 2% in 1h is 3.36, 10% in 1d is 0.7.", "testdata/cdc.yml", map[string]map[string]colors{
			"Every SLO": {"Burn 5m": {"", "3.36"}, "Burn 1h": {"", "3.36"}, "Burn 2h": {"0.7", ""}, "Burn 1d": {"0.7", ""}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dashboardFiles(t, generate(t, tt.config))[UIDSLOOverview+".json"]
			seen := 0
			for _, p := range fleetTables(d) {
				title := p["title"].(string)
				want, ok := tt.want[title]
				if !ok {
					t.Errorf("unexpected fleet table %q", title)
					continue
				}
				seen++
				for _, c := range columnsOf(t, p) {
					if !strings.HasPrefix(c.name, burnColumn) {
						continue
					}
					v, ok := overrideOf(p, c.name, "thresholds")
					if !ok {
						t.Errorf("%s: column %q has no thresholds of its own", title, c.name)
						continue
					}
					got := colors{}
					for _, st := range v.(map[string]any)["steps"].([]any) {
						st := st.(map[string]any)
						switch st["color"] {
						case colorTicket:
							got.orange = fmt.Sprint(st["value"])
						case colorPage:
							got.red = fmt.Sprint(st["value"])
						}
					}
					if got != want[c.name] {
						t.Errorf("%s: column %q turns orange at %q and red at %q, want %q and %q", title, c.name, got.orange, got.red, want[c.name].orange, want[c.name].red)
					}
					if _, ok := overrideOf(p, c.name, "custom.cellOptions"); !ok {
						t.Errorf("%s: column %q is not colored", title, c.name)
					}
				}
			}
			if seen != len(tt.want) {
				t.Errorf("found %d of the %d fleet tables", seen, len(tt.want))
			}
		})
	}
}

// Each burn alert's panel draws, per pipeline, the alert's threshold
// computed from the pipeline's recorded window: the expression is the
// model's factor for every window (evaluated here with the recorded days
// in place of the series; review_promtool_test.go has Prometheus evaluate
// it).
func TestBurnAlertPanelsDrawTheAlertsOwnThreshold(t *testing.T) {
	for _, path := range configs {
		m := loadModel(t, path)
		d := dashboardFiles(t, generate(t, path))[UIDSLOOverview+".json"]
		panels := map[string]map[string]any{}
		for _, p := range panelsOf(d) {
			panels[p["title"].(string)] = p
		}
		for _, g := range windowGroups(m) {
			for _, a := range g.alerts {
				title := burnAlertTitle(a)
				p, ok := panels[title]
				if !ok {
					t.Errorf("%s: no panel %q", path, title)
					continue
				}
				targets := p["targets"].([]any)
				if len(targets) != 3 {
					t.Fatalf("%s %s: %d queries, want long window, short window and threshold", path, title, len(targets))
				}
				for i, w := range a.Windows() {
					if e := targets[i].(map[string]any)["expr"].(string); !strings.Contains(e, slo.RecordSLIError(w)+"{") {
						t.Errorf("%s %s: query %d reads %s, want the %s window", path, title, i, e, slo.PromDuration(w))
					}
				}
				expr := targets[2].(map[string]any)["expr"].(string)
				got, err := evalThreshold(expr, g.window)
				if err != nil {
					t.Fatalf("%s %s: %v", path, title, err)
				}
				// Exactly: the expression rounds once, as Float64 does.
				if want, _ := a.Factor.Float64(); got != want {
					t.Errorf("%s %s: for a %s window the threshold line is at %v, want the factor %v", path, title, windowText(g.window), got, want)
				}
			}
		}
	}
}

// evalThreshold evaluates a threshold expression, "series * a * b / (c *
// d)", in float64 as PromQL does, with the series standing for the
// recorded window in days.
func evalThreshold(expr string, window time.Duration) (float64, error) {
	parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substitute(expr))
	if err != nil {
		return 0, err
	}
	var eval func(promql.Node) (float64, error)
	eval = func(n promql.Node) (float64, error) {
		switch n := n.(type) {
		case *promql.NumberLiteral:
			return n.Val, nil
		case *promql.ParenExpr:
			return eval(n.Expr)
		case *promql.AggregateExpr:
			vs, ok := n.Expr.(*promql.VectorSelector)
			if !ok || vs.Name != slo.RecordTimePeriodDays {
				return 0, fmt.Errorf("unexpected %s", n)
			}
			return window.Hours() / 24, nil
		case *promql.BinaryExpr:
			l, err := eval(n.LHS)
			if err != nil {
				return 0, err
			}
			r, err := eval(n.RHS)
			if err != nil {
				return 0, err
			}
			switch n.Op {
			case promql.MUL:
				return l * r, nil
			case promql.DIV:
				return l / r, nil
			}
		}
		return 0, fmt.Errorf("unexpected %s in a threshold", n)
	}
	return eval(parsed)
}

// budgetOrBurnSeries are the recorded series that hold an SLO's budget or
// burn: a panel reading one must say whose SLO it is.
func budgetOrBurnSeries(m *slo.Model) map[string]bool {
	names := map[string]bool{
		slo.RecordPeriodErrorBudgetRemaining: true,
		slo.RecordPeriodBurnRate:             true,
		slo.RecordCurrentBurnRate:            true,
	}
	for _, w := range rateWindows(m) {
		names[slo.RecordSLIError(w)] = true
	}
	return names
}

// Every panel that shows a budget or a burn rate names the owner: tables
// keep the owner label as a column, graphs and stats put it in the
// legend.
func TestOwnerIsShownOnEveryBudgetAndBurnPanel(t *testing.T) {
	for _, path := range configs {
		m := loadModel(t, path)
		series := budgetOrBurnSeries(m)
		checked := 0
		for name, d := range dashboardFiles(t, generate(t, path)) {
			for _, p := range panelsOf(d) {
				for _, q := range p["targets"].([]any) {
					q := q.(map[string]any)
					expr := q["expr"].(string)
					if !readsAny(t, expr, series) {
						continue
					}
					checked++
					where := fmt.Sprintf("%s %s %q query %s", path, name, p["title"], q["refId"])
					got, ok := resultLabels(t, expr)
					if !ok || !slices.Contains(got, slo.LabelOwner) {
						t.Errorf("%s: gives series labelled %v, without the owner:\n%s", where, got, expr)
					}
					if p["type"] == "table" {
						if excludes(p, slo.LabelOwner) {
							t.Errorf("%s: the table hides the owner column", where)
						}
						continue
					}
					if legend, _ := q["legendFormat"].(string); !strings.Contains(legend, "{{owner}}") {
						t.Errorf("%s: legend %q does not name the owner", where, legend)
					}
				}
			}
		}
		// The fleet tables' budget and burn columns, the least-budget
		// stat, each alert panel's two windows, budget and period burn
		// over time.
		want := 1 + 2*len(burnAlertKinds(m)) + 2
		for _, g := range windowGroups(m) {
			want += 1 + len(g.rateWindows)
		}
		if checked != want {
			t.Errorf("%s: %d budget and burn queries found, want %d", path, checked, want)
		}
	}
}

// A budget figure the rules have not recorded reads "no data yet", never
// a blank, and its description says what the SLO window asks of
// Prometheus' retention.
func TestBudgetPanelsSayNoDataYetAndTheRetentionTheyNeed(t *testing.T) {
	for _, path := range configs {
		m := loadModel(t, path)
		longest := windowText(longestWindow(m))
		budget := map[string]bool{slo.RecordPeriodErrorBudgetRemaining: true, slo.RecordPeriodBurnRate: true}
		checked := 0
		for name, d := range dashboardFiles(t, generate(t, path)) {
			for _, p := range panelsOf(d) {
				reads := false
				for _, q := range p["targets"].([]any) {
					reads = reads || readsAny(t, q.(map[string]any)["expr"].(string), budget)
				}
				if !reads {
					continue
				}
				checked++
				defaults := p["fieldConfig"].(map[string]any)["defaults"].(map[string]any)
				if defaults["noValue"] != noDataYet {
					t.Errorf("%s %s %q: noValue %v, want %q", path, name, p["title"], defaults["noValue"], noDataYet)
				}
				desc, _ := p["description"].(string)
				for _, want := range []string{"--storage.tsdb.retention.time to " + longest, "no data yet"} {
					if !strings.Contains(desc, want) {
						t.Errorf("%s %s %q: description does not say %q:\n%s", path, name, p["title"], want, desc)
					}
				}
			}
		}
		if checked < 4 {
			t.Errorf("%s: only %d budget panels found", path, checked)
		}
	}
}

// Every dashboard has job and instance variables, several values of
// each allowed, the job preset to the configuration's alerting.prober_job;
// and every query reaches them: the prober's series are selected on job,
// instance and pipeline, the recorded series (which have no job or
// instance) on the pipeline variable, whose values come from the chosen
// jobs and instances, and ALERTS on all three, an absent label allowed.
func TestJobAndInstanceVariablesReachEveryQuery(t *testing.T) {
	tests := []struct{ config, wantJob string }{
		{exampleConfig, config.DefaultProberJob},
		{"testdata/cdc.yml", "outbox-canary-inventory"},
	}
	known := proberMetrics(t)
	for _, tt := range tests {
		for name, d := range dashboardFiles(t, generate(t, tt.config)) {
			where := tt.config + " " + name
			vars := variablesOf(d)
			for _, v := range []string{varJob, varInstance} {
				if vars[v]["multi"] != true || vars[v]["includeAll"] != true {
					t.Errorf("%s: variable %s is %v, want several values and All allowed", where, v, vars[v])
				}
			}
			if cur := vars[varJob]["current"].(map[string]any); fmt.Sprint(cur["value"]) != "["+tt.wantJob+"]" {
				t.Errorf("%s: job variable preset to %v, want alerting.prober_job %s", where, cur["value"], tt.wantJob)
			}
			// Variables are defined before the variables that use them.
			var order []string
			for _, v := range d["templating"].(map[string]any)["list"].([]any) {
				order = append(order, v.(map[string]any)["name"].(string))
			}
			if !slices.Equal(order[:4], []string{varDatasource, varJob, varInstance, varPipeline}) {
				t.Errorf("%s: variables in order %v", where, order)
			}

			type query struct{ where, expr, variable string }
			var queries []query
			for _, v := range order {
				q, _ := vars[v]["query"].(string)
				if vars[v]["type"] != "query" || v == varJob {
					continue
				}
				sel := labelValuesQuery.FindStringSubmatch(q)
				if sel == nil {
					t.Fatalf("%s: variable %s: %q is not label_values(selector, label)", where, v, q)
				}
				queries = append(queries, query{where + " variable " + v, sel[1], v})
			}
			for _, p := range panelsOf(d) {
				for _, q := range p["targets"].([]any) {
					q := q.(map[string]any)
					queries = append(queries, query{fmt.Sprintf("%s %q %s", where, p["title"], q["refId"]), q["expr"].(string), ""})
				}
			}
			for _, q := range queries {
				for _, err := range scopingErrors(t, q.expr, q.variable, known) {
					t.Errorf("%s: %v\n%s", q.where, err, q.expr)
				}
			}
		}
	}
}

// scopingErrors checks every selector of expr against the variables it
// must be scoped by. variable is the variable whose query expr is ("" for
// a panel): the instance variable is scoped by the job alone, the
// pipeline variable by job and instance.
func scopingErrors(t *testing.T, expr, variable string, proberSeries map[string]bool) []error {
	t.Helper()
	parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substitute(expr))
	if err != nil {
		return []error{err}
	}
	var errs []error
	promql.Inspect(parsed, func(node promql.Node, _ []promql.Node) error {
		vs, ok := node.(*promql.VectorSelector)
		if !ok {
			return nil
		}
		// Matchers by label and operator; a label may be matched twice
		// (the chosen pipelines and a table's window group).
		has := map[string][]string{}
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				has[m.Name+m.Type.String()] = append(has[m.Name+m.Type.String()], m.Value)
			}
		}
		var want map[string]string
		switch {
		case vs.Name == alertsMetric:
			want = map[string]string{"job=~": "VAR_job|", "instance=~": "VAR_instance|", "pipeline=~": "VAR_pipeline|"}
		case slices.Contains(debezium.Metrics, vs.Name):
			// The Connect worker's exporter writes them, under its own job:
			// the connector is picked by its server, never by the prober's
			// job, instance or pipeline, which would select nothing.
			want = map[string]string{"server=~": "VAR_" + varDebeziumServer}
			if variable == varDebeziumServer {
				want = nil
			}
			for _, l := range []string{labelJob, labelInstance, slo.LabelPipeline} {
				for k := range has {
					if strings.HasPrefix(k, l) {
						errs = append(errs, fmt.Errorf("Debezium's %s is matched on %s, which the worker's exporter does not write", vs.Name, l))
					}
				}
			}
		case proberSeries[vs.Name]:
			want = map[string]string{"job=~": "VAR_job", "instance=~": "VAR_instance", "pipeline=~": "VAR_pipeline"}
			switch variable {
			case varInstance:
				want = map[string]string{"job=~": "VAR_job"}
			case varPipeline:
				want = map[string]string{"job=~": "VAR_job", "instance=~": "VAR_instance"}
			}
		default:
			// A recorded series: no job or instance to match (a matcher
			// on them would select nothing).
			want = map[string]string{"pipeline=~": "VAR_pipeline"}
			for _, l := range []string{labelJob, labelInstance} {
				for k := range has {
					if strings.HasPrefix(k, l) {
						errs = append(errs, fmt.Errorf("recorded series %s is matched on %s, which recording drops", vs.Name, l))
					}
				}
			}
		}
		for k, v := range want {
			if !slices.Contains(has[k], v) {
				errs = append(errs, fmt.Errorf("%s is not selected by %s%q (has %v)", vs.Name, k, v, has))
			}
		}
		return nil
	})
	return errs
}

// substitute replaces Grafana's macros with a duration and each variable
// with VAR_<name>, so the query parses and which variable stood where
// stays visible.
func substitute(expr string) string {
	return variableRef.ReplaceAllStringFunc(intervalMacro.ReplaceAllString(expr, "5m"), func(ref string) string {
		return "VAR_" + variableRef.FindStringSubmatch(ref)[1]
	})
}

// readsAny reports whether expr selects any of names.
func readsAny(t *testing.T, expr string, names map[string]bool) bool {
	t.Helper()
	parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substitute(expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	found := false
	promql.Inspect(parsed, func(node promql.Node, _ []promql.Node) error {
		if vs, ok := node.(*promql.VectorSelector); ok && names[vs.Name] {
			found = true
		}
		return nil
	})
	return found
}

// resultLabels is the label names of the series expr returns, for the
// shapes the dashboards use: aggregations by labels, topk/bottomk of one,
// and arithmetic between two such vectors or with a number. ok is false
// for anything else (a bare selector keeps labels nobody listed).
func resultLabels(t *testing.T, expr string) (names []string, ok bool) {
	t.Helper()
	parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substitute(expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var walk func(promql.Node) ([]string, bool, bool) // labels, ok, scalar
	walk = func(n promql.Node) ([]string, bool, bool) {
		switch n := n.(type) {
		case *promql.NumberLiteral:
			return nil, true, true
		case *promql.ParenExpr:
			return walk(n.Expr)
		case *promql.AggregateExpr:
			if n.Op == promql.TOPK || n.Op == promql.BOTTOMK {
				return walk(n.Expr)
			}
			if n.Without {
				return nil, false, false
			}
			out := slices.Clone(n.Grouping)
			sort.Strings(out)
			return out, true, false
		case *promql.BinaryExpr:
			l, lok, lscalar := walk(n.LHS)
			r, rok, rscalar := walk(n.RHS)
			if !lok || !rok {
				return nil, false, false
			}
			switch {
			case lscalar && rscalar:
				return nil, true, true
			case lscalar:
				return r, true, false
			case rscalar:
				return l, true, false
			}
			// Two vectors match one to one on all their labels only
			// when they have the same ones.
			if n.VectorMatching != nil && (n.VectorMatching.On || len(n.VectorMatching.MatchingLabels) > 0) {
				return nil, false, false
			}
			return l, slices.Equal(l, r), false
		}
		return nil, false, false
	}
	names, ok, _ = walk(parsed)
	return names, ok
}

// excludes reports whether a table's organize transformation hides field.
func excludes(p map[string]any, field string) bool {
	trs, _ := p["transformations"].([]any)
	for _, tr := range trs {
		tr := tr.(map[string]any)
		if tr["id"] != "organize" {
			continue
		}
		ex, _ := tr["options"].(map[string]any)["excludeByName"].(map[string]any)
		if ex[field] == true {
			return true
		}
	}
	return false
}

// The dead man has no pipeline label: "alerts firing" must count the
// alerts without one beside those of the chosen pipelines.
func TestAlertsFiringCountsInstanceWideAlerts(t *testing.T) {
	d := dashboardFiles(t, generate(t, exampleConfig))[UIDSLOOverview+".json"]
	for _, p := range panelsOf(d) {
		if p["title"] != "Alerts firing" {
			continue
		}
		expr := p["targets"].([]any)[0].(map[string]any)["expr"].(string)
		if !strings.Contains(expr, `pipeline=~"$pipeline|"`) || !strings.Contains(expr, `alertstate="firing"`) {
			t.Errorf("alerts firing reads %s, want the chosen pipelines' alerts and those without a pipeline", expr)
		}
		return
	}
	t.Fatal("no Alerts firing panel")
}

func TestBurnThresholdExprIsTheFactor(t *testing.T) {
	tests := []struct {
		name    string
		percent *big.Rat
		long    time.Duration
		window  time.Duration
		want    string
	}{
		{"2% of 30d in 1h is 14.4.", big.NewRat(2, 1), time.Hour, 30 * 24 * time.Hour, `max by (pipeline) (slo:time_period:days{pipeline=~"$pipeline"}) * 86400 * 2 / (100 * 3600)`},
		{"10% of 28d in 3d is 14/15, rounded once.", big.NewRat(10, 1), 72 * time.Hour, 28 * 24 * time.Hour, `max by (pipeline) (slo:time_period:days{pipeline=~"$pipeline"}) * 86400 * 10 / (100 * 259200)`},
		{"A fractional share keeps its denominator out of the float.", big.NewRat(1, 2), time.Hour, 30 * 24 * time.Hour, `max by (pipeline) (slo:time_period:days{pipeline=~"$pipeline"}) * 86400 * 1 / (100 * 2 * 3600)`},
		{"0.1% is 1/1000, not 0.1 in binary.", big.NewRat(1, 10), 30 * time.Minute, 7 * 24 * time.Hour, `max by (pipeline) (slo:time_period:days{pipeline=~"$pipeline"}) * 86400 * 1 / (100 * 10 * 1800)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := slo.BurnAlert{BudgetPercent: tt.percent, Long: tt.long, Factor: slo.BurnFactor(tt.percent, tt.window, tt.long)}
			expr := queries{}.burnThresholdExpr(a)
			if expr != tt.want {
				t.Errorf("expr\n got %s\nwant %s", expr, tt.want)
			}
			got, err := evalThreshold(expr, tt.window)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := a.Factor.Float64(); got != want {
				t.Errorf("evaluates to %v, want the factor %v", got, want)
			}
		})
	}
}
