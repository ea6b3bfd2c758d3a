package dashboards

import (
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"
)

// With alerting.selector set, every query and variable of every dashboard
// selects the scope, and every aggregation keeps its labels: a dashboard
// of one environment never shows, nor adds in, another's pipelines of the
// same name.
func TestScopeIsInEveryDashboardQuery(t *testing.T) {
	scope := map[string]string{"env": "prod", "cluster": "eu-1"}
	for _, path := range configs {
		m := loadModel(t, path)
		m.Scope = scope
		files, err := Generate(m, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for name, d := range dashboardFiles(t, files) {
			exprs, _ := queriesOf(t, d)
			for _, e := range exprs {
				n++
				parsed, err := promql.NewParser(promql.Options{}).ParseExpr(substitute(e))
				if err != nil {
					t.Fatalf("%s %s: %s: %v", path, name, e, err)
				}
				promql.Inspect(parsed, func(node promql.Node, _ []promql.Node) error {
					switch node := node.(type) {
					case *promql.VectorSelector:
						for k, v := range scope {
							if !slices.ContainsFunc(node.LabelMatchers, func(m *labels.Matcher) bool {
								return m.Name == k && m.Type == labels.MatchEqual && m.Value == v
							}) {
								t.Errorf("%s %s: %s: selector %s lacks %s=%q", path, name, e, node, k, v)
							}
						}
					case *promql.AggregateExpr:
						if node.Op == promql.TOPK || node.Op == promql.BOTTOMK {
							return nil // they keep the series they pick, labels and all
						}
						for k := range scope {
							if node.Without || !slices.Contains(node.Grouping, k) {
								t.Errorf("%s %s: %s: aggregation %s drops %s", path, name, e, node.Op, k)
							}
						}
					}
					return nil
				})
			}
		}
		if n == 0 {
			t.Fatalf("%s: no queries", path)
		}
	}
}
