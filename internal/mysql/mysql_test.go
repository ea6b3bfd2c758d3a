package mysql_test

// Runs against the local stack's MariaDB 10.11 (`deploy/local/stack.sh
// up`) as its least-privilege user canary; skips without it, fails in CI.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

var tableA = outboxdb.Table{Name: "outbox", ID: "id", PublishedAt: "published_at", CreatedAt: "created_at"}

func open(t *testing.T, dsn string) *mysql.DB {
	t.Helper()
	db, err := mysql.Open(config.Database{DSN: config.InlineSecret(dsn)}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestACanaryIsInsertedAndItsPublishStampReadBackInUTC(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	db := open(t, dsn)
	ctx := context.Background()

	ins, err := db.PrepareInsert(outboxdb.InsertSpec{Table: "outbox", IDColumn: "id",
		Columns: []string{"aggregate_type", "aggregate_id", "payload"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ins(ctx, []any{"outbox-canary", "canary", `{"canary":1}`}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got.RowID == "" || got.Committed.Before(got.CommitSent) || got.CommitSent.Before(got.Started) {
		t.Fatalf("inserted %+v: want an id and ordered stamps", got)
	}
	// Not published yet: no row in the answer.
	rows, err := db.ReadPublished(ctx, []outboxdb.Table{tableA}, [][]string{{got.RowID}})
	if err != nil || len(rows) != 0 {
		t.Fatalf("unpublished row read back as %+v, %v; want nothing", rows, err)
	}
	// A relay marks it, at a known UTC instant written as text: the
	// session of the admin handle is in UTC too, and the stamp must come
	// back as that instant whatever the server's zone.
	stamp := time.Date(2026, 12, 2, 11, 0, 0, 123456000, time.UTC)
	if _, err := admin.ExecContext(ctx, "UPDATE outbox SET published_at = ? WHERE id = ?",
		stamp.Format("2006-01-02 15:04:05.000000"), got.RowID); err != nil {
		t.Fatal(err)
	}
	rows, err = db.ReadPublished(ctx, []outboxdb.Table{tableA, tableA}, [][]string{{got.RowID, "999"}, nil})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Table != 0 || rows[0].ID != got.RowID || !rows[0].PublishedAt.Equal(stamp) {
		t.Fatalf("read back %+v, want row %s of table 0 published at %v", rows, got.RowID, stamp)
	}
}

func TestDeleteAfterInsertLeavesTheDebeziumTableEmpty(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	db := open(t, dsn)
	ctx := context.Background()
	ins, err := db.PrepareInsert(outboxdb.InsertSpec{Table: "outbox", IDColumn: "id", SuppliedID: true, DeleteAfter: true,
		Columns: []string{"id", "aggregatetype", "aggregateid", "type", "payload"}})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	got, err := ins(ctx, []any{id, "outbox-canary", "canary", "canary", `{}`}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got.RowID != id || got.CommitSent.Before(got.Started) || got.Committed.Before(got.CommitSent) {
		t.Fatalf("inserted %+v, want row %s with ordered stamps", got, id)
	}
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows left (%v), want 0", n, err)
	}
}

func TestTheClockIsSYSDATEInAUTCSession(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	db := open(t, m.DSN)
	ctx := context.Background()
	var zone string
	if err := db.SQL().QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&zone); err != nil || zone != "+00:00" {
		t.Fatalf("session time zone %q (%v), want +00:00", zone, err)
	}
	before := time.Now()
	got, err := db.Clock(ctx)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	// Same machine: the database clock is the local clock, so the reading
	// lies inside the bracket (with a millisecond for the server's own
	// rounding to microseconds).
	if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
		t.Fatalf("database clock %v outside the local bracket [%v, %v]", got, before, after)
	}
}

func TestReadingAMissingTableIsTheTablesFaultAndAnUnreachableServerIsNot(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	dsn, _ := m.NewDatabase(t)
	db := open(t, dsn)
	_, err := db.ReadPublished(context.Background(), []outboxdb.Table{tableA}, [][]string{{"1"}})
	if err == nil || !db.TableFault(err) {
		t.Fatalf("error %v: want a table fault (no such table)", err)
	}
	down := open(t, "mysql://canary:sQcret@"+stacktest.ClosedAddr(t)+"/canary")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = down.Ping(ctx)
	if err == nil || down.TableFault(err) {
		t.Fatalf("ping of a closed port: %v; want an error that is not a table's", err)
	}
	if strings.Contains(err.Error(), "sQcret") {
		t.Fatalf("error %q shows the password", err)
	}
	if _, err := down.Clock(ctx); err == nil {
		t.Fatal("clock of a closed port: no error")
	}
}

func TestAWrongPasswordIsExplained(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	db := open(t, "mysql://canary:wrongQ@"+m.Host+":"+m.Port+"/canary")
	err := db.Explain(db.Ping(context.Background()))
	if err == nil || !strings.Contains(err.Error(), "refused the user name or password of database.dsn") || strings.Contains(err.Error(), "wrongQ") {
		t.Fatalf("error %v: want the refused login explained, without the password", err)
	}
}

func TestTheBacklogCountsUnpublishedRowsAndTheOldestAge(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	db := open(t, dsn)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, 90*time.Second)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, time.Second)
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, true, time.Hour)
	b, err := db.Backlog(context.Background(), tableA)
	if err != nil {
		t.Fatal(err)
	}
	if b.Rows != 2 || b.OldestAge < 90*time.Second || b.OldestAge > 10*time.Minute {
		t.Fatalf("backlog %+v, want 2 rows, the oldest 90s old", b)
	}
	// The index that leads with published_at answers it.
	var key *string
	var rest [9]any
	for i := range rest {
		rest[i] = new(any)
	}
	err = admin.QueryRowContext(context.Background(), "EXPLAIN SELECT COUNT(*), MIN(created_at) FROM outbox WHERE published_at IS NULL").
		Scan(rest[0], rest[1], rest[2], rest[3], rest[4], &key, rest[5], rest[6], rest[7], rest[8])
	if err != nil {
		t.Fatal(err)
	}
	if key == nil || *key != "outbox_unpublished_idx" {
		t.Fatalf("backlog query uses index %v, want outbox_unpublished_idx", key)
	}
}

func TestAnOpenTransactionIsSeenWithItsSession(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	db := open(t, dsn)
	ctx := context.Background()
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var session int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, payload) VALUES ('order', 'k', '{}')"); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	var tx outboxdb.Transactions
	stacktest.EventuallyEvery(t, 30*time.Second, stacktest.InnoDBTrxIdle, "the open transaction to be a second old", func() (bool, string) {
		tx, err = db.OpenTransactions(ctx, []time.Duration{time.Hour, 0})
		return err == nil && tx.OldestAge >= time.Second, fmt.Sprintf("%+v, %v", tx, err)
	})
	// One statement counts against each threshold: none over an hour,
	// ours over none.
	if tx.Open < 1 || len(tx.OverThreshold) != 2 || tx.OverThreshold[0] != 0 || tx.OverThreshold[1] < 1 || tx.OldestSession != session || tx.OldestAge > time.Since(opened)+time.Second {
		t.Fatalf("open transactions %+v, want session %d's, at most %v old", tx, session, time.Since(opened))
	}
	// Another database's outbox on the same server is not watched through
	// this one: its transaction is not counted here.
	otherDSN, _ := m.FreshOutbox(t, stacktest.MySQLSeedA)
	other, err := open(t, otherDSN).OpenTransactions(ctx, []time.Duration{0})
	if err != nil {
		t.Fatal(err)
	}
	if other.Open != 0 || other.OldestSession != 0 {
		t.Fatalf("open transactions seen from another database %+v, want none: session %d's is in %s", other, session, stacktest.MySQLDatabaseName(dsn))
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

func TestTheBinlogIsRowBasedAndItsPositionMovesAsRowsAreWritten(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	db := open(t, dsn)
	ctx := context.Background()
	before, err := db.CaptureLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !before.Enabled || before.Format != "ROW/FULL" || before.RetainedFiles < 1 || before.RetainedBytes <= 0 ||
		before.Expiry != 24*time.Hour || !strings.Contains(before.Position, "mariadb-bin.") {
		t.Fatalf("binlog %+v: want enabled, ROW/FULL, files kept 24h", before)
	}
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, 0)
	after, err := db.CaptureLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Written <= before.Written || after.RetainedBytes <= before.RetainedBytes {
		t.Fatalf("binlog after an insert %+v, before %+v: want it to have grown", after, before)
	}
}
