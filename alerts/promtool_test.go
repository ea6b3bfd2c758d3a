package alerts_test

// These tests prove the generated rules with promtool: `promtool check
// rules` on every generated file, and `promtool test rules` on the
// scenarios in testdata/scenarios (each a subtest named after its file;
// run with -v to see promtool's own output). They need promtool (Debian's
// prometheus package, installed by deploy/local/stack.sh): without it they
// skip, except in CI (CI=true, stacktest.InCI), where they fail.

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
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
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	exampleConfig = "../examples/outbox-canary.yml"
	testConfig    = "testdata/test-config.yml"
	scenarioDir   = "testdata/scenarios"
	// labelsOnlyRules is the rule file most scenarios load: the generated
	// rules without annotations, because promtool compares annotations
	// exactly and the scenarios are about which alert fires for whom.
	// testdata/scenarios/g-annotations.yml loads the full file.
	labelsOnlyRules = "labels-only.rules.yml"
	fullRules       = "rules.yml"
)

// promtool finds the promtool binary or skips (fails in CI).
func promtool(t *testing.T) string {
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

// generateRules is what `outbox-canary rules` generates for cfg.
func generateRules(t *testing.T, cfg *config.Config) *alerts.RuleFile {
	t.Helper()
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	return rf
}

func loadModel(t *testing.T, path string) (*config.Config, *slo.Model) {
	t.Helper()
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, m
}

// writeRules generates the rules of a model into dir: the full rule file,
// the labels-only one, and the PrometheusRule. It returns their paths.
func writeRules(t *testing.T, dir string, cfg *config.Config, m *slo.Model) []string {
	t.Helper()
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	return writeRuleFile(t, dir, cfg, rf)
}

// writeRuleFile writes generated (or mutated) rules into dir, as
// writeRules does.
func writeRuleFile(t *testing.T, dir string, cfg *config.Config, rf *alerts.RuleFile) []string {
	t.Helper()
	stripped := alerts.RuleFile{}
	for _, g := range rf.Groups {
		g2 := alerts.Group{Name: g.Name}
		for _, r := range g.Rules {
			r.Annotations = nil
			g2.Rules = append(g2.Rules, r)
		}
		stripped.Groups = append(stripped.Groups, g2)
	}
	var paths []string
	for _, f := range []struct {
		name, format string
		rf           *alerts.RuleFile
	}{
		{fullRules, alerts.FormatRules, rf},
		{labelsOnlyRules, alerts.FormatRules, &stripped},
		{"prometheusrule.yml", alerts.FormatPrometheusRule, rf},
	} {
		data, err := alerts.Marshal(f.rf, f.format, cfg.Alerting.RuleObjectLabels())
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	writeObjectives(t, dir, cfg)
	return paths
}

// extractSpec writes the spec of a generated PrometheusRule as a plain
// rule file, for promtool.
func extractSpec(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec alerts.RuleFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	for {
		var pr alerts.PrometheusRule
		if err := dec.Decode(&pr); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
			t.Fatalf("%s: not a PrometheusRule with groups: %s %s, %d groups", path, pr.APIVersion, pr.Kind, len(pr.Spec.Groups))
		}
		spec.Groups = append(spec.Groups, pr.Spec.Groups...)
	}
	if len(spec.Groups) == 0 {
		t.Fatalf("%s: no PrometheusRule", path)
	}
	out, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	specPath := strings.TrimSuffix(path, ".yml") + ".spec.yml"
	if err := os.WriteFile(specPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return specPath
}

// promtoolGOGC is the garbage collector's target for promtool runs:
// `promtool test rules` allocates for every evaluation of every rule, and
// at the default (100) a quarter of its CPU time went to collecting. The
// suites run promtool a hundred times on a 2-core machine shared with the
// other packages' tests; the memory is there (a run stays under 100 MB).
const promtoolGOGC = "400"

// promtoolSlots holds one token per CPU: the suites' tests run in
// parallel, and the Alertmanager tests' waits on real time must not keep
// promtool runs from the CPUs, nor more promtool runs than CPUs slow each
// other down (`make test` runs this package with a -parallel above the
// CPUs for that).
var promtoolSlots = make(chan struct{}, runtime.NumCPU())

func runPromtool(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	promtoolSlots <- struct{}{}
	defer func() { <-promtoolSlots }()
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	if os.Getenv("GOGC") == "" {
		cmd.Env = append(cmd.Env, "GOGC="+promtoolGOGC)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// promtool evaluates on one goroutine; with a P per CPU its
		// garbage collector and idle Ps spin beside the other runs
		// promtoolSlots lets through: 12 % more CPU in one run measured.
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestGeneratedRulesPassPromtoolCheck(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, tc := range []struct{ name, config string }{
		{"the example configuration's rules are valid", exampleConfig},
		{"the test configuration's rules, with a log-capture pipeline, are valid", testConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, m := loadModel(t, tc.config)
			paths := writeRules(t, t.TempDir(), cfg, m)
			files := []string{paths[0], paths[1], extractSpec(t, paths[2])}
			for _, f := range files {
				out, err := runPromtool(t, bin, "check", "rules", f)
				t.Logf("promtool check rules %s:\n%s", filepath.Base(f), out)
				if err != nil {
					t.Errorf("promtool check rules %s: %v", filepath.Base(f), err)
				}
			}
		})
	}
}

// scenarios lists the promtool test files; the file name is the scenario.
func scenarios(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", scenarioDir, err)
	}
	return files
}

// runScenario copies a scenario next to the generated rules (promtool
// resolves rule_files relative to the test file) and runs it.
func runScenario(t *testing.T, bin, rulesDir, scenario string) (string, error) {
	t.Helper()
	return runPromtool(t, bin, append([]string{"test", "rules"}, copyScenarios(t, rulesDir, scenario)...)...)
}

// copyScenarios copies scenarios next to the generated rules and returns
// the copies' paths. Each copy names every group of its rule files in
// group_eval_order, in the files' order (inGroupOrder).
func copyScenarios(t *testing.T, rulesDir string, scenarios ...string) []string {
	t.Helper()
	var paths []string
	for _, sc := range scenarios {
		data, err := os.ReadFile(sc)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(rulesDir, filepath.Base(sc))
		if err := os.WriteFile(dst, inGroupOrder(t, rulesDir, sc, withObjectives(t, rulesDir, sc, data)), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, dst)
	}
	return paths
}

// inGroupOrder sets a scenario's group_eval_order to the groups of its
// rule files (in rulesDir) in the order the files hold them. Without it
// promtool evaluates the groups of a step in an order it draws anew each
// run (it sorts them by their place in group_eval_order, all equal when
// none is given, from a map), so a check that depends on whether a group
// reads another's recording of the same step or of the step before
// passed or failed from one run to the next: a mutation's check failed 25
// runs in 30 on the same files. Prometheus itself evaluates each group on
// its own schedule, in no order between groups. The files' order puts a
// pipeline's SLO groups before the group that records its stall, so a
// burn alert held back by the stall reads it a step late: the harder
// case. PROMTOOL_GROUP_ORDER=reverse runs every suite in the reverse
// order, by hand (it would double the suites' cost in make test): the
// scenarios must pass there too; a mutation's named check may not fail
// there (the minimum count a tenth's does not).
func inGroupOrder(t *testing.T, rulesDir, scenario string, data []byte) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	root := doc.Content[0]
	var ruleFiles []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch root.Content[i].Value {
		case "group_eval_order":
			return data // the scenario chose its order
		case "rule_files":
			if err := root.Content[i+1].Decode(&ruleFiles); err != nil {
				t.Fatalf("%s: rule_files: %v", scenario, err)
			}
		}
	}
	var order []string
	for _, f := range ruleFiles {
		rules, err := os.ReadFile(filepath.Join(rulesDir, f))
		if err != nil {
			t.Fatalf("%s loads %s: %v", scenario, f, err)
		}
		var rf alerts.RuleFile
		if err := yaml.Unmarshal(rules, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			if !slices.Contains(order, g.Name) {
				order = append(order, g.Name)
			}
		}
	}
	if os.Getenv("PROMTOOL_GROUP_ORDER") == "reverse" {
		slices.Reverse(order)
	}
	var value yaml.Node
	if err := value.Encode(order); err != nil {
		t.Fatal(err)
	}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "group_eval_order"}, &value)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runScenarios runs scenarios in one promtool run (one process loading the
// rules once) and returns promtool's report of each, by file name: promtool
// tests every file it is given and heads each report "Unit Testing:  FILE".
func runScenarios(t *testing.T, bin, rulesDir string, scenarios ...string) map[string]string {
	t.Helper()
	out, err := runPromtool(t, bin, append([]string{"test", "rules"}, copyScenarios(t, rulesDir, scenarios...)...)...)
	reports := map[string]string{}
	for _, part := range strings.Split(out, "Unit Testing:")[1:] {
		file, report, _ := strings.Cut(part, "\n")
		reports[filepath.Base(strings.TrimSpace(file))] = report
	}
	for _, sc := range scenarios {
		if _, ok := reports[filepath.Base(sc)]; !ok {
			t.Fatalf("promtool test rules (%v) reports nothing on %s:\n%s", err, filepath.Base(sc), out)
		}
	}
	return reports
}

// TestScenariosWithPromtool runs each scenario of testdata/scenarios on
// the rules.
func TestScenariosWithPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	cfg, m := loadModel(t, testConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios(t) {
		name := strings.TrimSuffix(filepath.Base(sc), ".yml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := runScenario(t, bin, writeScenarioRules(t, cfg, rf), sc)
			t.Logf("promtool test rules %s:\n%s", filepath.Base(sc), out)
			if err != nil {
				t.Errorf("scenario %s failed: %v", name, err)
			}
		})
	}
}

