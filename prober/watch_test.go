package prober

// Tests of the watchers (watch*.go), diagnose and lint. Those that need a
// server run against the project's real PostgreSQL and Kafka: start them
// with `deploy/local/stack.sh up` (or `make test`), then
// `go test ./prober/ -run 'Watch|Backlog|Diagnose|Lint|Slot|Transaction|ConsumerLag'`.
// Without the stack they skip (and fail in CI). Each test gets a fresh
// database and a fresh topic, so they run in parallel.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// watchWait bounds every wait for an expected state.
const watchWait = 30 * time.Second

// seedSchema is one of the supported outbox tables with its column mapping.
type seedSchema struct {
	name    string
	sql     string
	columns string // YAML of outbox.columns
	route   string // the route column, for inserts
	kind    string // relay.kind
}

var (
	seedA = seedSchema{name: "seed schema A", sql: outboxsql.SchemaA, route: "aggregate_type", kind: config.RelayPolling,
		columns: "{}"}
	seedB = seedSchema{name: "seed schema B", sql: outboxsql.SchemaB, route: "event_type", kind: config.RelayPolling,
		columns: "{route: event_type, event_type: event_type}"}
	seedDebezium = seedSchema{name: "Debezium's outbox", sql: outboxsql.DebeziumOutbox, route: "aggregatetype", kind: config.RelayCDC,
		columns: "{route: aggregatetype, key: aggregateid, event_type: type}"}
)

// pipelineSpec is what a test varies in a pipeline's configuration.
type pipelineSpec struct {
	dsn     string
	schema  seedSchema
	brokers []string
	topic   string
	budgets string // YAML map; default {end_to_end: 30s}
	watch   string // YAML of watch; default {}
	idGen   string // outbox.id_generation; default database
}

// pipelineYAMLFor renders a whole configuration file with one pipeline
// named "orders".
func pipelineYAMLFor(s pipelineSpec) string {
	budgets := s.budgets
	if budgets == "" {
		budgets = "{end_to_end: 30s}"
	}
	watch := s.watch
	if watch == "" {
		watch = "{}"
	}
	brokers := s.brokers
	if len(brokers) == 0 {
		brokers = []string{"127.0.0.1:1"}
	}
	extra := ""
	if s.idGen != "" {
		extra = "\n      id_generation: " + s.idGen
	}
	topic := s.topic
	if topic == "" {
		topic = "outbox.event.outbox-canary"
	}
	return fmt.Sprintf(`instance_id: test
signing_key: {value: test-key}
pipelines:
  - name: orders
    database: {dsn: {value: %q}}
    outbox:
      table: outbox
      columns: %s%s
    relay: {kind: %s}
    canary: {lost_after: 5m}
    kafka: {brokers: [%s], topic: %q}
    budgets: %s
    watch: %s
`, s.dsn, s.schema.columns, extra, s.schema.kind, strings.Join(brokers, ", "), topic, budgets, watch)
}

// loadPipeline turns a spec into a validated, defaulted pipeline.
func loadPipeline(t *testing.T, s pipelineSpec) *config.Pipeline {
	t.Helper()
	cfg, err := config.Load([]byte(pipelineYAMLFor(s)))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, pipelineYAMLFor(s))
	}
	return &cfg.Pipelines[0]
}

// freshOutbox creates a database holding the schema's outbox table and
// returns its DSN and a pool on it.
func freshOutbox(t *testing.T, st stacktest.Stack, schema seedSchema) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := st.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), schema.sql); err != nil {
		t.Fatalf("load %s: %v", schema.name, err)
	}
	return dsn, pool
}

// execer is a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertRow inserts one business row into a seed outbox; age backdates its
// created_at on the database clock.
func insertRow(t *testing.T, q execer, schema seedSchema, published bool, age time.Duration) {
	t.Helper()
	sql := fmt.Sprintf(`INSERT INTO outbox (%s, aggregate_id, payload, created_at, published_at)
		VALUES ('order', 'ord-1', '{}', clock_timestamp() - make_interval(secs => $1), CASE WHEN $2 THEN clock_timestamp() END)`, schema.route)
	if _, err := q.Exec(context.Background(), sql, age.Seconds(), published); err != nil {
		t.Fatalf("insert an outbox row: %v", err)
	}
}

// closedAddr returns a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}

// logBuffer is a slog handler target that tests can read while the code
// under test writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newWatchMetrics(t *testing.T, p *config.Pipeline) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{*p})
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return m
}

