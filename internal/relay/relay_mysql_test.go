package relay_test

// The relay on the local stack's MariaDB 10.11 and Kafka, as the
// least-privilege user canary; skips without them (fails in CI).

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// mysqlOutbox is a fresh MariaDB database with one outbox table, and the
// relay's own pool on it (mysql.Open: UTC sessions).
type mysqlOutbox struct {
	db      *sql.DB // the user canary's
	columns relay.Columns
}

func newMySQLOutbox(t *testing.T, m stacktest.MySQL, schema stacktest.Schema, columns relay.Columns) *mysqlOutbox {
	t.Helper()
	dsn, _ := m.FreshOutbox(t, schema)
	db, err := mysql.Open(config.Database{DSN: config.InlineSecret(dsn)}, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &mysqlOutbox{db: db.SQL(), columns: columns}
}

func (o *mysqlOutbox) insert(t *testing.T, route, key, payload string) int64 {
	t.Helper()
	c := o.columns
	res, err := o.db.ExecContext(context.Background(), fmt.Sprintf("INSERT INTO %s (%s, %s, %s) VALUES (?, ?, ?)",
		mysql.QuoteTable(c.Table), mysql.QuoteIdent(c.Route), mysql.QuoteIdent(c.Key), mysql.QuoteIdent(c.Payload)), route, key, payload)
	if err != nil {
		t.Fatalf("inserting an outbox row: %v", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (o *mysqlOutbox) row(t *testing.T, id int64) stored {
	t.Helper()
	var s stored
	err := o.db.QueryRowContext(context.Background(), "SELECT payload, created_at, published_at FROM outbox WHERE id = ?", id).
		Scan(&s.payload, &s.createdAt, &s.publishedAt)
	if err == sql.ErrNoRows {
		return s
	}
	if err != nil {
		t.Fatalf("reading outbox row %d: %v", id, err)
	}
	s.exists = true
	return s
}

func (o *mysqlOutbox) waitPublished(t *testing.T, id int64) stored {
	t.Helper()
	var s stored
	waitFor(t, fmt.Sprintf("row %d to be marked published", id), func() bool {
		s = o.row(t, id)
		return s.exists && s.publishedAt != nil
	})
	return s
}

func startMySQLRelay(t *testing.T, o *mysqlOutbox, brokers []string, cfg relay.Config) *running {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Columns = o.columns
	writer := relay.NewKafkaWriter(brokers)
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := relay.NewOn(cfg, relay.MySQLStore(o.db), writer, logger, reg, time.Now)
	if err != nil {
		t.Fatalf("relay.NewOn: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{relay: r, reg: reg, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-run.done:
			if err != nil {
				t.Errorf("relay.Run returned %v after cancellation, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("relay.Run did not return within 10s of cancellation")
		}
		_ = writer.Close()
	})
	return run
}

func TestRelayOnMariaDBPublishesRowsAndMarksThemAfterTheAck(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	for _, tc := range []struct {
		name    string
		schema  stacktest.Schema
		columns relay.Columns
	}{
		{"A row of seed schema A on MariaDB is published with its key, payload and stamps, then marked.", stacktest.MySQLSeedA, relay.SchemaAColumns()},
		{"A row of seed schema B on MariaDB is routed by its event type and marked.", stacktest.MySQLSeedB, relay.SchemaBColumns()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newMySQLOutbox(t, m, tc.schema, tc.columns)
			topic := s.NewTopic(t, 1, nil)
			startMySQLRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: topic})
			id := o.insert(t, "order", "ord-1", `{"n": 1}`)
			row := o.waitPublished(t, id)

			msgs := readAll(t, s.KafkaBrokers, topic)
			if got := ids(t, msgs); !slices.Equal(got, []int64{id}) {
				t.Fatalf("topic holds ids %v, want [%d]", got, id)
			}
			msg := msgs[0]
			if string(msg.Key) != "ord-1" || !sameJSON(t, string(msg.Value), `{"n": 1}`) {
				t.Errorf("message key %q value %s, want ord-1 and the payload", msg.Key, msg.Value)
			}
			h := headers(msg)
			// created_at comes back as the instant the database wrote (UTC
			// sessions), to the microsecond.
			if created := parseStamp(t, h, relay.HeaderCreatedAt); !created.Equal(row.createdAt) {
				t.Errorf("header created-at %v, row's created_at %v", created, row.createdAt)
			}
			// published_at is taken after the broker's ack: not before the
			// send (same machine, same clock; the database keeps
			// microseconds).
			sent := parseStamp(t, h, relay.HeaderSentAt)
			if row.publishedAt.Before(sent.Truncate(time.Microsecond)) {
				t.Errorf("published_at %v before the send at %v: it must be marked after the ack", row.publishedAt, sent)
			}
			if tc.columns.EventType != "" && h[relay.HeaderEventType] != "order" {
				t.Errorf("event-type header %q, want order", h[relay.HeaderEventType])
			}
		})
	}
}

// A row another transaction holds locked is skipped, not waited for:
// FOR UPDATE SKIP LOCKED (MariaDB 10.6+), so relays sharing a table, or a
// slow business transaction, never stall the others' rows.
func TestRelayOnMariaDBSkipsALockedRowAndPublishesItOnceReleased(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	o := newMySQLOutbox(t, m, stacktest.MySQLSeedA, relay.SchemaAColumns())
	topic := s.NewTopic(t, 1, nil)
	locked := o.insert(t, "order", "ord-1", `{"n": 1}`)
	free := o.insert(t, "order", "ord-2", `{"n": 2}`)

	ctx := context.Background()
	holder, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	var got int64
	if err := holder.QueryRowContext(ctx, "SELECT id FROM outbox WHERE id = ? FOR UPDATE", locked).Scan(&got); err != nil {
		t.Fatal(err)
	}

	run := startMySQLRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: topic})
	o.waitPublished(t, free)
	if r := o.row(t, locked); r.publishedAt != nil {
		t.Fatalf("the locked row was marked published at %v", r.publishedAt)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	o.waitPublished(t, locked)
	after := run.metric(t, "outbox_relay_polls_total")
	waitFor(t, "three more polls", func() bool { return run.metric(t, "outbox_relay_polls_total") >= after+3 })
	if ids := ids(t, readAll(t, s.KafkaBrokers, topic)); !slices.Equal(ids, []int64{free, locked}) {
		t.Errorf("topic holds ids %v, want [%d %d]: the free row first, each once", ids, free, locked)
	}
}