// TestScenariosCatchWrongThresholds mutates the generated thresholds,
// windows and rules and requires the scenarios to fail: they would not
// notice a broken generator otherwise.
// seenRecords matches the names of the burn alerts' counts of bad
// canaries (alerts.RecordBadEventsSeen), less their window.
var seenRecords = regexp.QuoteMeta(strings.TrimSuffix(alerts.RecordBadEventsSeen(time.Minute), "1m"))

func TestScenariosCatchWrongThresholds(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	burn := func(mutate func(a *slo.BurnAlert)) func(m *slo.Model) {
		return func(m *slo.Model) {
			for i := range m.Pipelines {
				for j := range m.Pipelines[i].SLOs {
					old := m.Pipelines[i].SLOs[j].Burn
					mutated := make([]slo.BurnAlert, len(old))
					for k, a := range old {
						mutate(&a)
						mutated[k] = a
					}
					m.Pipelines[i].SLOs[j].Burn = mutated
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		// model changes the model before generation; config changes the
		// configuration, so the objective series the prober exports
		// change with the rules; rules changes the generated rules and
		// returns how many it changed.
		model  func(m *slo.Model)
		config func(c *config.Config)
		rules  func(rf *alerts.RuleFile) int
		// mustFail are the scenarios that must catch the mutation, each
		// with a check that it fails (requireScenariosFail).
		mustFail []string
	}{
		{
			name:  "Burn factors ten times too high miss the slow relay's page and the slow-burn ticket.",
			model: burn(func(a *slo.BurnAlert) { a.Factor = new(big.Rat).Mul(a.Factor, big.NewRat(10, 1)) }),
			mustFail: []string{
				`x-page-resolves: alertname: OutboxCanaryErrorBudgetBurn, time: 1h2m30s`,
				`d-slow-burn-ticket: alertname: OutboxCanaryErrorBudgetBurn, time: 1d`,
			},
		},
		{
			// A page's short window needs its pair's count, which the
			// factor scales too: a smooth 5x burn (scenario d) puts fewer
			// bad canaries in it than even a tenth of the count, so the
			// mutation shows where the count is small: a page held long
			// after its burn.
			name:  "Burn factors ten times too low hold a burn's page long after it.",
			model: burn(func(a *slo.BurnAlert) { a.Factor = new(big.Rat).Quo(a.Factor, big.NewRat(10, 1)) }),
			mustFail: []string{
				`x-page-resolves: alertname: OutboxCanaryErrorBudgetBurn, time: 1h2m15s`,
			},
		},
		{
			// Five times, not ten: ten makes the 3d window 30d, a name
			// the period ratio records already, and promtool fails on
			// the duplicate sample, not on a late page.
			name:  "Long windows five times too long page late.",
			model: burn(func(a *slo.BurnAlert) { a.Long *= 5 }),
			mustFail: []string{
				`x-page-resolves: alertname: OutboxCanaryErrorBudgetBurn, time: 1h2m30s`,
			},
		},
		{
			name:  "Short windows swapped for the long ones resolve late.",
			model: burn(func(a *slo.BurnAlert) { a.Short = a.Long }),
			mustFail: []string{
				`x-page-resolves: alertname: OutboxCanaryErrorBudgetBurn, time: 1h47m30s`,
			},
		},
		{
			name:   "A stall threshold one canary interval lower pages on a 20s relay restart.",
			config: func(c *config.Config) { c.Alerting.StallIntervals-- },
			mustFail: []string{
				`j-pauses-do-not-page: expr: "count_over_time(ALERTS[2h])", time: 2h`,
			},
		},
		{
			name:   "A stall threshold one canary interval higher misses a pause just over the tolerance.",
			config: func(c *config.Config) { c.Alerting.StallIntervals++ },
			mustFail: []string{
				`j-pauses-do-not-page: alertname: OutboxCanaryStalled, time: 1h15s`,
			},
		},
		{
			name: "A period ratio summed by every label breaks when an owner or alerting.labels changes.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if !strings.HasPrefix(r.Record, "slo:sli_error:ratio_rate") || !strings.Contains(r.Expr, "sum_over_time") {
					return false
				}
				base := regexp.MustCompile(`slo:sli_error:ratio_rate5m(\{[^}]*\})?\[\w+\]`).FindString(r.Expr)
				r.Expr = "sum_over_time(" + base + ") / ignoring (sloth_window) count_over_time(" + base + ")"
				return true
			}),
			mustFail: []string{
				`l-label-change: expr: "slo:sli_error:ratio_rate30d{sloth_id=\"orders-end_to_end\"}", time: 2h`,
			},
		},
		{
			name: "Burn alerts without the minimum count of bad canaries page on a fresh Prometheus.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertErrorBudgetBurn {
					return false
				}
				r.Expr = regexp.MustCompile(`(?m)^\s*and on \([^)]*\)\n\s*`+seenRecords+`.*\n`).ReplaceAllString(r.Expr, "")
				return true
			}),
			mustFail: []string{
				`k-fresh-prometheus: expr: "count_over_time(ALERTS[1h])", time: 1h`,
				`o-fresh-prometheus-15s: alertname: OutboxCanaryErrorBudgetBurn, time: 1m30s`,
			},
		},
		{
			name: "Burn alerts whose minimum count is a tenth of the full window's page a fresh Prometheus on two late canaries, and page before the stall alert.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertErrorBudgetBurn {
					return false
				}
				r.Expr = regexp.MustCompile(`(?m)^(\s*`+seenRecords+`.* > .*)$`).ReplaceAllString(r.Expr, "$1 / 10")
				return true
			}),
			mustFail: []string{
				`o-fresh-prometheus-15s: alertname: OutboxCanaryErrorBudgetBurn, time: 1m30s`,
			},
		},
		{
			name: "Page short windows without the minimum count keep a burn's page firing on a later blip.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertErrorBudgetBurn {
					return false
				}
				r.Expr = regexp.MustCompile(`(?m)^\s*and on \([^)]*\)\n\s*`+seenRecords+`(5m|30m) > .*\n`).ReplaceAllString(r.Expr, "")
				return true
			}),
			mustFail: []string{
				`x-page-resolves: alertname: OutboxCanaryErrorBudgetBurn, time: 1h47m30s`,
			},
		},
		{
			// Either the short window's count or the page's for: keeps
			// the second stall's burn page of scenario w from coming
			// before its stall page; without both, it does.
			name: "Burn pages with neither the short window's count nor their for: page before the stall page.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertErrorBudgetBurn || r.For == "" {
					return false
				}
				r.For = ""
				r.Expr = regexp.MustCompile(`(?m)^\s*and on \([^)]*\)\n\s*`+seenRecords+`(5m|30m) > .*\n`).ReplaceAllString(r.Expr, "")
				return true
			}),
			mustFail: []string{
				`w-burn-before-stall: alertname: OutboxCanaryErrorBudgetBurn, time: 1h44m15s`,
			},
		},
		{
			name: "Burn alerts not held back by a stall in their short windows page beside the stall page, and before it.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertErrorBudgetBurn {
					return false
				}
				r.Expr = regexp.MustCompile(`(?m)^unless on \(pipeline\) max_over_time\(.*\n`).ReplaceAllString(r.Expr, "")
				return true
			}),
			mustFail: []string{
				`b-relay-stalls: alertname: OutboxCanaryErrorBudgetBurn, time: 1h4m30s`,
				`f-recovery: alertname: OutboxCanaryErrorBudgetBurn, time: 3h5m`,
				`y-stall-then-blip: alertname: OutboxCanaryErrorBudgetBurn, time: 1h3m15s`,
			},
		},
		{
			name: "Backlog alerts not held back by an open stall incident page beside the stall page.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertOldestUnpublished && r.Alert != alerts.AlertBacklogGrowing {
					return false
				}
				r.Expr = regexp.MustCompile(`(?m)^unless on \(pipeline\) `+regexp.QuoteMeta(alerts.RecordStallIncidentStart)+`.*\n`).ReplaceAllString(r.Expr, "")
				return true
			}),
			mustFail: []string{
				`b-relay-stalls: alertname: OutboxOldestUnpublishedTooOld, time: 1h2m15s`,
				`u-crash-loop-backoff: alertname: OutboxOldestUnpublishedTooOld, time: 1h5m15s`,
			},
		},
		{
			name: "Burn pages without their for: page on a back-off's first short outages, before its stall page.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertErrorBudgetBurn || r.For == "" {
					return false
				}
				r.For = ""
				return true
			}),
			mustFail: []string{
				`u-crash-loop-backoff: alertname: OutboxCanaryErrorBudgetBurn, time: 1h2m15s`,
			},
		},
		{
			name: "A period burn rate blind to how much of the window the data covers reads minutes as the whole window.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Record != "slo:period_burn_rate:ratio" {
					return false
				}
				r.Expr = regexp.MustCompile(`(?s)\* on \([^)]*\) group_left \(\)\n.*?\n/`).ReplaceAllString(r.Expr, "/")
				return true
			}),
			mustFail: []string{
				`k-fresh-prometheus: expr: "slo:period_error_budget_remaining:ratio{sloth_id=\"orders-end_to_end\"} > bool 0.99", time: 1h`,
				`l-label-change: expr: "round(slo:period_error_budget_remaining:ratio{sloth_id=\"orders-end_to_end\"}, 0.001)", time: 2h`,
			},
		},
		{
			name: "A WAL growth ticket without its floor and warm-up goes pending on a healthy slot's few kilobytes.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertSlotRetainedWALGrowth {
					return false
				}
				r.Expr = regexp.MustCompile(`(?s)\n\s*and\n.*?\n(\s*\))`).ReplaceAllString(r.Expr, "\n$1")
				return true
			}),
			mustFail: []string{
				`n-healthy-slot-is-quiet: expr: "count_over_time(ALERTS{alertname=\"OutboxReplicationSlotRetainedWALGrowing\"}[1h15m])", time: 1h15m`,
			},
		},
		{
			name: "A WAL growth ticket without its warm-up takes its slope from a new busy slot's first minutes and fires.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertSlotRetainedWALGrowth {
					return false
				}
				r.Expr = regexp.MustCompile(`\n\s*and\n[^\n]* offset [^\n]*\n`).ReplaceAllString(r.Expr, "\n")
				return true
			}),
			mustFail: []string{
				`s-new-busy-slot-is-quiet: expr: "count_over_time(ALERTS{alertname=\"OutboxReplicationSlotRetainedWALGrowing\", alertstate=\"firing\"}[1h15m])", time: 1h15m`,
			},
		},
		{
			name: "A stall alert that wants the last canary sent stall_intervals intervals after the last delivery needs one more missed canary than configured.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertStalled {
					return false
				}
				// orders' 22s (the threshold less one interval) becomes
				// 30s (3 intervals of 10s), what issue 15 found.
				mutated := regexp.MustCompile(`(last_sent_timestamp_seconds(?:\{[^}]*\})? - outbox_canary_last_received_timestamp_seconds(?:\{[^}]*\})? and [^\n]*\) > )22\n`).ReplaceAllString(r.Expr, "${1}30\n")
				changed := mutated != r.Expr
				r.Expr = mutated
				return changed
			}),
			mustFail: []string{
				`p-stall-at-exactly-n-missed: alertname: OutboxCanaryStalled, time: 1h45s`,
			},
		},
		{
			name: "A stall alert without its name for the stall makes a second stall the first one's alert, kept firing, never paged again.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if _, ok := r.Labels[alerts.LabelStalledSince]; !ok {
					return false
				}
				r.Labels = maps.Clone(r.Labels) // rewriteRules compares with the rule before
				delete(r.Labels, alerts.LabelStalledSince)
				return true
			}),
			mustFail: []string{
				`r-second-stall: alertname: OutboxCanaryStalled, time: 1h45s`,
			},
		},
		{
			name: "A stall alert named by its own last delivery, not its incident's start, pages every stall of a flapping relay anew.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertStalled {
					return false
				}
				r.Expr = regexp.MustCompile(`(?m)^(\s*)`+regexp.QuoteMeta(alerts.RecordStallIncidentStart)+`(?:\{[^}]*\})?\n\s*and on \([^)]*\) \(`).ReplaceAllString(r.Expr, "${1}(")
				return true
			}),
			mustFail: []string{
				`t-crash-loop: alertname: OutboxCanaryStalled, time: 1h1m45s`,
				`u-crash-loop-backoff: alertname: OutboxCanaryStalled, time: 1h4m`,
				`v-relay-every-minute: alertname: OutboxCanaryStalled, time: 1h1m45s`,
			},
		},
		{
			name: "A skew ticket without its for: tickets on one canary, and one with the pipeline's default owner misses the segment's.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertClockSkewSuspected {
					return false
				}
				r.For = ""
				r.Labels = maps.Clone(r.Labels)
				r.Labels["owner"] = "team-orders"
				return true
			}),
			mustFail: []string{
				`q-clock-skew: alertname: OutboxCanaryClockSkewSuspected, time: 24m45s`,
			},
		},
		{
			name: "Alerts without keep_firing_for resolve when the prober or a watcher stops seeing.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				changed := r.KeepFiringFor != ""
				r.KeepFiringFor = ""
				return changed
			}),
			mustFail: []string{
				`e-prober-gone: alertname: OutboxCanaryStalled, time: 1h11m15s`,
				`m-blind-spots: alertname: OutboxOldestUnpublishedTooOld, time: 13m`,
				`f-recovery: alertname: OutboxCanaryStalled, time: 3h19m`,
			},
		},
		{
			name: "A stall blamed on no segment pages the pipeline's default owner instead of the stage's.",
			rules: func(rf *alerts.RuleFile) int {
				n := 0
				for i, g := range rf.Groups {
					var kept []alerts.Rule
					for _, r := range g.Rules {
						if r.Alert == alerts.AlertStalled && r.Labels["segment"] != "end_to_end" {
							n++
							continue
						}
						if r.Alert == alerts.AlertStalled {
							r.Expr = regexp.MustCompile(`(?m)^unless on \(pipeline\) \(sum by .*\n`).ReplaceAllString(r.Expr, "")
						}
						kept = append(kept, r)
					}
					rf.Groups[i].Rules = kept
				}
				return n
			},
			mustFail: []string{
				`b-relay-stalls: alertname: OutboxCanaryStalled, time: 1h45s`,
			},
		},
		{
			name: "The binlog file page without its for: pages at every rotation of a healthy binlog.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert == alerts.AlertBinlogFileAtRisk {
					r.For = ""
				}
				return true
			}),
			mustFail: []string{
				`z1-healthy-binlog-is-quiet: expr: "count_over_time(ALERTS{alertname=~\"OutboxBinlog.*\", alertstate=\"firing\"}[2h])", time: 2h`,
				`z3-binlog-file-at-risk: alertname: OutboxBinlogUnreadFileAtRisk, time: 1h5m`,
			},
		},
		{
			name: "The binlog file page at twice the headroom pages early.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert == alerts.AlertBinlogFileAtRisk {
					r.Expr = strings.Replace(r.Expr, "< 3600", "< 7200", 1)
				}
				return true
			}),
			mustFail: []string{
				`z3-binlog-file-at-risk: alertname: OutboxBinlogUnreadFileAtRisk, time: 1h5m`,
			},
		},
		{
			name: "The binlog behind ticket without its floor tickets a connector before it is far behind.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert == alerts.AlertBinlogConnectorBehind {
					r.Expr = strings.Replace(r.Expr, "> 16777216", "> 0", 1)
				}
				return true
			}),
			mustFail: []string{
				`z2-binlog-connector-behind: alertname: OutboxBinlogConnectorFallingBehind, time: 1h16m`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := loadModel(t, testConfig)
			mutatedCfg, m := loadModel(t, testConfig)
			if tc.config != nil {
				tc.config(mutatedCfg)
				var err error
				if m, err = slo.FromConfig(mutatedCfg); err != nil {
					t.Fatal(err)
				}
			}
			if tc.model != nil {
				tc.model(m)
			}
			rf, err := alerts.Generate(m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rules != nil && tc.rules(rf) == 0 {
				t.Fatal("the mutation changed no rule: the test no longer tests what it says")
			}
			requireScenariosFailWith(t, bin, cfg, mutatedCfg, rf, generateRules(t, cfg), scenarioDir, tc.mustFail...)
		})
	}
}

