package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober"
)

const lintDescription = `
Check each pipeline's outbox table (or only --pipeline's) against what a
measurable outbox needs, and print a checklist of OK, WARN and FAIL lines,
with a fix under every WARN and FAIL:

  - the mapped columns exist;
  - polling: a partial index on exactly "<published_at> IS NULL", so relay
    polls and the backlog query stay cheap at any table size;
  - polling: a monotonic id (a sequence or identity; a uuid is not);
  - created_at defaults to the database clock (now(), clock_timestamp(),
    CURRENT_TIMESTAMP);
  - published rows are cleaned up (published rows kept, dead tuples, size);
  - canaries go to a topic of their own: not one a watched business group
    reads, and named after the canary aggregate type under the default
    routing (outbox.event.<aggregate type>).

It reads the catalogue and statistics only (a role with pg_monitor and
SELECT on the table suffices) and writes nothing.

Exit status: 0 when nothing FAILs (WARNs allowed); 1 when a check FAILs or a
database cannot be read; 2 on a usage error.

Example:
  outbox-canary lint --config /etc/outbox-canary.yml --pipeline orders
`

func lintCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lint", "--config FILE [--pipeline NAME]", lintDescription, stderr)
	configPath := fs.String("config", "", "configuration file (required)")
	pipeline := fs.String("pipeline", "", "lint only this pipeline (default: all)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long each pipeline's checks may take")
	maxPublished := fs.Int64("max-published-rows", prober.DefaultLintOptions().MaxPublishedRows, "published rows the table may keep")
	maxBytes := fs.Int64("max-table-bytes", prober.DefaultLintOptions().MaxTableBytes, "total size the table may reach, indexes included")
	if helped, err := parseFlags(fs, args); helped || err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError(fs, "lint: --timeout %s: must be positive", *timeout)
	}
	cfg, err := loadConfig(fs, *configPath)
	if err != nil {
		return err
	}
	pipes, err := selectPipelines(cfg, *pipeline, *configPath, stderr)
	if err != nil {
		return fmt.Errorf("lint: %w", err)
	}
	opts := prober.LintOptions{MaxPublishedRows: *maxPublished, MaxTableBytes: *maxBytes}
	failed := 0
	for i, p := range pipes {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		findings := lintPipeline(ctx, p, opts, *timeout)
		fmt.Fprintf(stdout, "pipeline %q (table %s, %s relay)\n", p.Name, p.Outbox.Table, p.Relay.Kind)
		for _, f := range findings {
			fmt.Fprintf(stdout, "  %-4s  %-17s %s\n", f.Level, f.Check, f.Message)
			if f.Fix != "" {
				fmt.Fprintf(stdout, "        %-17s fix: %s\n", "", f.Fix)
			}
		}
		if prober.LintFailed(findings) {
			failed++
		}
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("lint: %d of %d pipelines have failing checks", failed, len(pipes))}
	}
	return nil
}

// lintPipeline connects, lints and disconnects; a database that cannot be
// read is a FAIL finding of its own, so the other pipelines are still
// linted.
func lintPipeline(ctx context.Context, p *config.Pipeline, opts prober.LintOptions, timeout time.Duration) []prober.Finding {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dbFail := func(err error) []prober.Finding {
		return []prober.Finding{{Check: "database", Level: prober.LintFail, Message: err.Error(),
			Fix: "check database.dsn, the network path and that the database is up; the role needs pg_monitor and SELECT on the table"}}
	}
	dsn, err := p.Database.DSN.Resolve()
	if err != nil {
		return dbFail(fmt.Errorf("database.dsn: %w", err))
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return dbFail(fmt.Errorf("database.dsn: %w", err)) // pgx redacts the password
	}
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return dbFail(fmt.Errorf("database pool: %w", err))
	}
	defer pool.Close()
	findings, err := prober.Lint(ctx, pool, p, opts)
	if err != nil {
		return dbFail(err)
	}
	return findings
}
