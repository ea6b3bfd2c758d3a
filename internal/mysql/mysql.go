// Package mysql is the prober's one way into MySQL and MariaDB: a shared
// database/sql pool per database (go-sql-driver/mysql, sessions pinned to
// UTC), identifier quoting, and the outboxdb.DB of the family: canary
// inserts, the clock (SYSDATE(6), the moment a statement runs; NOW(6) is
// the statement's start), published_at read back by primary key, the
// backlog, open transactions from information_schema.innodb_trx, and the
// binlog's position and retention.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/explain"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// DB is one MySQL or MariaDB database as an outboxdb.DB.
type DB struct {
	db    *sql.DB
	label string
}

var _ outboxdb.DB = (*DB)(nil)

// Open builds a pool of at most maxConns connections on the database. It
// connects to nothing yet: a server that is down is found by the first
// statement, and retried by whoever owns the pool. The DSN is never part
// of an error.
func Open(d config.Database, maxConns int) (*DB, error) {
	cfg, err := d.MySQLConfig()
	if err != nil {
		return nil, err
	}
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(max(maxConns, 1))
	db.SetMaxIdleConns(max(maxConns, 1))
	// A server restart breaks idle connections; the driver notices a dead
	// one before it sends on it (CheckConnLiveness), and idle ones are
	// closed after a while, so one restart does not fail several inserts.
	db.SetConnMaxIdleTime(time.Minute)
	return &DB{db: db, label: config.DescribeMySQL(cfg)}, nil
}

// SQL is the pool, for the reference relay and tests.
func (d *DB) SQL() *sql.DB { return d.db }

// Close closes the pool.
func (d *DB) Close() error { return d.db.Close() }

func (d *DB) Family() string   { return config.KindMySQL }
func (d *DB) Describe() string { return d.label }

func (d *DB) Ping(ctx context.Context) error { return d.db.PingContext(ctx) }

// Clock reads SYSDATE(6): the moment the statement reads it (NOW(6) and
// CURRENT_TIMESTAMP(6) would be the statement's start), in the session's
// time zone, which Open pins to UTC.
func (d *DB) Clock(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := d.db.QueryRowContext(ctx, "SELECT SYSDATE(6)").Scan(&t); err != nil {
		return time.Time{}, err
	}
	return t, nil
}

// PrepareInsert builds the canary INSERT (and the DELETE of
// delete_after_insert) once. MySQL has no RETURNING (MariaDB's is its
// own): a row the database numbers is read back as the insert id, which
// the OK packet of the same round trip carries.
func (d *DB) PrepareInsert(spec outboxdb.InsertSpec) (outboxdb.Inserter, error) {
	if len(spec.Columns) == 0 {
		return nil, errors.New("insert: no columns")
	}
	quoted := make([]string, len(spec.Columns))
	for i, c := range spec.Columns {
		quoted[i] = QuoteIdent(c)
	}
	insert := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", QuoteTable(spec.Table), strings.Join(quoted, ", "),
		strings.TrimSuffix(strings.Repeat("?, ", len(quoted)), ", "))
	del := fmt.Sprintf("DELETE FROM %s WHERE %s = ?", QuoteTable(spec.Table), QuoteIdent(spec.IDColumn))
	rowID := func(res sql.Result, values []any) (string, error) {
		if spec.SuppliedID {
			return fmt.Sprint(values[0]), nil
		}
		id, err := res.LastInsertId()
		if err != nil {
			return "", fmt.Errorf("insert id: %w", err)
		}
		if id == 0 {
			return "", fmt.Errorf("insert id: %s has no AUTO_INCREMENT column (set outbox.id_generation: uuid)", spec.Table)
		}
		return strconv.FormatInt(id, 10), nil
	}
	if !spec.DeleteAfter {
		// One statement in autocommit mode: the server commits before it
		// answers, so one round trip holds the insert and the commit.
		return func(ctx context.Context, values []any, now func() time.Time) (outboxdb.Inserted, error) {
			var in outboxdb.Inserted
			in.Started = now()
			in.CommitSent = in.Started
			res, err := d.db.ExecContext(ctx, insert, values...)
			if err != nil {
				return outboxdb.Inserted{}, fmt.Errorf("insert into %s: %w", spec.Table, err)
			}
			in.Committed = now()
			if in.RowID, err = rowID(res, values); err != nil {
				return outboxdb.Inserted{}, err
			}
			return in, nil
		}, nil
	}
	return func(ctx context.Context, values []any, now func() time.Time) (_ outboxdb.Inserted, err error) {
		var in outboxdb.Inserted
		in.Started = now()
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("begin: %w", err)
		}
		defer func() {
			if err != nil {
				_ = tx.Rollback()
			}
		}()
		res, err := tx.ExecContext(ctx, insert, values...)
		if err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("insert into %s: %w", spec.Table, err)
		}
		if in.RowID, err = rowID(res, values); err != nil {
			return outboxdb.Inserted{}, err
		}
		if _, err = tx.ExecContext(ctx, del, in.RowID); err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("delete canary row %s: %w", in.RowID, err)
		}
		in.CommitSent = now()
		if err = tx.Commit(); err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("commit: %w", err)
		}
		in.Committed = now()
		return in, nil
	}, nil
}