// mayRead says whether selector vs may read rule r of group g's output,
// named name (r's record, or ALERTS and ALERTS_FOR_STATE for an alert):
// unless one of its matchers rules out a label the output is known to
// have: its name, its static labels (an alert's templated ones are not
// known).
func mayRead(vs *promql.VectorSelector, g alerts.Group, r alerts.Rule, name string) bool {
	ls := map[string]string{}
	for k, v := range r.Labels {
		if !strings.Contains(v, "{{") {
			ls[k] = v
		}
	}
	ls[labels.MetricName] = name
	if r.Alert != "" {
		ls[labels.AlertName] = r.Alert
	}
	for _, m := range vs.LabelMatchers {
		if v, ok := ls[m.Name]; ok && !m.Matches(v) {
			return false
		}
	}
	return true
}

// groupRule names a rule by its group and its record or alert: the rules
// of a name in a group are kept or dropped together, so that mutated
// rules and the rules as generated keep alike (requireScenariosFail).
type groupRule struct{ group, name string }

func nameOf(g alerts.Group, r alerts.Rule) groupRule { return groupRule{g.Name, r.Record + r.Alert} }

// rulesTheChecksRead are the rules that a check of files reads, directly
// or through the recordings and alerts it reads: the alerts an
// alert_rule_test names, and whatever a promql_expr_test's selectors may
// match (an alert through ALERTS or ALERTS_FOR_STATE). A rule that no
// check reads cannot change a check's result.
func rulesTheChecksRead(t *testing.T, rf *alerts.RuleFile, files []string) map[groupRule]bool {
	t.Helper()
	alertnames := map[string]bool{}
	var reads []*promql.VectorSelector
	for _, f := range files {
		for _, tc := range readScenario(t, f).Tests {
			for _, a := range tc.Alerts {
				alertnames[a.Alertname] = true
			}
			for _, e := range tc.PromQL {
				reads = append(reads, selectorsOf(t, e.Expr)...)
			}
		}
	}
	read := func(g alerts.Group, r alerts.Rule) bool {
		if r.Alert != "" && alertnames[r.Alert] {
			return true
		}
		names := []string{r.Record}
		if r.Alert != "" {
			names = []string{"ALERTS", "ALERTS_FOR_STATE"}
		}
		return slices.ContainsFunc(reads, func(vs *promql.VectorSelector) bool {
			return slices.ContainsFunc(names, func(name string) bool { return mayRead(vs, g, r, name) })
		})
	}
	kept := map[groupRule]bool{}
	followed := map[[2]int]bool{} // the rules whose selectors are in reads
	for changed := true; changed; {
		changed = false
		for i, g := range rf.Groups {
			for j, r := range g.Rules {
				if followed[[2]int{i, j}] || !kept[nameOf(g, r)] && !read(g, r) {
					continue
				}
				kept[nameOf(g, r)], followed[[2]int{i, j}], changed = true, true, true
				reads = append(reads, selectorsOf(t, r.Expr)...)
			}
		}
	}
	return kept
}

