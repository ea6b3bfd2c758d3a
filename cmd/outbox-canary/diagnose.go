package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/diagnose"
)

const diagnoseHelp = `Walk the runbook and name the first unhealthy stage of each pipeline.

Walk the outbox runbook for each pipeline (or only --pipeline), source to
consumer, and stop at the first unhealthy stage, because downstream symptoms
usually have upstream causes:

  1. commit: open transactions older than watch.long_transaction_threshold
     (the rows they wrote are invisible to the relay)
  2. relay: polling, the age of the oldest unpublished row against the
     commit_to_publish budget (end_to_end if none); cdc, the Kafka Connect
     connector and its tasks, and with --prometheus-url Debezium's own
     streaming metrics (connected, milliseconds behind source, queue
     remaining of total: docs/cdc.md)
  3. replication slot: cdc, the slot active, its wal_status, retained WAL
  4. broker: the canary topic's brokers reachable, a leader for every
     partition, none under-replicated
  5. consumers: lag of watch.consumer_groups against the end_to_end budget

Each stage prints its evidence and, when unhealthy, the next thing to check.
A stage that cannot be checked (a server unreachable) is unhealthy, with the
error as evidence. --json prints the same as a JSON array, one object per
pipeline.

Exit status: 0 when every pipeline is healthy; 1 when one is not; 2 on a
usage error.

Example:
  outbox-canary diagnose --config.file=/etc/outbox-canary.yml --pipeline=orders`

func diagnoseCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "diagnose", diagnoseHelp)
	configPath := configFlag(cmd)
	pipeline := cmd.Flag("pipeline", "Diagnose only this pipeline (default: all).").PlaceHolder("NAME").String()
	asJSON := cmd.Flag("json", "Print the diagnosis as JSON.").Bool()
	timeout := cmd.Flag("timeout", "How long each stage may wait for its servers.").Default("10s").Duration()
	promURL := cmd.Flag("prometheus-url", "A Prometheus that scrapes the Kafka Connect worker's JMX exporter "+
		"(deploy/local/connect/jmx-exporter.yml): a cdc pipeline's relay stage then reads Debezium's streaming metrics "+
		"of its connector (the series whose server label is the connector's topic.prefix) as evidence, and is unhealthy when "+
		"Debezium is disconnected from the log, behind source past the commit_to_publish budget, or its queue is full.").
		PlaceHolder("URL").String()
	return func(ctx context.Context) error {
		if *timeout <= 0 {
			return usagef(c, "--timeout %s: must be positive", *timeout)
		}
		if *promURL != "" {
			if u, err := url.Parse(*promURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usagef(c, "--prometheus-url %q: want an http or https URL such as http://localhost:9090", *promURL)
			}
		}
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("diagnose: %w", err)
		}
		pipes, err := selectPipelines(c, cfg, *pipeline, *configPath)
		if err != nil {
			return err
		}
		results := make([]diagnose.Diagnosis, 0, len(pipes))
		unhealthy := 0
		for _, p := range pipes {
			d := diagnose.Pipeline(ctx, p, diagnose.Options{StageTimeout: *timeout, PrometheusURL: *promURL})
			if !d.Healthy {
				unhealthy++
			}
			results = append(results, d)
		}
		if *asJSON {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if err := enc.Encode(results); err != nil {
				return fmt.Errorf("diagnose: %w", err)
			}
		} else {
			for i, d := range results {
				if i > 0 {
					fmt.Fprintln(c.stdout)
				}
				printDiagnosis(c.stdout, pipes[i], d)
			}
		}
		if unhealthy > 0 {
			return &exitError{code: 1, err: fmt.Errorf("diagnose: %d of %d pipelines unhealthy", unhealthy, len(pipes))}
		}
		return nil
	}
}

var statusLabels = map[string]string{
	diagnose.StatusOK:            "OK",
	diagnose.StatusUnhealthy:     "UNHEALTHY",
	diagnose.StatusNotChecked:    "NOT CHECKED",
	diagnose.StatusNotApplicable: "N/A",
	diagnose.StatusNotConfigured: "NOT CONFIGURED",
	diagnose.StatusExplained:     "LAGGING (a later stage's doing)",
}

// printDiagnosis prints one pipeline's walk as a checklist.
func printDiagnosis(w io.Writer, p *config.Pipeline, d diagnose.Diagnosis) {
	fmt.Fprintf(w, "pipeline %q (table %s -> %s relay -> topic %s)\n", p.Name, p.Outbox.Table, p.Relay.Kind, p.Kafka.Topic)
	for i, s := range d.Stages {
		fmt.Fprintf(w, "  %d. %-17s %s\n", i+1, s.Name, statusLabels[s.Status])
		if s.Status == diagnose.StatusNotChecked {
			continue
		}
		for _, e := range s.Evidence {
			fmt.Fprintf(w, "       %s\n", e)
		}
		if s.NextStep != "" {
			fmt.Fprintf(w, "       next: %s\n", s.NextStep)
		}
	}
	if d.Healthy {
		fmt.Fprintln(w, "  verdict: healthy")
		return
	}
	fmt.Fprintf(w, "  verdict: UNHEALTHY at stage %q\n", d.FirstUnhealthy)
}
