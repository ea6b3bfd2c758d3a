package prober

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// The Tracker is the thin shell around the pure judge (package judge, whose
// documentation holds the blame rule): it serialises the events, takes the
// consume stamp behind a fence so that the judge's clock never passes an
// arrival it has not been told of, persists the state after every change
// and before any metric moves, hands the stamp lookups the judge asks for
// to its outbox table's Lookups (lookups.go), which read them outside its
// lock, and applies the judge's effects to the metrics and the callbacks
// once the lock is released.
//
// Restarts: a change is written and fsynced (state.go: a journal line, now
// and then a snapshot) before the effects it produced are applied to the
// metrics and callbacks. Changes are written in batches (group commit): an
// arrival, a verdict at a deadline or a lookup's answer waits at most
// CommitDelay, until a sweep or a Sent finds the batch due, and its
// effects wait with it. Sent returns only once its canary is written
// (write(2)): alone, at once, not judged, and fsynced with the next batch,
// where the canary is written again as judged; Sent's effects
// (canaries_sent, last_sent, insert_to_commit) wait for that batch too. So
// a pipeline's batches are fsynced at most once per CommitDelay, whatever
// it sends; the service's sweep writes the due batches of every pipeline
// to the process's journal and fsyncs them once (SweepGroup) before
// applying their effects.
//
// After kill -9 at any instant a canary is neither lost nor counted twice:
// what was written survives the process. A message processed before the
// last batch is below the stored next offset and ignored as a replay; one
// processed after it is read again and judged then, its first judgement
// never having been applied; a verdict in the state is never emitted
// again; a canary written by Sent whose batch never was is judged again by
// the next process (its Sent's effects never having been applied). The
// span from the last batch to the restart is the prober's downtime, which
// no pipeline segment is charged for. What remains unknown is a crash
// between a canary's COMMIT and Sent writing it: the canary then arrives
// as unknown_canary (skipped), never as an SLI event. A crash of the
// machine (power, kernel), not of the process, loses what was written and
// not yet fsynced too: the canaries sent in the last CommitDelay, which
// then arrive as unknown_canary, and nothing else (the batch's effects had
// not been applied).

// ErrUnknownCanary is returned by Await for a canary id the tracker does not
// know (never sent through it, or forgotten long after it resolved).
var ErrUnknownCanary = errors.New("unknown canary")

// Kind classifies an arrival.
type Kind = judge.Kind

// Arrival kinds.
const (
	KindFirst     = judge.KindFirst
	KindDuplicate = judge.KindDuplicate
	KindReplay    = judge.KindReplay
	KindUnknown   = judge.KindUnknown
	KindPending   = judge.KindPending
)

// Outcome is what Arrived made of one message.
type Outcome struct {
	Kind     Kind
	CanaryID string
}

// Canary states in a Report.
const (
	StateInFlight = "in_flight"
	StateArrived  = "arrived"
	StateLate     = "late" // arrived after its end_to_end deadline
	StateLost     = "lost"
)

// SegmentResult is one segment of one canary as far as it is known.
type SegmentResult struct {
	Segment  string        `json:"segment"`
	Measured bool          `json:"measured"`           // both stamps known, Duration valid
	Duration time.Duration `json:"duration,omitempty"` // end stamp minus start stamp; an upper bound when Bound
	// Bound: Duration is only an upper bound (a stamp taken after its
	// event, such as a published_at marked after consumption).
	Bound    bool          `json:"bound,omitempty"`
	Budget   time.Duration `json:"budget,omitempty"`
	Budgeted bool          `json:"budgeted"`
	// Outcome is "good" or "bad" once the SLI event was counted,
	// "unjudged" (with Reason) when the segment is not an SLI event, ""
	// if not (yet) decided or not budgeted.
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// JudgedAt is when the outcome was decided (an arrival, or a deadline
	// that passed): burn rates over a window count it then.
	JudgedAt time.Time `json:"judged_at,omitzero"`
	// Skew is true when the segment measured negative by clocks that
	// disagree; StampOrder when by a stamp taken after its event. Neither
	// is a latency.
	Skew       bool `json:"skew,omitempty"`
	StampOrder bool `json:"stamp_order,omitempty"`
	// MissingStamp names a stamp the canary did not get, which leaves this
	// segment unmeasured; empty when the stamp could not be read (Reason
	// unknown).
	MissingStamp string `json:"missing_stamp,omitempty"`
}

// Took is the segment's measure as a person reads it, rounded to
// precision: "412ms", "<= 40ms" when only an upper bound is known, the
// reason a stamp-order or skewed segment is no latency, "no <stamp> stamp",
// or "-" when nothing is known yet.
func (s SegmentResult) Took(precision time.Duration) string {
	switch {
	case s.StampOrder: // measured as 0 when within the tolerance: no latency
		return "negative (stamp order)"
	case s.Bound:
		return "<= " + s.Duration.Round(precision).String()
	case s.Measured:
		return s.Duration.Round(precision).String()
	case s.Skew:
		return "negative (clock skew suspected)"
	case s.MissingStamp != "":
		return "no " + s.MissingStamp + " stamp"
	}
	return "-"
}

