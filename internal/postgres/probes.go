// Package postgres is the prober's one way into PostgreSQL: the pool built
// from a pipeline's database settings, identifier quoting, and the read-only
// probes (backlog, open transactions, replication slots, partial indexes)
// that the watchers, diagnose and lint share.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// Querier is what the database watchers need of a pgx pool or connection.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Backlog is the polling relay's queue: rows not yet published and the age
// of the oldest, both on the database clock so no cross-host skew enters.
type Backlog struct {
	Rows      int64
	OldestAge time.Duration // 0 when the backlog is empty
}

// BacklogQuery is the SQL of QueryBacklog. Its only predicate is the partial
// index's (published_at IS NULL), so the planner can answer from the index,
// which holds just the backlog, however many published rows the table keeps.
func BacklogQuery(p *config.Pipeline) string {
	c := p.Outbox.Columns
	age := "0"
	if c.CreatedAt != "" {
		age = fmt.Sprintf("COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(%s)), 0)", QuoteIdent(c.CreatedAt))
	}
	return fmt.Sprintf("SELECT count(*), %s::float8 FROM %s WHERE %s IS NULL",
		age, QuoteTable(p.Outbox.Table), QuoteIdent(c.PublishedAt))
}

// QueryBacklog measures the backlog of a polling pipeline.
func QueryBacklog(ctx context.Context, q Querier, p *config.Pipeline) (Backlog, error) {
	if p.Outbox.Columns.PublishedAt == "" {
		return Backlog{}, errors.New("backlog: the outbox has no published_at column (cdc relays never write one)")
	}
	var rows int64
	var ageSeconds float64
	if err := q.QueryRow(ctx, BacklogQuery(p)).Scan(&rows, &ageSeconds); err != nil {
		return Backlog{}, fmt.Errorf("backlog of %s: %w", p.Outbox.Table, err)
	}
	return Backlog{Rows: rows, OldestAge: secondsToDuration(ageSeconds)}, nil
}

// HasUnpublishedIndex reports whether the outbox has a valid partial index
// whose predicate is exactly "<published_at> IS NULL": without it every
// backlog query and every relay poll scans the whole table history. An
// index left invalid by a failed CREATE INDEX CONCURRENTLY does not count,
// nor does one with more conditions, which the backlog query cannot use.
func HasUnpublishedIndex(ctx context.Context, q Querier, p *config.Pipeline) (bool, error) {
	rows, err := q.Query(ctx,
		`SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indrelid = $1::regclass AND indpred IS NOT NULL AND indisvalid`,
		QuoteTable(p.Outbox.Table))
	if err != nil {
		return false, fmt.Errorf("indexes of %s: %w", p.Outbox.Table, err)
	}
	predicates, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("indexes of %s: %w", p.Outbox.Table, err)
	}
	for _, pred := range predicates {
		if IsUnpublishedPredicate(pred, p.Outbox.Columns.PublishedAt) {
			return true, nil
		}
	}
	return false, nil
}

// Transactions summarises open transactions of the pipeline's database:
// rows an open transaction inserted stay invisible to the relay until it
// commits, which is segment 1 of the lag and invisible to every other signal.
type Transactions struct {
	OldestAge time.Duration
	OldestPID int32
	OverLimit int64 // older than the threshold
}

// QueryTransactions reads pg_stat_activity (all rows visible with the
// pg_monitor role). Our own session is left out.
func QueryTransactions(ctx context.Context, q Querier, threshold time.Duration) (Transactions, error) {
	open, err := QueryOpenTransactions(ctx, q, []time.Duration{threshold})
	if err != nil {
		return Transactions{}, err
	}
	return open.At(0), nil
}

// OpenTransactions is QueryOpenTransactions' answer: the database's open
// transactions counted against several thresholds at once.
type OpenTransactions struct {
	OldestAge time.Duration
	OldestPID int32
	OverLimit []int64 // OverLimit[i]: older than thresholds[i]
}

