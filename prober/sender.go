package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// DB is what the sender needs of a pgx pool: a single INSERT in a
// transaction of its own (implicit), or, with delete_after_insert, an
// explicit transaction.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SenderOptions configures a Sender.
type SenderOptions struct {
	Pipeline *config.Pipeline
	// Instance is written into every payload so that instances sharing a
	// canary topic skip each other's canaries.
	Instance string
	DB       DB
	Signer   *Signer
	// Tracker receives every committed canary; nil only in tests that look
	// at the rows themselves.
	Tracker *Tracker
	Metrics *Metrics
	Now     func() time.Time
	Logger  *slog.Logger
}

// Sender inserts canary rows into one pipeline's outbox table.
type Sender struct {
	p        *config.Pipeline
	instance string
	db       DB
	signer   *Signer
	tracker  *Tracker
	metrics  *Metrics
	now      func() time.Time
	log      *slog.Logger

	insertSQL string
	deleteSQL string
	// uuidIDs: the prober supplies the primary key (Debezium's table has
	// no default), otherwise the database fills it and RETURNING reads it.
	uuidIDs bool

	mu      sync.Mutex
	lastSeq uint64
	failing bool // the last insert failed
}

// NewSender builds the pipeline's INSERT once, with every identifier quoted.
func NewSender(o SenderOptions) (*Sender, error) {
	if o.Pipeline == nil || o.DB == nil || o.Signer == nil || o.Metrics == nil {
		return nil, errors.New("sender: pipeline, database, signer and metrics are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sender{
		p: o.Pipeline, instance: o.Instance, db: o.DB, signer: o.Signer, tracker: o.Tracker,
		metrics: o.Metrics, now: o.Now, log: o.Logger,
		uuidIDs: o.Pipeline.Outbox.IDGeneration == config.IDUUID,
	}
	s.insertSQL, s.deleteSQL = buildInsert(o.Pipeline)
	return s, nil
}

// buildInsert returns the canary INSERT and the DELETE of cdc hygiene. The
// payload is passed as a string parameter without a cast: PostgreSQL infers
// the column's type (jsonb, json or text) for the parameter, and pgx sends a
// string to a json/jsonb parameter as raw JSON text.
func buildInsert(p *config.Pipeline) (insert, del string) {
	c := p.Outbox.Columns
	table := postgres.QuoteTable(p.Outbox.Table)
	var cols []string
	if p.Outbox.IDGeneration == config.IDUUID {
		cols = append(cols, c.ID)
	}
	cols = append(cols, c.Route, c.Key)
	if c.EventType != "" && c.EventType != c.Route {
		cols = append(cols, c.EventType)
	}
	cols = append(cols, c.Payload)
	quoted := make([]string, len(cols))
	params := make([]string, len(cols))
	for i, col := range cols {
		quoted[i] = postgres.QuoteIdent(col)
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	insert = fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) RETURNING %s::text",
		table, strings.Join(quoted, ", "), strings.Join(params, ", "), postgres.QuoteIdent(c.ID))
	// The id goes back as text: pgx sends a string parameter in text
	// format, which PostgreSQL parses as the column's own type (bigint or
	// uuid), so the primary key index is used.
	del = fmt.Sprintf("DELETE FROM %s WHERE %s = $1", table, postgres.QuoteIdent(c.ID))
	return insert, del
}

// nextSeq returns an increasing sequence number that a restart does not
// reuse: it is at least the current time in nanoseconds, so a new process
// starts above anything its predecessor sent (unless the clock went back
// by more than the predecessor's whole run), without any state to persist.
func (s *Sender) nextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := uint64(max(s.now().UnixNano(), 0))
	if seq <= s.lastSeq {
		seq = s.lastSeq + 1
	}
	s.lastSeq = seq
	return seq
}

// Send inserts one canary in a short transaction of its own and hands it to
// the tracker. A failed insert is counted and logged, and is not an SLI
// event: the pipeline was not exercised, so it says nothing about it.
func (s *Sender) Send(ctx context.Context) (Canary, error) {
	c, err := s.insert(ctx)
	if err != nil {
		s.metrics.CanaryInsertFailures.WithLabelValues(s.p.Name).Inc()
		err = fmt.Errorf("insert canary: %w", postgres.Explain(err))
		s.logInsert(err)
		return Canary{}, err
	}
	s.logInsert(nil)
	if s.tracker != nil {
		if err := s.tracker.Sent(c); err != nil {
			return c, fmt.Errorf("track canary %s: %w", c.ID, err)
		}
	}
	s.log.Debug("canary sent", "canary", c.ID, "seq", c.Seq, "row", c.RowID,
		"insert_to_commit", c.Committed.Sub(c.InsertStarted))
	return c, nil
}

