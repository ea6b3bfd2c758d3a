package watch

// The watchers of a MySQL pipeline, the same code path as PostgreSQL's
// through the family seam (outboxdb.Watched), on the local
// stack's MariaDB as its least-privilege user canary (PROCESS lets it see
// every session's transactions); skips without it, fails in CI.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// openMySQL opens a pipeline's MariaDB with conns connections, closed
// when the test ends.
func openMySQL(t *testing.T, d config.Database, conns int) *mysql.DB {
	t.Helper()
	db, err := mysql.Open(d, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestAMariaDBPipelineHasItsBacklogAndOpenTransactionsWatched(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, 90*time.Second)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, time.Second)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, true, time.Hour)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedA, Watch: "{long_transaction_threshold: 1s}"})
	db := openMySQL(t, p.Database, 2)
	w, mt := newWatcher(t, Options{Pipeline: p, DB: db})

	// A transaction that has written a row and stays open.
	ctx := context.Background()
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, payload) VALUES ('order', 'k', '{}')"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the test's end

	stacktest.EventuallyEvery(t, watchWait, stacktest.InnoDBTrxIdle, "the open transaction to be over the 1s threshold", func() (bool, string) {
		w.Sample(ctx)
		long := testutil.ToFloat64(mt.LongTransactions.WithLabelValues("orders"))
		return long == 1, fmt.Sprintf("long transactions %v, oldest %vs", long, testutil.ToFloat64(mt.OldestTransactionAge.WithLabelValues("orders")))
	})
	// The uncommitted row is invisible: the backlog is the two committed.
	if got := testutil.ToFloat64(mt.BacklogRows.WithLabelValues("orders")); got != 2 {
		t.Errorf("backlog rows = %v, want 2", got)
	}
	if got := testutil.ToFloat64(mt.OldestUnpublishedAge.WithLabelValues("orders")); got < 90 || got >= 3600 {
		t.Errorf("oldest unpublished age = %vs, want about 90s", got)
	}
	for _, watcher := range []string{WatcherBacklog, WatcherTransactions} {
		if got := testutil.ToFloat64(mt.Up.WithLabelValues("orders", watcher)); got != 1 {
			t.Errorf("watcher_up of %s = %v, want 1", watcher, got)
		}
	}
}

func TestAnUnreachableMariaDBBlindsItsWatchersWithoutShowingThePassword(t *testing.T) {
	t.Parallel()
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "mysql://canary:sQcret@" + stacktest.ClosedAddr(t) + "/orders", Schema: stacktest.MySQLSeedA})
	db := openMySQL(t, p.Database, 1)
	var logs stacktest.SyncBuffer
	w, mt := newWatcher(t, Options{Pipeline: p, DB: db, Logger: logs.Logger()})
	w.Sample(context.Background())
	for _, watcher := range []string{WatcherBacklog, WatcherTransactions} {
		if got := testutil.ToFloat64(mt.Up.WithLabelValues("orders", watcher)); got != 0 {
			t.Errorf("watcher_up of %s = %v, want 0", watcher, got)
		}
		if got := testutil.ToFloat64(mt.Errors.WithLabelValues("orders", watcher)); got != 1 {
			t.Errorf("errors of %s = %v, want 1", watcher, got)
		}
	}
	if strings.Contains(logs.String(), "sQcret") {
		t.Errorf("the logs show the password:\n%s", logs.String())
	}
}

