package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// SenderOptions configures a Sender.
type SenderOptions struct {
	Pipeline *config.Pipeline
	// Instance is written into every payload so that instances sharing a
	// canary topic skip each other's canaries.
	Instance string
	// DB is the pipeline's database, of whichever family.
	DB     outboxdb.DB
	Signer *Signer
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
	db       outboxdb.DB
	signer   *Signer
	tracker  *Tracker
	metrics  *Metrics
	now      func() time.Time
	log      *slog.Logger

	insert outboxdb.Inserter
	// uuidIDs: the prober supplies the primary key (Debezium's table has
	// no default), otherwise the database fills it and the insert reads it
	// back.
	uuidIDs bool

	mu      sync.Mutex
	lastSeq uint64
	failing bool // the last insert failed
}

// NewSender builds the pipeline's INSERT once, with the database's family.
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
	ins, err := o.DB.PrepareInsert(insertSpec(o.Pipeline))
	if err != nil {
		return nil, fmt.Errorf("sender: %w", err)
	}
	s.insert = ins
	return s, nil
}

// insertSpec is the canary row's shape in the pipeline's table: the id
// when the prober supplies it, the route and key, the event type when it
// has a column of its own, and the payload.
func insertSpec(p *config.Pipeline) outboxdb.InsertSpec {
	c := p.Outbox.Columns
	spec := outboxdb.InsertSpec{Table: p.Outbox.Table, IDColumn: c.ID, DeleteAfter: p.Canary.DeleteAfterInsert,
		SuppliedID: p.Outbox.IDGeneration == config.IDUUID}
	if spec.SuppliedID {
		spec.Columns = append(spec.Columns, c.ID)
	}
	spec.Columns = append(spec.Columns, c.Route, c.Key)
	if c.EventType != "" && c.EventType != c.Route {
		spec.Columns = append(spec.Columns, c.EventType)
	}
	spec.Columns = append(spec.Columns, c.Payload)
	return spec
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
	c, err := s.insertCanary(ctx)
	if err != nil {
		s.metrics.CanaryInsertFailures.WithLabelValues(s.p.Name).Inc()
		err = fmt.Errorf("insert canary: %w", s.db.Explain(err))
		s.logInsert(err)
		return Canary{}, err
	}
	s.logInsert(nil)
	if s.tracker != nil {
		if err := s.tracker.Sent(c); err != nil {
			return c, fmt.Errorf("track canary %s: %w", c.ID, err)
		}
	}
	if s.log.Enabled(ctx, slog.LevelDebug) { // the arguments alone would allocate, for every canary
		s.log.Debug("canary sent", "canary", c.ID, "seq", c.Seq, "row", c.RowID,
			"insert_to_commit", c.Committed.Sub(c.InsertStarted))
	}
	return c, nil
}

func (s *Sender) insertCanary(ctx context.Context) (_ Canary, err error) {
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
	// The commit happened somewhere between sending it and the answer:
	// CommitSent is when it was sent (the start of segments from commit,
	// an upper bound on them), Committed when it returned.
	in, err := s.insert(ctx, args, s.now)
	if err != nil {
		return Canary{}, err
	}
	c.RowID, c.InsertStarted, c.CommitSent, c.Committed = in.RowID, in.Started, in.CommitSent, in.Committed
	return c, nil
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
