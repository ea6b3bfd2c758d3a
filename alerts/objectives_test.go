package alerts_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// objectivesFile is where writeRuleFile puts what the prober of a
// configuration exports for the rules to read (the objective series of
// its SLOs), so that copyScenarios feeds it to every scenario that loads
// those rules: the scenarios hold the series a test is about, and the
// prober exports these whenever it exports any.
const objectivesFile = "slo-objectives.json"

type objectives struct {
	// Scope are the scopes' label names: a scenario's series carry the
	// scope labels of the Prometheus (or environment) that scraped them,
	// and so do the objective series scraped with them. A series of a
	// scoped configuration holds its scope's labels already, and goes
	// only where the scenario names its pipeline in that scope.
	Scope  []string          `json:"scope"`
	Series []objectiveSeries `json:"series"`
}

type objectiveSeries struct {
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value"`
}

// writeObjectives adds the objective series of cfg's SLOs to dir's
// objectivesFile.
func writeObjectives(t *testing.T, dir string, cfg *config.Config) {
	t.Helper()
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var o objectives
	path := filepath.Join(dir, objectivesFile)
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &o); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range m.Scope.Labels() {
		if !slices.Contains(o.Scope, name) {
			o.Scope = append(o.Scope, name)
		}
	}
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			l, v := s.ObjectiveSeries()
			maps.Copy(l, m.Scope)
			o.Series = append(o.Series, objectiveSeries{l, v})
		}
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// withObjectives adds to every test of a scenario the objective series of
// each pipeline its input series name, in every scope they name it in,
// from the start of the test to its last evaluation: what the prober
// measuring that pipeline exports beside the series the test holds.
// Scenarios that set the series themselves (one naming
// outbox_canary_slo_objective_ratio) are left as they are.
func withObjectives(t *testing.T, rulesDir, scenario string, data []byte) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(rulesDir, objectivesFile))
	if os.IsNotExist(err) {
		return data
	} else if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), slo.MetricSLOObjective) {
		return data
	}
	var o objectives
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	root := doc.Content[0]
	evalInterval := time.Minute // promtool's default
	if v := mapValue(root, "evaluation_interval"); v != nil {
		evalInterval = parseDuration(t, scenario, v.Value)
	}
	tests := mapValue(root, "tests")
	if tests == nil {
		return data
	}
	for _, tc := range tests.Content {
		interval := evalInterval
		if v := mapValue(tc, "interval"); v != nil {
			interval = parseDuration(t, scenario, v.Value)
		}
		var last time.Duration
		for _, key := range []string{"alert_rule_test", "promql_expr_test"} {
			if checks := mapValue(tc, key); checks != nil {
				for _, c := range checks.Content {
					if v := mapValue(c, "eval_time"); v != nil {
						last = max(last, parseDuration(t, scenario, v.Value))
					}
				}
			}
		}
		input := mapValue(tc, "input_series")
		if input == nil {
			continue
		}
		// The scopes each pipeline is named in, as label sets.
		scopes := map[string]map[string]map[string]string{}
		for _, in := range input.Content {
			s := mapValue(in, "series")
			if s == nil {
				continue
			}
			ls, err := promql.NewParser(promql.Options{}).ParseMetric(s.Value)
			if err != nil {
				t.Fatalf("%s: series %s: %v", scenario, s.Value, err)
			}
			p := ls.Get(slo.LabelPipeline)
			if p == "" {
				continue
			}
			scope := map[string]string{}
			for _, name := range o.Scope {
				if v := ls.Get(name); v != "" {
					scope[name] = v
				}
			}
			if scopes[p] == nil {
				scopes[p] = map[string]map[string]string{}
			}
			scopes[p][fmt.Sprint(scope)] = scope
		}
		steps := int(last/interval) + 1
		for _, obj := range o.Series {
			for _, key := range slices.Sorted(maps.Keys(scopes[obj.Labels[slo.LabelPipeline]])) {
				scope := scopes[obj.Labels[slo.LabelPipeline]][key]
				if !inScope(obj.Labels, scope, o.Scope) {
					continue
				}
				l := maps.Clone(obj.Labels)
				maps.Copy(l, scope)
				name := slo.MetricSLOObjective + labels.FromMap(l).String()
				values := strconv.FormatFloat(obj.Value, 'g', -1, 64) + "x" + strconv.Itoa(steps)
				input.Content = append(input.Content, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
					{Kind: yaml.ScalarNode, Value: "series"}, {Kind: yaml.ScalarNode, Value: name},
					{Kind: yaml.ScalarNode, Value: "values"}, {Kind: yaml.ScalarNode, Value: values},
				}})
			}
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inScope says whether a series' own scope labels, where it has them,
// are those of scope.
func inScope(series, scope map[string]string, names []string) bool {
	for _, name := range names {
		if v, ok := series[name]; ok && v != scope[name] {
			return false
		}
	}
	return true
}

// mapValue is the value of key in a YAML mapping node, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func parseDuration(t *testing.T, scenario, s string) time.Duration {
	t.Helper()
	d, err := model.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	return time.Duration(d)
}

// burnRuleSelects says whether a burn alert rule raises the alert of an
// SLO: every selector of its objective series matches the SLO's
// (its window and burn class), and every selector of its error ratios
// matches the SLO's segment. It holds one page and one ticket per SLO
// across rules written once per class (TestOnePageAndOneTicketPerSLO).
func burnRuleSelects(t *testing.T, r alerts.Rule, s slo.SLO) bool {
	t.Helper()
	objective, _ := s.ObjectiveSeries()
	return burnRuleMatches(t, r, objective, s.Segment)
}

// burnRuleSelectsSegment says whether a burn alert rule's error ratios
// match a segment, whatever the class.
func burnRuleSelectsSegment(t *testing.T, r alerts.Rule, segment string) bool {
	t.Helper()
	return burnRuleMatches(t, r, nil, segment)
}

// burnRuleMatches says whether some part of a burn rule's expression (a
// window pair, or a class's pair where classes were merged: the operands
// of its outermost ors) selects the objective series and segment.
func burnRuleMatches(t *testing.T, r alerts.Rule, objective map[string]string, segment string) bool {
	t.Helper()
	var parts []promql.Expr
	var split func(e promql.Expr)
	split = func(e promql.Expr) {
		switch e := e.(type) {
		case *promql.ParenExpr:
			split(e.Expr)
		case *promql.BinaryExpr:
			if e.Op == promql.LOR {
				split(e.LHS)
				split(e.RHS)
				return
			}
			parts = append(parts, e)
		default:
			parts = append(parts, e)
		}
	}
	split(parseExpr(t, r.Expr))
	for _, part := range parts {
		if partMatches(t, part.String(), objective, segment) {
			return true
		}
	}
	return false
}

func partMatches(t *testing.T, expr string, objective map[string]string, segment string) bool {
	t.Helper()
	for _, vs := range selectorsOf(t, expr) {
		var ls map[string]string
		switch {
		case vs.Name == slo.MetricSLOObjective:
			ls = objective
		case strings.HasPrefix(vs.Name, "slo:sli_error:ratio_rate"):
			ls = map[string]string{slo.LabelSegment: segment}
		default:
			continue
		}
		for _, m := range vs.LabelMatchers {
			if v, ok := ls[m.Name]; ok && !m.Matches(v) {
				return false
			}
		}
	}
	return true
}
