package watch

// Tests of the watchers. Those that need a server run against the
// project's real PostgreSQL and Kafka: start them with
// `deploy/local/stack.sh up` (or `make test`), then `go test ./internal/watch/`.
// Without the stack they skip (and fail in CI). Each test gets a fresh
// database and a fresh topic, so they run in parallel.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

// watchWait bounds every wait for an expected state.
const watchWait = 30 * time.Second

// pgDB is a PostgreSQL database's watchers' questions on q.
func pgDB(q postgres.Querier) outboxdb.Watched { return postgres.NewProbes(q, "test") }

// newWatcher builds a watcher with fresh metrics, failing the test on error.
func newWatcher(t *testing.T, o Options) (*Watcher, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	o.Metrics = m
	w, err := New(o)
	if err != nil {
		t.Fatalf("watcher: %v", err)
	}
	return w, m
}

func TestWatcherSampleCountsErrorsByWatcherWhenServersAreUnreachable(t *testing.T) {
	t.Parallel()
	connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error_code":404,"message":"Connector outbox not found"}`, http.StatusNotFound)
	}))
	t.Cleanup(connect.Close)
	pg := stacktest.ClosedAddr(t)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{
		DSN: "postgres://u:secret@" + pg + "/x?connect_timeout=5", Schema: stacktest.SeedDebezium,
		Watch: fmt.Sprintf("{consumer_groups: [{group: billing, topic: orders}], connect_url: %q, connector: outbox}", connect.URL),
	})
	pool, err := pgxpool.New(context.Background(), "postgres://u:secret@"+pg+"/x?connect_timeout=5")
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	client := &kafka.Client{Addr: kafka.TCP(stacktest.ClosedAddr(t)), Timeout: 5 * time.Second}
	var logs stacktest.SyncBuffer
	w, m := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Kafka: client, Logger: logs.Logger()})

	w.Sample(context.Background())
	w.Sample(context.Background())

	for _, watcher := range []string{WatcherTransactions, WatcherSlots, WatcherConsumers, WatcherConnector} {
		if got := testutil.ToFloat64(m.Errors.WithLabelValues("orders", watcher)); got != 2 {
			t.Errorf("watch errors of %s = %v after two samples, want 2", watcher, got)
		}
		if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", watcher)); got != 0 {
			t.Errorf("watcher_up of %s = %v while it cannot reach its server, want 0", watcher, got)
		}
		if n := strings.Count(logs.String(), `level=WARN msg="watcher failing; its series are withdrawn until it recovers" pipeline=orders watcher=`+watcher+" "); n != 1 {
			t.Errorf("watcher %s was warned about %d times over two failed samples, want once (when it started failing):\n%s", watcher, n, logs.String())
		}
	}
	// A cdc pipeline has no backlog watcher: its table has no published_at.
	if got := testutil.CollectAndCount(m.Errors, slo.MetricWatchErrors); got != 4 {
		t.Errorf("watch error series = %d, want 4 (no backlog series for a cdc pipeline)", got)
	}
	if got := testutil.CollectAndCount(m.ConnectorRunning); got != 0 {
		t.Errorf("connector running has %d series while Kafka Connect says 404, want none: a blind watcher reports nothing", got)
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
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	topic := st.NewTopic(t, 1, nil)
	st.ProduceAged(t, topic, 5, time.Minute)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA, Brokers: st.KafkaBrokers,
		Watch: fmt.Sprintf("{consumer_groups: [{group: billing, topic: %q}]}", topic)})
	stacktest.InsertRow(t, pool, stacktest.SeedA, true, time.Hour)
	stacktest.InsertRow(t, pool, stacktest.SeedA, false, 40*time.Second)
	stacktest.InsertRow(t, pool, stacktest.SeedA, false, 0)

	var logs stacktest.SyncBuffer
	w, m := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Kafka: st.KafkaClient(), Logger: logs.Logger()})
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
	if got := testutil.CollectAndCount(m.Errors); got != 0 {
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
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://u@127.0.0.1:1/x", Schema: stacktest.SeedDebezium,
				Watch: fmt.Sprintf("{connect_url: %q, connector: outbox}", connect.URL)})
			var logs stacktest.SyncBuffer
			// No database, no Kafka: the connector is the only probe.
			w, m := newWatcher(t, Options{Pipeline: p, Logger: logs.Logger()})
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
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://u@127.0.0.1:1/x", Schema: stacktest.SeedDebezium,
		Watch: fmt.Sprintf("{interval: 1h, connect_url: %q, connector: outbox}", connect.URL)})
	var logs stacktest.SyncBuffer
	w, m := newWatcher(t, Options{Pipeline: p, Logger: logs.Logger(), HTTP: &http.Client{Timeout: time.Minute}})

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
	if got := testutil.ToFloat64(m.Errors.WithLabelValues("orders", WatcherConnector)); got != 0 {
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
	w.http = &http.Client{Timeout: 100 * time.Millisecond}
	w.Sample(context.Background())
	if got := testutil.ToFloat64(m.Errors.WithLabelValues("orders", WatcherConnector)); got != 1 {
		t.Errorf("connector watch errors = %v after a timed-out request, want 1", got)
	}
}

