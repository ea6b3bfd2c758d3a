package slo

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// loadConfig loads a small valid configuration; extra is appended to the
// pipeline (indented to its level) to vary it.
func loadConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(testConfigYAML + extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const testConfigYAML = `
instance_id: test
signing_key: {env: KEY}
pipelines:
  - name: orders
    database: {dsn: {env: DSN}}
    kafka: {brokers: ["k:9092"]}
    budgets: {end_to_end: 2s, commit_to_publish: 1s}
    owners: {default: team-orders, commit_to_publish: team-relay}
`

func TestFromConfig(t *testing.T) {
	cfg := loadConfig(t, "    canary: {schedule: \"@every 30s\"}\n    slo: {objective: 99.5, window: 28d}\n")
	m, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := m.Pipelines[0]
	if p.CanaryInterval != 30*time.Second {
		t.Errorf("CanaryInterval = %s, want 30s", p.CanaryInterval)
	}
	if got := strings.Join(p.RelaySegments(), ","); got != "commit_to_publish" {
		t.Errorf("RelaySegments = %s", got)
	}
	var ids []string
	for _, s := range p.SLOs {
		ids = append(ids, s.ID+"@"+s.Owner)
	}
	if got, want := strings.Join(ids, " "), "orders-commit_to_publish@team-relay orders-end_to_end@team-orders"; got != want {
		t.Errorf("SLOs = %s, want %s", got, want)
	}
	s := p.SLOs[0]
	var thresholds []string
	for _, a := range s.Burn {
		thresholds = append(thresholds, a.Severity+" "+a.ThresholdExpr(s))
	}
	want := "page (13.44 * (1 - 0.995))|page (5.6 * (1 - 0.995))|ticket (2.8 * (1 - 0.995))|ticket ((14 / 15) * (1 - 0.995))"
	if got := strings.Join(thresholds, "|"); got != want {
		t.Errorf("burn thresholds for a 28d window:\n got %s\nwant %s", got, want)
	}
}

func TestFromConfigUsesConfiguredBurnWindows(t *testing.T) {
	cfg := loadConfig(t, `alerting:
  burn_windows:
    - {severity: page, budget_percent: 1, long_window: 30m, short_window: 3m}
`)
	m, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := m.Pipelines[0].SLOs[0]
	if len(s.Burn) != 1 {
		t.Fatalf("got %d burn alerts, want the 1 configured", len(s.Burn))
	}
	if got, want := s.Burn[0].ThresholdExpr(s), "(14.4 * (1 - 0.999))"; got != want {
		t.Errorf("1%% of 30d in 30m: threshold %s, want %s", got, want)
	}
}

func TestFromConfigRejectsAnAlertWindowLongerThanTheSLOWindow(t *testing.T) {
	cfg := loadConfig(t, "    slo: {window: 2d}\n")
	_, err := FromConfig(cfg)
	if err == nil || !strings.Contains(err.Error(), `"orders": slo.window`) || !strings.Contains(err.Error(), "3d/6h") {
		t.Fatalf("error = %v, want one naming the pipeline, slo.window and the 3d/6h window", err)
	}
}

// The window is wrong in the file, so the error points at its line as
// every config problem does.
func TestAnSLOWindowShorterThanTheBurnWindowsIsRejectedWithItsLine(t *testing.T) {
	cfg := loadConfig(t, "    slo:\n      window: 1ms\n")
	_, err := FromConfig(cfg)
	want := `line 11: pipelines[0] "orders": slo.window: burn window 0 (1h/5m): the long window must be shorter than the SLO window 1ms; shorten it or lengthen slo.window`
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n  got  %v\n  want %s", err, want)
	}
	var problem config.Problem
	if !errors.As(err, &problem) || problem.Line != 11 {
		t.Fatalf("error %v is not a config.Problem with line 11", err)
	}
}