// A cdc pipeline on MariaDB: the binlog watcher's position moves as the
// binlog is written, with the files the server keeps and their expiry.
func TestAMariaDBCDCPipelineHasItsBinlogWatched(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedDebezium, IDGen: "uuid"})
	db := openMySQL(t, p.Database, 2)
	w, mt := newWatcher(t, Options{Pipeline: p, DB: db})
	ctx := context.Background()

	w.Sample(ctx)
	if got := testutil.ToFloat64(mt.Up.WithLabelValues("orders", WatcherBinlog)); got != 1 {
		t.Fatalf("binlog watcher_up = %v, want 1", got)
	}
	before := testutil.ToFloat64(mt.BinlogWritten.WithLabelValues("orders"))
	if files := testutil.ToFloat64(mt.BinlogRetainedFiles.WithLabelValues("orders")); files < 1 {
		t.Errorf("binlog files kept = %v, want at least 1", files)
	}
	if expiry := testutil.ToFloat64(mt.BinlogExpiry.WithLabelValues("orders")); expiry != 86400 {
		t.Errorf("binlog expiry = %vs, want the stack's 86400", expiry)
	}
	if _, err := admin.ExecContext(ctx, "INSERT INTO outbox VALUES (UUID(), 'order', 'k', 'created', '{}')"); err != nil {
		t.Fatal(err)
	}
	w.Sample(ctx)
	if after := testutil.ToFloat64(mt.BinlogWritten.WithLabelValues("orders")); after <= before {
		t.Errorf("binlog position %v after an insert, %v before: want it to have moved", after, before)
	}
	if got := testutil.ToFloat64(mt.BinlogRetainedBytes.WithLabelValues("orders")); got <= 0 {
		t.Errorf("binlog bytes kept = %v, want > 0", got)
	}
	// Polling-only watchers stay out of a cdc pipeline.
	if n := testutil.CollectAndCount(mt.BacklogRows); n != 0 {
		t.Errorf("%d backlog series for a cdc pipeline, want none", n)
	}
}

// countingDB counts the questions asked of a database through the family
// seam, by method, on the way to the real one.
type countingDB struct {
	outboxdb.Watched
	mu     sync.Mutex
	counts map[string]int
}

func (c *countingDB) count(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[what]++
}

func (c *countingDB) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.counts
	c.counts = map[string]int{}
	return got
}

func (c *countingDB) Backlog(ctx context.Context, t outboxdb.Table) (outboxdb.Backlog, error) {
	c.count("backlog " + t.Name)
	return c.Watched.Backlog(ctx, t)
}

func (c *countingDB) UnpublishedIndex(ctx context.Context, t outboxdb.Table) (string, error) {
	c.count("index " + t.Name)
	return c.Watched.UnpublishedIndex(ctx, t)
}

func (c *countingDB) OpenTransactions(ctx context.Context, thresholds []time.Duration) (outboxdb.Transactions, error) {
	c.count(fmt.Sprint("transactions ", thresholds))
	return c.Watched.OpenTransactions(ctx, thresholds)
}

func (c *countingDB) CaptureLog(ctx context.Context) (outboxdb.CaptureLog, error) {
	c.count("binlog")
	return c.Watched.CaptureLog(ctx)
}

