package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// OutboxDB is a PostgreSQL database as an outboxdb.DB, on a shared pool;
// its watchers' questions are Probes' on the pool.
type OutboxDB struct {
	*Probes
	pool *pgxpool.Pool

	mu sync.Mutex
	// published caches ReadPublished's statement per list of tables: the
	// prober reads the same groups every round, and pgx prepares each
	// text once per connection.
	published map[string]string
}

var _ outboxdb.DB = (*OutboxDB)(nil)

// NewOutboxDB wraps pool.
func NewOutboxDB(pool *pgxpool.Pool) *OutboxDB {
	return &OutboxDB{Probes: NewProbes(pool, Describe(pool.Config())), pool: pool, published: map[string]string{}}
}

func (d *OutboxDB) Ping(ctx context.Context) error { return d.pool.Ping(ctx) }

// Clock reads clock_timestamp(), the wall clock when the statement reads
// it (now() would be its transaction's start).
func (d *OutboxDB) Clock(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := d.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
	return t, err
}

// InsertSQL returns the canary INSERT and the DELETE of delete_after_insert.
// The payload is passed as a string parameter without a cast: PostgreSQL
// infers the column's type (jsonb, json or text) for the parameter, and pgx
// sends a string to a json/jsonb parameter as raw JSON text. The id goes
// back as text; the DELETE takes it as text, which PostgreSQL parses as the
// column's own type (bigint or uuid), so the primary key index is used.
func InsertSQL(spec outboxdb.InsertSpec) (insert, del string) {
	quoted := make([]string, len(spec.Columns))
	params := make([]string, len(spec.Columns))
	for i, col := range spec.Columns {
		quoted[i] = QuoteIdent(col)
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	table := QuoteTable(spec.Table)
	insert = fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) RETURNING %s::text",
		table, strings.Join(quoted, ", "), strings.Join(params, ", "), QuoteIdent(spec.IDColumn))
	del = fmt.Sprintf("DELETE FROM %s WHERE %s = $1", table, QuoteIdent(spec.IDColumn))
	return insert, del
}

// PrepareInsert builds the statements once.
func (d *OutboxDB) PrepareInsert(spec outboxdb.InsertSpec) (outboxdb.Inserter, error) {
	if len(spec.Columns) == 0 {
		return nil, errors.New("insert: no columns")
	}
	insert, del := InsertSQL(spec)
	if !spec.DeleteAfter {
		// One statement, its own transaction: PostgreSQL commits the
		// INSERT before it answers, so one round trip holds the insert
		// and the commit.
		return func(ctx context.Context, values []any, now func() time.Time) (outboxdb.Inserted, error) {
			var in outboxdb.Inserted
			in.Started = now()
			in.CommitSent = in.Started
			if err := d.pool.QueryRow(ctx, insert, values...).Scan(&in.RowID); err != nil {
				return outboxdb.Inserted{}, fmt.Errorf("insert into %s: %w", spec.Table, err)
			}
			in.Committed = now()
			return in, nil
		}, nil
	}
	return func(ctx context.Context, values []any, now func() time.Time) (outboxdb.Inserted, error) {
		var in outboxdb.Inserted
		in.Started = now()
		tx, err := d.pool.Begin(ctx)
		if err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("begin: %w", err)
		}
		defer func() {
			// A no-op after Commit; after a cancelled ctx it still needs a
			// live context to release the connection cleanly.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}()
		if err := tx.QueryRow(ctx, insert, values...).Scan(&in.RowID); err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("insert into %s: %w", spec.Table, err)
		}
		if _, err := tx.Exec(ctx, del, in.RowID); err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("delete canary row %s: %w", in.RowID, err)
		}
		in.CommitSent = now()
		if err := tx.Commit(ctx); err != nil {
			return outboxdb.Inserted{}, fmt.Errorf("commit: %w", err)
		}
		in.Committed = now()
		return in, nil
	}, nil
}

// PublishedSQL is ReadPublished's statement: one UNION ALL branch per
// table, reading a batch of rows by primary key with the table's index
// before each row:
//
//	SELECT 0, "id"::text, <micros of "published_at"> FROM "r0"."outbox" WHERE "id" = ANY($1)
//	UNION ALL SELECT 1, ... FROM "r1"."outbox" WHERE "id" = ANY($2) ...
//
// The ids go as a text array, which PostgreSQL takes as an array of the id
// column's own type (bigint or uuid), so the primary key index is used;
// they come back as text, as the insert's RETURNING gave them.
// published_at comes back as microseconds since 1970, so that tables whose
// column is timestamptz and tables whose column is timestamp can share a
// UNION ALL without a cast that would read the latter in the session's
// TimeZone: the epoch of a timestamp is its wall clock read as UTC, as pgx
// reads it. A table with no ids gets an empty array, which its index
// answers at once, so the text is fixed for a fixed list of tables.
func PublishedSQL(tables []outboxdb.Table) string {
	var b strings.Builder
	for i, t := range tables {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		id := QuoteIdent(t.ID)
		fmt.Fprintf(&b, "SELECT %d, %s::text, (extract(epoch FROM %s) * 1000000)::bigint FROM %s WHERE %s = ANY($%d)",
			i, id, QuoteIdent(t.PublishedAt), QuoteTable(t.Name), id, i+1)
	}
	return b.String()
}

// ReadPublished reads every table of tables in one statement
// (PublishedSQL).
func (d *OutboxDB) ReadPublished(ctx context.Context, tables []outboxdb.Table, ids [][]string) ([]outboxdb.PublishedRow, error) {
	var key strings.Builder
	for _, t := range tables {
		fmt.Fprintf(&key, "%q.%q.%q;", t.Name, t.ID, t.PublishedAt)
	}
	d.mu.Lock()
	sql, ok := d.published[key.String()]
	if !ok {
		sql = PublishedSQL(tables)
		d.published[key.String()] = sql
	}
	d.mu.Unlock()
	args := make([]any, len(tables))
	for i := range tables {
		if ids[i] == nil {
			args[i] = []string{} // nothing to read there: an empty array, no row
		} else {
			args[i] = ids[i]
		}
	}
	rows, err := d.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var out []outboxdb.PublishedRow
	var r outboxdb.PublishedRow
	var published *int64 // µs since 1970; NULL until the relay marks the row
	_, err = pgx.ForEachRow(rows, []any{&r.Table, &r.ID, &published}, func() error {
		if published != nil {
			out = append(out, outboxdb.PublishedRow{Table: r.Table, ID: r.ID, PublishedAt: time.UnixMicro(*published).UTC()})
		}
		return nil
	})
	return out, err
}

// TableFault: PostgreSQL refused one of the statement's tables (class 42:
// a table or column that does not exist, a permission, a type; class 22: a
// value it cannot convert, such as a row id that is not a uuid).
func (d *OutboxDB) TableFault(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	class := pgErr.Code[:min(2, len(pgErr.Code))]
	return class == "42" || class == "22"
}
