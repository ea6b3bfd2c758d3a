package relay_test

// These tests run the relay against the project's real PostgreSQL and Kafka:
// start them with `deploy/local/stack.sh up` (or `make test`), then
// `go test ./internal/relay/...`. Without the stack they skip (and fail in CI).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// waitTimeout bounds every wait for an expected state.
const waitTimeout = 30 * time.Second

// outbox is one fresh database holding one outbox table.
type outbox struct {
	pool    *pgxpool.Pool
	columns relay.Columns
}

func newOutbox(t *testing.T, dsn, schema string, columns relay.Columns) *outbox {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatalf("loading the outbox schema: %v", err)
	}
	return &outbox{pool: pool, columns: columns}
}

// insert adds one row and returns its id. For schema B the route is the
// event type.
func (o *outbox) insert(t *testing.T, route, key, payload string) int64 {
	t.Helper()
	c := o.columns
	q := postgres.QuoteIdent
	sql := fmt.Sprintf("INSERT INTO %s (%s, %s, %s) VALUES ($1, $2, $3) RETURNING %s", postgres.QuoteTable(c.Table),
		q(c.Route), q(c.Key), q(c.Payload), q(c.ID))
	var id int64
	if err := o.pool.QueryRow(context.Background(), sql, route, key, payload).Scan(&id); err != nil {
		t.Fatalf("inserting an outbox row: %v", err)
	}
	return id
}

// stored is a row as the database holds it.
type stored struct {
	exists      bool
	payload     string
	createdAt   time.Time
	publishedAt *time.Time
}

func (o *outbox) row(t *testing.T, id int64) stored {
	t.Helper()
	sql := fmt.Sprintf("SELECT payload::text, created_at, published_at FROM %s WHERE id = $1", postgres.QuoteTable(o.columns.Table))
	var s stored
	err := o.pool.QueryRow(context.Background(), sql, id).Scan(&s.payload, &s.createdAt, &s.publishedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s
	case err != nil:
		t.Fatalf("reading outbox row %d: %v", id, err)
	}
	s.exists = true
	return s
}

// running is a relay started by startRelay; it stops when the test ends.
type running struct {
	relay *relay.Relay
	reg   *prometheus.Registry
	done  chan error
}

func startRelay(t *testing.T, o *outbox, brokers []string, cfg relay.Config) *running {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Columns = o.columns
	writer := relay.NewKafkaWriter(brokers)
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := relay.New(cfg, o.pool, writer, logger, reg, time.Now)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
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
		if err := writer.Close(); err != nil {
			t.Errorf("closing the Kafka writer: %v", err)
		}
	})
	return run
}

// metric returns the value of one counter or gauge sample, labels as pairs.
func (r *running) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			found := 0
			for i := 0; i+1 < len(labels); i += 2 {
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found++
					}
				}
			}
			if found != len(labels)/2 {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitPublished(t *testing.T, o *outbox, id int64) stored {
	t.Helper()
	var s stored
	waitFor(t, fmt.Sprintf("row %d to be marked published", id), func() bool {
		s = o.row(t, id)
		return s.exists && s.publishedAt != nil
	})
	return s
}

// readAll reads every message on every partition of topic, up to the high
// watermark it finds first: what the topic holds now, no more.
func readAll(t *testing.T, brokers []string, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatalf("dialing Kafka: %v", err)
	}
	defer conn.Close()
	partitions, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("reading partitions of %s: %v", topic, err)
	}
	var all []kafka.Message
	for _, p := range partitions {
		leader, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			t.Fatalf("dialing the leader of %s/%d: %v", topic, p.ID, err)
		}
		first, last, err := leader.ReadOffsets()
		leader.Close()
		if err != nil {
			t.Fatalf("reading offsets of %s/%d: %v", topic, p.ID, err)
		}
		if first == last {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("reading %s/%d at offset %d of [%d, %d): %v", topic, p.ID, r.Offset(), first, last, err)
			}
			all = append(all, m)
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return all
}