// eventually polls cond until it is true or watchWait passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(watchWait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s; last: %s", what, watchWait, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWatcherSampleCountsErrorsByWatcherWhenServersAreUnreachable(t *testing.T) {
	t.Parallel()
	connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error_code":404,"message":"Connector outbox not found"}`, http.StatusNotFound)
	}))
	t.Cleanup(connect.Close)
	pg := closedAddr(t)
	p := loadPipeline(t, pipelineSpec{
		dsn: "postgres://u:secret@" + pg + "/x?connect_timeout=5", schema: seedDebezium,
		watch: fmt.Sprintf("{consumer_groups: [{group: billing, topic: orders}], connect_url: %q, connector: outbox}", connect.URL),
	})
	pool, err := pgxpool.New(context.Background(), "postgres://u:secret@"+pg+"/x?connect_timeout=5")
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	client := &kafka.Client{Addr: kafka.TCP(closedAddr(t)), Timeout: 5 * time.Second}
	m := newWatchMetrics(t, p)
	var logs logBuffer
	w := &Watcher{Pipeline: p, DB: pool, Kafka: client, Metrics: m, Logger: logs.logger()}

	w.Sample(context.Background())
	w.Sample(context.Background())

	for _, watcher := range []string{WatcherTransactions, WatcherSlots, WatcherConsumers, WatcherConnector} {
		if got := testutil.ToFloat64(m.WatchErrors.WithLabelValues("orders", watcher)); got != 2 {
			t.Errorf("watch errors of %s = %v after two samples, want 2", watcher, got)
		}
	}
	// A cdc pipeline has no backlog watcher: its table has no published_at.
	if got := testutil.CollectAndCount(m.WatchErrors, "outbox_canary_watch_errors_total"); got != 4 {
		t.Errorf("watch error series = %d, want 4 (no backlog series for a cdc pipeline)", got)
	}
	if got := testutil.ToFloat64(m.ConnectorRunning.WithLabelValues("orders", "outbox")); got != 0 {
		t.Errorf("connector running = %v while Kafka Connect says 404, want 0", got)
	}
	if got := testutil.CollectAndCount(m.OldestTransactionAge); got != 0 {
		t.Errorf("oldest transaction age has %d series although the database was never reached; want none", got)
	}
	if strings.Contains(logs.String(), "secret") {
		t.Errorf("the log shows the DSN's password:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "watcher=transactions") {
		t.Errorf("the log does not name the failed watcher:\n%s", logs.String())
	}
}