// keepRulesNamed drops the rules not named in keep. Where it would drop
// every rule (a mutation dropped the alert that a check names, and the
// rules as generated were not asked), it drops none: a rule file holds
// a group at least, and more rules are slower, not wrong.
func keepRulesNamed(rf *alerts.RuleFile, keep map[groupRule]bool) {
	kept := make([][]bool, len(rf.Groups))
	for i, g := range rf.Groups {
		kept[i] = make([]bool, len(g.Rules))
		for j, r := range g.Rules {
			kept[i][j] = keep[nameOf(g, r)]
		}
	}
	if groups := keptGroups(rf.Groups, kept); len(groups) > 0 {
		rf.Groups = groups
	}
}

// keptGroups is groups less the rules kept does not mark, and less the
// groups left empty.
func keptGroups(groups []alerts.Group, kept [][]bool) []alerts.Group {
	var out []alerts.Group
	for i, g := range groups {
		g2 := g
		g2.Rules = nil
		for j, r := range g.Rules {
			if kept[i][j] {
				g2.Rules = append(g2.Rules, r)
			}
		}
		if len(g2.Rules) > 0 {
			out = append(out, g2)
		}
	}
	return out
}

// writeScenarioRules writes rf into a new directory, as writeRuleFile
// does, and returns it.
func writeScenarioRules(t *testing.T, cfg *config.Config, rf *alerts.RuleFile) string {
	t.Helper()
	dir := t.TempDir()
	writeRuleFile(t, dir, cfg, rf)
	return dir
}

