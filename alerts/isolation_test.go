package alerts_test

// The rules read every pipeline's series at once (they are written per
// class, not per pipeline), and write a series of a pipeline only from
// that pipeline's own series, so another pipeline's series, fed or
// recorded, can never make its alerts fire; and without series they raise
// nothing. The prober's and the Kafka clusters' rules write no pipeline's
// series.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// labelSloth is the label of an SLO's recordings that names its pipeline
// (Sloth's service); they are read by it and by sloth_id.
const labelSloth = "sloth_service"

// parseExpr parses a rule's expression.
func parseExpr(t *testing.T, expr string) promql.Expr {
	t.Helper()
	e, err := promql.NewParser(promql.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return e
}

// selectorsOf lists the series selectors of an expression.
func selectorsOf(t *testing.T, expr string) []*promql.VectorSelector {
	t.Helper()
	var sels []*promql.VectorSelector
	promql.Inspect(parseExpr(t, expr), func(node promql.Node, _ []promql.Node) error {
		if vs, ok := node.(*promql.VectorSelector); ok {
			sels = append(sels, vs)
		}
		return nil
	})
	return sels
}

func equalMatcher(vs *promql.VectorSelector, name string) (string, bool) {
	for _, m := range vs.LabelMatchers {
		if m.Name == name && m.Type == labels.MatchEqual {
			return m.Value, true
		}
	}
	return "", false
}

// labelValue is what an expression's series hold in one label: one known
// value (fixed), never the label (none), or either, as far as the rules
// tell (unknown); bottom is a recording not inferred yet.
type labelValue struct {
	known, none, bottom bool
	value               string
}

var bottomValue = labelValue{bottom: true}

var unknownValue = labelValue{}

func fixedValue(v string) labelValue { return labelValue{known: true, value: v} }

var noValue = labelValue{known: true, none: true}

func (v labelValue) String() string {
	switch {
	case !v.known:
		return "unknown"
	case v.none:
		return "none"
	}
	return fmt.Sprintf("%q", v.value)
}

// either is the value of series that come from a or from b.
func either(a, b labelValue) labelValue {
	if a.bottom {
		return b
	}
	if b.bottom || a == b {
		return a
	}
	return unknownValue
}

// matched is the value of series matched on the label: both sides hold
// the same, so whichever side tells.
func matched(a, b labelValue) labelValue {
	if a.known || a.bottom {
		return a
	}
	return b
}

// recorded tells the value of a label in the series a selector reads,
// from the rules that record them; unknownValue for series no rule
// records.
type recorded func(vs *promql.VectorSelector, label string) labelValue

// valueOf infers the value of label in the series an expression returns,
// following PromQL's rules for which labels each operation keeps.
func valueOf(node promql.Node, label string, rec recorded) labelValue {
	valueOf := func(node promql.Node, label string) labelValue { return valueOf(node, label, rec) }
	switch n := node.(type) {
	case *promql.VectorSelector:
		if v, ok := equalMatcher(n, label); ok {
			return fixedValue(v)
		}
		return rec(n, label)
	case *promql.MatrixSelector:
		return valueOf(n.VectorSelector, label)
	case *promql.SubqueryExpr:
		return valueOf(n.Expr, label)
	case *promql.ParenExpr:
		return valueOf(n.Expr, label)
	case *promql.UnaryExpr:
		return valueOf(n.Expr, label)
	case *promql.StepInvariantExpr:
		return valueOf(n.Expr, label)
	case *promql.NumberLiteral, *promql.StringLiteral:
		return noValue
	case *promql.Call:
		switch n.Func.Name {
		case "absent", "absent_over_time":
			// absent() labels its series with the selector's equality
			// matchers.
			var vs *promql.VectorSelector
			switch a := n.Args[0].(type) {
			case *promql.VectorSelector:
				vs = a
			case *promql.MatrixSelector:
				vs, _ = a.VectorSelector.(*promql.VectorSelector)
			}
			if vs == nil {
				return unknownValue
			}
			if v, ok := equalMatcher(vs, label); ok {
				return fixedValue(v)
			}
			return noValue
		case "label_replace", "label_join":
			return unknownValue
		}
		for _, a := range n.Args {
			if a.Type() == promql.ValueTypeVector || a.Type() == promql.ValueTypeMatrix {
				return valueOf(a, label)
			}
		}
		return noValue // vector(), time(): no labels
	case *promql.AggregateExpr:
		if n.Op == promql.COUNT_VALUES {
			return unknownValue
		}
		if n.Op == promql.TOPK || n.Op == promql.BOTTOMK {
			return valueOf(n.Expr, label)
		}
		if slices.Contains(n.Grouping, label) != n.Without {
			return valueOf(n.Expr, label)
		}
		return noValue
	case *promql.BinaryExpr:
		lt, rt := n.LHS.Type(), n.RHS.Type()
		switch {
		case lt == promql.ValueTypeScalar && rt == promql.ValueTypeScalar:
			return noValue
		case lt == promql.ValueTypeScalar:
			return valueOf(n.RHS, label)
		case rt == promql.ValueTypeScalar:
			return valueOf(n.LHS, label)
		}
		l, r := valueOf(n.LHS, label), valueOf(n.RHS, label)
		vm := n.VectorMatching
		switch n.Op {
		case promql.LAND, promql.LUNLESS:
			return l
		case promql.LOR:
			return either(l, r)
		}
		onLabel := vm != nil && vm.On && slices.Contains(vm.MatchingLabels, label)
		matchedOn := vm == nil || (vm.On && onLabel) || (!vm.On && !slices.Contains(vm.MatchingLabels, label))
		switch {
		case vm != nil && vm.Card == promql.CardManyToOne:
			if slices.Contains(vm.Include, label) {
				return r
			}
			if matchedOn {
				return matched(l, r)
			}
			return l
		case vm != nil && vm.Card == promql.CardOneToMany:
			if slices.Contains(vm.Include, label) {
				return l
			}
			if matchedOn {
				return matched(r, l)
			}
			return r
		case vm != nil && vm.On:
			// One-to-one on a list keeps that list alone.
			if onLabel {
				return matched(l, r)
			}
			return noValue
		case matchedOn:
			return matched(l, r)
		}
		return noValue // ignoring the label drops it
	}
	return unknownValue
}

// ruleValue is the value of label in the series a rule writes: its own
// labels override the expression's.
func ruleValue(t *testing.T, r alerts.Rule, label string, rec recorded) labelValue {
	t.Helper()
	if v, ok := r.Labels[label]; ok {
		return fixedValue(v)
	}
	return valueOf(parseExpr(t, r.Expr), label, rec)
}

// ruleValues infers the pipeline and sloth_service of every rule's series
// (by group and rule index), the recordings' in turn from the rules that
// write them, until nothing changes: a recording may read itself.
func ruleValues(t *testing.T, rf *alerts.RuleFile) map[[2]int]map[string]labelValue {
	t.Helper()
	values := map[[2]int]map[string]labelValue{}
	for i, g := range rf.Groups {
		for j := range g.Rules {
			values[[2]int{i, j}] = map[string]labelValue{slo.LabelPipeline: bottomValue, labelSloth: bottomValue}
		}
	}
	rec := func(vs *promql.VectorSelector, label string) labelValue {
		v, written := bottomValue, false
		pipeline, selects := equalMatcher(vs, slo.LabelPipeline)
		for i, g := range rf.Groups {
			for j, r := range g.Rules {
				if r.Record != vs.Name {
					continue
				}
				written = true
				if wp := values[[2]int{i, j}][slo.LabelPipeline]; selects && wp.known && (wp.none || wp.value != pipeline) {
					continue // the selector cannot read this rule's series
				}
				v = either(v, values[[2]int{i, j}][label])
			}
		}
		if !written {
			return unknownValue
		}
		return v
	}
	for changed := true; changed; {
		changed = false
		for i, g := range rf.Groups {
			for j, r := range g.Rules {
				for label, old := range values[[2]int{i, j}] {
					if v := ruleValue(t, r, label, rec); v != old {
						values[[2]int{i, j}][label] = v
						changed = true
					}
				}
			}
		}
	}
	return values
}

func ruleName(g alerts.Group, r alerts.Rule) string {
	return g.Name + "/" + r.Alert + r.Record
}

// pipelineLeaks lists how the rules of a file break the isolation of
// pipelines:
//
//   - a rule of every pipeline (the SLOs', the pipelines' classes')
//     writes series of a pipeline only from that pipeline's series (its
//     pipeline label comes from them, neither aggregated away nor written
//     by the rule), so an unfed pipeline has none and one pipeline's
//     series never make another's alert;
//   - a rule of no pipeline (the prober's, the Kafka clusters') writes
//     series of no pipeline: neither label.
func pipelineLeaks(t *testing.T, rf *alerts.RuleFile) []string {
	t.Helper()
	var leaks []string
	values := ruleValues(t, rf)
	for i, g := range rf.Groups {
		for j, r := range g.Rules {
			name := ruleName(g, r)
			pipeline, sloth := values[[2]int{i, j}][slo.LabelPipeline], values[[2]int{i, j}][labelSloth]
			if g.EveryPipeline {
				if pipeline != unknownValue {
					leaks = append(leaks, fmt.Sprintf("%s writes pipeline %s, not the pipeline of the series it reads", name, pipeline))
				}
				continue
			}
			if pipeline != noValue {
				leaks = append(leaks, fmt.Sprintf("%s writes pipeline %s, not none", name, pipeline))
			}
			if sloth != noValue {
				leaks = append(leaks, fmt.Sprintf("%s writes %s %s, not none", name, labelSloth, sloth))
			}
		}
	}
	return leaks
}

func TestPipelineRulesReadAndWriteOnlyTheirPipeline(t *testing.T) {
	generate := func(t *testing.T, path string, replicas int, scope map[string]string) *alerts.RuleFile {
		cfg, _ := loadModel(t, path)
		cfg.Alerting.Replicas = replicas
		cfg.Alerting.Selector = scope
		rf := generateRules(t, cfg)
		return rf
	}
	for _, tc := range []struct {
		name     string
		config   string
		replicas int
		scope    map[string]string
	}{
		{"the test configuration", testConfig, 0, nil},
		{"the test configuration with two replicas", testConfig, 2, nil},
		{"the test configuration scoped to an environment", testConfig, 0, map[string]string{"env": "prod"}},
		{"the Kafka scenario's configuration", filepath.Join("testdata", "kafka", "config.yml"), 0, nil},
		{"the example configuration", exampleConfig, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, leak := range pipelineLeaks(t, generate(t, tc.config, tc.replicas, tc.scope)) {
				t.Error(leak)
			}
		})
	}

	// The check must see a leak where there is one.
	for _, tc := range []struct {
		name   string
		mutate func(rf *alerts.RuleFile) int
	}{
		{
			name: "An inserts-failing alert summed over the pipelines writes a series of no pipeline.",
			mutate: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertInsertsFailing {
					return false
				}
				r.Expr = strings.ReplaceAll(r.Expr, "sum by (pipeline) (", "sum(")
				return true
			}),
		},
		{
			name: "A stall recording that aggregates away its pipeline writes a series of no pipeline.",
			mutate: rewriteRules(func(r *alerts.Rule) bool {
				if r.Record != alerts.RecordStall {
					return false
				}
				r.Expr = strings.ReplaceAll(r.Expr, "max by (pipeline) (", "max(")
				return true
			}),
		},
		{
			name: "An inserts-failing alert labelled with another pipeline writes that pipeline's alert.",
			mutate: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertInsertsFailing {
					return false
				}
				r.Labels = map[string]string{slo.LabelPipeline: "orders"}
				return true
			}),
		},
		{
			name: "A prober alert kept by pipeline writes series of the pipelines.",
			mutate: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertPipelinesUnmeasured {
					return false
				}
				r.Expr = strings.Replace(r.Expr, "count by (job) (", "count by (job, pipeline) (", 1)
				return true
			}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := generate(t, testConfig, 0, nil)
			if tc.mutate(rf) == 0 {
				t.Fatal("the mutation changed no rule: the test no longer tests what it says")
			}
			leaks := pipelineLeaks(t, rf)
			if len(leaks) == 0 {
				t.Fatal("the mutated rules pass the check; it must catch them")
			}
			t.Logf("caught, as it must be:\n%s", strings.Join(leaks, "\n"))
		})
	}
}

