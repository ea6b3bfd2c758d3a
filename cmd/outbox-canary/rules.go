package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/slo"
)

const rulesDescription = `
Generate the Prometheus recording and alerting rules of a configuration:
per pipeline and segment, Sloth-compatible SLO recordings (so Sloth's
Grafana dashboards work unchanged) and multiwindow multi-burn-rate alerts;
per pipeline, the stall, insert failure, backlog, replication slot, long
transaction and clock skew alerts; and the prober's dead man.

--format rules writes a plain rule file for Prometheus's rule_files;
--format prometheusrule writes a PrometheusRule for the Prometheus Operator.
Warnings about canary rates too low for the objective go to stderr.
Secrets are not resolved: the environment they name need not be set.`

func rulesCommand(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rules", "--config FILE [--format rules|prometheusrule] [--out PATH]", rulesDescription, stderr)
	configPath := fs.String("config", "", "configuration `file` (required)")
	format := fs.String("format", alerts.FormatRules, "output format: "+strings.Join(alerts.Formats(), " or "))
	out := fs.String("out", "", "write to this `path` instead of stdout")
	if helped, err := parseFlags(fs, args); helped || err != nil {
		return err
	}
	cfg, err := loadConfig(fs, *configPath)
	if err != nil {
		return err
	}
	model, err := slo.FromConfig(cfg)
	if err != nil {
		return fmt.Errorf("rules: config %s: %w", *configPath, err)
	}
	rf, err := alerts.Generate(model)
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	data, err := alerts.Marshal(rf, *format, cfg.Alerting.Labels)
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	for _, w := range slo.Warnings(model) {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if *out == "" {
		if _, err := stdout.Write(data); err != nil {
			return fmt.Errorf("rules: write: %w", err)
		}
		return nil
	}
	if dir := filepath.Dir(*out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	return nil
}