// firstLines keeps a long promtool report readable in the test log.
func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls[n] = "..."
	}
	return strings.Join(ls, "\n")
}

// dropRules removes the rules drop selects and returns how many it did.
func dropRules(drop func(r alerts.Rule) bool) func(rf *alerts.RuleFile) int {
	return func(rf *alerts.RuleFile) int {
		n := 0
		for i, g := range rf.Groups {
			rf.Groups[i].Rules = slices.DeleteFunc(slices.Clone(g.Rules), drop)
			n += len(g.Rules) - len(rf.Groups[i].Rules)
		}
		return n
	}
}

// rewriteRules applies a change to every rule and counts the rules it
// changed.
func rewriteRules(change func(r *alerts.Rule) bool) func(rf *alerts.RuleFile) int {
	return func(rf *alerts.RuleFile) int {
		n := 0
		for i := range rf.Groups {
			for j := range rf.Groups[i].Rules {
				before := rf.Groups[i].Rules[j]
				if change(&rf.Groups[i].Rules[j]) && !reflect.DeepEqual(before, rf.Groups[i].Rules[j]) {
					n++
				}
			}
		}
		return n
	}
}

// TestSlotScenarioNeedsTheSlotSelector runs the slot scenario on rules
// generated as if watch.slot were unset: the leftover slot then pages for
// the pipeline, and the scenario must notice.
func TestSlotScenarioNeedsTheSlotSelector(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	// Without watch.slot the objective series name no slot, and the
	// rules take every slot of the pipeline.
	cfg, _ := loadModel(t, testConfig)
	for i := range cfg.Pipelines {
		cfg.Pipelines[i].Watch.Slot = ""
	}
	rf := generateRules(t, cfg)
	sc := filepath.Join(scenarioDir, "h-slot-of-another-pipeline.yml")
	out, err := runScenario(t, bin, writeScenarioRules(t, cfg, rf), sc)
	if err == nil {
		t.Fatalf("the slot scenario passed with rules that ignore watch.slot; it must fail:\n%s", out)
	}
	if !strings.Contains(out, "FAILED") {
		t.Errorf("the slot scenario did not fail on an expectation (%v):\n%s", err, out)
	}
}