func TestWatchSlotConfinesTheSlotWatcherToThePipelinesSlot(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	sp := st.NewSlotPair(t)
	dsn, pool, ours, leftover, suffix := sp.DSN, sp.Pool, sp.Ours, sp.Leftover, sp.Suffix
	ctx := context.Background()

	t.Run("QuerySlots returns the named slot alone, every slot without a name, nothing for a missing one.", func(t *testing.T) {
		names := func(slot string) string {
			slots, err := postgres.QuerySlots(ctx, pool, slot)
			if err != nil {
				t.Fatalf("postgres.QuerySlots(%q): %v", slot, err)
			}
			var out []string
			for _, s := range slots {
				out = append(out, fmt.Sprintf("%s active=%t", s.Name, s.Active))
			}
			return strings.Join(out, ", ")
		}
		for _, tc := range []struct{ slot, want string }{
			{ours, ours + " active=true"},
			{leftover, leftover + " active=false"},
			{"", leftover + " active=false, " + ours + " active=true"},
			{"missing_" + suffix, ""},
		} {
			if got := names(tc.slot); got != tc.want {
				t.Errorf("postgres.QuerySlots(%q) = [%s], want [%s]", tc.slot, got, tc.want)
			}
		}
	})

	watch := func(slot string) (*Metrics, *stacktest.SyncBuffer) {
		t.Helper()
		spec := stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedDebezium, IDGen: "uuid"}
		if slot != "" {
			spec.Watch = fmt.Sprintf("{slot: %s}", slot)
		}
		p := stacktest.LoadPipeline(t, spec)
		logs := &stacktest.SyncBuffer{}
		w, m := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Logger: logs.Logger()})
		w.Sample(ctx)
		w.Sample(ctx)
		if n := testutil.CollectAndCount(m.Errors); n != 0 {
			t.Errorf("%d watch error series, want none:\n%s", n, logs.String())
		}
		return m, logs
	}

	t.Run("With watch.slot the watcher reports that slot only, and does not ask for watch.slot.", func(t *testing.T) {
		m, logs := watch(ours)
		if n := testutil.CollectAndCount(m.SlotActive); n != 1 {
			t.Errorf("%d slot_active series, want 1: the leftover slot is not this pipeline's", n)
		}
		if got := testutil.ToFloat64(m.SlotActive.WithLabelValues("orders", ours)); got != 1 {
			t.Errorf("slot_active{slot=%s} = %v, want 1", ours, got)
		}
		if n := testutil.CollectAndCount(m.SlotWALStatus); n != len(postgres.WALStatuses()) {
			t.Errorf("%d wal_status series, want %d (our slot's)", n, len(postgres.WALStatuses()))
		}
		if strings.Contains(logs.String(), "watch.slot is not set") {
			t.Errorf("warned that watch.slot is not set although it is:\n%s", logs.String())
		}
	})

	t.Run("Without watch.slot the watcher reports every slot and warns once that watch.slot should be set.", func(t *testing.T) {
		m, logs := watch("")
		if n := testutil.CollectAndCount(m.SlotActive); n != 2 {
			t.Errorf("%d slot_active series, want 2 (every slot of the database)", n)
		}
		if got := testutil.ToFloat64(m.SlotActive.WithLabelValues("orders", leftover)); got != 0 {
			t.Errorf("slot_active{slot=%s} = %v, want 0", leftover, got)
		}
		if n := strings.Count(logs.String(), "watch.slot is not set"); n != 1 {
			t.Errorf("warned %d times over two samples that watch.slot is not set, want once:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), leftover) {
			t.Errorf("the warning does not list the slots it watches:\n%s", logs.String())
		}
	})

	t.Run("A watch.slot that does not exist is reported inactive, with a warning once.", func(t *testing.T) {
		missing := "missing_" + suffix
		m, logs := watch(missing)
		if n := testutil.CollectAndCount(m.SlotActive); n != 1 {
			t.Errorf("%d slot_active series, want 1 (the missing slot's)", n)
		}
		if got := testutil.ToFloat64(m.SlotActive.WithLabelValues("orders", missing)); got != 0 {
			t.Errorf("slot_active{slot=%s} = %v, want 0", missing, got)
		}
		if n := testutil.CollectAndCount(m.SlotRetainedWAL); n != 0 {
			t.Errorf("%d retained WAL series for a slot that does not exist, want none", n)
		}
		if n := strings.Count(logs.String(), "does not exist"); n != 1 {
			t.Errorf("warned %d times over two samples that the slot is missing, want once:\n%s", n, logs.String())
		}
	})

	t.Run("A slot that is dropped takes its series with it, so its alert can resolve.", func(t *testing.T) {
		gone := "gone_" + suffix
		if _, err := pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", gone); err != nil {
			t.Fatalf("create slot %s: %v", gone, err)
		}
		p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedDebezium, IDGen: "uuid"})
		logs := &stacktest.SyncBuffer{}
		w, m := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Logger: logs.Logger()})
		w.Sample(ctx)
		if got := testutil.ToFloat64(m.SlotActive.WithLabelValues("orders", gone)); got != 0 {
			t.Fatalf("slot_active{slot=%s} = %v before the drop, want 0 (inactive)", gone, got)
		}
		// The runbook's fix for an abandoned slot.
		if _, err := pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", gone); err != nil {
			t.Fatalf("drop slot %s: %v", gone, err)
		}
		w.Sample(ctx)
		for _, vec := range []*compactvec.GaugeVec{m.SlotActive, m.SlotRetainedWAL, m.SlotUnconfirmedWAL} {
			if vec.DeleteLabelValues("orders", gone) {
				t.Errorf("a series of the dropped slot %s is still exported", gone)
			}
		}
		if n := testutil.CollectAndCount(m.SlotActive); n != 2 {
			t.Errorf("%d slot_active series after the drop, want 2 (ours and the leftover)", n)
		}
	})
}