// At is the summary against the i-th threshold.
func (o OpenTransactions) At(i int) Transactions {
	return Transactions{OldestAge: o.OldestAge, OldestPID: o.OldestPID, OverLimit: o.OverLimit[i]}
}

// QueryOpenTransactions is QueryTransactions for pipelines on one database
// whose watch.long_transaction_threshold differs: one statement, and one
// read of pg_stat_activity, counts the transactions over each threshold,
// so a hundred pipelines cost what one does and agree with each other. The
// answer is a count per threshold, never a row per transaction, however
// many sessions the database has.
func QueryOpenTransactions(ctx context.Context, q Querier, thresholds []time.Duration) (OpenTransactions, error) {
	secs := make([]float64, len(thresholds))
	for i, t := range thresholds {
		secs[i] = t.Seconds()
	}
	var oldest float64
	var pid *int32
	var over []int64
	// The CTE is read twice, so PostgreSQL materialises it: every count
	// and the oldest age come from the same ages.
	err := q.QueryRow(ctx, `
		WITH open AS (
			SELECT pid, xact_start, clock_timestamp() - xact_start AS age
			FROM pg_stat_activity
			WHERE xact_start IS NOT NULL
			  AND pid <> pg_backend_pid()
			  AND backend_type = 'client backend'
			  AND datname = current_database()
		)
		SELECT COALESCE((SELECT EXTRACT(EPOCH FROM max(age)) FROM open), 0)::float8,
		       (SELECT pid FROM open ORDER BY xact_start LIMIT 1),
		       ARRAY(SELECT (SELECT count(*) FROM open WHERE age > make_interval(secs => t.secs))
		             FROM unnest($1::float8[]) WITH ORDINALITY AS t(secs, i) ORDER BY t.i)`,
		secs).Scan(&oldest, &pid, &over)
	if err != nil {
		return OpenTransactions{}, fmt.Errorf("open transactions: %w", err)
	}
	if len(over) != len(thresholds) {
		return OpenTransactions{}, fmt.Errorf("open transactions: %d counts for %d thresholds", len(over), len(thresholds))
	}
	o := OpenTransactions{OldestAge: secondsToDuration(oldest), OverLimit: over}
	if pid != nil {
		o.OldestPID = *pid
	}
	return o, nil
}

// Slot is one logical replication slot of the pipeline's database.
type Slot = outboxdb.Slot

// QuerySlots reads pg_replication_slots for the current database: only the
// slot named slot when it is not "" (watch.slot), else every slot of the
// database, whoever reads it. It runs on the primary only:
// pg_current_wal_lsn() fails on a standby, and the error says so.
func QuerySlots(ctx context.Context, q Querier, slot string) ([]Slot, error) {
	rows, err := q.Query(ctx, `
		SELECT slot_name, active, COALESCE(wal_status, ''), safe_wal_size,
		       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::int8,
		       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::int8
		FROM pg_replication_slots
		WHERE database = current_database()
		  AND ($1::text = '' OR slot_name::text = $1::text)
		ORDER BY slot_name`, slot)
	if err != nil {
		return nil, fmt.Errorf("replication slots: %w", err)
	}
	slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Slot, error) {
		var s Slot
		err := r.Scan(&s.Name, &s.Active, &s.WALStatus, &s.SafeWALSize, &s.RetainedWAL, &s.UnconfirmedWAL)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("replication slots: %w", err)
	}
	return slots, nil
}

// WALStatuses are the values of pg_replication_slots.wal_status
// (outboxdb.WALStatuses).
func WALStatuses() []string { return outboxdb.WALStatuses() }

func secondsToDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// Probes are a PostgreSQL database's answers to its watchers
// (outboxdb.Watched) on any Querier: OutboxDB's on its pool, and the
// watchers' own on the pool's share Pools.Watched holds for them.
type Probes struct {
	q     Querier
	label string
}