// ReadPublished reads the tables' rows in one UNION ALL, a branch per
// table with ids, each an IN list on the primary key: MySQL has no array
// parameter, and with client-side interpolation the varying text costs no
// prepare round trip. published_at comes back in the session's time zone,
// UTC.
func (d *DB) ReadPublished(ctx context.Context, tables []outboxdb.Table, ids [][]string) ([]outboxdb.PublishedRow, error) {
	var b strings.Builder
	var args []any
	for i, t := range tables {
		if len(ids[i]) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(" UNION ALL ")
		}
		id, pub := QuoteIdent(t.ID), QuoteIdent(t.PublishedAt)
		fmt.Fprintf(&b, "SELECT %d, CAST(%s AS CHAR), %s FROM %s WHERE %s IS NOT NULL AND %s IN (%s)",
			i, id, pub, QuoteTable(t.Name), pub, id, strings.TrimSuffix(strings.Repeat("?, ", len(ids[i])), ", "))
		for _, v := range ids[i] {
			args = append(args, v)
		}
	}
	if b.Len() == 0 {
		return nil, nil
	}
	rows, err := d.db.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outboxdb.PublishedRow
	for rows.Next() {
		var r outboxdb.PublishedRow
		if err := rows.Scan(&r.Table, &r.ID, &r.PublishedAt); err != nil {
			return nil, err
		}
		r.PublishedAt = r.PublishedAt.UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// TableFault: SQLSTATE class 42 (no such table or column, a privilege
// refused: 1146, 1054, 1142, 1143) or 22 (a value it cannot convert), as
// for PostgreSQL.
func (d *DB) TableFault(err error) bool {
	var me *driver.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	class := string(me.SQLState[:2])
	return class == "42" || class == "22"
}

// Backlog counts the rows whose published_at is NULL and the age of the
// oldest on the database clock: the schemas' index leads with
// published_at, so both read only the backlog's index entries.
func (d *DB) Backlog(ctx context.Context, t outboxdb.Table) (outboxdb.Backlog, error) {
	if t.PublishedAt == "" {
		return outboxdb.Backlog{}, errors.New("backlog: the outbox has no published_at column (cdc relays never write one)")
	}
	age := "0"
	if t.CreatedAt != "" {
		age = fmt.Sprintf("COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(%s), SYSDATE(6)), 0)", QuoteIdent(t.CreatedAt))
	}
	var b outboxdb.Backlog
	var micros int64
	err := d.db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*), %s FROM %s WHERE %s IS NULL",
		age, QuoteTable(t.Name), QuoteIdent(t.PublishedAt))).Scan(&b.Rows, &micros)
	if err != nil {
		return outboxdb.Backlog{}, fmt.Errorf("backlog of %s: %w", t.Name, err)
	}
	b.OldestAge = time.Duration(max(micros, 0)) * time.Microsecond
	return b, nil
}

