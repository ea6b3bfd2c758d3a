package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Limit returns a Querier on q that runs at most cap(slots) queries at a
// time, over every Querier sharing slots: a query waits for a slot (or
// its context) before it asks q for a connection, and gives the slot back
// when its rows are closed or its row scanned.
func Limit(q Querier, slots chan struct{}) Querier {
	return limited{q: q, slots: slots}
}

type limited struct {
	q     Querier
	slots chan struct{}
}

func (l limited) acquire(ctx context.Context) (func(), error) {
	select {
	case l.slots <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-l.slots }) }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l limited) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	release, err := l.acquire(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := l.q.Query(ctx, sql, args...)
	if err != nil {
		release()
		return nil, err
	}
	return &limitedRows{Rows: rows, release: release}, nil
}

func (l limited) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	release, err := l.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return limitedRow{row: l.q.QueryRow(ctx, sql, args...), release: release}
}

type limitedRows struct {
	pgx.Rows
	release func()
}

func (r *limitedRows) Close() {
	r.Rows.Close()
	r.release()
}

// Next releases the slot as soon as the rows are exhausted, as pgx frees
// the connection then, whether or not the caller closes them.
func (r *limitedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *limitedRows) CommandTag() pgconn.CommandTag { return r.Rows.CommandTag() }

type limitedRow struct {
	row     pgx.Row
	release func()
}

func (r limitedRow) Scan(dest ...any) error {
	defer r.release()
	return r.row.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
