package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/slo"
)

const rulesHelp = `Generate Prometheus recording and alerting rules.

Generate the Prometheus recording and alerting rules of a configuration:
per pipeline and segment, Sloth-compatible SLO recordings (so Sloth's
Grafana dashboards work unchanged) and multiwindow multi-burn-rate alerts;
per pipeline, the stall, insert failure, backlog, replication slot, long
transaction and clock skew alerts; and the prober's dead man.

--format rules writes a plain rule file for Prometheus's rule_files;
--format prometheusrule writes PrometheusRules for the Prometheus Operator,
one per pipeline (outbox-canary-PIPELINE) and one for the prober
(outbox-canary), each small enough for a client-side kubectl apply (its
metadata labels are alerting.prometheusrule_labels, apart from the labels
on alerts); --format alertmanager writes the Alertmanager route tree
(one receiver per owner and severity) and the inhibit rules that make one
incident one page.
Warnings about canary rates too low for the objective go to stderr.
Secrets are not resolved: the environment they name need not be set.`

func rulesCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "rules", rulesHelp)
	configPath := configFlag(cmd)
	format := cmd.Flag("format", "Output format, one of: "+strings.Join(alerts.Formats(), ", ")+".").Default(alerts.FormatRules).Enum(alerts.Formats()...)
	out := cmd.Flag("out", "Write to this file instead of stdout.").PlaceHolder("FILE").String()
	return func(context.Context) error {
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		model, err := slo.FromConfig(cfg)
		if err != nil {
			return fmt.Errorf("rules: config %s: %w", *configPath, err)
		}
		data, err := alerts.Render(model, *format)
		if err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		for _, w := range slo.Warnings(model) {
			fmt.Fprintf(c.stderr, "warning: %s\n", w)
		}
		if err := writeOutput(c, *out, data); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		return nil
	}
}

// writeOutput writes data to path, creating its directory, or to stdout
// when path is empty.
func writeOutput(c *cli, path string, data []byte) error {
	if path == "" {
		_, err := c.stdout.Write(data)
		return err
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, data, 0o644)
}