// Pipelines on one MariaDB database share one sampler, as on PostgreSQL:
// each sample asks each question once (open transactions once over every
// distinct threshold, the backlog once per outbox table, the binlog once,
// the unpublished index once per table in the first), however
// many pipelines want the answer, and each pipeline exports its own series
// from it.
func TestPipelinesOnOneMariaDBDatabaseAskEachQuestionOncePerInterval(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := admin.ExecContext(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// 60 polling pipelines on 3 outbox tables; table i holds i unpublished
	// rows. Two cdc pipelines on a Debezium outbox beside them.
	tables := []string{"outbox", "outbox_1", "outbox_2"}
	for i := 1; i < len(tables); i++ {
		exec("CREATE TABLE " + tables[i] + " LIKE outbox")
		for range i {
			exec("INSERT INTO " + tables[i] + " (aggregate_type, aggregate_id, payload) VALUES ('order', 'o', '{}')")
		}
	}
	exec(strings.Replace(outboxsql.MySQLDebeziumOutbox, "CREATE TABLE outbox", "CREATE TABLE cdc_outbox", 1))
	cfg := fleetSpec{dsn: dsn, polling: 60, tables: tables, cdc: []string{"", ""}, thresholds: []string{"1s", "1h"}}.load(t)

	real := openMySQL(t, cfg.Pipelines[0].Database, 4)
	db := &countingDB{Watched: real, counts: map[string]int{}}
	mt, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs stacktest.SyncBuffer
	set, err := OpenSet(cfg.Pipelines, func(config.Database) (outboxdb.Watched, error) { return db, nil }, nil, mt, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.groups) != 1 {
		t.Fatalf("OpenSet: %d samplers for one database, want 1", len(set.groups))
	}
	g := set.groups[0]

	// Three thresholds, in one question: the polling pipelines' two and
	// the cdc ones' default. (Whether a transaction over one is counted is
	// TestAMariaDBPipelineHasItsBacklogAndOpenTransactionsWatched's: here
	// a transaction left open by another test on the shared server could
	// be counted too.)
	want := map[string]int{"transactions [1s 1h0m0s 1m0s]": 1, "binlog": 1}
	first := map[string]int{"transactions [1s 1h0m0s 1m0s]": 1, "binlog": 1}
	for _, table := range tables {
		want["backlog "+table] = 1
		first["backlog "+table] = 1
		first["index "+table] = 1
	}
	g.Sample(ctx)
	if got := db.take(); fmt.Sprint(got) != fmt.Sprint(first) {
		t.Fatalf("the first sample of 62 pipelines on one database asked %v, want %v", got, first)
	}
	if strings.Contains(logs.String(), "no partial index") {
		t.Errorf("the watchers warned of a missing unpublished index; the schema has one leading with published_at:\n%s", logs.String())
	}
	for i := range 3 {
		g.Sample(ctx)
		if got := db.take(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("sample %d of 62 pipelines on one database asked %v, want %v", i+2, got, want)
		}
	}
	t.Logf("62 pipelines (60 polling on %d tables, 2 cdc) on one MariaDB database: %d questions per interval", len(tables), len(want))

	if n := testutil.CollectAndCount(mt.Errors); n != 0 {
		t.Fatalf("%d watch error series, want none:\n%s", n, logs.String())
	}
	for i := range 60 {
		p := &cfg.Pipelines[i]
		if got, want := testutil.ToFloat64(mt.BacklogRows.WithLabelValues(p.Name)), float64(i%len(tables)); got != want {
			t.Errorf("backlog rows of %s on %s = %v, want %v (its own table's)", p.Name, p.Outbox.Table, got, want)
		}
		for _, watcher := range []string{WatcherBacklog, WatcherTransactions} {
			if got := testutil.ToFloat64(mt.Up.WithLabelValues(p.Name, watcher)); got != 1 {
				t.Errorf("watcher_up{pipeline=%s, watcher=%s} = %v, want 1", p.Name, watcher, got)
			}
		}
	}
	for _, name := range []string{"c000", "c001"} {
		if got := testutil.ToFloat64(mt.Up.WithLabelValues(name, WatcherBinlog)); got != 1 {
			t.Errorf("binlog watcher_up of %s = %v, want 1", name, got)
		}
	}
	if n := testutil.CollectAndCount(mt.BacklogRows); n != 60 {
		t.Errorf("%d backlog series, want one per polling pipeline (60)", n)
	}
	if n := testutil.CollectAndCount(mt.LongTransactions); n != 62 {
		t.Errorf("%d long-transaction series, want one per pipeline (62)", n)
	}

	// Set.Run samples the database in one loop: cancelled after its first
	// sample, a fresh set has asked each question once.
	if set, err = OpenSet(cfg.Pipelines, func(config.Database) (outboxdb.Watched, error) { return db, nil }, nil, mt, logs.Logger()); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { set.Run(runCtx); close(done) }()
	stacktest.EventuallyEvery(t, watchWait, stacktest.InnoDBTrxIdle, "Run's first sample", func() (bool, string) {
		db.mu.Lock()
		n := db.counts["binlog"] + db.counts["backlog outbox_2"]
		db.mu.Unlock()
		return n == 2, fmt.Sprintf("%d of the binlog and outbox_2 backlog questions asked", n)
	})
	cancel()
	<-done
	if got := db.take(); fmt.Sprint(got) != fmt.Sprint(first) {
		t.Errorf("Run's first sample asked %v, want %v", got, first)
	}
}