func headers(m kafka.Message) map[string]string {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

func ids(t *testing.T, msgs []kafka.Message) []int64 {
	t.Helper()
	var out []int64
	for _, m := range msgs {
		id, err := strconv.ParseInt(headers(m)[relay.HeaderID], 10, 64)
		if err != nil {
			t.Fatalf("message at %d/%d: header id: %v", m.Partition, m.Offset, err)
		}
		out = append(out, id)
	}
	return out
}

func parseStamp(t *testing.T, h map[string]string, name string) time.Time {
	t.Helper()
	v, ok := h[name]
	if !ok {
		t.Fatalf("header %s missing (headers %v)", name, h)
	}
	ts, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("header %s: %v", name, err)
	}
	return ts
}

func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("value %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

func TestRelayPublishesInsertedRows(t *testing.T) {
	s := stacktest.Load(t)
	withTable := func(c relay.Columns, table string) relay.Columns { c.Table = table; return c }
	tests := []struct {
		name          string
		schema        string
		columns       relay.Columns
		deletePublish bool
		route         string
		wantEventType bool
	}{
		{
			name:    "A row of seed schema A is published with its key, payload and stamps, and marked published.",
			schema:  outboxsql.SchemaA,
			columns: relay.SchemaAColumns(),
			route:   "order",
		},
		{
			name:          "A row of seed schema B, in a schema-qualified table, is published with its event type as a header.",
			schema:        outboxsql.SchemaB,
			columns:       withTable(relay.SchemaBColumns(), "public.outbox"),
			route:         "OrderPaid",
			wantEventType: true,
		},
		{
			name:          "A relay that deletes published rows publishes the row and leaves the table empty.",
			schema:        outboxsql.SchemaA,
			columns:       relay.SchemaAColumns(),
			deletePublish: true,
			route:         "order",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOutbox(t, s.NewDatabase(t), tt.schema, tt.columns)
			topic := s.NewTopic(t, 1, nil)
			run := startRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: topic, DeletePublished: tt.deletePublish})

			payload := `{"type":"OrderPaid","orderId":"ord-1042","amount":12.5}`
			id := o.insert(t, tt.route, "ord-1042", payload)
			before := o.row(t, id)

			var after stored
			if tt.deletePublish {
				waitFor(t, "the row to be deleted", func() bool { return !o.row(t, id).exists })
			} else {
				after = waitPublished(t, o, id)
				if after.publishedAt.Before(before.createdAt) {
					t.Errorf("published_at %s is before created_at %s", after.publishedAt, before.createdAt)
				}
			}

			msgs := readAll(t, s.KafkaBrokers, topic)
			if len(msgs) != 1 {
				t.Fatalf("topic holds %d messages, want 1", len(msgs))
			}
			m := msgs[0]
			if string(m.Key) != "ord-1042" {
				t.Errorf("key = %q, want ord-1042", m.Key)
			}
			// The value is the stored jsonb as PostgreSQL prints it.
			if !sameJSON(t, string(m.Value), payload) || string(m.Value) != before.payload {
				t.Errorf("value = %s, want the stored payload %s", m.Value, before.payload)
			}
			h := headers(m)
			if h[relay.HeaderID] != strconv.FormatInt(id, 10) {
				t.Errorf("header id = %q, want %d", h[relay.HeaderID], id)
			}
			if created := parseStamp(t, h, relay.HeaderCreatedAt); !created.Equal(before.createdAt) {
				t.Errorf("header %s = %s, want created_at %s", relay.HeaderCreatedAt, created, before.createdAt)
			}
			readAt, sentAt := parseStamp(t, h, relay.HeaderReadAt), parseStamp(t, h, relay.HeaderSentAt)
			if sentAt.Before(readAt) {
				t.Errorf("sent-at %s is before read-at %s", sentAt, readAt)
			}
			if !m.Time.Equal(sentAt.Truncate(time.Millisecond)) {
				t.Errorf("record timestamp %s, want the send time %s in milliseconds", m.Time, sentAt)
			}
			if got, ok := h[relay.HeaderEventType]; tt.wantEventType && got != tt.route || !tt.wantEventType && ok {
				t.Errorf("header %s = %q (present %t), want %q", relay.HeaderEventType, got, ok, map[bool]string{true: tt.route}[tt.wantEventType])
			}
			if got := run.metric(t, "outbox_relay_rows_published_total"); got != 1 {
				t.Errorf("outbox_relay_rows_published_total = %v, want 1", got)
			}

			// kcat, an independent client, sees the same key and headers.
			wantHeaders := fmt.Sprintf("id=%d,outbox-created-at=%s,outbox-relay-read-at=%s,outbox-relay-sent-at=%s",
				id, h[relay.HeaderCreatedAt], h[relay.HeaderReadAt], h[relay.HeaderSentAt])
			if tt.wantEventType {
				wantHeaders += ",event-type=" + tt.route
			}
			lines := strings.FieldsFunc(s.Kcat(t, topic, "%k|%h|%s\n"), func(r rune) bool { return r == '\n' })
			if len(lines) != 1 {
				t.Fatalf("kcat printed %d messages %q, want 1", len(lines), lines)
			}
			if want := "ord-1042|" + wantHeaders + "|" + string(m.Value); lines[0] != want {
				t.Errorf("kcat printed\n %s\nwant\n %s", lines[0], want)
			}
		})
	}
}

