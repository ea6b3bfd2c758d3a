package dashboards

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/internal/debezium"
	"github.com/outbox-canary/outbox-canary/slo"
)

// exampleRules is the rule file `make generate` writes from the example
// configuration: the recording rules the SLO overview reads must be in it.
const exampleRules = "../examples/rules/outbox-canary.rules.yml"

// histograms are the prober's histograms: Prometheus stores them as
// _bucket, _sum and _count series.
var histograms = []string{slo.MetricSegmentLatency}

// proberMetrics reads the metric names out of slo/metrics.go, the contract
// the prober exports, so a metric added there is known here without a
// second list to keep in step.
func proberMetrics(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../slo/metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "Metric") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				name, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				names[name] = true
			}
		}
	}
	if !names[slo.MetricSegmentLatency] || !names[slo.MetricCanariesSent] {
		t.Fatalf("read %d metric names from slo/metrics.go, and not the ones expected", len(names))
	}
	for _, h := range histograms {
		delete(names, h)
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[h+suffix] = true
		}
	}
	return names
}

// recordedNames are the series the example rule file records, plus
// Prometheus' own ALERTS.
func recordedNames(t *testing.T) (records map[string]bool, alerts []string) {
	t.Helper()
	data, err := os.ReadFile(exampleRules)
	if err != nil {
		t.Fatalf("%v: the SLO overview reads the recording rules of outbox-canary rules; run make generate", err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Alert  string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", exampleRules, err)
	}
	records = map[string]bool{alertsMetric: true}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	return records, alerts
}

var (
	// Grafana's interval macros, replaced by a duration before parsing.
	intervalMacro = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)
	// Dashboard variables, $name or ${name}.
	variableRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	// A query variable's label_values(selector, label).
	labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
)

// checkQuery parses a panel's PromQL expression the way Prometheus will
// see it once Grafana has substituted its variables, and checks that it
// names only known metrics and defined variables.
func checkQuery(expr string, known, variables map[string]bool) error {
	var undefined []string
	substituted := variableRef.ReplaceAllStringFunc(intervalMacro.ReplaceAllString(expr, "5m"), func(ref string) string {
		name := variableRef.FindStringSubmatch(ref)[1]
		if !variables[name] {
			undefined = append(undefined, ref)
		}
		return "value"
	})
	if len(undefined) > 0 {
		return fmt.Errorf("%s: undefined variables %v", expr, undefined)
	}
	parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substituted)
	if err != nil {
		return fmt.Errorf("%s: %w", expr, err)
	}
	var unknown []string
	var selectors int
	promql.Inspect(parsed, func(node promql.Node, _ []promql.Node) error {
		vs, ok := node.(*promql.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if !known[name] {
			unknown = append(unknown, name)
		}
		return nil
	})
	if len(unknown) > 0 {
		return fmt.Errorf("%s: unknown metrics %q", expr, unknown)
	}
	if selectors == 0 {
		return fmt.Errorf("%s: reads no metric", expr)
	}
	return nil
}

// queriesOf collects every PromQL expression of a dashboard (panel targets,
// in collapsed rows too) and every query variable, the latter as the
// selector of its label_values().
func queriesOf(t *testing.T, d map[string]any) (exprs []string, variables map[string]bool) {
	t.Helper()
	variables = map[string]bool{}
	for _, v := range d["templating"].(map[string]any)["list"].([]any) {
		v := v.(map[string]any)
		variables[v["name"].(string)] = true
		if v["type"] != "query" {
			continue
		}
		m := labelValuesQuery.FindStringSubmatch(v["query"].(string))
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v["name"], v["query"])
			continue
		}
		exprs = append(exprs, m[1])
	}
	for _, p := range panelsOf(d) {
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %q has no query", p["title"])
		}
		for _, q := range targets {
			exprs = append(exprs, q.(map[string]any)["expr"].(string))
		}
	}
	return exprs, variables
}

// Every query of every panel parses as PromQL and reads only what the
// prober exports or the generated rules record.
func TestQueriesReadOnlyExportedOrRecordedMetrics(t *testing.T) {
	known := proberMetrics(t)
	records, _ := recordedNames(t)
	for name := range records {
		known[name] = true
	}
	// Debezium's own, from the Kafka Connect worker's JMX exporter
	// (internal/debezium checks that its configuration writes them).
	for _, name := range debezium.Metrics {
		known[name] = true
	}
	for _, path := range configs {
		for name, d := range dashboardFiles(t, generate(t, path)) {
			exprs, variables := queriesOf(t, d)
			if len(exprs) < 5 {
				t.Errorf("%s %s: only %d queries found", path, name, len(exprs))
			}
			for _, e := range exprs {
				if err := checkQuery(e, known, variables); err != nil {
					t.Errorf("%s %s: %v", path, name, err)
				}
			}
		}
	}
}

