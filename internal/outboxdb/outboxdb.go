// Package outboxdb is the database-family seam: what the prober needs of
// the database that holds an outbox table, whatever its family. Each family
// implements DB beside its driver (internal/postgres with pgx,
// internal/mysql with go-sql-driver/mysql for MySQL and MariaDB); the
// prober, its judge, the SLOs, rules, dashboards and the status page see
// only this package's types, so a stamp is a time.Time whichever family
// wrote it.
//
// What differs between the families, and is kept behind DB:
//   - the clock: PostgreSQL's clock_timestamp() and MySQL's SYSDATE(6) are
//     the moment a statement reads them (now() is PostgreSQL's transaction
//     start, NOW(6) MySQL's statement start); MySQL's TIMESTAMP columns are
//     read in the session's time zone, so its sessions are pinned to UTC;
//   - how a row's id comes back (RETURNING, or the insert id);
//   - how rows are read by id (an array parameter, or an IN list);
//   - which errors are a table's fault rather than the server's;
//   - the capture log: WAL positions and replication slots, or binlog files
//     and positions expired by time;
//   - where open transactions are listed (pg_stat_activity,
//     information_schema.innodb_trx).
//
// The watchers ask only Watched, DB's read-only questions, through Limit
// or a family's own bound on the connections they hold.
package outboxdb

import (
	"context"
	"time"
)

// DB is one outbox database, shared by every pipeline whose tables are on
// it. Its methods are safe for concurrent use.
type DB interface {
	Watched
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Clock reads the database's wall clock at the moment the statement
	// runs, for the clock offset estimate.
	Clock(ctx context.Context) (time.Time, error)
	// PrepareInsert builds the insert of one pipeline's canary rows once.
	PrepareInsert(spec InsertSpec) (Inserter, error)
	// ReadPublished reads the published_at of rows by primary key from
	// tables at once (ids[i] are tables[i]'s, empty for none), in one
	// statement where the family can; a row whose published_at is NULL,
	// or that is gone, is not in the answer.
	ReadPublished(ctx context.Context, tables []Table, ids [][]string) ([]PublishedRow, error)
	// TableFault reports whether err, from ReadPublished, was caused by
	// what the statement reads (a table or column that does not exist, a
	// privilege, a value it cannot convert) rather than by the server
	// (unreachable, shutting down, a timeout), which would fail every
	// table's statement.
	TableFault(err error) bool
}

// Watched is the part of DB the watchers (internal/watch) ask, one
// question a statement: every family's watchers are one code path on it.
// A process's watchers get their own value per database, one that holds
// back the connections the canary inserts need (the families' Pools).
type Watched interface {
	// Family is config.KindPostgres or config.KindMySQL.
	Family() string
	// Describe names the database for logs: host:port/database as user,
	// never the password.
	Describe() string
	// Explain rewords a connection error an operator fixes in
	// database.dsn (see internal/explain); others come back unchanged.
	Explain(err error) error
	// Backlog measures a polling relay's queue on the table.
	Backlog(ctx context.Context, t Table) (Backlog, error)
	// UnpublishedIndex says how to create the index that holds just the
	// table's unpublished rows, which the backlog query and a polling
	// relay's claim read (PostgreSQL's partial index on published_at IS
	// NULL, MySQL's index leading with published_at); "" when the table
	// has one.
	UnpublishedIndex(ctx context.Context, t Table) (fix string, err error)
	// OpenTransactions summarises the database's open transactions,
	// whose rows stay invisible to the relay until they commit, counting
	// those older than each of thresholds in one statement, so pipelines
	// on one database with different thresholds share one answer.
	OpenTransactions(ctx context.Context, thresholds []time.Duration) (Transactions, error)
	// CaptureLog reads where the log that change data capture reads (the
	// WAL, the binlog) is, how much of it the server keeps, and the
	// readers that hold it back where the server tracks them (replication
	// slots), in one statement where the family can.
	CaptureLog(ctx context.Context) (CaptureLog, error)
}

// Table is an outbox table and the columns the prober reads.
type Table struct {
	// Name as configured: table or schema.table.
	Name        string
	ID          string
	PublishedAt string
	CreatedAt   string // "" when the table has none
}