var _ outboxdb.Watched = (*Probes)(nil)

// NewProbes asks q; label names the database (Describe).
func NewProbes(q Querier, label string) *Probes { return &Probes{q: q, label: label} }

func (p *Probes) Family() string          { return config.KindPostgres }
func (p *Probes) Describe() string        { return p.label }
func (p *Probes) Explain(err error) error { return Explain(err) }

// Backlog is QueryBacklog on a table.
func (p *Probes) Backlog(ctx context.Context, t outboxdb.Table) (outboxdb.Backlog, error) {
	b, err := QueryBacklog(ctx, p.q, tablePipeline(t))
	return outboxdb.Backlog(b), err
}

// UnpublishedIndex is HasUnpublishedIndex, with the partial index that
// would do.
func (p *Probes) UnpublishedIndex(ctx context.Context, t outboxdb.Table) (string, error) {
	ok, err := HasUnpublishedIndex(ctx, p.q, tablePipeline(t))
	if err != nil || ok {
		return "", err
	}
	return "CREATE INDEX ON " + t.Name + " (" + t.ID + ") WHERE " + t.PublishedAt + " IS NULL", nil
}

// tablePipeline is t as the probes that take a pipeline read it.
func tablePipeline(t outboxdb.Table) *config.Pipeline {
	var p config.Pipeline
	p.Outbox.Table = t.Name
	c := &p.Outbox.Columns
	c.ID, c.CreatedAt, c.PublishedAt = t.ID, t.CreatedAt, t.PublishedAt
	return &p
}

// OpenTransactions is QueryOpenTransactions counting every open one (older
// than 0) and those over each threshold, in one statement.
func (p *Probes) OpenTransactions(ctx context.Context, thresholds []time.Duration) (outboxdb.Transactions, error) {
	o, err := QueryOpenTransactions(ctx, p.q, append([]time.Duration{0}, thresholds...))
	if err != nil {
		return outboxdb.Transactions{}, err
	}
	return outboxdb.Transactions{Open: o.OverLimit[0], OverThreshold: o.OverLimit[1:], OldestAge: o.OldestAge,
		OldestSession: int64(o.OldestPID)}, nil
}

// CaptureLog reads the WAL position, what the replication slots hold back
// and the slots of the database (as QuerySlots does, every one) in one
// statement; it fails on a standby (pg_current_wal_lsn()).
func (p *Probes) CaptureLog(ctx context.Context) (outboxdb.CaptureLog, error) {
	rows, err := p.q.Query(ctx, `
		SELECT w.position, w.written, w.retained, w.logical,
		       s.slot_name, s.active, COALESCE(s.wal_status, ''), s.safe_wal_size,
		       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::int8,
		       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::int8
		FROM (SELECT pg_current_wal_lsn()::text AS position,
		             pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8 AS written,
		             COALESCE((SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) FROM pg_replication_slots), 0)::int8 AS retained,
		             current_setting('wal_level') = 'logical' AS logical) w
		LEFT JOIN pg_replication_slots s ON s.database = current_database()
		ORDER BY s.slot_name`)
	if err != nil {
		return outboxdb.CaptureLog{}, fmt.Errorf("wal position and replication slots: %w", err)
	}
	var c outboxdb.CaptureLog
	var name *string
	var active *bool
	var s Slot
	_, err = pgx.ForEachRow(rows, []any{&c.Position, &c.Written, &c.RetainedBytes, &c.Enabled,
		&name, &active, &s.WALStatus, &s.SafeWALSize, &s.RetainedWAL, &s.UnconfirmedWAL}, func() error {
		if name != nil { // NULL: the database has no slot
			s.Name, s.Active = *name, active != nil && *active
			c.Slots = append(c.Slots, s)
		}
		return nil
	})
	if err != nil {
		return outboxdb.CaptureLog{}, fmt.Errorf("wal position and replication slots: %w", err)
	}
	return c, nil
}