// TestOneBadCanaryCountsAsOne runs testdata/scenarios-40s on rules
// generated for canaries every 40s, where the 1h page needs more than
// 1.296 bad canaries: one bad canary between a fresh Prometheus's first
// two scrapes must not page. Counted with increase(), which extrapolates
// it to 1.5, it does, and the test says so.
func TestOneBadCanaryCountsAsOne(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	scenario := filepath.Join("testdata", "scenarios-40s", "one-bad-canary-counts-as-one.yml")
	for _, tc := range []struct {
		name        string
		extrapolate bool
	}{
		{"Counted as Prometheus saw it, one bad canary is one and does not page.", false},
		{"Counted with increase(), one bad canary is 1.5 and pages: the scenario fails.", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := loadModel(t, testConfig)
			for i := range cfg.Pipelines {
				cfg.Pipelines[i].Canary.Schedule = "@every 40s"
			}
			m, err := slo.FromConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rf, err := alerts.Generate(m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.extrapolate {
				n := rewriteRules(func(r *alerts.Rule) bool {
					if !strings.HasPrefix(r.Record, strings.TrimSuffix(alerts.RecordBadEventsSeen(time.Minute), "1m")) {
						return false
					}
					r.Expr = regexp.MustCompile(`(outbox_canary_sli_events_total\{[^}]*\}) - min_over_time\(outbox_canary_sli_events_total\{[^}]*\}(\[\w+\])\)`).
						ReplaceAllString(r.Expr, "increase(${1}${2})")
					return true
				})(rf)
				if n == 0 {
					t.Fatal("the mutation changed no rule: the test no longer tests what it says")
				}
			}
			dir := t.TempDir()
			writeRuleFile(t, dir, cfg, rf)
			out, err := runScenario(t, bin, dir, scenario)
			t.Logf("promtool test rules:\n%s", out)
			switch {
			case !tc.extrapolate && err != nil:
				t.Errorf("one bad canary pages a fresh Prometheus: %v", err)
			case tc.extrapolate && (err == nil || !strings.Contains(out, "FAILED")):
				t.Errorf("with increase() the scenario passed (%v): it cannot tell one bad canary from 1.5", err)
			}
		})
	}
}

// replicaScenarioDir holds the promtool scenarios of two prober replicas
// measuring the same pipelines.
const replicaScenarioDir = "testdata/replicas"

// replicaModel is the test configuration with alerting.replicas: 2.
func replicaModel(t *testing.T) (*config.Config, *slo.Model) {
	t.Helper()
	cfg, _ := loadModel(t, testConfig)
	cfg.Alerting.Replicas = 2
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, m
}

// TestRedundantProbersWithPromtool runs testdata/replicas on rules for
// two replicas: both healthy, no alert; one gone, no page, an SLI without
// a hole and the redundancy ticket; the relay stalled under both, one
// stall page; one replica's consumer stuck, no page; both gone, the dead
// man.
func TestRedundantProbersWithPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	cfg, m := replicaModel(t)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(replicaScenarioDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", replicaScenarioDir, err)
	}
	for _, sc := range files {
		t.Run(strings.TrimSuffix(filepath.Base(sc), ".yml"), func(t *testing.T) {
			t.Parallel()
			out, err := runScenario(t, bin, writeScenarioRules(t, cfg, rf), sc)
			t.Logf("promtool test rules %s:\n%s", filepath.Base(sc), out)
			if err != nil {
				t.Errorf("scenario %s failed: %v", filepath.Base(sc), err)
			}
		})
	}
}

// TestRedundantProberScenariosCatchPerReplicaRules mutates the rules back
// towards one prober's and requires testdata/replicas to fail where it
// should: the scenarios would not notice rules that read one replica
// alone otherwise.
func TestRedundantProberScenariosCatchPerReplicaRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, tc := range []struct {
		name  string
		rules func(rf *alerts.RuleFile) int
		// fails is what promtool's report must name.
		fails string
	}{
		{
			name: "A stall seen by any replica, not every one, pages the relay's owner for one replica's stuck consumer.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertStalled && r.Record != alerts.RecordStall {
					return false
				}
				r.Expr = strings.ReplaceAll(r.Expr, "min by (pipeline) (", "max by (pipeline) (")
				return true
			}),
			fails: "alertname: OutboxCanaryStalled, time: 1h15m",
		},
		{
			name: "A stall recorded per replica pages once per replica, each with its own stalled_since.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Record != alerts.RecordStall {
					return false
				}
				r.Expr = regexp.MustCompile(`max by \(pipeline\) \((outbox_canary_last_received_timestamp_seconds(?:\{[^}]*\})?)\)`).ReplaceAllString(r.Expr, "$1")
				return true
			}),
			fails: "alertname: OutboxCanaryStalled, time: 1h45s",
		},
		{
			name: "Burn counts summed over replicas page for one replica's stuck consumer.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if !strings.HasPrefix(r.Record, strings.TrimSuffix(alerts.RecordBadEventsSeen(time.Minute), "1m")) {
					return false
				}
				by := regexp.MustCompile(`min by \(([^)]*)\)`).FindStringSubmatch(r.Expr)[1]
				seen := regexp.MustCompile(`\S*outbox_canary_sli_events_total[^\n]* - min_over_time\([^\n]*\]\)`).FindString(r.Expr)
				r.Expr = "sum by (" + by + ") (" + seen + ")" + r.Expr[strings.Index(r.Expr, "\nand on"):]
				return true
			}),
			fails: "alertname: OutboxCanaryErrorBudgetBurn, time: 1h5m",
		},
		{
			name: "A redundancy ticket without its for: tickets a replica's restart.",
			rules: rewriteRules(func(r *alerts.Rule) bool {
				if r.Alert != alerts.AlertRedundancyLost {
					return false
				}
				r.For = ""
				return true
			}),
			fails: "alertname: OutboxCanaryRedundancyLost, time: 31m",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, rf, unmutated := mutatedReplicaRules(t, tc.rules)
			requireScenariosFail(t, bin, cfg, rf, unmutated, replicaScenarioDir, "two-replicas: "+tc.fails)
		})
	}
}

