// Package relay is outbox-canary's reference polling relay: it moves rows
// from a PostgreSQL, MySQL or MariaDB outbox table (Store) to Kafka the way
// the seed article describes,
// with fault injection (pause, publish delay, drop, duplicate) so that tests
// and demos can stall or slow each segment of the pipeline on purpose.
//
// One poll, in one transaction:
//
//	SELECT id, route, key, payload, created_at[, event_type] FROM outbox
//	  WHERE published_at IS NULL ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED
//	-- publish the batch synchronously, acks=all, keyed by aggregate id
//	-- (with a mark delay: wait that long once the whole batch is acknowledged)
//	UPDATE outbox SET published_at = clock_timestamp() WHERE id = ANY($1)
//	COMMIT
//
// (on MySQL: LIMIT ?, SYSDATE(6) and an IN list).
//
// published_at is therefore taken after the broker's ack of the whole batch,
// and becomes visible only at COMMIT: a consumer often reads a record before
// its row says published. A mark delay widens that gap on purpose, as relays
// that mark on a timer or after a larger unit of work do, so that a prober
// can be shown such a relay.
//
// A failure anywhere rolls the transaction back, so its rows stay unpublished
// and are sent again by a later poll: delivery is at least once.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/retry"
)

// Header names of every message the relay sends. Timestamps are RFC 3339
// with nanoseconds, in UTC.
const (
	// HeaderID carries the row id as decimal text (like Debezium's "id").
	HeaderID = "id"
	// HeaderCreatedAt carries the row's created_at (database clock).
	HeaderCreatedAt = "outbox-created-at"
	// HeaderReadAt carries when the relay read the batch (relay clock).
	HeaderReadAt = "outbox-relay-read-at"
	// HeaderSentAt carries when the relay sent the batch, after any injected
	// delay (relay clock). The record's CreateTime is the same instant.
	HeaderSentAt = "outbox-relay-sent-at"
	// HeaderEventType carries the EventType column, when one is configured.
	HeaderEventType = "event-type"
)

// Defaults for zero Config fields.
const (
	DefaultTopicTemplate  = "outbox.event.{{.Route}}"
	DefaultPollInterval   = 100 * time.Millisecond
	DefaultBatchSize      = 500
	DefaultMaxBackoff     = 5 * time.Second
	DefaultPublishTimeout = 10 * time.Second
)

// Config tunes one relay. Zero fields take the defaults above; negative
// values are errors.
type Config struct {
	// Columns maps the outbox table; empty fields default to seed schema A.
	Columns Columns
	// TopicTemplate is a text/template over TopicData that names each row's
	// topic. The default mirrors Debezium's outbox event router.
	TopicTemplate string
	// PollInterval is the pause between polls. A full batch is followed by
	// another poll at once.
	PollInterval time.Duration
	// BatchSize is the most rows claimed and sent per poll.
	BatchSize int
	// DeletePublished deletes rows after the broker acknowledged them,
	// instead of setting published_at.
	DeletePublished bool
	// MaxBackoff caps the wait after consecutive failed polls (the wait
	// doubles from PollInterval).
	MaxBackoff time.Duration
	// PublishTimeout bounds one batch's send, retries included.
	PublishTimeout time.Duration
	// MarkDelay is waited after the broker acknowledged the whole batch and
	// before its rows are marked published (their rows stay claimed
	// meanwhile): published_at then lies that much after the records
	// reached Kafka. Zero marks at once. Faults().SetMarkDelay changes it
	// while the relay runs.
	MarkDelay time.Duration
}

// TopicData is what Config.TopicTemplate sees for each row.
type TopicData struct {
	// Route is the value of the Route column (aggregate type or event type).
	Route string
	// EventType is the value of the EventType column, empty if none.
	EventType string
}

// MessageWriter sends a batch synchronously and returns once every message is
// acknowledged. *kafka.Writer implements it; see NewKafkaWriter.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Relay is one polling loop over one outbox table. Create it with New and
// start it with Run.
type Relay struct {
	cfg     Config
	store   Store
	writer  MessageWriter
	log     *slog.Logger
	now     func() time.Time
	topic   *template.Template
	faults  *Faults
	metrics *metrics
}

// New checks cfg, applies its defaults and registers the relay's metrics on
// reg (nil registers nothing). The caller owns pool and writer and closes
// them after Run returns. now is the relay clock used for headers and
// durations (nil means time.Now).
func New(cfg Config, pool *pgxpool.Pool, writer MessageWriter, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("relay: nil database pool")
	}
	return NewOn(cfg, PostgresStore(pool), writer, logger, reg, now)
}

