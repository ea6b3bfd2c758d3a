package watch

// The watchers of a MySQL pipeline, through the family seam, on the local
// stack's MariaDB as its least-privilege user canary (PROCESS lets it see
// every session's transactions); skips without it, fails in CI.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestAMariaDBPipelineHasItsBacklogAndOpenTransactionsWatched(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, 90*time.Second)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, time.Second)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, true, time.Hour)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedA, Watch: "{long_transaction_threshold: 1s}"})
	db, err := mysql.Open(p.Database, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w, mt := newWatcher(t, Options{Pipeline: p, Family: db})

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

	stacktest.Eventually(t, watchWait, "the open transaction to be over the 1s threshold", func() (bool, string) {
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
	db, err := mysql.Open(p.Database, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var logs stacktest.SyncBuffer
	w, mt := newWatcher(t, Options{Pipeline: p, Family: db, Logger: logs.Logger()})
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
	db, err := mysql.Open(p.Database, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w, mt := newWatcher(t, Options{Pipeline: p, Family: db})
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
