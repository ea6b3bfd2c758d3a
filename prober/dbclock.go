package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClockOffset is the database clock minus the prober clock, estimated from
// the sample with the lowest round trip. The true offset lies within
// Offset ± Error.
type ClockOffset struct {
	Offset     time.Duration
	Error      time.Duration
	MeasuredAt time.Time
}

// ToLocal converts a database timestamp to the prober's clock.
func (o ClockOffset) ToLocal(dbTime time.Time) time.Time { return dbTime.Add(-o.Offset) }

// ClockReader reads a database's wall clock (outboxdb.DB's Clock:
// PostgreSQL's clock_timestamp(), MySQL's SYSDATE(6)).
type ClockReader interface {
	Clock(ctx context.Context) (time.Time, error)
}

// EstimateDBOffset brackets a read of the database's wall clock with local reads of
// the clock, samples times. The database read happened somewhere inside the
// bracket; assuming the middle errs by at most half the round trip, so the
// fastest sample gives the tightest bound (NTP's reasoning, without its
// filtering: one short burst is enough for a millisecond budget).
func EstimateDBOffset(ctx context.Context, q ClockReader, now func() time.Time, samples int) (ClockOffset, error) {
	if samples < 1 {
		samples = 1
	}
	var best ClockOffset
	bestRTT := time.Duration(-1)
	for i := 0; i < samples; i++ {
		before := now()
		dbTime, err := q.Clock(ctx)
		if err != nil {
			return ClockOffset{}, fmt.Errorf("read database clock: %w", err)
		}
		after := now()
		rtt := after.Sub(before)
		if rtt < 0 {
			// The local clock stepped backwards during the sample; it says nothing.
			continue
		}
		if bestRTT < 0 || rtt < bestRTT {
			bestRTT = rtt
			mid := before.Add(rtt / 2)
			best = ClockOffset{Offset: dbTime.Sub(mid), Error: rtt / 2, MeasuredAt: after}
		}
	}
	if bestRTT < 0 {
		return ClockOffset{}, errors.New("read database clock: the local clock went backwards in every sample")
	}
	return best, nil
}

// DBClock keeps the latest estimate of one database's clock offset and
// exports it as the gauges of every pipeline on that database: one
// estimate serves them all, as their published_at stamps are all on that
// one clock.
type DBClock struct {
	q   ClockReader
	now func() time.Time
	log *slog.Logger
	// Each pipeline's series, resolved once.
	offset, offsetError []prometheus.Gauge
	errors              []prometheus.Counter

	mu  sync.Mutex
	off ClockOffset
	ok  bool
}

// NewDBClock returns an estimator with no estimate yet for the database
// of pipelines; log names the database.
func NewDBClock(pipelines []string, q ClockReader, m *Metrics, now func() time.Time, log *slog.Logger) *DBClock {
	d := &DBClock{q: q, now: now, log: log}
	for _, p := range pipelines {
		d.offset = append(d.offset, m.DBClockOffset.WithLabelValues(p))
		d.offsetError = append(d.offsetError, m.DBClockOffsetError.WithLabelValues(p))
		d.errors = append(d.errors, m.DependencyErrors.WithLabelValues(p, DependencyDBClock))
	}
	return d
}

// dbClockSamples is how many round trips one estimate takes; the fastest
// wins.
const dbClockSamples = 5

// Estimate measures the offset again and exports it. A change larger than
// the error bounds of both estimates is logged: it means a clock stepped.
func (d *DBClock) Estimate(ctx context.Context) error {
	off, err := EstimateDBOffset(ctx, d.q, d.now, dbClockSamples)
	if err != nil {
		for _, c := range d.errors {
			c.Inc()
		}
		return fmt.Errorf("estimate clock offset: %w", err)
	}
	d.mu.Lock()
	prev, had := d.off, d.ok
	d.off, d.ok = off, true
	d.mu.Unlock()
	for i := range d.offset {
		d.offset[i].Set(off.Offset.Seconds())
		d.offsetError[i].Set(off.Error.Seconds())
	}
	change := (off.Offset - prev.Offset).Abs()
	switch {
	case !had:
		d.log.Info("database clock offset measured", "offset", off.Offset, "error", off.Error)
	case change > off.Error+prev.Error:
		d.log.Warn("database clock offset changed", "offset", off.Offset, "previous", prev.Offset, "error", off.Error)
	}
	return nil
}

// Current returns the latest estimate, if there is one.
func (d *DBClock) Current() (ClockOffset, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.off, d.ok
}