// NewOn is New on a Store of any family (MySQLStore, PostgresStore).
func NewOn(cfg Config, store Store, writer MessageWriter, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Relay, error) {
	if store == nil {
		return nil, errors.New("relay: nil database")
	}
	if writer == nil {
		return nil, errors.New("relay: nil Kafka writer")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	tmpl, err := parseTopicTemplate(cfg.TopicTemplate)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err := store.prepare(cfg.Columns, cfg.DeletePublished); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	faults := NewFaults(logger)
	faults.setMarkDelay(cfg.MarkDelay)
	m, err := newMetrics(reg, faults)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return &Relay{
		cfg: cfg, store: store, writer: writer, log: logger, now: now,
		topic: tmpl, faults: faults, metrics: m,
	}, nil
}

func (c Config) withDefaults() (Config, error) {
	c.Columns = c.Columns.withDefaults()
	if c.TopicTemplate == "" {
		c.TopicTemplate = DefaultTopicTemplate
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"poll interval", &c.PollInterval, DefaultPollInterval},
		{"max backoff", &c.MaxBackoff, DefaultMaxBackoff},
		{"publish timeout", &c.PublishTimeout, DefaultPublishTimeout},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("%s %s: must not be negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.BatchSize < 0 {
		return c, fmt.Errorf("batch size %d: must not be negative", c.BatchSize)
	}
	if c.MarkDelay < 0 {
		return c, fmt.Errorf("mark delay %s: must not be negative", c.MarkDelay)
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	c.MaxBackoff = max(c.MaxBackoff, c.PollInterval)
	return c, nil
}

// parseTopicTemplate parses the template and renders it once, so that a
// reference to a missing field fails at start-up rather than on every poll.
func parseTopicTemplate(text string) (*template.Template, error) {
	t, err := template.New("topic").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("topic template %q: %w", text, err)
	}
	if _, err := renderTopic(t, TopicData{Route: "example", EventType: "example"}); err != nil {
		return nil, fmt.Errorf("topic template %q: %w", text, err)
	}
	return t, nil
}

func renderTopic(t *template.Template, d TopicData) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return "", err
	}
	topic := strings.TrimSpace(b.String())
	if topic == "" {
		return "", fmt.Errorf("empty topic for route %q", d.Route)
	}
	return topic, nil
}

// Faults returns the relay's fault-injection state, for NewAdminHandler and
// tests.
func (r *Relay) Faults() *Faults { return r.faults }

// Run polls until ctx is cancelled, then returns nil. A failed poll is
// logged, counted and retried after a backoff; Run never returns because of
// one.
func (r *Relay) Run(ctx context.Context) error {
	r.log.Info("relay started", "table", r.cfg.Columns.Table, "poll_interval", r.cfg.PollInterval, "batch_size", r.cfg.BatchSize)
	failures := 0
	retryWait := retry.Backoff(r.cfg.PollInterval, r.cfg.MaxBackoff)
	for {
		n, stage, err := r.poll(ctx)
		if ctx.Err() != nil {
			r.log.Info("relay stopped")
			return nil
		}
		wait := r.cfg.PollInterval
		switch {
		case err != nil:
			failures++
			wait = retryWait.NextBackOff()
			r.metrics.pollErrors.WithLabelValues(stage).Inc()
			r.log.Warn("poll failed, rows stay unpublished", "stage", stage, "err", err, "consecutive_failures", failures, "retry_in", wait)
		case n == r.cfg.BatchSize:
			failures = 0
			retryWait.Reset()
			wait = 0
		default:
			failures = 0
			retryWait.Reset()
		}
		if wait == 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			r.log.Info("relay stopped")
			return nil
		case <-t.C:
		}
	}
}

type row struct {
	id        int64
	route     string
	key       *string
	payload   []byte
	createdAt time.Time
	eventType *string
}