// Report is one canary's segment breakdown, for the status page and the
// check command. Segments is keyed by segment name (every segment of the
// pipeline, insert_to_commit included); Pipeline.Segments gives the order.
type Report struct {
	ID         string                   `json:"id"`
	Seq        uint64                   `json:"seq"`
	Pipeline   string                   `json:"pipeline"`
	State      string                   `json:"state"` // StateInFlight, StateArrived, StateLate or StateLost
	Committed  time.Time                `json:"committed"`
	Consumed   time.Time                `json:"consumed,omitzero"`
	OutOfOrder bool                     `json:"out_of_order,omitempty"`
	Segments   map[string]SegmentResult `json:"segments"`
	// CommitUncertainty is how long the statement that commits (the lone
	// INSERT, or COMMIT) took to return: the commit
	// happened somewhere in it, and segments from commit are measured from
	// its start.
	CommitUncertainty time.Duration `json:"commit_uncertainty,omitempty"`
	// Where, for a canary in flight, is the segment it is waiting in as
	// far as the evidence goes ("" when it cannot tell: a record stamped at
	// send while the brokers were out of reach), and Deadline when that
	// segment's budget runs out (zero when unknown).
	Where    string    `json:"where,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// LookupResult is what a stamp lookup found, on the prober's clock.
type LookupResult struct {
	Stamps map[string]time.Time
	// ErrorBound of the stamps' conversion to the prober's clock (the
	// database clock offset's).
	ErrorBound time.Duration
	// Unavailable, when set, is why this canary's stamps could not be read
	// although the batch was (its pipeline's database clock offset is not
	// measured yet): retried as after a failed batch, never taken for a
	// missing stamp.
	Unavailable error
}

// TrackerOptions configures a Tracker.
type TrackerOptions struct {
	Pipeline *config.Pipeline
	Instance string
	Metrics  *Metrics
	Now      func() time.Time
	Logger   *slog.Logger // already carrying the pipeline
	// OnDone, optional, is called once per canary when it is final
	// (arrived and judged, or lost), after the tracker's lock is released:
	// the demo prints a line per canary from it.
	OnDone func(Report)
	// StatePath is the file for the persisted state; "" keeps it in memory
	// only (tests, and `check`, which must not disturb the service's file).
	StatePath string
	// Journal is the process's journal, shared by its trackers so that a
	// sweep fsyncs their lines once (see SweepGroup); nil gives the tracker
	// one of its own beside StatePath (<StatePath>.journal.<segment>),
	// loaded at once.
	Journal *stateJournal
	// Lookups, optional, reads the stamps the messages do not carry (a
	// polling relay's published_at), shared with the other trackers on the
	// same outbox table. Without it the judge's asks are never answered.
	Lookups *Lookups
	// CommitDelay is how long a change may wait to be written and
	// fsynced with others in one batch (group commit), its effects on the
	// metrics and callbacks waiting with it: one fsync per batch instead of
	// one per change. Sent writes its canary at once and leaves the fsync
	// to the batch. Zero: DefaultCommitDelay; negative: every change is
	// written and fsynced at once. Only with a StatePath.
	CommitDelay time.Duration
}

// DefaultCommitDelay bounds how long a change waits for the batch that
// writes and fsyncs it, and so how late its effects reach /metrics (up to
// this plus a sweep): well under any scrape interval (15 s and more).
// Measured (docs/persistence.md): at one canary a second, 2 s makes a batch
// the two canaries of the last two seconds, judged, on one 4 KiB page,
// half the fsyncs and half the disk writes of 1 s, which fsyncs a page
// per canary.
const DefaultCommitDelay = 2 * time.Second

// Tracker follows the canaries of one pipeline from Sent to arrival or
// loss. It is safe for concurrent use.
type Tracker struct {
	p       *config.Pipeline
	plan    judge.Plan
	m       *Metrics
	now     func() time.Time
	log     *slog.Logger
	path    string
	store   *stateStore
	lookups *Lookups
	onDone  func(Report)
	forget  time.Duration
	// inFlight is the pipeline's in-flight gauge, set at every commit
	// (every sweep): resolved once rather than by its label each time, as
	// are the series every canary moves (series).
	inFlight prometheus.Gauge
	series   canarySeries

	// fence: consume stamps taken and not yet handed to the judge;
	// unhandled, those of messages its reader fetched and has not yet
	// handed to BeginArrival (FenceFetched).
	fenceMu   sync.Mutex
	fence     map[uint64]time.Time
	fenceN    uint64
	unhandled func() (time.Time, bool)

	mu      sync.Mutex
	j       *judge.Judge
	waiters map[string][]chan Report
	// Group commit: the effects of changes not yet written, and since when
	// the oldest of them waits (zero: none).
	commitDelay  time.Duration
	pending      []judge.Effect
	pendingSince time.Time
}

// NewTracker creates the tracker of one pipeline and loads its state file
// if there is one (a damaged or foreign file is moved aside, see
// stateStore). The span since the state's last write is the prober's
// downtime.
func NewTracker(opts TrackerOptions) (*Tracker, error) {
	if opts.Pipeline == nil || opts.Metrics == nil {
		return nil, errors.New("tracker: Pipeline and Metrics are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := opts.Pipeline
	if _, ok := opts.Metrics.SegmentLatency[p.Name]; !ok {
		return nil, errors.New("tracker: metrics were not created for this pipeline")
	}
	t := &Tracker{
		p: p, plan: planOf(p), m: opts.Metrics, now: func() time.Time { return wallClock(opts.Now()) }, log: opts.Logger, path: opts.StatePath,
		lookups: opts.Lookups, onDone: opts.OnDone, forget: 2 * time.Duration(p.Canary.LostAfter),
		fence:       map[uint64]time.Time{},
		waiters:     map[string][]chan Report{},
		commitDelay: cmp.Or(opts.CommitDelay, DefaultCommitDelay),
	}
	t.store = &stateStore{path: opts.StatePath, pipeline: p.Name, instance: opts.Instance, log: opts.Logger, m: opts.Metrics, journal: opts.Journal}
	if opts.StatePath != "" && opts.Journal == nil {
		sj, err := openStateJournal(opts.StatePath+journalSuffix, opts.Logger)
		if err != nil {
			return nil, err
		}
		t.store.journal = sj
		defer sj.loaded()
	}
	now := t.now()
	st, committed := t.store.load(now)
	t.j = judge.New(judgeConfig(p, t.plan, t.forget), st, now)
	// The gauges the stall alert reads come back with their values.
	restored := t.j.State()
	for _, g := range []struct {
		vec *compactvec.GaugeVec
		at  time.Time
	}{{t.m.LastSent, restored.LastSent}, {t.m.LastReceived, restored.LastReceived}, {t.m.LastSuccess, restored.LastSuccess}} {
		if !g.at.IsZero() {
			g.vec.WithLabelValues(p.Name).Set(unixSeconds(g.at))
		}
	}
	// Canaries the last process wrote at their commit and was killed
	// before the batch that judged them: it never applied their Sent's
	// effects, this one does, once its first batch holds them.
	for _, s := range committed {
		t.pending = append(t.pending, t.j.Sent(s)...)
	}
	if len(t.pending) > 0 {
		t.pendingSince = now
	}
	t.inFlight = t.m.InFlight.WithLabelValues(p.Name)
	t.series = canarySeries{
		sent: t.m.CanariesSent.WithLabelValues(p.Name), lastSent: t.m.LastSent.WithLabelValues(p.Name),
		received: t.m.CanariesReceived.WithLabelValues(p.Name), lastReceived: t.m.LastReceived.WithLabelValues(p.Name),
		sli: map[[2]string]*compactvec.Counter{},
	}
	for _, seg := range p.BudgetedSegments() { // the series NewMetrics made
		for _, o := range []string{judge.Good, judge.Bad} {
			t.series.sli[[2]string{seg, o}] = t.m.SLIEvents.WithLabelValues(p.Name, seg, o)
		}
	}
	t.inFlight.Set(float64(t.inFlightLocked()))
	return t, nil
}

// planOf derives the judge's plan from the pipeline's stamps and budgets.
func planOf(p *config.Pipeline) judge.Plan {
	var after, lookup []string
	if p.Relay.PublishedStamp == config.PublishedFromColumn {
		// published_at is written after the broker's ack, and read back
		// from the row rather than carried by the message.
		after, lookup = []string{config.StampPublish}, []string{config.StampPublish}
	}
	return judge.NewPlan(p.StampOrder(), p.Budget, config.SegmentInsertToCommit, config.SegmentEndToEnd, after, lookup)
}

func judgeConfig(p *config.Pipeline, plan judge.Plan, forget time.Duration) judge.Config {
	return judge.Config{
		Plan:                plan,
		SkewTolerance:       time.Duration(p.Relay.SkewTolerance),
		MaxSkew:             time.Duration(p.Relay.MaxClockSkew),
		LostAfter:           time.Duration(p.Canary.LostAfter),
		Forget:              forget,
		ArrivedLookupWindow: arrivedLookupWindow,
		LookupSettle:        lookupSettle,
		FloodSkips:          floodSkips,
	}
}

// arrivedLookupWindow bounds how long after arrival a published_at that
// reads NULL is asked for again (the polling relay commits it just after
// sending) before it is given up as missing.
const arrivedLookupWindow = 10 * time.Second

// lookupSettle is how long after a canary's arrival its published_at is
// first read: the polling relay writes it after the broker's ack, and a
// read at arrival found it NULL more often than not (1.6 reads per
// canary), a read this much later almost never.
const lookupSettle = 500 * time.Millisecond

// floodSkips: the readers behind with at least this many messages to go
// are chewing through a flood that is not our canaries (the prober's own
// lag, charged to no segment).
const floodSkips = 1000

// BeginArrival takes the consume stamp of a message just fetched and
// raises the fence: until EndArrival or Arrived hands it over, no deadline
// later than this stamp is judged. The stamp is received, when the fetch
// stamped the message as its answer was read (the reader's fence,
// FenceFetched, held it until now), else now.
func (t *Tracker) BeginArrival(received time.Time) (token uint64, consumed time.Time) {
	t.fenceMu.Lock()
	defer t.fenceMu.Unlock()
	t.fenceN++
	consumed = t.now()
	if !received.IsZero() {
		consumed = wallClock(received)
	}
	t.fence[t.fenceN] = consumed
	return t.fenceN, consumed
}

// FenceFetched makes the sweeps' clock wait for the messages a reader has
// stamped and not yet handed to BeginArrival: unhandled returns the
// earliest of their stamps (kafkaclient.Reader.Unhandled); nil stops.
func (t *Tracker) FenceFetched(unhandled func() (time.Time, bool)) {
	t.fenceMu.Lock()
	t.unhandled = unhandled
	t.fenceMu.Unlock()
}

// EndArrival lowers a fence without an arrival (the message was not one
// of ours, or was dropped).
func (t *Tracker) EndArrival(token uint64) {
	t.fenceMu.Lock()
	delete(t.fence, token)
	t.fenceMu.Unlock()
}

// fencedNow is now, or the earliest consume stamp not yet handed over.
func (t *Tracker) fencedNow() time.Time {
	t.fenceMu.Lock()
	defer t.fenceMu.Unlock()
	now := t.now()
	for _, c := range t.fence {
		if c.Before(now) {
			now = c
		}
	}
	// Read after now: a message stamped after this call is stamped no
	// earlier than now.
	if t.unhandled != nil {
		if c, ok := t.unhandled(); ok && c.Before(now) {
			now = wallClock(c)
		}
	}
	return now
}

// How commitAndUnlock writes.
type commitMode int

const (
	commitBatched  commitMode = iota // once the oldest unwritten change waited commitDelay
	commitNow                        // now (a partition's first offset; a Sent that cannot be written alone)
	commitSnapshot                   // now, as a whole snapshot (shutdown)
)

// commitAndUnlock writes the changed state with the next batch (group
// commit), then, outside the lock, applies the effects of every change
// written. Effects of changes not yet written wait for their batch. It
// must be called with t.mu held; it releases it.
func (t *Tracker) commitAndUnlock(fx []judge.Effect) error {
	return t.commitModeAndUnlock(fx, commitBatched)
}

// commitModeAndUnlock is commitAndUnlock, writing as mode says. The
// lookups the judge asked for are made at once rather than with the
// batch: an ask is no metric and nothing of it is persisted (a restarted
// process asks again), and a stamp looked up before the batch lets the
// batch write its canary once, final, rather than arrived and then final.
func (t *Tracker) commitModeAndUnlock(fx []judge.Effect, mode commitMode) error {
	return t.commitGroupedAndUnlock(fx, mode, nil)
}

// commitGroupedAndUnlock is commitModeAndUnlock; with a group, the fsync
// of a line it writes and the effects are left to the group's Commit.
func (t *Tracker) commitGroupedAndUnlock(fx []judge.Effect, mode commitMode, g *SweepGroup) error {
	var asks []string
	fx = slices.DeleteFunc(fx, func(e judge.Effect) bool {
		if e.Kind == judge.EffectLookup {
			asks = append(asks, e.Canary)
			return true
		}
		return false
	})
	err := t.commitLookupsAsideAndUnlock(fx, mode, g)
	if len(asks) > 0 && t.lookups != nil {
		// All of a sweep's asks at once, so one round takes them together.
		t.lookups.ask(t, asks)
	}
	return err
}

// commitLookupsAsideAndUnlock is commitGroupedAndUnlock once the lookups
// are taken out of fx.
func (t *Tracker) commitLookupsAsideAndUnlock(fx []judge.Effect, mode commitMode, g *SweepGroup) error {
	t.pending = append(t.pending, fx...)
	if mode == commitBatched && t.store.unwrittenPartition(t.j.State().Next) {
		// The first offset of a partition is written at once: a reader
		// restarted without one starts near the restart, past what an
		// unwritten batch had read.
		mode = commitNow
	}
	var err error
	var pos journalPos // the end of the line written, to fsync before the effects; zero: none
	if t.j.Dirty() || mode == commitSnapshot {
		now := t.now()
		if mode == commitBatched && t.path != "" && t.commitDelay > 0 {
			// A change no effect waits on (a canary forgotten, a foreign
			// message's offset, a lookup that found nothing) rides with the
			// next write: lost in a crash, it is made again.
			if len(t.pending) == 0 {
				t.mu.Unlock()
				return nil
			}
			if t.pendingSince.IsZero() {
				t.pendingSince = now
			}
			if now.Sub(t.pendingSince) < t.commitDelay {
				t.mu.Unlock()
				return nil
			}
		}
		if mode == commitSnapshot {
			err = t.store.snapshot(t.j, now)
		} else {
			pos, err = t.store.save(t.j, now)
		}
		// A failed write is counted and retried with the next batch; the
		// effects are applied anyway, rather than freeze the metrics.
		t.pendingSince = time.Time{}
	}
	fx, t.pending = t.pending, nil
	reports, lastSuccess := t.reportsFor(fx)
	inFlight := t.inFlightLocked()
	waiters := t.takeWaiters(reports)
	t.mu.Unlock()
	if pos == (journalPos{}) {
		t.apply(fx, reports, waiters, inFlight, lastSuccess)
		return err
	}
	// The effects wait for the fsync of their line, with the lines of
	// other trackers when a sweep group gathers them.
	if g != nil && g.add(t.store.journal, pos, func(err error) {
		if err != nil {
			t.mu.Lock()
			_ = t.store.failed(err)
			t.mu.Unlock()
			t.log.Debug("persisting tracker state failed", "err", err)
		}
		t.apply(fx, reports, waiters, inFlight, lastSuccess)
	}) {
		return nil
	}
	err = t.store.syncTo(pos, &t.mu)
	t.apply(fx, reports, waiters, inFlight, lastSuccess)
	return err
}

// reportsFor builds, under the lock, the reports of the canaries that
// became final for those that read them (OnDone, Await's waiters), and
// says when the last of them that was good end to end arrived (zero:
// none). A report is a map of every segment: built for every canary when
// nobody read it, it was a quarter of the allocations of a batch.
func (t *Tracker) reportsFor(fx []judge.Effect) (reports map[string]Report, lastSuccess time.Time) {
	for _, e := range fx {
		if e.Kind != judge.EffectFinal {
			continue
		}
		c := t.j.Canary(e.Canary)
		if c == nil {
			continue
		}
		// As report has it: good end to end means arrived in time.
		if v, ok := c.Verdicts.Get(config.SegmentEndToEnd); ok && v.Outcome == judge.Good && c.Arrived {
			lastSuccess = c.Consumed
		}
		if t.onDone == nil && len(t.waiters[e.Canary]) == 0 {
			continue
		}
		if reports == nil {
			reports = map[string]Report{}
		}
		reports[e.Canary] = t.report(c)
	}
	return reports, lastSuccess
}

func (t *Tracker) takeWaiters(reports map[string]Report) map[string][]chan Report {
	var out map[string][]chan Report
	for id := range reports {
		if ws := t.waiters[id]; len(ws) > 0 {
			if out == nil {
				out = map[string][]chan Report{}
			}
			out[id] = ws
			delete(t.waiters, id)
		}
	}
	return out
}

// apply turns the judge's effects into metrics and callbacks (its
// lookups were asked for as it made them, see commitModeAndUnlock).
func (t *Tracker) apply(fx []judge.Effect, reports map[string]Report, waiters map[string][]chan Report, inFlight int, lastSuccess time.Time) {
	name := t.p.Name
	m := t.m
	for _, e := range fx {
		switch e.Kind {
		case judge.EffectVerdict:
			if e.Outcome == judge.Unjudged {
				m.CanariesUnjudged.WithLabelValues(name, e.Segment, e.Reason).Inc()
				t.log.Info("canary segment not judged", "canary", e.Canary, "segment", e.Segment, "reason", e.Reason)
			} else {
				t.series.sliEvents(m, name, e.Segment, e.Outcome).Inc()
				if e.Outcome == judge.Bad {
					t.log.Info("canary segment over budget", "canary", e.Canary, "segment", e.Segment)
				}
			}
		case judge.EffectObserve:
			m.ObserveLatency(name, e.Segment, e.Duration)
		case judge.EffectSkew:
			m.ClockSkew.WithLabelValues(name, e.Segment).Inc()
			t.log.Warn("negative segment: the clocks of its stamps disagree (clock skew suspected)", "canary", e.Canary, "segment", e.Segment, "duration", e.Duration)
		case judge.EffectStampOrder:
			m.StampOrder.WithLabelValues(name, e.Segment).Inc()
			t.log.Debug("negative segment from a stamp taken after its event (stamp order, not skew)", "canary", e.Canary, "segment", e.Segment, "duration", e.Duration)
		case judge.EffectStampInvalid:
			m.StampsInvalid.WithLabelValues(name, e.Stamp, e.Reason).Inc()
			t.log.Warn("stamp outside the plausible range; its segments are not judged", "canary", e.Canary, "stamp", e.Stamp, "reason", e.Reason)
		case judge.EffectStampMissing:
			m.StampsMissing.WithLabelValues(name, e.Stamp).Inc()
			t.log.Warn("canary arrived without a configured stamp; its segments are not judged", "canary", e.Canary, "stamp", e.Stamp)
		case judge.EffectSent:
			t.series.sent.Inc()
			t.series.lastSent.Set(unixSeconds(e.At))
		case judge.EffectReceived:
			t.series.received.Inc()
			t.series.lastReceived.Set(unixSeconds(e.At))
		case judge.EffectLate:
			m.CanariesLate.WithLabelValues(name).Inc()
		case judge.EffectLost:
			m.CanariesLost.WithLabelValues(name).Inc()
			t.log.Warn("canary lost", "canary", e.Canary, "lost_after", t.p.Canary.LostAfter)
		case judge.EffectDuplicate:
			m.CanariesDuplicate.WithLabelValues(name).Inc()
		case judge.EffectOutOfOrder:
			m.CanariesOutOfOrder.WithLabelValues(name).Inc()
		case judge.EffectUnknownCanary:
			m.MessagesSkipped.WithLabelValues(name, ReasonUnknownCanary).Inc() // logged by the consumer, as its other skips
		case judge.EffectFinal:
			if r, ok := reports[e.Canary]; ok {
				for _, ch := range waiters[e.Canary] {
					ch <- r // buffered, one send per waiter
				}
				if t.onDone != nil {
					t.onDone(r)
				}
			}
		}
	}
	if !lastSuccess.IsZero() {
		m.LastSuccess.WithLabelValues(name).Set(unixSeconds(lastSuccess))
	}
	t.inFlight.Set(float64(inFlight))
}

// canarySeries are the series of a pipeline that every canary moves,
// looked up by their labels once: apply runs for every batch. Read-only
// once made (apply runs outside the tracker's lock).
type canarySeries struct {
	sent, received         *compactvec.Counter
	lastSent, lastReceived *compactvec.Gauge
	sli                    map[[2]string]*compactvec.Counter // by budgeted segment and outcome
}

// sliEvents is the SLI event counter of a segment and outcome.
func (s *canarySeries) sliEvents(m *Metrics, pipeline, segment, outcome string) *compactvec.Counter {
	if c, ok := s.sli[[2]string{segment, outcome}]; ok {
		return c
	}
	return m.SLIEvents.WithLabelValues(pipeline, segment, outcome)
}

// Sent records a committed canary and writes it before returning, so a
// process restarted right after still knows it; the fsync, and the
// effects (canaries_sent, last_sent, insert_to_commit, judged here), wait
// for the next batch. If the write fails the canary is tracked in memory
// and the error says so.
func (t *Tracker) Sent(c Canary) error {
	s := judge.Sent{ID: c.ID, Key: c.Key, RowID: c.RowID, Seq: c.Seq,
		InsertStarted: wallClock(c.InsertStarted), CommitSent: wallClock(cmp.Or(c.CommitSent, c.Committed)), Committed: wallClock(c.Committed)}
	t.mu.Lock()
	if t.batchDueLocked(t.commitDelay - t.commitDelay/8) {
		// The batch would be written by the next sweep: write it first,
		// so that it holds the canaries of the last CommitDelay, judged,
		// and this one starts the next batch rather than being written
		// twice, committed and then judged. The eighth covers a sweep
		// and the jitter of the schedule.
		if err := t.commitModeAndUnlock(nil, commitNow); err != nil {
			t.log.Debug("persisting tracker state failed", "err", err)
		}
		t.mu.Lock()
	}
	fx := t.j.Sent(s)
	var err error
	if t.writeAloneLocked(c.ID) {
		err = t.store.writeCommitted(s)
		t.pending = append(t.pending, fx...)
		if t.pendingSince.IsZero() {
			t.pendingSince = t.now()
		}
		t.mu.Unlock()
	} else {
		err = t.commitModeAndUnlock(fx, commitNow)
	}
	if err != nil {
		return fmt.Errorf("canary %s is tracked in memory only: %w", c.ID, err)
	}
	return nil
}

// writeAloneLocked reports whether Sent writes its canary alone and leaves
// the fsync to the next batch. Not without a journal to append to (the
// first write of a process, and the one after a failure, are snapshots),
// nor when every change is written at once, nor when a batch is due (it
// is written with the canary), nor when an arrival parked for the canary
// was judged with it (that arrival must be written with its offset).
func (t *Tracker) writeAloneLocked(id string) bool {
	if t.path == "" || t.commitDelay < 0 || !t.store.canWriteCommitted() || t.batchDueLocked(t.commitDelay) {
		return false
	}
	c := t.j.Canary(id)
	return c != nil && !c.Arrived
}

// batchDueLocked reports whether changes wait to be written and the oldest
// has waited at least d.
func (t *Tracker) batchDueLocked(d time.Duration) bool {
	return t.path != "" && !t.pendingSince.IsZero() && t.now().Sub(t.pendingSince) >= d
}

// Expect announces a canary whose insert is about to commit, so that its
// arrival, should it overtake Sent, is parked instead of being taken for
// an unknown canary. Every Expect is followed by Sent or Abandon.
func (t *Tracker) Expect(canaryID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.j.Expect(canaryID)
}

// Abandon withdraws an Expect whose insert failed; an arrival parked for it
// (a COMMIT that took effect although it reported an error) is skipped as
// an unknown canary.
func (t *Tracker) Abandon(canaryID string) {
	t.mu.Lock()
	fx := t.j.Abandon(canaryID)
	_ = t.commitAndUnlock(fx)
}

// Arrived hands a consumed canary of this instance to the judge and lowers
// its fence. a.Consumed must be the stamp BeginArrival returned with token.
func (t *Tracker) Arrived(token uint64, a Arrival) Outcome {
	t.mu.Lock()
	kind, fx := t.j.Arrived(judge.Arrival{CanaryID: a.CanaryID, Key: a.Key, Seq: a.Seq,
		Partition: a.Partition, Offset: a.Offset, Consumed: a.Consumed, Stamps: a.Stamps, Unparseable: a.Unparseable})
	t.EndArrival(token)
	if err := t.commitAndUnlock(fx); err != nil {
		t.log.Debug("persisting tracker state failed; a restart may recount this canary", "canary", a.CanaryID, "err", err)
	}
	return Outcome{Kind: kind, CanaryID: a.CanaryID}
}

// Skipped records that every message of a partition below next was read,
// skipped of them skipped (not our canaries; the others came through
// Arrived), so that a restart neither reads nor counts them again. The
// consumer records a whole fetch at once: a skipped message takes no
// lock of its own. The offset is written with the next batch (within
// CommitDelay): a crash before it re-counts the skips since the last
// write.
func (t *Tracker) Skipped(partition int, next int64, skipped int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.j.Skipped(partition, next, skipped)
}

// NextOffset returns the next offset of a partition to process, if it has
// one: a message below it was processed before a restart, and is read
// again as a replay.
func (t *Tracker) NextOffset(partition int) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.j.NextOffset(partition)
}

// ResetOffset makes next the next offset to read from a partition even if
// lower: the topic was deleted and recreated.
func (t *Tracker) ResetOffset(partition int, next int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.j.ResetOffset(partition, next)
}

// StartOffsets returns, per partition, the next offset to read: the one
// after the last message processed. Partitions never read are absent.
func (t *Tracker) StartOffsets() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.j.NextOffsets()
}

// Position is where the readers of the canary topic were (see
// judge.Position).
type Position = judge.Position

// Position reports where the readers were.
func (t *Tracker) Position(p Position) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.j.Position(p)
}

// PositionFrom reports where the readers were at at: caught up when every
// partition read was processed up to its high watermark in marks, counting
// from where its reader started (starts: what precedes a start was never
// ours to read). Under one lock, where a NextOffset per partition and the
// Position took one each, for every pipeline twice a second.
func (t *Tracker) PositionFrom(at time.Time, starts map[int]int64, marks map[int]kafkaclient.Mark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	caught, lag := true, int64(0)
	for p, start := range starts {
		h := marks[p].HighWatermark
		done, ok := t.j.NextOffset(p)
		if !ok || start > done {
			done = start
		}
		if done < h {
			caught, lag = false, lag+h-done
		}
	}
	t.j.Position(judge.Position{At: at, CaughtUp: caught, Lag: lag})
}

// Sweep judges what time alone decides: deadlines, losses, lookups due,
// forgetting. Its clock never passes a fenced arrival.
func (t *Tracker) Sweep() {
	t.sweep(nil)
}

// sweep is Sweep; with a group, a batch it writes is fsynced and its
// effects applied by the group's Commit, with the other trackers'.
func (t *Tracker) sweep(g *SweepGroup) {
	t.mu.Lock()
	compact := t.store.compactDue()
	if t.idleLocked() && !compact {
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	now := t.fencedNow()
	t.mu.Lock()
	fx := t.j.Tick(now)
	mode := commitBatched
	if compact {
		mode = commitSnapshot
	}
	if err := t.commitGroupedAndUnlock(fx, mode, g); err != nil {
		t.log.Debug("persisting tracker state failed", "err", err)
	}
}

// SweepGroup gathers the batches a sweep of every tracker writes: each
// tracker writes its line, then one fsync of the process's journal makes
// them all durable (Commit), and only then are their effects applied.
// Not safe for concurrent use: one sweep fills it.
type SweepGroup struct {
	journal *stateJournal
	pos     journalPos
	applies []func(error)
}

// Sweep sweeps t as part of the group.
func (g *SweepGroup) Sweep(t *Tracker) { t.sweep(g) }

// add defers the effects of a line at pos of journal sj to Commit; false
// if the group fsyncs another journal (a tracker with one of its own).
func (g *SweepGroup) add(sj *stateJournal, pos journalPos, apply func(error)) bool {
	if g.journal == nil {
		g.journal = sj
	}
	if g.journal != sj {
		return false
	}
	if g.pos.before(pos) {
		g.pos = pos
	}
	g.applies = append(g.applies, apply)
	return true
}

// Commit fsyncs the lines the group's trackers wrote, once, and applies
// their effects; a failed fsync is counted by each as a failed write (the
// effects are applied anyway, as for any failed write).
func (g *SweepGroup) Commit() {
	if len(g.applies) == 0 {
		return
	}
	err := g.journal.syncTo(g.pos)
	for _, apply := range g.applies {
		apply(err)
	}
	g.applies, g.pos = g.applies[:0], journalPos{}
}

// idleLocked reports whether a sweep would do nothing: the judge's Tick
// has nothing to judge or forget even at the unfenced now (the fence only
// holds the clock back), and no change waits to be written. Most sweeps
// of a pipeline at one canary every 10 s are so, and at 300 pipelines
// taking the fence (the reader's lock) for each was 4 % of the CPU.
func (t *Tracker) idleLocked() bool {
	return len(t.pending) == 0 && !t.j.Dirty() && t.j.Idle(t.now())
}

// lookupCanaries returns the canaries of ids that the judge still wants
// looked up, for a round of the table's Lookups; the others are dropped.
func (t *Tracker) lookupCanaries(ids []string) []Canary {
	t.mu.Lock()
	defer t.mu.Unlock()
	canaries := make([]Canary, 0, len(ids))
	for _, id := range ids {
		c := t.j.Canary(id)
		if c == nil || !t.j.LookupWanted(id) {
			t.j.LookupDropped(id)
			continue
		}
		canaries = append(canaries, Canary{ID: c.ID, Seq: c.Seq, Pipeline: t.p.Name, Key: c.Key, RowID: c.RowID,
			InsertStarted: c.InsertStarted, CommitSent: c.CommitSent, Committed: c.Committed})
	}
	return canaries
}

// lookupAnswered reports the answers of a batch to the judge under one
// lock: found by canary id, or err for every canary of cs (a failure is
// never taken for a missing stamp).
func (t *Tracker) lookupAnswered(cs []Canary, found map[string]LookupResult, err error) {
	if err != nil {
		t.log.Debug("looking up canary stamps failed; retried", "canaries", len(cs), "err", err)
	}
	at := t.now()
	t.mu.Lock()
	var fx []judge.Effect
	for _, c := range cs {
		res, ok := found[c.ID]
		switch {
		case err != nil:
			fx = append(fx, t.j.StampUnavailable(c.ID, at)...)
		case ok && res.Unavailable != nil:
			t.log.Debug("looking up canary stamps failed; retried", "canary", c.ID, "err", res.Unavailable)
			fx = append(fx, t.j.StampUnavailable(c.ID, at)...)
		case ok && len(res.Stamps) > 0:
			fx = append(fx, t.j.StampFound(c.ID, res.Stamps, res.ErrorBound, at)...)
		default:
			fx = append(fx, t.j.StampAbsent(c.ID, at)...)
		}
	}
	if err := t.commitAndUnlock(fx); err != nil {
		t.log.Debug("persisting tracker state failed", "err", err)
	}
}

// Flush writes the whole state as a snapshot (emptying the journal) and
// applies the effects that waited for it; the service calls it on
// shutdown, so that a stopped prober leaves one complete file.
func (t *Tracker) Flush() error {
	t.mu.Lock()
	return t.commitModeAndUnlock(nil, commitSnapshot)
}

// InFlight is the number of canaries sent that have neither arrived nor
// been declared lost.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlightLocked()
}

// inFlightLocked runs at every commit: it costs the canaries not final
// (judge.InFlight), not every canary remembered.
func (t *Tracker) inFlightLocked() int { return t.j.InFlight() }

// Recent returns up to n final canaries, newest first, from those still
// remembered (about 2 x lost_after).
func (t *Tracker) Recent(n int) []Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cs []*judge.Canary
	for _, c := range t.j.Canaries() {
		if c.Final {
			cs = append(cs, c)
		}
	}
	slices.SortFunc(cs, func(a, b *judge.Canary) int {
		return cmp.Or(b.FinalAt.Compare(a.FinalAt), cmp.Compare(b.Seq, a.Seq))
	})
	out := make([]Report, 0, min(n, len(cs)))
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, t.report(c))
	}
	return out
}

// InFlightReports returns the canaries in flight, oldest first.
func (t *Tracker) InFlightReports() []Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Report
	for _, c := range t.j.Open() {
		if !c.Arrived {
			out = append(out, t.report(c))
		}
	}
	return out
}

// LastReceived is when the last canary first arrived; zero before any.
func (t *Tracker) LastReceived() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.j.State().LastReceived
}

// Memory is how long a canary is remembered after its commit.
func (t *Tracker) Memory() time.Duration { return t.forget }

// Report returns a canary's report as it stands, if the canary is
// remembered.
func (t *Tracker) Report(canaryID string) (Report, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.j.Canary(canaryID)
	if c == nil {
		return Report{}, false
	}
	return t.report(c), true
}

// Await returns the canary's report once it is final (arrived and judged,
// or lost), or the context's error. It is how `check` waits for its one
// canary.
func (t *Tracker) Await(ctx context.Context, canaryID string) (Report, error) {
	t.mu.Lock()
	c := t.j.Canary(canaryID)
	if c == nil {
		t.mu.Unlock()
		return Report{}, fmt.Errorf("canary %s: %w", canaryID, ErrUnknownCanary)
	}
	if c.Final {
		rep := t.report(c)
		t.mu.Unlock()
		return rep, nil
	}
	ch := make(chan Report, 1)
	t.waiters[canaryID] = append(t.waiters[canaryID], ch)
	t.mu.Unlock()
	select {
	case rep := <-ch:
		return rep, nil
	case <-ctx.Done():
		t.mu.Lock()
		t.waiters[canaryID] = slices.DeleteFunc(t.waiters[canaryID], func(c chan Report) bool { return c == ch })
		if len(t.waiters[canaryID]) == 0 {
			delete(t.waiters, canaryID)
		}
		t.mu.Unlock()
		return Report{}, fmt.Errorf("await canary %s: %w", canaryID, ctx.Err())
	}
}

// report describes a canary; called with t.mu held.
func (t *Tracker) report(c *judge.Canary) Report {
	rep := Report{
		ID: c.ID, Seq: c.Seq, Pipeline: t.p.Name, Committed: c.Committed, OutOfOrder: c.OutOfOrder,
		State: StateInFlight, Segments: map[string]SegmentResult{}, CommitUncertainty: c.Committed.Sub(c.CommitSent),
	}
	e2e := t.plan.EndToEnd
	switch {
	case c.Arrived && (c.Lost || (e2e.Budgeted && c.Consumed.After(c.Committed.Add(e2e.Budget)))):
		rep.State, rep.Consumed = StateLate, c.Consumed
	case c.Arrived:
		rep.State, rep.Consumed = StateArrived, c.Consumed
	case c.Lost:
		rep.State = StateLost
	}
	for _, v := range t.j.View(c) {
		missing := v.MissingStamp
		if v.Verdict.Reason == judge.ReasonUnknown {
			// The stamp could not be read (our own database was down), which
			// says nothing of whether the relay wrote it: not "no stamp".
			missing = ""
		}
		rep.Segments[v.Name] = SegmentResult{
			Segment: v.Name, Measured: v.Measured || v.Bound, Bound: v.Bound, Duration: v.Duration,
			Budget: v.Budget, Budgeted: v.Budgeted, Outcome: v.Verdict.Outcome, Reason: v.Verdict.Reason,
			JudgedAt: v.Verdict.At, Skew: v.Skew, StampOrder: v.StampOrder, MissingStamp: missing,
		}
	}
	if rep.State == StateInFlight {
		rep.Where, rep.Deadline = t.j.Where(c)
	}
	return rep
}

// wallClock drops a local time's monotonic reading. The relay's and the
// database's stamps are wall-clock times, and a segment between one of
// them and a local stamp is measured on the wall clock; a local segment
// measured on the monotonic clock would then disagree with them by the
// clock's slew in between (microseconds), so that commit_to_publish +
// publish_to_consume would not add up to end_to_end. A restored state has
// no monotonic readings either.
func wallClock(t time.Time) time.Time { return t.Round(0) }

func unixSeconds(ts time.Time) float64 { return float64(ts.UnixNano()) / 1e9 }