// noSeriesScenario is a promtool test of every pipeline's rules with the
// prober up (in env prod, for the rules scoped to it) and no series of
// any pipeline, evaluated every interval for span: nothing may fire or go
// pending, counted over the whole run, but the prober's page for the
// pipelines unmeasured (which fires at 15s and 1m, and at 10m only if
// promtool happens to evaluate the prober's group after the pipelines':
// their RecordUnmeasured is older than the 5m lookback otherwise).
func noSeriesScenario(interval, span time.Duration) string {
	return fmt.Sprintf(`# Generated by TestPipelinesWithoutSeriesRaiseNothing.
rule_files: [labels-only.rules.yml]
evaluation_interval: %[1]s
tests:
  - interval: %[1]s
    input_series:
      - series: outbox_canary_build_info{job="outbox-canary", instance="prober:9464", version="test", env="prod"}
        values: 1x%[3]d
    promql_expr_test:
      - expr: count by (alertname, alertstate) (count_over_time(ALERTS{alertname!="%[5]s"}[%[4]s]))
        eval_time: %[2]s
        exp_samples: []
`, model.Duration(interval), model.Duration(span), int(span/interval), model.Duration(2*span), alerts.AlertPipelinesUnmeasured)
}

// scenarioFile is what the promtool tests read of a promtool test file.
type scenarioFile struct {
	EvaluationInterval string `yaml:"evaluation_interval"`
	Tests              []struct {
		Alerts []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
		} `yaml:"alert_rule_test"`
		PromQL []struct {
			Expr     string `yaml:"expr"`
			EvalTime string `yaml:"eval_time"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

func readScenario(t *testing.T, path string) scenarioFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sc scenarioFile
	if err := yaml.Unmarshal(data, &sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return sc
}

// spansByInterval gives, per evaluation interval of the scenarios in
// files, the last time any of them evaluates.
func spansByInterval(t *testing.T, files []string) map[time.Duration]time.Duration {
	t.Helper()
	parse := func(file, d string) time.Duration {
		v, err := model.ParseDuration(d)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return time.Duration(v)
	}
	spans := map[time.Duration]time.Duration{}
	for _, f := range files {
		sc := readScenario(t, f)
		interval := time.Minute // promtool's default
		if sc.EvaluationInterval != "" {
			interval = parse(f, sc.EvaluationInterval)
		}
		for _, tc := range sc.Tests {
			for _, a := range tc.Alerts {
				spans[interval] = max(spans[interval], parse(f, a.EvalTime))
			}
			for _, e := range tc.PromQL {
				spans[interval] = max(spans[interval], parse(f, e.EvalTime))
			}
		}
	}
	return spans
}

// TestPipelinesWithoutSeriesRaiseNothing runs every pipeline's rules
// without any pipeline's series (noSeriesScenario) at each evaluation
// interval of the scenarios, for as long as the longest of them: a
// pipeline a scenario does not feed raises nothing, whatever it feeds
// another (TestPipelineRulesReadAndWriteOnlyTheirPipeline). The page for
// the pipelines unmeasured is the prober's and counts every pipeline's
// RecordUnmeasured.
func TestPipelinesWithoutSeriesRaiseNothing(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	glob := func(dir string) []string {
		files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no scenarios in %s: %v", dir, err)
		}
		return files
	}
	for _, tc := range []struct {
		name  string
		model func(t *testing.T) (*config.Config, *slo.Model)
		// spans are the runs: how long at each evaluation interval.
		spans  map[time.Duration]time.Duration
		mutate func(rf *alerts.RuleFile) int
	}{
		{
			name:  "The test configuration's pipelines raise nothing without series, as long as testdata/scenarios run.",
			model: func(t *testing.T) (*config.Config, *slo.Model) { return loadModel(t, testConfig) },
			spans: spansByInterval(t, glob(scenarioDir)),
		},
		{
			name:  "Nor do they with two replicas, as long as testdata/replicas run.",
			model: replicaModel,
			spans: spansByInterval(t, glob(replicaScenarioDir)),
		},
		{
			name: "Nor scoped to an environment, as long as testdata/scopes run.",
			model: func(t *testing.T) (*config.Config, *slo.Model) {
				cfg, _ := loadModel(t, testConfig)
				cfg.Alerting.Selector = map[string]string{"env": "prod"}
				m, err := slo.FromConfig(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return cfg, m
			},
			spans: spansByInterval(t, glob(scopeScenarioDir)),
		},
		{
			name:  "An inserts-failing alert that fires on the absence of its counter fires without series, and the test fails.",
			model: func(t *testing.T) (*config.Config, *slo.Model) { return loadModel(t, testConfig) },
			spans: map[time.Duration]time.Duration{15 * time.Second: 10 * time.Minute},
			mutate: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertInsertsFailing {
					return false
				}
				r.Expr = "absent(" + regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\}`).FindString(r.Expr) + ")"
				return true
			}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, m := tc.model(t)
			rf, err := alerts.Generate(m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mutate != nil && tc.mutate(rf) == 0 {
				t.Fatal("the mutation changed no rule: the test no longer tests what it says")
			}
			dir := t.TempDir()
			writeRuleFile(t, dir, cfg, rf)
			var files []string
			for interval, span := range tc.spans {
				f := filepath.Join(dir, "no-series-every-"+model.Duration(interval).String()+".yml")
				if err := os.WriteFile(f, []byte(noSeriesScenario(interval, span)), 0o644); err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			for file, report := range runScenarios(t, bin, dir, files...) {
				failed := strings.Contains(report, "FAILED")
				switch {
				case tc.mutate == nil && failed:
					t.Errorf("%s: pipelines without series raise alerts:\n%s", file, report)
				case tc.mutate != nil && !failed:
					t.Errorf("%s passed on rules that fire without series; it must fail:\n%s", file, report)
				default:
					t.Logf("%s:\n%s", file, firstLines(report, 12))
				}
			}
		})
	}
}