func TestRelayKeepsEachKeyOnOnePartitionInOrder(t *testing.T) {
	s := stacktest.Load(t)
	o := newOutbox(t, s.NewDatabase(t), outboxsql.SchemaA, relay.SchemaAColumns())
	topic := s.NewTopic(t, 3, nil)
	keys := []string{"ord-1", "ord-2", "ord-3", "ord-4"}
	var last int64
	for i := range 5 {
		for _, k := range keys {
			last = o.insert(t, "order", k, fmt.Sprintf(`{"seq":%d}`, i))
		}
	}
	startRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: topic, BatchSize: 7})
	waitPublished(t, o, last)

	msgs := readAll(t, s.KafkaBrokers, topic)
	if len(msgs) != 5*len(keys) {
		t.Fatalf("topic holds %d messages, want %d", len(msgs), 5*len(keys))
	}
	partition := map[string]int{}
	lastID := map[string]int64{}
	for i, m := range msgs {
		k := string(m.Key)
		if p, ok := partition[k]; ok && p != m.Partition {
			t.Errorf("key %s on partitions %d and %d", k, p, m.Partition)
		}
		partition[k] = m.Partition
		id := ids(t, msgs[i:i+1])[0]
		if id <= lastID[k] {
			t.Errorf("key %s: id %d after id %d, want increasing ids", k, id, lastID[k])
		}
		lastID[k] = id
	}
}

func TestRelayPausedLeavesRowsUnpublishedUntilResumed(t *testing.T) {
	s := stacktest.Load(t)
	o := newOutbox(t, s.NewDatabase(t), outboxsql.SchemaA, relay.SchemaAColumns())
	topic := s.NewTopic(t, 1, nil)
	run := startRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: topic})

	run.relay.Faults().Pause()
	if got := run.metric(t, "outbox_relay_paused"); got != 1 {
		t.Errorf("outbox_relay_paused = %v while paused, want 1", got)
	}
	// A poll that started before Pause may still be running: wait for one
	// paused poll before taking the baseline.
	waitFor(t, "a paused poll", func() bool { return run.metric(t, "outbox_relay_faults_injected_total", "fault", "pause") >= 1 })
	claims := run.metric(t, "outbox_relay_polls_total")
	skipped := run.metric(t, "outbox_relay_faults_injected_total", "fault", "pause")

	id := o.insert(t, "order", "ord-7", `{"n":7}`)
	waitFor(t, "five more paused polls", func() bool {
		return run.metric(t, "outbox_relay_faults_injected_total", "fault", "pause") >= skipped+5
	})
	if got := o.row(t, id); got.publishedAt != nil {
		t.Fatalf("row published at %s while the relay was paused", got.publishedAt)
	}
	if got := run.metric(t, "outbox_relay_polls_total"); got != claims {
		t.Errorf("outbox_relay_polls_total went from %v to %v while paused, want no claims", claims, got)
	}
	if msgs := readAll(t, s.KafkaBrokers, topic); len(msgs) != 0 {
		t.Fatalf("topic holds %d messages while paused, want 0", len(msgs))
	}

	run.relay.Faults().Resume()
	waitPublished(t, o, id)
	// Let a few more polls pass: a row published twice would show up now.
	after := run.metric(t, "outbox_relay_polls_total")
	waitFor(t, "three more polls", func() bool { return run.metric(t, "outbox_relay_polls_total") >= after+3 })
	if got := ids(t, readAll(t, s.KafkaBrokers, topic)); !slices.Equal(got, []int64{id}) {
		t.Errorf("topic holds ids %v, want exactly [%d]", got, id)
	}
	if got := run.metric(t, "outbox_relay_paused"); got != 0 {
		t.Errorf("outbox_relay_paused = %v after resume, want 0", got)
	}
}