// mutatedReplicaRules generates the rules for two replicas and mutates
// them, returning them mutated and as generated; a mutation that changes
// no rule fails the test.
func mutatedReplicaRules(t *testing.T, mutate func(rf *alerts.RuleFile) int) (cfg *config.Config, mutated, unmutated *alerts.RuleFile) {
	t.Helper()
	cfg, _ = replicaModel(t)
	mutated, unmutated = generateRules(t, cfg), generateRules(t, cfg)
	if mutate(mutated) == 0 {
		t.Fatal("the mutation changed no rule: the test no longer tests what it says")
	}
	return cfg, mutated, unmutated
}

// promtoolCheck is a check of a scenario as promtool's report names it
// when it fails: "alertname: NAME, time: T" or `expr: "EXPR", time: T`.
var promtoolCheck = regexp.MustCompile(`^(?:alertname: (\w+)|expr: ("(?:[^"\\]|\\.)*")), time: (\w+)$`)

// requireScenariosFail runs scenarios of dir on mutated rules and
// requires each to fail the check it is named with. Each of fails is
// "SCENARIO: CHECK": SCENARIO a file of dir less its .yml, CHECK as
// promtoolCheck. Each scenario runs cut down to the tests that hold the
// check, up to its time (checkedUpTo): nothing else can fail it, and the
// whole of a scenario of several hours-long tests costs a minute of CPU
// for each mutation.
//
// Each cut-down scenario runs on the unmutated rules too, cut down the
// same way, and must pass there: the mutation, not the cutting, is what
// fails it.
func requireScenariosFail(t *testing.T, bin string, cfg *config.Config, mutated, unmutated *alerts.RuleFile, dir string, fails ...string) {
	t.Helper()
	requireScenariosFailWith(t, bin, cfg, cfg, mutated, unmutated, dir, fails...)
}

// requireScenariosFailWith is requireScenariosFail where the mutated
// rules are of another configuration, whose objective series the
// scenarios get with them.
func requireScenariosFailWith(t *testing.T, bin string, cfg, mutatedCfg *config.Config, mutated, unmutated *alerts.RuleFile, dir string, fails ...string) {
	t.Helper()
	var files []string
	checks := map[string]string{}
	for _, f := range fails {
		name, check, ok := strings.Cut(f, ": ")
		if !ok {
			t.Fatalf("%q: want SCENARIO: CHECK", f)
		}
		if _, dup := checks[name+".yml"]; dup {
			t.Fatalf("%s: one check per scenario", name)
		}
		checks[name+".yml"] = check
		files = append(files, checkedUpTo(t, filepath.Join(dir, name+".yml"), check))
	}
	// Both rule sets keep the rules that either's checks read, so that
	// the two runs differ by the mutation alone.
	keep := rulesTheChecksRead(t, unmutated, files)
	maps.Copy(keep, rulesTheChecksRead(t, mutated, files))
	cutDown := func(rf *alerts.RuleFile, cfg *config.Config) string {
		trimmed := alerts.RuleFile{Groups: slices.Clone(rf.Groups)}
		keepRulesNamed(&trimmed, keep)
		return writeScenarioRules(t, cfg, &trimmed)
	}
	for file, report := range runScenarios(t, bin, cutDown(unmutated, cfg), files...) {
		if strings.Contains(report, "FAILED") {
			t.Fatalf("%s, cut down to %s, fails on the unmutated rules too:\n%s", file, checks[file], firstLines(report, 30))
		}
	}
	reports := runScenarios(t, bin, cutDown(mutated, mutatedCfg), files...)
	for file, check := range checks {
		report := reports[file]
		// The comma: time 1h must not be found in time 1h15m.
		if !strings.Contains(report, "FAILED") || !strings.Contains(report, check+",") {
			t.Errorf("%s did not fail %s with mutated rules:\n%s", file, check, firstLines(report, 30))
			continue
		}
		t.Logf("%s fails, as it must:\n%s", file, firstLines(report, 12))
	}
}

