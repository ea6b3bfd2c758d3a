package dashboards

// These tests have Prometheus evaluate the SLO overview's queries against
// the rules `make generate` writes (examples/rules), with promtool's
// `test rules`: the fleet table's queries return one row per SLO with its
// owner, the least-budget stat finds the SLO that burns, each alert
// panel's threshold line sits at the model's factor for its pipeline's
// window, and "alerts firing" counts the dead man, which has no pipeline.
// They need promtool (Debian's prometheus package, installed by
// deploy/local/stack.sh): without it they skip, except in CI (CI=true),
// where they fail.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

func promtoolBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		stacktest.Unavailable(t, "promtool not found (%v): install Debian's prometheus package or run deploy/local/stack.sh up", err)
	}
	return p
}

// The promtool unit test file format, the fields used here.
type promtoolFile struct {
	RuleFiles          []string       `yaml:"rule_files"`
	EvaluationInterval string         `yaml:"evaluation_interval"`
	Tests              []promtoolTest `yaml:"tests"`
}

type promtoolTest struct {
	Name        string        `yaml:"name"`
	Interval    string        `yaml:"interval"`
	InputSeries []inputSeries `yaml:"input_series"`
	ExprTests   []exprTest    `yaml:"promql_expr_test"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type exprTest struct {
	Expr       string      `yaml:"expr"`
	EvalTime   string      `yaml:"eval_time"`
	ExpSamples []expSample `yaml:"exp_samples"`
}

type expSample struct {
	Labels string  `yaml:"labels,omitempty"`
	Value  float64 `yaml:"value"`
}

// interpolate writes a dashboard query as Grafana sends it to Prometheus
// for the given variable values (several values already as "(a|b)").
func interpolate(t *testing.T, expr string, values map[string]string) string {
	t.Helper()
	return variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		name := variableRef.FindStringSubmatch(ref)[1]
		v, ok := values[name]
		if !ok {
			t.Fatalf("%s: no value for variable %s", expr, ref)
		}
		return v
	})
}

// labelsOf prints a label set as promtool expects it.
func labelsOf(pairs ...string) string {
	var parts []string
	for i := 0; i+1 < len(pairs); i += 2 {
		parts = append(parts, pairs[i]+"="+strconv.Quote(pairs[i+1]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

const (
	testJob      = "outbox-canary"
	testInstance = "prober:9464"
)

// healthyProber is two hours of a prober measuring every SLO of the model,
// ten good canaries a minute on every segment; burning names an SLO that
// also gets five bad ones a minute.
func healthyProber(m *slo.Model, burning string) []inputSeries {
	target := fmt.Sprintf(`job=%q, instance=%q`, testJob, testInstance)
	in := []inputSeries{{Series: fmt.Sprintf(`%s{%s, version="test"}`, slo.MetricBuildInfo, target), Values: "1x120"}}
	for _, p := range m.Pipelines {
		in = append(in, inputSeries{Series: fmt.Sprintf(`%s{%s, pipeline=%q}`, slo.MetricCanariesSent, target, p.Name), Values: "0+10x120"})
		in = append(in, objectiveSeries(p, target, "x120")...)
		for _, s := range p.SLOs {
			bad := "0x120"
			if s.ID == burning {
				bad = "0+5x120"
			}
			for outcome, values := range map[string]string{slo.OutcomeGood: "0+10x120", slo.OutcomeBad: bad} {
				in = append(in, inputSeries{
					Series: fmt.Sprintf(`%s{%s, pipeline=%q, segment=%q, outcome=%q}`, slo.MetricSLIEvents, target, p.Name, s.Segment, outcome),
					Values: values,
				})
			}
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].Series < in[j].Series })
	return in
}

// objectiveSeries are the objective series a prober exports for the
// pipeline's SLOs, with the target's labels, for steps ("x120").
func objectiveSeries(p slo.Pipeline, target, steps string) []inputSeries {
	var in []inputSeries
	for _, s := range p.SLOs {
		l, objective := s.ObjectiveSeries()
		series := labels.FromMap(l).String()
		in = append(in, inputSeries{
			Series: slo.MetricSLOObjective + "{" + target + ", " + strings.TrimPrefix(series, "{"),
			Values: strconv.FormatFloat(objective, 'g', -1, 64) + steps,
		})
	}
	return in
}

// reviewPanels maps the SLO overview's panels by title.
func reviewPanels(t *testing.T) (map[string]map[string]any, map[string]any) {
	t.Helper()
	d := dashboardFiles(t, generate(t, exampleConfig))[UIDSLOOverview+".json"]
	out := map[string]map[string]any{}
	for _, p := range panelsOf(d) {
		out[p["title"].(string)] = p
	}
	return out, d
}

func targetExprs(p map[string]any) []string {
	var out []string
	for _, q := range p["targets"].([]any) {
		out = append(out, q.(map[string]any)["expr"].(string))
	}
	return out
}

func TestReviewQueriesOnTheGeneratedRules(t *testing.T) {
	bin := promtoolBinary(t)
	m := loadModel(t, exampleConfig)
	panels, d := reviewPanels(t)

	var all []string
	for _, p := range m.Pipelines {
		all = append(all, p.Name)
	}
	everything := map[string]string{
		varJob:      testJob,
		varInstance: "(" + testInstance + ")",
		varPipeline: "(" + strings.Join(all, "|") + ")",
	}
	const burning = "orders-commit_to_read"

	// The fleet: every query of every fleet table gives one series per
	// SLO of its window, labelled with pipeline, segment and owner only
	// (values set to 1: what matters here is which rows there are).
	fleet := promtoolTest{Name: "fleet", Interval: "1m", InputSeries: healthyProber(m, burning)}
	tables := fleetTables(d)
	if len(tables) == 0 {
		t.Fatal("no fleet table")
	}
	for _, p := range tables {
		title := p["title"].(string)
		var rows []expSample
		for _, pl := range m.Pipelines {
			for _, s := range pl.SLOs {
				if sm := groupTitle.FindStringSubmatch(title); sm != nil && sm[1] != windowText(s.Window) {
					continue
				}
				rows = append(rows, expSample{Labels: labelsOf("owner", s.Owner, "pipeline", s.Pipeline, "segment", s.Segment), Value: 1})
			}
		}
		for _, e := range targetExprs(p) {
			fleet.ExprTests = append(fleet.ExprTests, exprTest{
				Expr:       "(" + interpolate(t, e, everything) + ") * 0 + 1",
				EvalTime:   "2h",
				ExpSamples: rows,
			})
		}
	}
	// The least-budget stat finds the SLO that burns, and its owner.
	least := panels["Least error budget left"]
	if least == nil {
		t.Fatal("no Least error budget left panel")
	}
	var burningSLO slo.SLO
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			if s.ID == burning {
				burningSLO = s
			}
		}
	}
	fleet.ExprTests = append(fleet.ExprTests, exprTest{
		Expr:     "(" + interpolate(t, targetExprs(least)[0], everything) + ") * 0 + 1",
		EvalTime: "2h",
		ExpSamples: []expSample{{
			Labels: labelsOf("owner", burningSLO.Owner, "pipeline", burningSLO.Pipeline, "segment", burningSLO.Segment), Value: 1,
		}},
	})
	// Each alert panel's threshold line, per pipeline, is exactly the
	// model's factor for that pipeline's window.
	for _, kind := range burnAlertKinds(m) {
		p := panels[burnAlertTitle(kind)]
		if p == nil {
			t.Fatalf("no panel %q", burnAlertTitle(kind))
		}
		var want []expSample
		for _, pl := range m.Pipelines {
			for _, a := range pl.SLOs[0].Burn {
				if a.Long == kind.Long && a.Short == kind.Short && a.Severity == kind.Severity {
					f, _ := a.Factor.Float64()
					want = append(want, expSample{Labels: labelsOf("pipeline", pl.Name), Value: f})
				}
			}
		}
		fleet.ExprTests = append(fleet.ExprTests, exprTest{
			Expr:       interpolate(t, targetExprs(p)[2], everything),
			EvalTime:   "2h",
			ExpSamples: want,
		})
	}

	// The dead man: the prober's series end at 1h; from 1h7m
	// OutboxCanaryProberAbsent fires, without a pipeline label, and
	// "alerts firing" counts it whatever pipelines or instance are chosen.
	firing := panels["Alerts firing"]
	if firing == nil {
		t.Fatal("no Alerts firing panel")
	}
	alertsExpr := targetExprs(firing)[0]
	// The prober exports every pipeline's last canary sent while it runs:
	// without them OutboxCanaryPipelinesUnmeasured fires at 30m already.
	deadMan := promtoolTest{Name: "dead man", Interval: "1m", InputSeries: []inputSeries{{
		Series: fmt.Sprintf(`%s{job=%q, instance=%q, version="test"}`, slo.MetricBuildInfo, testJob, testInstance),
		Values: "1x60",
	}}}
	// And the objective series, by which the rules know the pipelines
	// (without them, too: a prober too old for the rules).
	for _, p := range m.Pipelines {
		deadMan.InputSeries = append(deadMan.InputSeries, inputSeries{
			Series: fmt.Sprintf(`%s{job=%q, instance=%q, pipeline=%q}`, slo.MetricLastSentTimestamp, testJob, testInstance, p.Name),
			Values: "0+60x60",
		})
		deadMan.InputSeries = append(deadMan.InputSeries, objectiveSeries(p, fmt.Sprintf(`job=%q, instance=%q`, testJob, testInstance), "x60")...)
	}
	for _, tc := range []struct {
		pipeline, instance, at string
		want                   float64
	}{
		// A pipeline no alert names: only instance-wide alerts count.
		{"not-configured", "(" + testInstance + ")", "30m", 0},
		{"not-configured", "(" + testInstance + ")", "1h10m", 1},
		{"orders", testInstance, "1h10m", 1},
		{everything[varPipeline], everything[varInstance], "1h10m", 1},
	} {
		vars := map[string]string{varJob: testJob, varInstance: tc.instance, varPipeline: tc.pipeline}
		deadMan.ExprTests = append(deadMan.ExprTests, exprTest{
			// At least one: other alerts may fire for a configured
			// pipeline whose series are gone; the dead man must be among
			// those counted.
			Expr:       "clamp_max(" + interpolate(t, alertsExpr, vars) + ", 1)",
			EvalTime:   tc.at,
			ExpSamples: []expSample{{Value: tc.want}},
		})
	}

	runPromtool(t, bin, promtoolFile{
		RuleFiles:          []string{"rules.yml"},
		EvaluationInterval: "1m",
		Tests:              []promtoolTest{fleet, deadMan},
	})
}

// runPromtool writes the test file next to a copy of the example rules and
// runs promtool test rules on it.
func runPromtool(t *testing.T, bin string, f promtoolFile) {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile(exampleRules)
	if err != nil {
		t.Fatalf("%v: run make generate", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(dir, "dashboards_test.yml")
	if err := os.WriteFile(testFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "test", "rules", testFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n--- %s:\n%s", err, out, filepath.Base(testFile), data)
	}
	t.Logf("promtool test rules:\n%s", out)
}