func TestRelayInjectsFaults(t *testing.T) {
	s := stacktest.Load(t)
	const delay = 300 * time.Millisecond
	tests := []struct {
		name   string
		inject func(*relay.Faults) error
		fault  string
		// check gets the ids of two rows inserted one after the other (the
		// second once the first is published) and what the topic holds.
		check func(t *testing.T, o *outbox, first, second int64, msgs []kafka.Message)
	}{
		{
			name:   "Duplicating the next row sends two copies of it and one of the row after.",
			inject: func(f *relay.Faults) error { return f.DuplicateNext(1) },
			fault:  "duplicate",
			check: func(t *testing.T, o *outbox, first, second int64, msgs []kafka.Message) {
				if got := ids(t, msgs); !slices.Equal(got, []int64{first, first, second}) {
					t.Errorf("topic holds ids %v, want [%d %d %d]", got, first, first, second)
				}
			},
		},
		{
			name:   "Dropping the next row marks it published but sends only the row after.",
			inject: func(f *relay.Faults) error { return f.DropNext(1) },
			fault:  "drop",
			check: func(t *testing.T, o *outbox, first, second int64, msgs []kafka.Message) {
				if got := ids(t, msgs); !slices.Equal(got, []int64{second}) {
					t.Errorf("topic holds ids %v, want [%d]", got, second)
				}
			},
		},
		{
			name:   "A publish delay shows between read and send, and between commit and publish.",
			inject: func(f *relay.Faults) error { return f.SetPublishDelay(delay) },
			fault:  "delay",
			check: func(t *testing.T, o *outbox, first, second int64, msgs []kafka.Message) {
				if got := ids(t, msgs); !slices.Equal(got, []int64{first, second}) {
					t.Fatalf("topic holds ids %v, want [%d %d]", got, first, second)
				}
				for _, m := range msgs {
					h := headers(m)
					if d := parseStamp(t, h, relay.HeaderSentAt).Sub(parseStamp(t, h, relay.HeaderReadAt)); d < delay {
						t.Errorf("message %s: sent-at minus read-at = %s, want at least %s", h[relay.HeaderID], d, delay)
					}
				}
				row := o.row(t, first)
				if d := row.publishedAt.Sub(row.createdAt); d < delay {
					t.Errorf("published_at minus created_at = %s, want at least %s", d, delay)
				}
			},
		},
		{
			name:   "A mark delay writes published_at that long after the record was sent.",
			inject: func(f *relay.Faults) error { return f.SetMarkDelay(delay) },
			fault:  "mark_delay",
			check: func(t *testing.T, o *outbox, first, second int64, msgs []kafka.Message) {
				if got := ids(t, msgs); !slices.Equal(got, []int64{first, second}) {
					t.Fatalf("topic holds ids %v, want [%d %d]", got, first, second)
				}
				for i, id := range []int64{first, second} {
					// The database and the relay share this machine's clock.
					sent := parseStamp(t, headers(msgs[i]), relay.HeaderSentAt)
					if d := o.row(t, id).publishedAt.Sub(sent); d < delay {
						t.Errorf("row %d: published_at minus sent-at = %s, want at least %s", id, d, delay)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOutbox(t, s.NewDatabase(t), outboxsql.SchemaA, relay.SchemaAColumns())
			topic := s.NewTopic(t, 1, nil)
			run := startRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: topic})
			if err := tt.inject(run.relay.Faults()); err != nil {
				t.Fatal(err)
			}
			first := o.insert(t, "order", "ord-1", `{"n":1}`)
			waitPublished(t, o, first)
			second := o.insert(t, "order", "ord-2", `{"n":2}`)
			waitPublished(t, o, second)
			tt.check(t, o, first, second, readAll(t, s.KafkaBrokers, topic))
			if got := run.metric(t, "outbox_relay_faults_injected_total", "fault", tt.fault); got < 1 {
				t.Errorf("outbox_relay_faults_injected_total{fault=%q} = %v, want at least 1", tt.fault, got)
			}
		})
	}
}

