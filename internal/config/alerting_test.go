package config

import (
	"strings"
	"testing"
)

const alertingBase = `
instance_id: test
signing_key: {env: KEY}
pipelines:
  - name: orders
    database: {dsn: {env: DSN}}
    kafka: {brokers: ["k:9092"]}
    budgets: {end_to_end: 2s}
`

func TestAlertingValidation(t *testing.T) {
	for _, tc := range []struct {
		name, alerting, wantErr string
	}{
		{"burn windows with exact decimal shares are accepted", "alerting:\n  burn_windows:\n    - {severity: page, budget_percent: 0.5, long_window: 1h, short_window: 5m}\n", ""},
		{"a burn window with an unknown severity is rejected", "alerting:\n  burn_windows:\n    - {severity: email, budget_percent: 2, long_window: 1h, short_window: 5m}\n", `line 11: alerting.burn_windows[0].severity: "email" must be "page" or "ticket"`},
		{"a short window longer than the long one is rejected", "alerting:\n  burn_windows:\n    - {severity: page, budget_percent: 2, long_window: 5m, short_window: 1h}\n", "line 11: alerting.burn_windows[0].short_window: 1h must be shorter than long_window 5m"},
		{"a budget share over 100% is rejected", "alerting:\n  burn_windows:\n    - {severity: page, budget_percent: 120, long_window: 1h, short_window: 5m}\n", "line 11: alerting.burn_windows[0].budget_percent: 120 must be more than 0 and at most 100"},
		{"a budget share in exponent notation is rejected", "alerting:\n  burn_windows:\n    - {severity: page, budget_percent: 2e0, long_window: 1h, short_window: 5m}\n", `line 11: alerting.burn_windows[0].budget_percent: "2e0" is not a decimal number`},
		{"a label that would override routing is rejected", "alerting:\n  labels: {owner: x}\n", "line 10: alerting.labels.owner: reserved"},
		{"a sloth_ label is rejected", "alerting:\n  labels: {sloth_slo: x}\n", "line 10: alerting.labels.sloth_slo: reserved"},
		{"a scope on a label the generator sets is rejected", "alerting:\n  selector:\n    env: prod\n    pipeline: orders\n", "line 12: alerting.selector.pipeline: reserved"},
		{"a scope on the instance label is rejected", "alerting:\n  selector: {instance: a}\n", "line 10: alerting.selector.instance: reserved"},
		{"a scope label that is not a label name is rejected", "alerting:\n  selector: {1env: prod}\n", "line 10: alerting.selector.1env: not a Prometheus label name"},
		{"a scope label with an empty value is rejected", "alerting:\n  selector:\n    env: \"\"\n", "line 11: alerting.selector.env: empty: a scope label needs a value"},
		{"a scope label alerting.labels also sets is rejected", "alerting:\n  labels: {env: prod}\n  selector: {env: prod}\n", "line 11: alerting.selector.env: also set by alerting.labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load([]byte(alertingBase + tc.alerting))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got := cfg.Alerting.BurnWindows[0].BudgetPercent.String(); got != "0.5" {
					t.Errorf("budget_percent = %s, want 0.5 as written", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestAlertingDefaults(t *testing.T) {
	cfg, err := Load([]byte(alertingBase))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Alerting
	if a.ProberJob != DefaultProberJob || a.StallIntervals != 2 || a.ProberAbsentFor.String() != "5m" || a.WALGrowthFor.String() != "30m" {
		t.Errorf("defaults: %+v", a)
	}
}