func TestAWatcherThatFailsWithdrawsItsSeriesAndSaysWhenItRecovers(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA})
	stacktest.InsertRow(t, pool, stacktest.SeedA, false, 40*time.Second)
	var logs stacktest.SyncBuffer
	w, m := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Logger: logs.Logger()})
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	w.Sample(ctx)
	if got := testutil.ToFloat64(m.BacklogRows.WithLabelValues("orders")); got != 1 {
		t.Fatalf("backlog rows = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", WatcherBacklog)); got != 1 {
		t.Errorf("watcher_up{backlog} = %v after a good sample, want 1", got)
	}
	if got := testutil.ToFloat64(m.LastSuccess.WithLabelValues("orders", WatcherBacklog)); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last success of the backlog watcher = %v, want about now", got)
	}

	// The backlog query fails (the table is gone under its name); the
	// transaction watcher still works.
	exec("ALTER TABLE outbox RENAME TO outbox_elsewhere")
	w.Sample(ctx)
	w.Sample(ctx)
	if n := testutil.CollectAndCount(m.BacklogRows) + testutil.CollectAndCount(m.OldestUnpublishedAge); n != 0 {
		t.Errorf("%d backlog series while the backlog cannot be read, want none: an old value would read as healthy", n)
	}
	if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", WatcherBacklog)); got != 0 {
		t.Errorf("watcher_up{backlog} = %v while it fails, want 0", got)
	}
	if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", WatcherTransactions)); got != 1 {
		t.Errorf("watcher_up{transactions} = %v, want 1: one failing watcher must not blind the others", got)
	}
	if got := testutil.ToFloat64(m.Errors.WithLabelValues("orders", WatcherBacklog)); got != 2 {
		t.Errorf("backlog watch errors = %v after two failed samples, want 2", got)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"watcher failing"); n != 1 {
		t.Errorf("logged %d 'watcher failing' lines over two failed samples, want one (a state change, not every tick):\n%s", n, logs.String())
	}

	exec("ALTER TABLE outbox_elsewhere RENAME TO outbox")
	w.Sample(ctx)
	if got := testutil.ToFloat64(m.BacklogRows.WithLabelValues("orders")); got != 1 {
		t.Errorf("backlog rows = %v after recovery, want 1", got)
	}
	if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", WatcherBacklog)); got != 1 {
		t.Errorf("watcher_up{backlog} = %v after recovery, want 1", got)
	}
	if !strings.Contains(logs.String(), "watcher recovered") {
		t.Errorf("the recovery was not logged:\n%s", logs.String())
	}
}

func TestAWatcherQueryThatHangsIsCutOffByTheSampleTimeout(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA, Watch: "{interval: 1s}"})
	ctx := context.Background()
	// A transaction holding an exclusive lock makes the backlog query wait,
	// as a silently dropped connection would: without a timeout the
	// watcher would wait with it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var logs stacktest.SyncBuffer
	w, m := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Logger: logs.Logger()})
	done := make(chan struct{})
	go func() { defer close(done); w.Sample(ctx) }()
	select {
	case <-done:
	case <-time.After(watchWait):
		t.Fatalf("Sample still waits on the locked table after %s; watch.interval is 1s", watchWait)
	}
	if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", WatcherBacklog)); got != 0 {
		t.Errorf("watcher_up{backlog} = %v after its query was cut off, want 0", got)
	}
	if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", WatcherTransactions)); got != 1 {
		t.Errorf("watcher_up{transactions} = %v, want 1: it does not touch the locked table", got)
	}
}

func TestTheBacklogWatcherWarnsOnceAboutAMissingPartialIndex(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	if _, err := pool.Exec(context.Background(), "DROP INDEX outbox_unpublished_idx"); err != nil {
		t.Fatalf("DROP INDEX: %v", err)
	}
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA})
	var logs stacktest.SyncBuffer
	w, _ := newWatcher(t, Options{Pipeline: p, DB: pgDB(pool), Logger: logs.Logger()})
	w.Sample(context.Background())
	w.Sample(context.Background())
	if n := strings.Count(logs.String(), "no partial index on the unpublished rows"); n != 1 {
		t.Errorf("the watcher warned %d times about the missing index over two samples, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "WHERE published_at IS NULL") {
		t.Errorf("the warning does not give the fix:\n%s", logs.String())
	}
}
