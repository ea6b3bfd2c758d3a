package alerts_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/slo"
)

// scopeScenarioDir holds the promtool scenarios of several scopes in one
// Prometheus: each loads one rule file per environment, env-prod.rules.yml
// and env-staging.rules.yml, generated from testdata/test-config.yml with
// alerting.selector {env: prod} and {env: staging}.
const scopeScenarioDir = "testdata/scopes"

var scopeEnvironments = []string{"prod", "staging"}

// writeScopedRules writes the labels-only rules of each environment into
// dir;
// scoped false leaves the selector out, as before scopes existed.
func writeScopedRules(t *testing.T, dir string, scoped bool) {
	t.Helper()
	for _, env := range scopeEnvironments {
		cfg, _ := loadModel(t, testConfig)
		if scoped {
			cfg.Alerting.Selector = map[string]string{"env": env}
		}
		m, err := slo.FromConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		envDir := filepath.Join(dir, env)
		if err := os.MkdirAll(envDir, 0o755); err != nil {
			t.Fatal(err)
		}
		rf, err := alerts.Generate(m)
		if err != nil {
			t.Fatal(err)
		}
		paths := writeRuleFile(t, envDir, cfg, rf)
		writeObjectives(t, dir, cfg)
		data, err := os.ReadFile(paths[1])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "env-"+env+".rules.yml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func scopeScenarios(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(scopeScenarioDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", scopeScenarioDir, err)
	}
	return files
}

// TestScopedRulesKeepEnvironmentsApartWithPromtool runs the scope
// scenarios against the scoped rules of two environments that share
// pipeline names, and requires them to fail against unscoped ones: the
// scenarios would not notice scopes that merge otherwise.
func TestScopedRulesKeepEnvironmentsApartWithPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, tc := range []struct {
		name     string
		scoped   bool
		wantPass bool
	}{
		{"Rules scoped to each environment keep its stalls, pages and budget its own.", true, true},
		{"Unscoped rules of two environments merge them, and the scenarios catch it.", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeScopedRules(t, dir, tc.scoped)
			for _, sc := range scopeScenarios(t) {
				out, err := runScenario(t, bin, dir, sc)
				t.Logf("promtool test rules %s:\n%s", filepath.Base(sc), out)
				if tc.wantPass && err != nil {
					t.Errorf("scenario %s failed: %v", filepath.Base(sc), err)
				}
				if !tc.wantPass && err == nil {
					t.Errorf("scenario %s passed against unscoped rules", filepath.Base(sc))
				}
			}
		})
	}
}

// TestScopeIsInEveryRule checks the scoped rules of the test
// configuration: every selector matches the scope, every rule carries its
// labels, and no aggregation or join drops them.
func TestScopeIsInEveryRule(t *testing.T) {
	cfg, _ := loadModel(t, testConfig)
	cfg.Alerting.Selector = map[string]string{"env": "prod", "cluster": "eu-1"}
	cfg.Alerting.Replicas = 2 // and so the redundancy ticket
	rf := generateRules(t, cfg)
	selectorRE := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\}`)
	// An aggregation without by, a by or on that starts with pipeline,
	// the SLO's identity or the job and ends without the scope, or a join
	// on ().
	unscopedRE := regexp.MustCompile(`\b(sum|max|min|count)\(|\b(by|on) \(\)|\b(by|on) \((pipeline|sloth_id|job)[^)]*[a-z_]\)`)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := g.Name + "/" + r.Alert + r.Record
			n++
			for _, sel := range selectorRE.FindAllString(r.Expr, -1) {
				if !strings.Contains(sel, `cluster="eu-1", env="prod"`) {
					t.Errorf("%s: selector %s lacks the scope", name, sel)
				}
			}
			for _, clause := range unscopedRE.FindAllString(r.Expr, -1) {
				if !strings.HasSuffix(clause, "cluster, env)") {
					t.Errorf("%s: %q drops the scope", name, clause)
				}
			}
			if r.Labels["env"] != "prod" || r.Labels["cluster"] != "eu-1" {
				t.Errorf("%s: labels %v lack the scope", name, r.Labels)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules generated")
	}
}

// TestScopeKeepsAlertmanagerGroupsAndInhibitionsApart: in an Alertmanager
// that several scopes share, one scope's alerts are grouped apart from
// another's and never inhibit them.
func TestScopeKeepsAlertmanagerGroupsAndInhibitionsApart(t *testing.T) {
	cfg, _ := loadModel(t, testConfig)
	cfg.Alerting.Selector = map[string]string{"env": "prod"}
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := alerts.AlertmanagerConfig(m, alerts.AlertmanagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var am struct {
		Route struct {
			Routes []struct {
				GroupBy []string `yaml:"group_by"`
			} `yaml:"routes"`
		} `yaml:"route"`
		InhibitRules []struct {
			Equal []string `yaml:"equal"`
		} `yaml:"inhibit_rules"`
	}
	if err := yaml.Unmarshal(data, &am); err != nil {
		t.Fatal(err)
	}
	if len(am.Route.Routes) == 0 || !slices.Contains(am.Route.Routes[0].GroupBy, "env") {
		t.Errorf("the route does not group by the scope's env label: %+v", am.Route.Routes)
	}
	if len(am.InhibitRules) == 0 {
		t.Fatal("no inhibit rules")
	}
	for i, r := range am.InhibitRules {
		if !slices.Contains(r.Equal, "env") {
			t.Errorf("inhibit rule %d: equal %v lacks the scope's env label", i, r.Equal)
		}
	}
}