func (s *Sender) insert(ctx context.Context) (_ Canary, err error) {
	// A time-ordered (version 7) id: rows the prober supplies the key of
	// stay in index order, and ids sort by the time they were made.
	uid, err := uuid.NewV7()
	if err != nil {
		return Canary{}, fmt.Errorf("canary id: %w", err)
	}
	id := uid.String()
	if s.tracker != nil {
		// Sent or Abandon follows every Expect (see Tracker.Expect).
		defer func() {
			if err != nil {
				s.tracker.Abandon(id)
			}
		}()
	}
	c := Canary{ID: id, Seq: s.nextSeq(), Pipeline: s.p.Name, Key: s.p.Canary.Key}
	payload, err := s.signer.Encode(Payload{CanaryID: c.ID, Instance: s.instance, Pipeline: s.p.Name, Seq: c.Seq})
	if err != nil {
		return Canary{}, fmt.Errorf("encode payload: %w", err)
	}
	var args []any
	if s.uuidIDs {
		args = append(args, c.ID)
	}
	args = append(args, s.p.Canary.AggregateType, s.p.Canary.Key)
	if col := s.p.Outbox.Columns; col.EventType != "" && col.EventType != col.Route {
		args = append(args, s.p.Canary.EventType)
	}
	args = append(args, string(payload))

	if s.tracker != nil {
		// The relay may publish the row, and the consumer read it, before
		// Send gets to call Sent: the tracker parks such an arrival
		// instead of skipping it as unknown.
		s.tracker.Expect(c.ID)
	}
	if s.p.Canary.DeleteAfterInsert {
		if err := s.insertAndDelete(ctx, &c, args); err != nil {
			return Canary{}, err
		}
		return c, nil
	}
	// One statement, its own transaction: PostgreSQL commits the INSERT
	// before it answers, so one round trip holds the insert and the
	// commit. The commit happened somewhere between sending it and the
	// answer: CommitSent is when it was sent (the start of segments from
	// commit, an upper bound on them), Committed when it returned.
	c.InsertStarted = s.now()
	c.CommitSent = c.InsertStarted
	if err := s.db.QueryRow(ctx, s.insertSQL, args...).Scan(&c.RowID); err != nil {
		return Canary{}, fmt.Errorf("insert into %s: %w", s.p.Outbox.Table, err)
	}
	c.Committed = s.now()
	return c, nil
}

// insertAndDelete inserts and deletes the canary row in one explicit
// transaction (delete_after_insert): log capture has the insert in the
// WAL, Debezium's router ignores the delete, and the table stays empty.
// CommitSent is taken before COMMIT, Committed when it returned.
func (s *Sender) insertAndDelete(ctx context.Context, c *Canary, args []any) error {
	c.InsertStarted = s.now()
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		// A no-op after Commit; after a cancelled ctx it still needs a
		// live context to release the connection cleanly.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := tx.QueryRow(ctx, s.insertSQL, args...).Scan(&c.RowID); err != nil {
		return fmt.Errorf("insert into %s: %w", s.p.Outbox.Table, err)
	}
	if _, err := tx.Exec(ctx, s.deleteSQL, c.RowID); err != nil {
		return fmt.Errorf("delete canary row %s: %w", c.RowID, err)
	}
	c.CommitSent = s.now()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	c.Committed = s.now()
	return nil
}

// logInsert logs a failed insert when inserts start failing and once more
// when they work again; the failures in between go to debug (the counter
// has them all), so a database outage is not a warning per canary tick.
func (s *Sender) logInsert(err error) {
	s.mu.Lock()
	was := s.failing
	s.failing = err != nil
	s.mu.Unlock()
	switch {
	case err != nil && !was:
		s.log.Warn("canary inserts failing; not SLI events, counted in outbox_canary_canary_insert_failures_total", "err", err)
	case err != nil:
		s.log.Debug("canary insert failed", "err", err)
	case was:
		s.log.Info("canary inserts work again")
	}
}
