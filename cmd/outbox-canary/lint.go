package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/lint"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

const lintHelp = `Check the outbox table's schema and hygiene, and its Debezium connector.

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
  - the role of database.dsn may do what the prober does: INSERT and SELECT
    on the table (the insert returns the id), USAGE on a serial id's
    sequence, DELETE with canary.delete_after_insert (each a FAIL), and
    pg_monitor, without which the open-transaction watcher cannot see the
    application's transactions (a WARN); ` + "`run`" + ` logs the same at its start;
  - the publish stamp: published_at, written after Kafka's ack, warns (a
    header with the relay's send time, or the record timestamp, is better);
  - canaries go to a topic of their own: not one a watched business group
    reads, and named after the canary aggregate type under the default
    routing (outbox.event.<aggregate type>);
  - with relay.published_stamp record_timestamp, the canary topic's
    message.timestamp.type (asked of Kafka): LogAppendTime makes the
    publish stamp the broker's append time; CreateTime behind Debezium
    warns, because the wait in Debezium's queue (poll.interval.ms) then
    lands in publish_to_consume, and the fix is the exact setting.

A cdc pipeline with watch.connect_url and watch.connector also gets its
connector checked, through the Kafka Connect REST API (and its slot,
publication and topics through the database and Kafka): its state, the
value converter against what the prober reads, plugin.name, a slot.name and
publication.name of its own, publication.autocreate.mode, snapshot.mode,
the captured tables, the outbox EventRouter, its predicate or scope and the
topic it routes canaries to (and that the topic exists), the record
timestamp, heartbeats and heartbeat.action.query, tasks.max and tombstones.
Each finding says why it matters and the property to set; docs/cdc.md
explains them and gives a recommended connector configuration.

On MySQL or MariaDB (docs/mysql.md): the table, an index that leads with
published_at (polling), the user's privileges, tried in forms that change
nothing (INSERT, SELECT, DELETE with canary.delete_after_insert: FAIL;
PROCESS and, for cdc, BINLOG MONITOR: WARN, each with what it blinds), the
binlog (log_bin, ROW, FULL, its expiry), and Debezium's MariaDB or MySQL
connector: database.server.id and the schema history topic of its own,
the captured database and table, and the checks shared with PostgreSQL's.

It reads the catalogue, statistics and the connector's configuration only
and writes nothing; run it with the prober's own DSN, so the privileges it
reports are the prober's.

Exit status: 0 when nothing FAILs (WARNs allowed); 1 when a check FAILs or a
database cannot be read; 2 on a usage error.

Example:
  outbox-canary lint --config.file=/etc/outbox-canary.yml --pipeline=orders`

func lintCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "lint", lintHelp)
	configPath := configFlag(cmd)
	pipeline := cmd.Flag("pipeline", "Lint only this pipeline (default: all).").PlaceHolder("NAME").String()
	timeout := cmd.Flag("timeout", "How long each pipeline's checks may take.").Default("30s").Duration()
	defaults := lint.DefaultOptions()
	maxPublished := cmd.Flag("max-published-rows", "Published rows the table may keep.").Default(fmt.Sprint(defaults.MaxPublishedRows)).Int64()
	maxBytes := cmd.Flag("max-table-bytes", "Total size the table may reach, indexes included.").Default(fmt.Sprint(defaults.MaxTableBytes)).Int64()
	return func(ctx context.Context) error {
		if *timeout <= 0 {
			return usagef(c, "--timeout %s: must be positive", *timeout)
		}
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("lint: %w", err)
		}
		pipes, err := selectPipelines(c, cfg, *pipeline, *configPath)
		if err != nil {
			return err
		}
		opts := lint.Options{MaxPublishedRows: *maxPublished, MaxTableBytes: *maxBytes}
		failed := 0
		for i, p := range pipes {
			if i > 0 {
				fmt.Fprintln(c.stdout)
			}
			findings := lintPipeline(ctx, p, opts, *timeout)
			fmt.Fprintf(c.stdout, "pipeline %q (table %s, %s relay)\n", p.Name, p.Outbox.Table, p.Relay.Kind)
			for _, f := range findings {
				fmt.Fprintf(c.stdout, "  %-4s  %-17s %s\n", f.Level, f.Check, f.Message)
				if f.Fix != "" {
					fmt.Fprintf(c.stdout, "        %-17s fix: %s\n", "", f.Fix)
				}
			}
			if lint.Failed(findings) {
				failed++
			}
		}
		if failed > 0 {
			return &exitError{code: 1, err: fmt.Errorf("lint: %d of %d pipelines have failing checks", failed, len(pipes))}
		}
		return nil
	}
}