// OpenTransactions reads information_schema.innodb_trx (the PROCESS
// privilege shows every session's), leaving out our own session and those
// of other databases: the server is often shared, and as on PostgreSQL
// (datname = current_database()) only sessions using the outbox's database
// count (docs/mysql.md: a session writing the outbox from another default
// database is not seen). InnoDB lists a
// transaction once it has read or written a table; trx_started has whole
// seconds, so an age is up to a second long. The server refreshes the
// table only after 100 ms without a read of it: readers that together
// read it more often see one frozen snapshot (docs/mysql.md).
func (d *DB) OpenTransactions(ctx context.Context, thresholds []time.Duration) (outboxdb.Transactions, error) {
	t := outboxdb.Transactions{OverThreshold: make([]int64, len(thresholds))}
	var micros int64
	over := make([]string, len(thresholds))
	args := make([]any, len(thresholds))
	dest := []any{&t.Open}
	for i, threshold := range thresholds {
		over[i] = "COALESCE(SUM(TIMESTAMPDIFF(MICROSECOND, x.trx_started, NOW(6)) > ?), 0),"
		args[i] = threshold.Microseconds()
		dest = append(dest, &t.OverThreshold[i])
	}
	dest = append(dest, &micros, &t.OldestSession)
	err := d.db.QueryRowContext(ctx, `
		SELECT COUNT(*), `+strings.Join(over, " ")+`
		       COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, x.trx_started, NOW(6))), 0),
		       COALESCE(SUBSTRING_INDEX(GROUP_CONCAT(x.trx_mysql_thread_id ORDER BY x.trx_started), ',', 1), 0)
		FROM information_schema.innodb_trx x
		JOIN information_schema.processlist p ON p.id = x.trx_mysql_thread_id
		WHERE x.trx_mysql_thread_id <> CONNECTION_ID() AND p.db = DATABASE()`, args...).Scan(dest...)
	if err != nil {
		return outboxdb.Transactions{}, fmt.Errorf("open transactions: %w", err)
	}
	t.OldestAge = time.Duration(max(micros, 0)) * time.Microsecond
	return t, nil
}

// CaptureLog reads the binlog's global settings (what a new session, such
// as a connector's, gets), its files (SHOW BINARY LOGS)
// and the current position (SHOW MASTER STATUS, SHOW BINARY LOG STATUS on
// MySQL 8.4+); the last two need BINLOG MONITOR on MariaDB, REPLICATION
// CLIENT on MySQL.
func (d *DB) CaptureLog(ctx context.Context) (outboxdb.CaptureLog, error) {
	var c outboxdb.CaptureLog
	var format, image sql.NullString
	var expiry sql.NullInt64
	if err := d.db.QueryRowContext(ctx, "SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image, @@GLOBAL.binlog_expire_logs_seconds").
		Scan(&c.Enabled, &format, &image, &expiry); err != nil {
		return outboxdb.CaptureLog{}, fmt.Errorf("binlog settings: %w", err)
	}
	c.Format = format.String + "/" + image.String
	c.Expiry = time.Duration(expiry.Int64) * time.Second
	if !c.Enabled {
		return c, nil
	}
	files, err := d.binaryLogs(ctx)
	if err != nil {
		return outboxdb.CaptureLog{}, err
	}
	file, pos, err := d.masterStatus(ctx)
	if err != nil {
		return outboxdb.CaptureLog{}, err
	}
	c.Position = fmt.Sprintf("%s:%d", file, pos)
	for _, f := range files {
		c.Files = append(c.Files, outboxdb.LogFile{Name: f.name, Size: f.size})
		c.RetainedBytes += f.size
		c.RetainedFiles++
		if f.name < file {
			c.Written += f.size
		}
	}
	c.Written += pos
	return c, nil
}

type binlogFile struct {
	name string
	size int64
}

func (d *DB) binaryLogs(ctx context.Context) ([]binlogFile, error) {
	rows, err := d.db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("binlog files: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("binlog files: %w", err)
	}
	var files []binlogFile
	for rows.Next() {
		// Log_name, File_size, and on MySQL 8 Encrypted.
		var f binlogFile
		dest := []any{&f.name, &f.size}
		for range cols[2:] {
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("binlog files: %w", err)
		}
		files = append(files, f)
	}
	return files, rows.Err()
}

func (d *DB) masterStatus(ctx context.Context) (string, int64, error) {
	var file string
	var pos int64
	for _, q := range []string{"SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"} {
		rows, err := d.db.QueryContext(ctx, q)
		var me *driver.MySQLError
		if errors.As(err, &me) && me.Number == 1064 { // syntax: MySQL 8.4 dropped the first
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("binlog position: %w", err)
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return "", 0, fmt.Errorf("binlog position: %w", err)
		}
		if !rows.Next() {
			return "", 0, fmt.Errorf("binlog position: %s answered no row", q)
		}
		dest := []any{&file, &pos}
		for range cols[2:] {
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			return "", 0, fmt.Errorf("binlog position: %w", err)
		}
		return file, pos, nil
	}
	return "", 0, errors.New("binlog position: neither SHOW MASTER STATUS nor SHOW BINARY LOG STATUS is known to the server")
}

// Explain rewords a refused login, the one connection failure whose
// message (Error 1045: Access denied ...) an operator may not tie to
// database.dsn; the driver's errors never carry the DSN or password.
func (d *DB) Explain(err error) error {
	if err == nil || explain.Done(err) || errors.Is(err, context.Canceled) {
		return err
	}
	var me *driver.MySQLError
	if errors.As(err, &me) && me.Number == 1045 {
		return explain.Wrap("MySQL refused the user name or password of database.dsn (or the user may not connect from this host): "+me.Message, err)
	}
	return err
}

