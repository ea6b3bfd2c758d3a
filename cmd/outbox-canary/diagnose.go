package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober"
)

const diagnoseDescription = `
Walk the outbox runbook for each pipeline (or only --pipeline), source to
consumer, and stop at the first unhealthy stage, because downstream symptoms
usually have upstream causes:

  1. commit            open transactions older than watch.long_transaction_threshold
                       (the rows they wrote are invisible to the relay)
  2. relay             polling: age of the oldest unpublished row against the
                       commit_to_publish budget (end_to_end if none);
                       cdc: the Kafka Connect connector and its tasks
  3. replication slot  cdc: slot active, wal_status, retained WAL
  4. broker            the canary topic: brokers reachable, a leader for every
                       partition, none under-replicated
  5. consumers         lag of watch.consumer_groups against the end_to_end budget

Each stage prints its evidence and, when unhealthy, the next thing to check.
A stage that cannot be checked (a server unreachable) is unhealthy, with the
error as evidence. --json prints the same as a JSON array, one object per
pipeline.

Exit status: 0 when every pipeline is healthy; 1 when one is not; 2 on a
usage error.

Example:
  outbox-canary diagnose --config /etc/outbox-canary.yml --pipeline orders
`

func diagnoseCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("diagnose", "--config FILE [--pipeline NAME] [--json] [--timeout 10s]", diagnoseDescription, stderr)
	configPath := fs.String("config", "", "configuration file (required)")
	pipeline := fs.String("pipeline", "", "diagnose only this pipeline (default: all)")
	asJSON := fs.Bool("json", false, "print the diagnosis as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "how long each stage may wait for its servers")
	if helped, err := parseFlags(fs, args); helped || err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError(fs, "diagnose: --timeout %s: must be positive", *timeout)
	}
	cfg, err := loadConfig(fs, *configPath)
	if err != nil {
		return err
	}
	pipes, err := selectPipelines(cfg, *pipeline, *configPath, stderr)
	if err != nil {
		return fmt.Errorf("diagnose: %w", err)
	}

	results := make([]prober.Diagnosis, 0, len(pipes))
	unhealthy := 0
	for _, p := range pipes {
		d := prober.Diagnose(ctx, p, prober.DiagnoseOptions{StageTimeout: *timeout})
		if !d.Healthy {
			unhealthy++
		}
		results = append(results, d)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(results); err != nil {
			return fmt.Errorf("diagnose: %w", err)
		}
	} else {
		for i, d := range results {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printDiagnosis(stdout, pipes[i], d)
		}
	}
	if unhealthy > 0 {
		return &exitError{code: 1, err: fmt.Errorf("diagnose: %d of %d pipelines unhealthy", unhealthy, len(pipes))}
	}
	return nil
}

// selectPipelines returns every pipeline, or only the named one; a name not
// in the file is a usage error, explained on stderr (main prints nothing
// for usage errors).
func selectPipelines(cfg *config.Config, name, path string, stderr io.Writer) ([]*config.Pipeline, error) {
	if name != "" {
		p, ok := cfg.Pipeline(name)
		if !ok {
			fmt.Fprintf(stderr, "--pipeline %q: not in %s\n", name, path)
			return nil, fmt.Errorf("--pipeline %q: not in %s: %w", name, path, errUsage)
		}
		return []*config.Pipeline{p}, nil
	}
	out := make([]*config.Pipeline, len(cfg.Pipelines))
	for i := range cfg.Pipelines {
		out[i] = &cfg.Pipelines[i]
	}
	return out, nil
}

var statusLabels = map[string]string{
	prober.StatusOK:            "OK",
	prober.StatusUnhealthy:     "UNHEALTHY",
	prober.StatusNotChecked:    "NOT CHECKED",
	prober.StatusNotApplicable: "N/A",
	prober.StatusNotConfigured: "NOT CONFIGURED",
}

// printDiagnosis prints one pipeline's walk as a checklist.
func printDiagnosis(w io.Writer, p *config.Pipeline, d prober.Diagnosis) {
	fmt.Fprintf(w, "pipeline %q (table %s -> %s relay -> topic %s)\n", p.Name, p.Outbox.Table, p.Relay.Kind, p.Kafka.Topic)
	for i, s := range d.Stages {
		fmt.Fprintf(w, "  %d. %-17s %s\n", i+1, s.Name, statusLabels[s.Status])
		if s.Status == prober.StatusNotChecked {
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
