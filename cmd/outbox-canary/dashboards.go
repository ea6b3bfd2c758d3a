package main

import (
	"context"
	"fmt"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/dashboards"
	"github.com/outbox-canary/outbox-canary/slo"
)

const dashboardsHelp = `Generate Grafana dashboards and provisioning files.

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
func dashboardsCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "dashboards", dashboardsHelp)
	configPath := configFlag(cmd)
	out := cmd.Flag("out", "The directory to write the files into, created if missing.").PlaceHolder("DIR").Required().String()
	opts := dashboards.DefaultOptions()
	cmd.Flag("grafana-dashboards-path", "Where Grafana will read the dashboard JSON files from (the provider's path).").Default(opts.DashboardsPath).StringVar(&opts.DashboardsPath)
	cmd.Flag("grafana-folder", "The Grafana folder the dashboards are provisioned into.").Default(opts.Folder).StringVar(&opts.Folder)
	cmd.Flag("prometheus-url", "The URL of the example Prometheus datasource.").Default(opts.PrometheusURL).StringVar(&opts.PrometheusURL)
	return func(context.Context) error {
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("dashboards: %w", err)
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
		fmt.Fprintf(c.stdout, "wrote %d dashboards and provisioning files to %s\n", len(files), *out)
		return nil
	}
}