// QuoteIdent quotes an identifier with backquotes.
func QuoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// QuoteTable quotes table or database.table.
func QuoteTable(s string) string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = QuoteIdent(p)
	}
	return strings.Join(parts, ".")
}

// UnpublishedIndex looks for an index whose first column is published_at
// (MySQL has no partial index): it keeps the unpublished rows, whose NULL
// sorts first, together at its start, so the backlog query and a polling
// relay's claim read only the backlog's entries (lint's MySQLIndex).
func (d *DB) UnpublishedIndex(ctx context.Context, t outboxdb.Table) (string, error) {
	indexes, err := d.Indexes(ctx, t.Name)
	if err != nil {
		return "", err
	}
	for _, ix := range indexes {
		if len(ix.Columns) > 0 && strings.EqualFold(ix.Columns[0], t.PublishedAt) {
			return "", nil
		}
	}
	second := t.ID
	if t.CreatedAt != "" {
		second = t.CreatedAt
	}
	return fmt.Sprintf("ALTER TABLE %s ADD INDEX %s (%s, %s), ALGORITHM=INPLACE, LOCK=NONE",
		QuoteTable(t.Name), QuoteIdent("ix_"+t.PublishedAt), QuoteIdent(t.PublishedAt), QuoteIdent(second)), nil
}

// WatcherConcurrency bounds the questions a database's watchers ask at
// once (Pools.Watched): its pool is shared with the canary inserts and,
// unlike PostgreSQL's (postgres.PoolReservedConns), holds no connections
// back for them.
const WatcherConcurrency = 2

// Pools holds one DB per distinct MySQL database of the pipelines, shared
// by every pipeline whose database.dsn resolves to the same string, as
// postgres.Pools does for PostgreSQL. The key is never logged.
type Pools struct {
	mu      sync.Mutex
	byDSN   map[string]*DB
	watched map[*DB]outboxdb.Watched // each DB's, bounded to WatcherConcurrency
	closed  bool
}

// NewPools opens a DB for each distinct MySQL database of dbs (the
// PostgreSQL ones are postgres.Pools'), of size(users) connections, where
// users is the number of entries that name it. Its errors name the
// database's position in dbs, never the DSN.
func NewPools(dbs []config.Database, size func(users int) int) (*Pools, error) {
	users := map[string]int{}
	dsns := make([]string, len(dbs))
	for i, db := range dbs {
		kind, err := db.Family()
		if err != nil {
			return nil, fmt.Errorf("database %d: %w", i, err)
		}
		if kind != config.KindMySQL {
			continue
		}
		if dsns[i], err = db.DSN.Resolve(); err != nil {
			return nil, fmt.Errorf("database %d: database.dsn: %w", i, err)
		}
		users[dsns[i]]++
	}
	ps := &Pools{byDSN: map[string]*DB{}, watched: map[*DB]outboxdb.Watched{}}
	for i, db := range dbs {
		dsn := dsns[i]
		if dsn == "" {
			continue
		}
		if _, ok := ps.byDSN[dsn]; ok {
			continue
		}
		d, err := Open(db, size(users[dsn]))
		if err != nil {
			ps.Close()
			return nil, fmt.Errorf("database %d: %w", i, err)
		}
		ps.byDSN[dsn] = d
		ps.watched[d] = outboxdb.Limit(d, WatcherConcurrency)
	}
	return ps, nil
}

// Watched returns the watchers' questions of db, the same value for every
// pipeline on it, at most WatcherConcurrency at a time.
func (ps *Pools) Watched(db config.Database) (outboxdb.Watched, error) {
	d, err := ps.DB(db)
	if err != nil {
		return nil, err
	}
	return ps.watched[d], nil
}

// DB returns the shared DB of db; db must be a MySQL one NewPools was given.
func (ps *Pools) DB(db config.Database) (*DB, error) {
	dsn, err := db.DSN.Resolve()
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, errors.New("mysql pools: closed")
	}
	d, ok := ps.byDSN[dsn]
	if !ok {
		return nil, errors.New("mysql pools: this database.dsn was not among the pipelines the pools were built for")
	}
	return d, nil
}

// Close closes every pool; closing twice is harmless.
func (ps *Pools) Close() {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return
	}
	ps.closed = true
	dbs := ps.byDSN
	ps.mu.Unlock()
	for _, d := range dbs {
		d.Close()
	}
}