func TestWatcherSampleSetsTheMetricsOfAPollingPipeline(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := freshOutbox(t, st, seedA)
	topic := st.NewTopic(t, 1, nil)
	produceAged(t, st.KafkaBrokers, topic, 5, time.Minute)
	p := loadPipeline(t, pipelineSpec{dsn: dsn, schema: seedA, brokers: st.KafkaBrokers,
		watch: fmt.Sprintf("{consumer_groups: [{group: billing, topic: %q}]}", topic)})
	insertRow(t, pool, seedA, true, time.Hour)
	insertRow(t, pool, seedA, false, 40*time.Second)
	insertRow(t, pool, seedA, false, 0)

	m := newWatchMetrics(t, p)
	var logs logBuffer
	w := &Watcher{Pipeline: p, DB: pool, Kafka: st.KafkaClient(), Metrics: m, Logger: logs.logger()}
	w.Sample(context.Background())

	if got := testutil.ToFloat64(m.BacklogRows.WithLabelValues("orders")); got != 2 {
		t.Errorf("backlog rows = %v, want 2 (the published row is not backlog)", got)
	}
	if got := testutil.ToFloat64(m.OldestUnpublishedAge.WithLabelValues("orders")); got < 40 || got >= 3600 {
		t.Errorf("oldest unpublished age = %vs, want the 40s-old row's age (not the published hour-old row's)", got)
	}
	if got := testutil.ToFloat64(m.LongTransactions.WithLabelValues("orders")); got != 0 {
		t.Errorf("long transactions = %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.ConsumerLagMessages.WithLabelValues("orders", "billing", topic)); got != 5 {
		t.Errorf("consumer lag = %v messages, want 5 (the group never committed)", got)
	}
	if got := testutil.ToFloat64(m.ConsumerLagSeconds.WithLabelValues("orders", "billing", topic)); got < 55 {
		t.Errorf("consumer lag = %vs, want at least 55 (the messages were stamped a minute ago)", got)
	}
	if got := testutil.CollectAndCount(m.WatchErrors); got != 0 {
		t.Errorf("%d watch error series, want none:\n%s", got, logs.String())
	}
	if got := testutil.CollectAndCount(m.SlotActive); got != 0 {
		t.Errorf("a polling pipeline reported %d replication slot series", got)
	}
	if strings.Contains(logs.String(), "no partial index") {
		t.Errorf("warned about a missing index that seed schema A has:\n%s", logs.String())
	}
}

// connectStatus renders a Kafka Connect status body: the connector's state
// on worker w1, then each task as "STATE@worker" (task ids from 0).
func connectStatus(connector string, tasks ...string) string {
	var ts []string
	for i, t := range tasks {
		state, worker, _ := strings.Cut(t, "@")
		ts = append(ts, fmt.Sprintf(`{"id":%d,"state":%q,"worker_id":%q}`, i, state, worker))
	}
	return fmt.Sprintf(`{"name":"outbox","connector":{"state":%q,"worker_id":"w1:8083"},"tasks":[%s],"type":"source"}`,
		connector, strings.Join(ts, ","))
}

// connectUnreachable in a replayed sequence answers 503.
const connectUnreachable = "503"

func TestWatcherCountsTheConnectorRestartsItObserves(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// statuses are the bodies Kafka Connect answers, one per sample.
		statuses []string
		// want is the restart counter after each sample.
		want []float64
	}{
		{"A connector that keeps running counts no restart.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 0}},
		{"A task that fails and later runs again counts one restart, when it runs.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING", "FAILED@w1"), connectStatus("RUNNING", "FAILED@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 0, 1}},
		{"A task failed at the first sample that runs again was restarted.",
			[]string{connectStatus("RUNNING", "FAILED@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 1}},
		{"A restart of the connector with its tasks counts the connector and each task.",
			[]string{connectStatus("RUNNING", "RUNNING@w1", "RUNNING@w1"), connectStatus("RESTARTING", "RESTARTING@w1", "UNASSIGNED@w1"), connectStatus("RUNNING", "RUNNING@w1", "RUNNING@w1")},
			[]float64{0, 0, 3}},
		{"A task that vanishes from the status and comes back running was restarted.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 1}},
		{"A task that moves to another worker was restarted there.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING", "RUNNING@w2"), connectStatus("RUNNING", "RUNNING@w2")},
			[]float64{0, 1, 1}},
		{"A first start, from unassigned to running, is not a restart.",
			[]string{connectStatus("RUNNING", "UNASSIGNED@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0}},
		{"Resuming a paused connector is not a restart.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectStatus("PAUSED", "PAUSED@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 0}},
		{"A failed task seen running after Connect was unreachable counts once.",
			[]string{connectStatus("RUNNING", "FAILED@w1"), connectUnreachable, connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 1, 1}},
		{"A running task still running after Connect was unreachable is no restart that sampling can see.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectUnreachable, connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 0}},
		{"Restarts add up over a restart loop.",
			[]string{connectStatus("RUNNING", "RUNNING@w1"), connectStatus("RUNNING", "FAILED@w1"), connectStatus("RUNNING", "RUNNING@w1"),
				connectStatus("RUNNING", "FAILED@w1"), connectStatus("RUNNING", "RUNNING@w1")},
			[]float64{0, 0, 1, 1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			body := ""
			connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.URL.Path != "/connectors/outbox/status" {
					http.NotFound(w, r)
					return
				}
				if body == connectUnreachable {
					http.Error(w, "unavailable", http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, body)
			}))
			t.Cleanup(connect.Close)
			p := loadPipeline(t, pipelineSpec{dsn: "postgres://u@127.0.0.1:1/x", schema: seedDebezium,
				watch: fmt.Sprintf("{connect_url: %q, connector: outbox}", connect.URL)})
			m := newWatchMetrics(t, p)
			var logs logBuffer
			// No database, no Kafka: the connector is the only probe.
			w := &Watcher{Pipeline: p, Metrics: m, Logger: logs.logger()}
			var got []float64
			for _, st := range tc.statuses {
				mu.Lock()
				body = st
				mu.Unlock()
				w.Sample(context.Background())
				got = append(got, testutil.ToFloat64(m.ConnectorRestarts.WithLabelValues("orders", "outbox")))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("restarts after each sample = %v, want %v\n%s", got, tc.want, logs.String())
			}
			if n := testutil.CollectAndCount(m.ConnectorRestarts); n != 1 {
				t.Errorf("%d restart series, want the connector's one, created at zero", n)
			}
		})
	}
}

func TestWatcherDoesNotCountTheErrorsOfItsOwnShutdown(t *testing.T) {
	t.Parallel()
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		// Hang like a slow Connect worker, until the client gives up.
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); connect.Close() })
	p := loadPipeline(t, pipelineSpec{dsn: "postgres://u@127.0.0.1:1/x", schema: seedDebezium,
		watch: fmt.Sprintf("{interval: 1h, connect_url: %q, connector: outbox}", connect.URL)})
	m := newWatchMetrics(t, p)
	var logs logBuffer
	w := &Watcher{Pipeline: p, Metrics: m, Logger: logs.logger(), HTTP: &http.Client{Timeout: time.Minute}}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	select {
	case <-asked:
	case <-time.After(watchWait):
		t.Fatal("the watcher never asked Kafka Connect")
	}
	cancel() // the service shuts down mid-request
	select {
	case <-done:
	case <-time.After(watchWait):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if got := testutil.ToFloat64(m.WatchErrors.WithLabelValues("orders", WatcherConnector)); got != 0 {
		t.Errorf("connector watch errors = %v after a shutdown, want 0", got)
	}
	if strings.Contains(logs.String(), "watcher failed") {
		t.Errorf("the shutdown was logged as a watcher failure:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "context canceled") {
		t.Errorf("the cancelled request left no trace at debug level:\n%s", logs.String())
	}

	// The same hang is a failure when it is the request's own deadline,
	// not the service's shutdown.
	w.HTTP = &http.Client{Timeout: 100 * time.Millisecond}
	w.Sample(context.Background())
	if got := testutil.ToFloat64(m.WatchErrors.WithLabelValues("orders", WatcherConnector)); got != 1 {
		t.Errorf("connector watch errors = %v after a timed-out request, want 1", got)
	}
}