func TestRelaySurvivesBrokenDependencies(t *testing.T) {
	s := stacktest.Load(t)
	tests := []struct {
		name      string
		brokers   func(t *testing.T) []string
		topic     func(t *testing.T) string
		stage     string
		unchanged bool
	}{
		{
			name:    "An unreachable Kafka counts Kafka errors and leaves the row unpublished.",
			brokers: func(*testing.T) []string { return []string{"127.0.0.1:1"} },
			topic:   func(t *testing.T) string { return "outbox.event.unreachable" },
			stage:   "kafka",
		},
		{
			name:    "A topic that does not exist is not created; the row stays unpublished.",
			brokers: func(*testing.T) []string { return s.KafkaBrokers },
			topic: func(t *testing.T) string {
				return fmt.Sprintf("outbox.missing.%d", time.Now().UnixNano())
			},
			stage: "kafka",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOutbox(t, s.NewDatabase(t), outboxsql.SchemaA, relay.SchemaAColumns())
			topic := tt.topic(t)
			run := startRelay(t, o, tt.brokers(t), relay.Config{
				TopicTemplate: topic, MaxBackoff: 100 * time.Millisecond, PublishTimeout: 3 * time.Second,
			})
			id := o.insert(t, "order", "ord-9", `{"n":9}`)
			waitFor(t, "three failed polls", func() bool {
				return run.metric(t, "outbox_relay_poll_errors_total", "stage", tt.stage) >= 3
			})
			if got := o.row(t, id); got.publishedAt != nil {
				t.Errorf("row published at %s although Kafka failed", got.publishedAt)
			}
			select {
			case err := <-run.done:
				t.Fatalf("relay.Run returned %v on a transient error, want it to keep polling", err)
			default:
			}
			if got := run.metric(t, "outbox_relay_rows_published_total"); got != 0 {
				t.Errorf("outbox_relay_rows_published_total = %v, want 0", got)
			}
			if tt.brokers(t)[0] == s.KafkaBrokers[0] {
				conn, err := kafka.Dial("tcp", s.KafkaBrokers[0])
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if parts, err := conn.ReadPartitions(topic); err == nil && len(parts) > 0 {
					t.Errorf("topic %s was created by the relay, want no auto-creation", topic)
				}
			}
		})
	}

	t.Run("An unreachable database counts database errors and the relay keeps polling.", func(t *testing.T) {
		pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		o := &outbox{pool: pool, columns: relay.SchemaAColumns()}
		run := startRelay(t, o, s.KafkaBrokers, relay.Config{TopicTemplate: "unused", MaxBackoff: 100 * time.Millisecond})
		waitFor(t, "three failed polls", func() bool {
			return run.metric(t, "outbox_relay_poll_errors_total", "stage", "database") >= 3
		})
		select {
		case err := <-run.done:
			t.Fatalf("relay.Run returned %v on a transient error, want it to keep polling", err)
		default:
		}
	})
}