// poll runs one claim-send-mark transaction and returns the number of rows
// it claimed; on failure, the stage that failed.
func (r *Relay) poll(ctx context.Context) (int, string, error) {
	paused, endPoll := r.faults.beginPoll()
	defer endPoll()
	if paused {
		r.metrics.faultsInjected.WithLabelValues(faultPause).Inc()
		r.log.Debug("poll skipped: relay paused")
		return 0, "", nil
	}
	r.metrics.polls.Inc()
	start := r.now()

	tx, err := r.store.begin(ctx)
	if err != nil {
		return 0, stageDatabase, fmt.Errorf("begin: %w", err)
	}
	// Rolling back after Commit is a no-op; after a cancelled ctx the
	// rollback still needs a live context.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tx.rollback(rctx)
	}()

	rows, err := tx.claim(ctx, r.cfg.BatchSize, r.cfg.Columns.EventType != "")
	if err != nil {
		return 0, stageDatabase, fmt.Errorf("claim rows: %w", err)
	}
	readAt := r.now()
	if len(rows) == 0 {
		return 0, "", nil
	}

	plan := r.faults.take(len(rows))
	committed := false
	defer func() {
		if !committed {
			r.faults.refund(plan)
		}
	}()

	if plan.delay > 0 {
		t := time.NewTimer(plan.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, stageKafka, ctx.Err()
		case <-t.C:
		}
	}

	sentAt := r.now()
	msgs, err := r.messages(rows, plan, readAt, sentAt)
	if err != nil {
		return 0, stageKafka, err
	}
	if len(msgs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		err = r.writer.WriteMessages(pctx, msgs...)
		cancel()
		if err != nil {
			return 0, stageKafka, fmt.Errorf("publish %d messages: %w", len(msgs), err)
		}
		r.metrics.messagesSent.Add(float64(len(msgs)))
	}
	if plan.markDelay > 0 {
		// Cancelled meanwhile: rolled back, the rows are sent again by a
		// later poll (at least once), as after any failure.
		t := time.NewTimer(plan.markDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, stageDatabase, ctx.Err()
		case <-t.C:
		}
	}

	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.id
	}
	if err := tx.finish(ctx, ids); err != nil {
		return 0, stageDatabase, fmt.Errorf("mark %d rows published: %w", len(ids), err)
	}
	if err := tx.commit(ctx); err != nil {
		return 0, stageDatabase, fmt.Errorf("commit: %w", err)
	}
	committed = true

	elapsed := r.now().Sub(start)
	r.metrics.rowsPublished.Add(float64(len(rows)))
	r.metrics.batchDuration.Observe(elapsed.Seconds())
	r.metrics.faultsInjected.WithLabelValues(faultDrop).Add(float64(plan.drop))
	r.metrics.faultsInjected.WithLabelValues(faultDuplicate).Add(float64(plan.duplicate))
	if plan.delay > 0 {
		r.metrics.faultsInjected.WithLabelValues(faultDelay).Inc()
	}
	if plan.markDelay > 0 {
		r.metrics.faultsInjected.WithLabelValues(faultMarkDelay).Inc()
	}
	r.log.Debug("batch published",
		"rows", len(rows), "messages", len(msgs), "first_id", rows[0].id, "last_id", rows[len(rows)-1].id,
		"dropped", plan.drop, "duplicated", plan.duplicate, "delay", plan.delay, "mark_delay", plan.markDelay, "duration", elapsed)
	return len(rows), "", nil
}

// messages builds the batch's messages: the plan's dropped rows are left
// out, its duplicated rows appear twice.
func (r *Relay) messages(rows []row, plan faultPlan, readAt, sentAt time.Time) ([]kafka.Message, error) {
	readText := readAt.UTC().Format(time.RFC3339Nano)
	sentText := sentAt.UTC().Format(time.RFC3339Nano)
	topics := map[TopicData]string{}
	msgs := make([]kafka.Message, 0, len(rows)+plan.duplicate)
	for i, row := range rows[plan.drop:] {
		data := TopicData{Route: row.route}
		if row.eventType != nil {
			data.EventType = *row.eventType
		}
		topic, ok := topics[data]
		if !ok {
			var err error
			if topic, err = renderTopic(r.topic, data); err != nil {
				return nil, fmt.Errorf("row %d: topic template: %w", row.id, err)
			}
			topics[data] = topic
		}
		headers := []kafka.Header{
			{Key: HeaderID, Value: []byte(strconv.FormatInt(row.id, 10))},
			{Key: HeaderCreatedAt, Value: []byte(row.createdAt.UTC().Format(time.RFC3339Nano))},
			{Key: HeaderReadAt, Value: []byte(readText)},
			{Key: HeaderSentAt, Value: []byte(sentText)},
		}
		if row.eventType != nil {
			headers = append(headers, kafka.Header{Key: HeaderEventType, Value: []byte(*row.eventType)})
		}
		m := kafka.Message{Topic: topic, Value: row.payload, Headers: headers, Time: sentAt}
		if row.key != nil {
			m.Key = []byte(*row.key)
		}
		msgs = append(msgs, m)
		if i < plan.duplicate {
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// NewKafkaWriter returns a writer for the relay: acks from all in-sync
// replicas, the Hash balancer (FNV-1a of the key, as Sarama does) so that one
// aggregate stays on one partition, no topic auto-creation, and a 1ms batch
// timeout so that a synchronous send does not wait for kafka-go's default 1s
// to fill a batch. Adjust its fields (Transport for TLS/SASL) before the
// first write; close it after the relay stops.
func NewKafkaWriter(brokers []string) *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		AllowAutoTopicCreation: false,
		BatchSize:              10000,
		BatchTimeout:           time.Millisecond,
		MaxAttempts:            3,
		Transport:              &kafka.Transport{},
	}
}
