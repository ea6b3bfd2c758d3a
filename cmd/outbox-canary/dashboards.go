package main

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-canary/outbox-canary/dashboards"
	"github.com/outbox-canary/outbox-canary/slo"
)

const dashboardsDescription = `
Generate the Grafana dashboards of the pipelines in the configuration (SLO
overview, segment latency, pipeline health) as JSON files, and Grafana
provisioning files that load them, into DIR:

  DIR/outbox-canary-*.json                   the dashboards
  DIR/provisioning/dashboards/*.yml          a file provider for them
  DIR/provisioning/datasources/*.yml         an example Prometheus datasource

The SLO overview reads the recording rules of 'outbox-canary rules': load
those into the Prometheus the dashboards query. The output depends only on
the configuration, so regenerating gives the same files.`

// dashboardsCommand writes the dashboards and provisioning files.
func dashboardsCommand(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dashboards", "--config FILE --out DIR", dashboardsDescription, stderr)
	configPath := fs.String("config", "", "the outbox-canary configuration `file` (required)")
	out := fs.String("out", "", "the `directory` to write the files into, created if missing (required)")
	opts := dashboards.DefaultOptions()
	fs.StringVar(&opts.DashboardsPath, "grafana-dashboards-path", opts.DashboardsPath, "where Grafana will read the dashboard JSON files from (the provider's path)")
	fs.StringVar(&opts.Folder, "grafana-folder", opts.Folder, "the Grafana folder the dashboards are provisioned into")
	fs.StringVar(&opts.PrometheusURL, "prometheus-url", opts.PrometheusURL, "the URL of the example Prometheus datasource")
	helped, err := parseFlags(fs, args)
	if helped || err != nil {
		return err
	}
	cfg, err := loadConfig(fs, *configPath)
	if err != nil {
		return err
	}
	if *out == "" {
		fs.Usage()
		return usageError(fs, "dashboards: --out is required")
	}
	model, err := slo.FromConfig(cfg)
	if err != nil {
		return fmt.Errorf("dashboards: config %s: %w", *configPath, err)
	}
	files, err := dashboards.Generate(model, opts)
	if err != nil {
		return fmt.Errorf("dashboards: %w", err)
	}
	if err := dashboards.WriteFiles(*out, files); err != nil {
		return fmt.Errorf("dashboards: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %d dashboards and provisioning files to %s\n", len(files), *out)
	return nil
}
