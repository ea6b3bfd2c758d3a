package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/mysql"
)

// Store is the database of the outbox table, of one family: one poll is
// one of its transactions, which claims rows FOR UPDATE SKIP LOCKED (so
// that several relays share a table without sending a row twice) and marks
// them after the broker's ack. PostgresStore and MySQLStore make one.
type Store interface {
	// prepare builds the family's statements for the table once.
	prepare(c Columns, deletePublished bool) error
	begin(ctx context.Context) (storeTx, error)
}

type storeTx interface {
	// claim takes up to limit unpublished rows in id order.
	claim(ctx context.Context, limit int, withEventType bool) ([]row, error)
	// finish marks the rows published (or deletes them).
	finish(ctx context.Context, ids []int64) error
	commit(ctx context.Context) error
	// rollback is a no-op after commit.
	rollback(ctx context.Context)
}

// PostgresStore is a PostgreSQL outbox on pool.
func PostgresStore(pool *pgxpool.Pool) Store { return &pgStore{pool: pool} }

type pgStore struct {
	pool *pgxpool.Pool
	q    queries
}

func (s *pgStore) prepare(c Columns, deletePublished bool) (err error) {
	s.q, err = buildQueries(c, deletePublished)
	return err
}

func (s *pgStore) begin(ctx context.Context) (storeTx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgTx{tx: tx, q: s.q}, nil
}

type pgTx struct {
	tx pgx.Tx
	q  queries
}

func (t *pgTx) claim(ctx context.Context, limit int, withEventType bool) ([]row, error) {
	pgRows, err := t.tx.Query(ctx, t.q.claim, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(pgRows, func(s pgx.CollectableRow) (row, error) {
		var x row
		dest := []any{&x.id, &x.route, &x.key, &x.payload, &x.createdAt}
		if withEventType {
			dest = append(dest, &x.eventType)
		}
		err := s.Scan(dest...)
		return x, err
	})
}

func (t *pgTx) finish(ctx context.Context, ids []int64) error {
	_, err := t.tx.Exec(ctx, t.q.finish, ids)
	return err
}

func (t *pgTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t *pgTx) rollback(ctx context.Context) { _ = t.tx.Rollback(ctx) }

// MySQLStore is a MySQL 8.0+ or MariaDB 10.6+ outbox (FOR UPDATE SKIP
// LOCKED) on db, whose sessions must be in UTC (mysql.Open's are), so that
// created_at and published_at mean the instants they say.
func MySQLStore(db *sql.DB) Store { return &mysqlStore{db: db} }

type mysqlStore struct {
	db     *sql.DB
	claimQ string
	// finishQ is the statement before its IN list, which has one
	// placeholder per row.
	finishQ string
}

func (s *mysqlStore) prepare(c Columns, deletePublished bool) error {
	if _, err := buildQueries(c, deletePublished); err != nil { // the same checks of the names
		return err
	}
	q := mysql.QuoteIdent
	t, id, published := mysql.QuoteTable(c.Table), q(c.ID), q(c.PublishedAt)
	// CAST AS CHAR reads varchar, char(36) or numeric keys alike; the
	// payload is read as bytes (a JSON column arrives as its text).
	sel := fmt.Sprintf("SELECT %s, CAST(%s AS CHAR), CAST(%s AS CHAR), %s, %s", id, q(c.Route), q(c.Key), q(c.Payload), q(c.CreatedAt))
	if c.EventType != "" {
		sel += fmt.Sprintf(", CAST(%s AS CHAR)", q(c.EventType))
	}
	s.claimQ = fmt.Sprintf("%s FROM %s WHERE %s IS NULL ORDER BY %s LIMIT ? FOR UPDATE SKIP LOCKED", sel, t, published, id)
	// SYSDATE(6): when the UPDATE runs, after the ack (NOW(6) would be
	// the same here: the statement's start).
	s.finishQ = fmt.Sprintf("UPDATE %s SET %s = SYSDATE(6) WHERE %s IN ", t, published, id)
	if deletePublished {
		s.finishQ = fmt.Sprintf("DELETE FROM %s WHERE %s IN ", t, id)
	}
	return nil
}

func (s *mysqlStore) begin(ctx context.Context) (storeTx, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &mysqlTx{tx: tx, s: s}, nil
}

type mysqlTx struct {
	tx *sql.Tx
	s  *mysqlStore
}

func (t *mysqlTx) claim(ctx context.Context, limit int, withEventType bool) ([]row, error) {
	rs, err := t.tx.QueryContext(ctx, t.s.claimQ, limit)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var rows []row
	for rs.Next() {
		var x row
		dest := []any{&x.id, &x.route, &x.key, &x.payload, &x.createdAt}
		if withEventType {
			dest = append(dest, &x.eventType)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, err
		}
		x.createdAt = x.createdAt.UTC()
		rows = append(rows, x)
	}
	return rows, rs.Err()
}

func (t *mysqlTx) finish(ctx context.Context, ids []int64) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	_, err := t.tx.ExecContext(ctx, t.s.finishQ+"("+strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")+")", args...)
	return err
}

func (t *mysqlTx) commit(context.Context) error { return t.tx.Commit() }

func (t *mysqlTx) rollback(context.Context) { _ = t.tx.Rollback() }