// lintPipeline connects, lints and disconnects; a database that cannot be
// read is a FAIL finding of its own, so the other pipelines are still
// linted.
func lintPipeline(ctx context.Context, p *config.Pipeline, opts lint.Options, timeout time.Duration) []lint.Finding {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dbFail := func(err error) []lint.Finding {
		return []lint.Finding{{Check: "database", Level: lint.Fail, Message: err.Error(),
			Fix: "check database.dsn, the network path and that the database is up; the role needs pg_monitor and SELECT on the table"}}
	}
	if kind, _ := p.Database.Family(); kind == config.KindMySQL {
		return lintMySQL(ctx, p, timeout, func(err error) []lint.Finding {
			return []lint.Finding{{Check: "database", Level: lint.Fail, Message: err.Error(),
				Fix: "check database.dsn, the network path and that the server is up; the user needs SELECT on the table"}}
		})
	}
	pool, err := postgres.NewPool(ctx, p.Database, postgres.PoolOptions{MaxConns: 1, ConnectTimeout: timeout})
	if err != nil {
		return dbFail(err)
	}
	defer pool.Close()
	findings, err := lint.Outbox(ctx, pool, p, opts)
	if err != nil {
		return dbFail(err)
	}
	findings = append(findings, lintTopicTimestamp(ctx, p, timeout)...)
	return append(findings, lintConnector(ctx, p, lint.ConnectorSources{DB: pool}, timeout)...)
}

// lintTopicTimestamp checks the canary topic's timestamp type, for a
// pipeline whose publish stamp is the record timestamp.
func lintTopicTimestamp(ctx context.Context, p *config.Pipeline, timeout time.Duration) []lint.Finding {
	if p.Relay.PublishedStamp != config.PublishedFromRecordTimestamp {
		return nil
	}
	client, closeKafka, err := kafkaclient.NewClient(p.Kafka, timeout)
	if err != nil {
		return []lint.Finding{lint.TopicTimestampCheck(p, 0, err)}
	}
	defer closeKafka()
	return lint.TopicTimestamp(ctx, p, client)
}

// lintConnector checks a cdc pipeline's connector; nothing for the others.
// Kafka that cannot be reached leaves the topics unchecked (a WARN of the
// topic checks), not the connector.
func lintConnector(ctx context.Context, p *config.Pipeline, src lint.ConnectorSources, timeout time.Duration) []lint.Finding {
	if !lint.ConnectorConfigured(p) {
		return nil
	}
	src.HTTP = &http.Client{Timeout: timeout}
	if client, closeKafka, err := kafkaclient.NewClient(p.Kafka, timeout); err == nil {
		defer closeKafka()
		src.Kafka = client
	}
	return lint.Connector(ctx, p, src)
}

// lintMySQL is lintPipeline on MySQL or MariaDB: the table, the index,
// the user's privileges and the binlog (lint.MySQLOutbox), the canary
// topic's timestamp type and the connector.
func lintMySQL(ctx context.Context, p *config.Pipeline, timeout time.Duration, dbFail func(error) []lint.Finding) []lint.Finding {
	db, err := mysql.Open(p.Database, 1)
	if err != nil {
		return dbFail(err)
	}
	defer db.Close()
	if err := db.Ping(ctx); err != nil {
		return dbFail(db.Explain(err))
	}
	findings, err := lint.MySQLOutbox(ctx, db, p)
	if err != nil {
		return dbFail(err)
	}
	findings = append(findings, lintTopicTimestamp(ctx, p, timeout)...)
	return append(findings, lintConnector(ctx, p, lint.ConnectorSources{MySQL: db}, timeout)...)
}
