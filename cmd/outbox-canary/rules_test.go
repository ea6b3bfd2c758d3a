package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRulesCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		golden  string // file the output must equal
		wantErr string
	}{
		{
			name:   "the plain format written to --out equals the checked-in example",
			args:   []string{"--format", "rules"},
			golden: "../../examples/rules/outbox-canary.rules.yml",
		},
		{
			name:   "the prometheusrule format equals the checked-in example",
			args:   []string{"--format", "prometheusrule"},
			golden: "../../examples/rules/outbox-canary.prometheusrule.yml",
		},
		{
			name:   "the alertmanager format equals the checked-in example",
			args:   []string{"--format", "alertmanager"},
			golden: "../../examples/rules/outbox-canary.alertmanager.yml",
		},
		{
			name:    "an unknown format is an error naming the formats",
			args:    []string{"--format", "json"},
			wantErr: "enum value must be one of rules,prometheusrule,alertmanager, got 'json'",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sub", "rules.yml")
			args := append([]string{"rules", "--config.file", "../../examples/outbox-canary.yml", "--out", out}, tc.args...)
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), args, &stdout, &stderr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("rules: %v\n%s", err, stderr.String())
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(tc.golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s: run make generate", tc.golden)
			}
			if stderr.Len() != 0 {
				t.Errorf("the example config is sized for its objective, yet rules warned:\n%s", stderr.String())
			}
		})
	}
}

func TestRulesCommandRequiresConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"rules"}, &stdout, &stderr)
	if exitCode(err) != 2 || !strings.Contains(stderr.String(), "required flag(s) '--config.file' not provided") {
		t.Fatalf("error = %v (stderr %q), want a usage error naming --config.file", err, stderr.String())
	}
}

func TestRulesCommandWarnsWhenCanariesAreTooRareForTheObjective(t *testing.T) {
	// One canary a minute at 99.9%: one bad canary in the hour is 1.67%,
	// over the 14.4x page threshold of 1.44%, on a full window and (by
	// the minimum count) on a fresh Prometheus alike.
	args := []string{"rules", "--config.file", rareCanariesConfig(t), "--out", filepath.Join(t.TempDir(), "r.yml")}
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("rules: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "warning: pipeline \"orders\"") {
		t.Errorf("stderr lacks the canary rate warning for orders:\n%s", stderr.String())
	}
	// The default, a canary every 10s, is judged well on every window.
	args = []string{"rules", "--config.file", "../../internal/config/testdata/valid-minimal.yml", "--out", filepath.Join(t.TempDir(), "r.yml")}
	stderr.Reset()
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("rules: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "warning:") {
		t.Errorf("a canary every 10s at 99.9%% is warned about:\n%s", stderr.String())
	}
}