// checkedUpTo writes a copy of scenario, under its name in a new
// directory, that keeps the tests holding check (promtoolCheck) and of
// them that check alone, and returns its path. promtool evaluates a test
// up to its last check.
func checkedUpTo(t *testing.T, scenario, check string) string {
	t.Helper()
	m := promtoolCheck.FindStringSubmatch(check)
	if m == nil {
		t.Fatalf("%q is not a check as promtool names one", check)
	}
	alertname, expr := m[1], ""
	if m[2] != "" {
		var err error
		if expr, err = strconv.Unquote(m[2]); err != nil {
			t.Fatalf("%q: %v", check, err)
		}
	}
	want, err := model.ParseDuration(m[3])
	if err != nil {
		t.Fatal(err)
	}
	if want.String() != m[3] {
		t.Fatalf("%q: write the time as promtool's report does, %s", check, want)
	}
	data, err := os.ReadFile(scenario)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	// Tests left out may hold the anchors of the kept ones' aliases.
	var resolve func(n *yaml.Node) *yaml.Node
	resolve = func(n *yaml.Node) *yaml.Node {
		if n.Kind == yaml.AliasNode {
			return resolve(n.Alias)
		}
		c := *n
		c.Anchor = ""
		c.Content = nil
		for _, k := range n.Content {
			c.Content = append(c.Content, resolve(k))
		}
		return &c
	}
	root := resolve(doc.Content[0])
	value := func(mapping *yaml.Node, key string) *yaml.Node {
		for i := 0; i+1 < len(mapping.Content); i += 2 {
			if mapping.Content[i].Value == key {
				return mapping.Content[i+1]
			}
		}
		return nil
	}
	at := func(c *yaml.Node) time.Duration {
		v := value(c, "eval_time")
		if v == nil {
			return 0 // as promtool reads it
		}
		d, err := model.ParseDuration(v.Value)
		if err != nil {
			t.Fatalf("%s: %v", scenario, err)
		}
		return time.Duration(d)
	}
	is := func(c *yaml.Node, key, want string) bool {
		v := value(c, key)
		return v != nil && v.Value == want
	}
	tests := value(root, "tests")
	if tests == nil {
		t.Fatalf("%s: no tests", scenario)
	}
	var kept []*yaml.Node
	for _, tc := range tests.Content {
		holds := false
		for _, kind := range []string{"alert_rule_test", "promql_expr_test"} {
			checks := value(tc, kind)
			if checks == nil {
				continue
			}
			checks.Content = slices.DeleteFunc(checks.Content, func(c *yaml.Node) bool {
				return at(c) != time.Duration(want) || !(kind == "alert_rule_test" && alertname != "" && is(c, "alertname", alertname) ||
					kind == "promql_expr_test" && expr != "" && is(c, "expr", expr))
			})
			holds = holds || len(checks.Content) > 0
		}
		if holds {
			kept = append(kept, tc)
		}
	}
	if len(kept) == 0 {
		t.Fatalf("%s holds %s in no test", scenario, check)
	}
	tests.Content = kept
	out, err := yaml.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(scenario))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestShardScenariosCatchAnUnwatchedShard mutates the page for pipelines
// no prober measures and requires testdata/replicas/shards.yml to fail
// where it should: without the page (or without the pipelines'
// recordings it counts) a dead shard is silent; without its PromQL
// suppression a total outage pages twice; suppressed only over the dead
// man's window, an outage that spreads over minutes pages twice.
func TestShardScenariosCatchAnUnwatchedShard(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	suppression := regexp.MustCompile(`(?m)^unless on \(job\) absent_over_time\(outbox_canary_build_info\{[^}]*\}\[1m\]\)$`)
	unmeasured := func(change func(r *alerts.Rule)) func(rf *alerts.RuleFile) int {
		return rewriteRules(func(r *alerts.Rule) bool {
			if r.Alert == alerts.AlertPipelinesUnmeasured {
				change(r)
			}
			return true
		})
	}
	for _, tc := range []struct {
		name  string
		rules func(rf *alerts.RuleFile) int
		// fails is what promtool's report must name.
		fails string
	}{
		{
			name:  "Without the page, a shard whose replicas are all gone pages no one.",
			rules: dropRules(func(r alerts.Rule) bool { return r.Alert == alerts.AlertPipelinesUnmeasured }),
			fails: "alertname: OutboxCanaryPipelinesUnmeasured, time: 46m30s",
		},
		{
			name:  "Without the pipelines' recordings of their absence, the page has nothing to count.",
			rules: dropRules(func(r alerts.Rule) bool { return r.Record == alerts.RecordUnmeasured }),
			fails: "alertname: OutboxCanaryPipelinesUnmeasured, time: 46m30s",
		},
		{
			name:  "Without the suppression while the job is absent, a total outage pages twice: the dead man and every pipeline unmeasured.",
			rules: unmeasured(func(r *alerts.Rule) { r.Expr = suppression.ReplaceAllString(r.Expr, "") }),
			fails: "alertname: OutboxCanaryPipelinesUnmeasured, time: 37m",
		},
		{
			name:  "Suppressed only once the job has been absent for the dead man's 5m, an outage that takes three minutes to spread pages the first shard too.",
			rules: unmeasured(func(r *alerts.Rule) { r.Expr = strings.Replace(r.Expr, "[1m])", "[5m])", 1) }),
			fails: "alertname: OutboxCanaryPipelinesUnmeasured, time: 36m45s",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, rf, unmutated := mutatedReplicaRules(t, tc.rules)
			requireScenariosFail(t, bin, cfg, rf, unmutated, replicaScenarioDir, "shards: "+tc.fails)
		})
	}
}

// TestAKafkaOutagePagesOncePerClusterWithPromtool runs testdata/kafka: a
// broker that several pipelines share is one page to its owner when the
// prober loses it, not one per pipeline.
func TestAKafkaOutagePagesOncePerClusterWithPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	cfg, m := loadModel(t, filepath.Join("testdata", "kafka", "config.yml"))
	dir := t.TempDir()
	writeRules(t, dir, cfg, m)
	sc := filepath.Join("testdata", "kafka", "one-page-per-cluster.yml")
	out, err := runScenario(t, bin, dir, sc)
	t.Logf("promtool test rules %s:\n%s", filepath.Base(sc), out)
	if err != nil {
		t.Errorf("scenario failed: %v", err)
	}
}

// TestScenarioCopiesNameTheirRuleFilesGroupsInOrder: without
// group_eval_order promtool draws the groups' order anew each run
// (inGroupOrder), so every copy the harness runs must name them all, in
// the files' order, and keep an order a scenario chose itself.
func TestScenarioCopiesNameTheirRuleFilesGroupsInOrder(t *testing.T) {
	t.Setenv("PROMTOOL_GROUP_ORDER", "") // the files' order, not the by-hand reverse
	cfg, m := loadModel(t, testConfig)
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRuleFile(t, dir, cfg, rf)
	var want []string
	for _, g := range rf.Groups {
		want = append(want, g.Name)
	}
	order := func(data []byte) []string {
		t.Helper()
		var sc struct {
			GroupEvalOrder []string `yaml:"group_eval_order"`
		}
		if err := yaml.Unmarshal(data, &sc); err != nil {
			t.Fatal(err)
		}
		return sc.GroupEvalOrder
	}
	sc := filepath.Join(scenarioDir, "b-relay-stalls.yml")
	data, err := os.ReadFile(sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := order(inGroupOrder(t, dir, sc, data)); !slices.Equal(got, want) {
		t.Errorf("group_eval_order of the copy:\n got %v\nwant %v", got, want)
	}
	chosen := append([]byte("group_eval_order: [a, b]\n"), data...)
	if got := order(inGroupOrder(t, dir, sc, chosen)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("a scenario's own group_eval_order became %v", got)
	}
}
