package prober

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/tick"
)

// database is one distinct database of the service (one shared pool: the
// pipelines whose database.dsn resolves to the same string) and what the
// prober knows of it: whether it answers, and its clock offset. One ping
// loop and one clock estimate serve every pipeline on it, so their cost
// does not grow with the pipelines; the per-pipeline gauges and readiness
// reasons are still set for each of them.
type database struct {
	db    outboxdb.DB
	clock *DBClock
	// clockEvery is the shortest database.clock_offset_interval of its
	// pipelines: each gets an estimate at least as fresh as it asked for.
	clockEvery time.Duration
	now        func() time.Time
	log        *slog.Logger // names the database and its pipelines
	// Each pipeline's series, resolved once.
	up     []prometheus.Gauge
	errors []prometheus.Counter

	mu     sync.Mutex
	ok     bool
	known  bool // ok was set by a check, not just initialised
	reason string
}

// newDatabase watches the database of pipelines (at least one), and its
// clock; label names it in logs (host, port, database and user: never the
// DSN).
func newDatabase(label string, db outboxdb.DB,
	pipelines []*config.Pipeline, m *Metrics, now func() time.Time, log *slog.Logger) *database {
	names := make([]string, len(pipelines))
	every := time.Duration(pipelines[0].Database.ClockOffsetInterval)
	for i, p := range pipelines {
		names[i] = p.Name
		every = min(every, time.Duration(p.Database.ClockOffsetInterval))
	}
	log = log.With("database", label, "pipelines", names)
	d := &database{db: db, clock: NewDBClock(names, db, m, now, log), clockEvery: every, now: now, log: log,
		reason: "database not reached yet"}
	for _, p := range names {
		d.up = append(d.up, m.DependencyUp.WithLabelValues(p, DependencyDatabase))
		d.errors = append(d.errors, m.DependencyErrors.WithLabelValues(p, DependencyDatabase))
	}
	return d
}

// status is whether the database answered the last check, and why not.
func (d *database) status() (ok bool, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ok, d.reason
}

// watch pings the database every interval for readiness and re-estimates
// the clock offset every clockEvery (and at once after the database came
// back, as a restart may have moved its clock), until ctx is done.
func (d *database) watch(ctx context.Context, every time.Duration) {
	var lastEstimate time.Time
	estimateFailing := false
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.db.Ping(pctx)
		var estimateErr error
		if err == nil && (lastEstimate.IsZero() || d.now().Sub(lastEstimate) >= d.clockEvery) {
			// A failed estimate is counted once, by Estimate, as db_clock;
			// the database answered, so it is not down: the previous
			// estimate stays in use and the next check tries again.
			if estimateErr = d.clock.Estimate(pctx); estimateErr == nil {
				lastEstimate = d.now()
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		d.set(err)
		if err != nil {
			for _, c := range d.errors {
				c.Inc()
			}
			lastEstimate = time.Time{} // a restart may have moved its clock
		}
		if estimateErr != nil && !estimateFailing {
			d.log.Warn("database clock offset not measured; the last estimate stays in use", "err", d.db.Explain(estimateErr))
		}
		estimateFailing = estimateErr != nil
		if !tick.Wait(ctx, every) {
			return
		}
	}
}

// set records a check's result for every pipeline on the database.
func (d *database) set(err error) {
	err = d.db.Explain(err) // the reason /readyz and check show, and the log
	d.mu.Lock()
	was, known := d.ok, d.known
	d.ok, d.known = err == nil, true
	if err != nil {
		d.reason = err.Error()
	} else {
		d.reason = ""
	}
	d.mu.Unlock()
	up := 0.0
	if err == nil {
		up = 1
	}
	for _, g := range d.up {
		g.Set(up)
	}
	// One line per change of state, not one per check nor per pipeline:
	// the logger names the pipelines it affects.
	switch {
	case err == nil && !was:
		d.log.Info("database reachable")
	case err != nil && (was || !known):
		d.log.Warn("database unreachable; canary inserts fail until it is back", "err", err)
	case err != nil:
		d.log.Debug("database still unreachable", "err", err)
	}
}