// InsertSpec is the shape of one pipeline's canary rows.
type InsertSpec struct {
	Table    string
	IDColumn string
	// Columns are the inserted columns in the order of the values; with
	// SuppliedID the first is IDColumn and the first value the id.
	Columns    []string
	SuppliedID bool
	// DeleteAfter deletes the row in the transaction that inserted it
	// (log capture sees the insert; the table stays empty).
	DeleteAfter bool
}

// Inserter inserts one canary row, with the values in the order of
// InsertSpec.Columns, in a short transaction of its own, taking its stamps
// from now.
type Inserter func(ctx context.Context, values []any, now func() time.Time) (Inserted, error)

// Inserted is what an insert learnt: the row's id as text, and when the
// insert started, when its commit was sent (a single-statement insert
// commits in its own round trip, so that is the start) and when the commit
// returned, on the prober's clock.
type Inserted struct {
	RowID                          string
	Started, CommitSent, Committed time.Time
}

// PublishedRow is one row read back: Table indexes ReadPublished's tables,
// PublishedAt is on the database clock, in UTC.
type PublishedRow struct {
	Table       int
	ID          string
	PublishedAt time.Time
}

// Backlog is the polling relay's queue: rows not yet published and the age
// of the oldest, both on the database clock so no cross-host skew enters.
type Backlog struct {
	Rows      int64
	OldestAge time.Duration // 0 when the backlog is empty, or without created_at
}

// Transactions are the database's open transactions but the reader's own.
type Transactions struct {
	Open int64
	// OverThreshold[i] counts those older than the i-th threshold asked
	// for.
	OverThreshold []int64
	OldestAge     time.Duration
	// OldestSession is the oldest one's session: a PostgreSQL backend pid,
	// a MySQL connection id; 0 for none.
	OldestSession int64
}

// CaptureLog is the server's change log as log capture sees it.
type CaptureLog struct {
	// Position is the server's current write position, as the family
	// spells it: an LSN (0/16B3748), or binlog file:offset.
	Position string
	// Written is the position as a byte count that only grows within one
	// server: the LSN, or the binlog files' bytes before the current one
	// plus its offset (while no file is purged).
	Written int64
	// RetainedBytes and RetainedFiles: the log the server keeps (MySQL's
	// binlog files; PostgreSQL's WAL that slots hold back, 0 files).
	RetainedBytes int64
	RetainedFiles int
	// Expiry is how long the server keeps a file whether or not a reader
	// has read it (binlog_expire_logs_seconds); 0: until readers release
	// it (replication slots) or forever.
	Expiry time.Duration
	// Enabled is false when the server writes no such log (MySQL without
	// log_bin, PostgreSQL with wal_level below logical).
	Enabled bool
	// Format is the row format where the family has one (MySQL's
	// binlog_format and binlog_row_image: "ROW/FULL"), "" otherwise.
	Format string
	// Files are the log files the server keeps, oldest first, the last
	// being the one written now (MySQL's binlog; none on PostgreSQL).
	Files []LogFile
	// Slots are the replication slots of the database, by name: the
	// readers that hold PostgreSQL's WAL back (none on MySQL, whose
	// readers' positions are their own: Kafka Connect's offsets).
	Slots []Slot
}

// Slot is one logical replication slot of a PostgreSQL database.
type Slot struct {
	Name           string
	Active         bool
	WALStatus      string // reserved, extended, unreserved, lost; "" before PG 13
	SafeWALSize    *int64 // nil when max_slot_wal_keep_size = -1 (unbounded)
	RetainedWAL    int64  // current LSN - restart_lsn
	UnconfirmedWAL int64  // current LSN - confirmed_flush_lsn
}

// WALStatuses are the values of pg_replication_slots.wal_status; each is a
// series of the wal_status gauge so a change is a visible flip, not a gap.
func WALStatuses() []string { return []string{"reserved", "extended", "unreserved", "lost"} }

// LogFile is one file of the capture log and its size in bytes.
type LogFile struct {
	Name string
	Size int64
}
