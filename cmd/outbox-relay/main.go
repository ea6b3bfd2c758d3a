// Command outbox-relay is outbox-canary's reference polling relay: it moves
// rows from a PostgreSQL outbox table to Kafka (claim with FOR UPDATE SKIP
// LOCKED, publish with acks=all, mark published_at, commit), and exposes an
// admin API that injects faults (pause, delay, drop, duplicate, a late
// published_at mark) so that the canary can be watched catching them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/version"
)

// dsnEnv names the environment variable that supplies --dsn, so that the
// password stays out of the process list.
const dsnEnv = "OUTBOX_RELAY_DSN"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintf(os.Stderr, "outbox-relay: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	dsn             string
	brokers         []string
	schema          string
	cfg             relay.Config
	listenAddress   string
	logLevel        string
	shutdownTimeout time.Duration
	showVersion     bool
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("outbox-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dsn, "dsn", "", "connection string of the database that holds the outbox table: PostgreSQL's, or a mysql:// URL for MySQL 8.0+ and MariaDB 10.6+ (default $"+dsnEnv+"; prefer the variable, so the password stays out of ps)")
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated Kafka bootstrap brokers, host:port")
	fs.StringVar(&o.schema, "schema", "a", "column preset: a = seed schema A (route by aggregate_type), b = seed schema B (route by event_type, sent as header event-type too); --table and --column.* override single names")
	fs.StringVar(&o.cfg.Columns.Table, "table", "", "outbox table, optionally schema-qualified as schema.table (default outbox)")
	fs.StringVar(&o.cfg.Columns.ID, "column.id", "", "monotonic integer id column: claim order and header \"id\" (default id)")
	fs.StringVar(&o.cfg.Columns.Route, "column.route", "", "column whose value fills {{.Route}} in --topic-template (default aggregate_type, or event_type with --schema=b)")
	fs.StringVar(&o.cfg.Columns.Key, "column.key", "", "column sent as the Kafka message key (default aggregate_id)")
	fs.StringVar(&o.cfg.Columns.Payload, "column.payload", "", "column sent as the Kafka message value (default payload)")
	fs.StringVar(&o.cfg.Columns.CreatedAt, "column.created-at", "", "database-stamped creation time, sent as header outbox-created-at (default created_at)")
	fs.StringVar(&o.cfg.Columns.PublishedAt, "column.published-at", "", "column set to clock_timestamp() once the broker acknowledged the row; NULL means unpublished (default published_at)")
	fs.StringVar(&o.cfg.Columns.EventType, "column.event-type", "", "optional column sent as header event-type and available as {{.EventType}} (default none, or event_type with --schema=b)")
	fs.StringVar(&o.cfg.TopicTemplate, "topic-template", relay.DefaultTopicTemplate, "Go text/template naming each row's topic from {{.Route}} and {{.EventType}}, as Debezium's outbox event router does")
	fs.DurationVar(&o.cfg.PollInterval, "poll-interval", relay.DefaultPollInterval, "pause between polls; a full batch is followed by the next poll at once")
	fs.IntVar(&o.cfg.BatchSize, "batch-size", relay.DefaultBatchSize, "most rows claimed and sent per poll")
	fs.BoolVar(&o.cfg.DeletePublished, "delete-published", false, "delete rows once acknowledged instead of setting published_at (keeps the table small, loses the audit trail)")
	fs.DurationVar(&o.cfg.MaxBackoff, "max-backoff", relay.DefaultMaxBackoff, "longest wait between polls after consecutive failures (the wait doubles from --poll-interval, with ±50% jitter)")
	fs.DurationVar(&o.cfg.PublishTimeout, "publish-timeout", relay.DefaultPublishTimeout, "bound on one batch's send to Kafka, retries included; on timeout the batch is rolled back and retried")
	fs.DurationVar(&o.cfg.MarkDelay, "mark-delay", 0, "wait this long after Kafka acknowledged the whole batch before marking its rows published, as relays that mark after a batch or on a timer do: published_at then lies after the records' arrival (0 marks at once; POST /admin/mark-delay changes it)")
	fs.StringVar(&o.listenAddress, "admin.listen-address", "127.0.0.1:9466", "address of the admin API, /metrics and /healthz (the admin API injects faults: keep it private)")
	fs.StringVar(&o.logLevel, "log.level", "info", "debug (one line per batch), info, warn (one line per failed poll) or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT or SIGTERM, how long to wait for the in-flight batch and the admin server")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, `outbox-relay: reference polling relay from a PostgreSQL outbox table to Kafka,
with fault injection for testing outbox-canary.

Every poll claims the oldest unpublished rows (FOR UPDATE SKIP LOCKED), sends
them keyed by aggregate id with acks=all and headers id, outbox-created-at,
outbox-relay-read-at and outbox-relay-sent-at, then marks them published in
the same transaction. A failed poll is rolled back and retried: nothing is lost.

Usage: outbox-relay [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(w, `
Admin API (on --admin.listen-address):
  GET  /admin/state           current faults, as JSON
  POST /admin/pause           stop claiming rows (they stay unpublished)
  POST /admin/resume          claim rows again
  POST /admin/delay?d=250ms   sleep between read and send (d=0 clears)
  POST /admin/mark-delay?d=1s mark published_at 1s after the batch's ack (d=0: at once)
  POST /admin/drop?n=2        mark the next n rows published without sending them
  POST /admin/duplicate?n=2   send the next n rows twice
  GET  /metrics, GET /healthz

Examples:
  # Seed schema A, topics outbox.event.<aggregate_type>:
  OUTBOX_RELAY_DSN=postgres://app@localhost:5432/orders outbox-relay --brokers=localhost:9092

  # Seed schema B in schema "sales", one topic for every event:
  outbox-relay --schema=b --table=sales.outbox --topic-template=sales.events

  # Stall the relay for a while, then let it catch up:
  curl -X POST http://127.0.0.1:9466/admin/pause
  curl -X POST http://127.0.0.1:9466/admin/resume
`)
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.showVersion {
		return o, nil
	}
	if o.dsn == "" {
		o.dsn = getenv(dsnEnv)
	}
	if o.dsn == "" {
		return o, fmt.Errorf("--dsn: no database given (set --dsn or $%s)", dsnEnv)
	}
	var preset relay.Columns
	switch o.schema {
	case "a":
		preset = relay.SchemaAColumns()
	case "b":
		preset = relay.SchemaBColumns()
	default:
		return o, fmt.Errorf("--schema %q: want a or b", o.schema)
	}
	o.cfg.Columns = o.cfg.Columns.Fill(preset)
	for _, b := range strings.Split(*brokers, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			return o, fmt.Errorf("--brokers %q: empty broker address", *brokers)
		}
		o.brokers = append(o.brokers, b)
	}
	if o.cfg.PollInterval <= 0 {
		return o, fmt.Errorf("--poll-interval %s: must be positive", o.cfg.PollInterval)
	}
	if o.cfg.BatchSize <= 0 {
		return o, fmt.Errorf("--batch-size %d: must be positive", o.cfg.BatchSize)
	}
	if o.cfg.MarkDelay < 0 {
		return o, fmt.Errorf("--mark-delay %s: must not be negative", o.cfg.MarkDelay)
	}
	if o.shutdownTimeout <= 0 {
		return o, fmt.Errorf("--shutdown-timeout %s: must be positive", o.shutdownTimeout)
	}
	return o, nil
}

// run is the testable body of main: it returns when ctx is cancelled (after a
// bounded graceful shutdown) or on a start-up error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if o.showVersion {
		fmt.Fprintf(stdout, "outbox-relay %s (revision %s, %s)\n", version.Version, version.Revision, version.GoVersion())
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log.level %q: %w", o.logLevel, err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	var store relay.Store
	if config.KindOfDSN(o.dsn) == config.KindMySQL {
		// Its errors never show the password.
		db, err := mysql.Open(config.Database{DSN: config.InlineSecret(o.dsn)}, 2)
		if err != nil {
			return fmt.Errorf("--dsn: %w", err)
		}
		defer db.Close()
		store = relay.MySQLStore(db.SQL())
	} else {
		poolCfg, err := pgxpool.ParseConfig(o.dsn)
		if err != nil {
			// pgconn masks the password in its parse errors.
			return fmt.Errorf("--dsn: %w", err)
		}
		// Built without pgx's table of Go types (the Makefile's TAGS): the
		// exec and simple-protocol query modes need the arguments' types
		// named.
		poolCfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
			postgres.RegisterArgTypes(conn)
			return nil
		}
		pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
		if err != nil {
			return fmt.Errorf("database pool: %w", err)
		}
		defer pool.Close()
		store = relay.PostgresStore(pool)
	}

	writer := relay.NewKafkaWriter(o.brokers)
	defer func() {
		if err := writer.Close(); err != nil {
			logger.Warn("closing Kafka writer", "err", err)
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_relay_build_info",
		Help:        "Always 1; the labels describe the build.",
		ConstLabels: prometheus.Labels{"version": version.Version, "revision": version.Revision, "goversion": version.GoVersion()},
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)

	r, err := relay.NewOn(o.cfg, store, writer, logger, reg, time.Now)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.listenAddress)
	if err != nil {
		return fmt.Errorf("--admin.listen-address: %w", err)
	}
	srv := &http.Server{Handler: relay.NewAdminHandler(r.Faults(), reg), ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("admin API listening", "address", ln.Addr().String(), "brokers", o.brokers, "table", o.cfg.Columns.Table)

	relayCtx, cancelRelay := context.WithCancel(ctx)
	defer cancelRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "timeout", o.shutdownTimeout)
	case err := <-serveErr:
		runErr = fmt.Errorf("admin server: %w", err)
		cancelRelay()
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("admin server shutdown", "err", err)
	}
	select {
	case err := <-relayDone:
		if err != nil && runErr == nil {
			runErr = err
		}
	case <-shutdownCtx.Done():
		logger.Warn("relay did not stop within the shutdown timeout")
	}
	return runErr
}