// Each recorded series the dashboards read is written by the rules
// generator (checked on its example output), and the alert panels'
// alertname=~"Outbox.*" sees every alert it writes.
func TestRecordingRulesAndAlertsMatchTheRulesGenerator(t *testing.T) {
	records, alerts := recordedNames(t)
	read := seriesRead(t)
	for _, name := range []string{slo.RecordPeriodErrorBudgetRemaining, slo.RecordTimePeriodDays, slo.RecordErrorBudget, alertsMetric} {
		if !read[name] {
			t.Errorf("the dashboards no longer read %s: the review needs it", name)
		}
	}
	prober := proberMetrics(t)
	for _, name := range debezium.Metrics {
		prober[name] = true // exported by the Connect worker's JMX exporter
	}
	for name := range read {
		if !prober[name] && !records[name] {
			t.Errorf("the dashboards read %s, which %s does not record", name, exampleRules)
		}
	}
	if len(alerts) == 0 {
		t.Errorf("%s has no alerts", exampleRules)
	}
	re := regexp.MustCompile("^(?:" + alertNames + ")$")
	for _, a := range alerts {
		if !re.MatchString(a) {
			t.Errorf("alert %s does not match alertname=~%q: the dashboards' alert panels miss it", a, alertNames)
		}
	}
}

// seriesRead is every series name a query or variable of a dashboard
// generated from any test configuration selects.
func seriesRead(t *testing.T) map[string]bool {
	t.Helper()
	read := map[string]bool{}
	for _, path := range configs {
		for _, d := range dashboardFiles(t, generate(t, path)) {
			exprs, _ := queriesOf(t, d)
			for _, e := range exprs {
				parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substitute(e))
				if err != nil {
					t.Fatalf("%s: %v", e, err)
				}
				promql.Inspect(parsed, func(node promql.Node, _ []promql.Node) error {
					if vs, ok := node.(*promql.VectorSelector); ok {
						read[vs.Name] = true
					}
					return nil
				})
			}
		}
	}
	return read
}

// The checker itself must fail on what it is there to catch.
func TestCheckQuery(t *testing.T) {
	known := map[string]bool{
		slo.MetricSegmentLatency + "_bucket": true,
		slo.MetricSegmentBudget:              true,
		slo.RecordErrorBudget:                true,
	}
	variables := map[string]bool{varPipeline: true, varSegment: true}
	tests := []struct {
		name    string
		expr    string
		wantErr string
	}{
		{
			name: "A histogram quantile over a known bucket series with Grafana macros and variables passes.",
			expr: `histogram_quantile(0.99, sum by (le, segment) (rate(outbox_canary_segment_latency_seconds_bucket{pipeline="$pipeline",segment=~"${segment}"}[$__rate_interval])))`,
		},
		{
			name: "A recorded series passes.",
			expr: `sum by (segment) (slo:error_budget:ratio{pipeline="$pipeline"})`,
		},
		{
			name: "A series selected by __name__ is checked like a plain name.",
			expr: `{__name__="outbox_canary_segment_budget_seconds"}`,
		},
		{
			name:    "A query naming a metric the prober does not export fails.",
			expr:    `sum(rate(outbox_canary_canaries_vanished_total{pipeline="$pipeline"}[$__rate_interval]))`,
			wantErr: `unknown metrics ["outbox_canary_canaries_vanished_total"]`,
		},
		{
			name:    "A misspelt recording rule fails.",
			expr:    `slo:error_budget:ratio{pipeline="$pipeline"} * slo:errorbudget:ratio`,
			wantErr: `unknown metrics ["slo:errorbudget:ratio"]`,
		},
		{
			name:    "The bare name of a histogram fails: only its _bucket, _sum and _count series exist.",
			expr:    `outbox_canary_segment_latency_seconds`,
			wantErr: "unknown metrics",
		},
		{
			name:    "A syntax error fails.",
			expr:    `sum by (segment (outbox_canary_segment_budget_seconds)`,
			wantErr: "parse error",
		},
		{
			name:    "A variable the dashboard does not define fails.",
			expr:    `outbox_canary_segment_budget_seconds{pipeline="$pipelin"}`,
			wantErr: "undefined variables [$pipelin]",
		},
		{
			name:    "An expression that reads no metric at all fails.",
			expr:    `vector(1)`,
			wantErr: "reads no metric",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkQuery(tt.expr, known, variables)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// The known-metric set read from slo/metrics.go holds every constant, so
// a panel may use any of them.
func TestProberMetricsReadsEveryConstant(t *testing.T) {
	known := proberMetrics(t)
	for _, name := range []string{slo.MetricBuildInfo, slo.MetricConnectorRestarts, slo.MetricSegmentLatency + "_count", slo.MetricDBClockOffsetError} {
		if !known[name] {
			t.Errorf("%s not read from slo/metrics.go", name)
		}
	}
}
