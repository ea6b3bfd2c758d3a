package prober

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/retry"
	"github.com/outbox-canary/outbox-canary/slo"
)

// The tracker turns canaries into per-segment latencies and SLI events.
//
// How a canary resolves, per budgeted segment, exactly once:
//
//   - A segment whose two stamps are known is judged by its duration: good
//     within budget, bad beyond. This happens at Sent (insert_to_commit), on
//     arrival, or when LookupStamps reveals a stamp before the message.
//   - end_to_end is bad as soon as commit + its budget has passed without
//     arrival: a stall is counted when the first canary's budget runs out,
//     not when lost_after expires.
//   - Per segment, a canary that has not arrived is "stuck" in the chain
//     segment after the latest stamp known for it. Once that segment's
//     deadline (its start stamp + budget) passes, it is bad. Only that
//     segment: the later ones have not started as far as we can see. They
//     are judged by their own durations if the canary arrives, and are NOT
//     counted if it is lost, because the blame already went to the segment
//     it was stuck in. This is what routes an alert to the team that owns
//     the stalled stage instead of paging every team downstream of it.
//     LookupStamps lets a polling pipeline prove the row was published, so
//     a broker stall is blamed on publish_to_consume, not on the relay.
//   - Segments the canary provably passed but whose end stamp only the
//     message carries (a relay read header, with publish looked up) are
//     judged on arrival, and not counted if it is lost or the stamp is
//     missing from the message (counted as outbox_canary_stamps_missing_total).
//   - Latencies are observed once per segment, when both stamps are known,
//     late arrivals included; a segment already judged is not counted again.
//   - A negative segment (stamps from disagreeing clocks) is counted as
//     suspected skew, not observed in the histogram and not clamped. A
//     negative within relay.skew_tolerance is measurement noise, not skew:
//     it is observed as measured (negative) and not flagged. A polling relay
//     writes published_at after the broker's ack, so its consumer often
//     reads the record a millisecond before published_at. Its SLI
//     outcome is good: whatever the skew, the stamps do not show the budget
//     being exceeded, and end_to_end (one clock, exact) still catches delay.
//
// Restarts: the state is written atomically on every Sent and Arrived (and
// by Sweep when it changed something), BEFORE the corresponding metrics are
// incremented. So after kill -9 at any instant a canary is neither lost nor
// counted twice: a message processed before the crash is below the stored
// next offset and ignored as a replay; a deadline that passed while the
// prober was down is resolved bad on the first Sweep. The last sent,
// received and success times are persisted too, so the gauges the stall
// alert reads come back with their values. The remaining windows: a crash
// between the canary's COMMIT and Sent persisting it makes it arrive as
// unknown (counted as skipped, reason unknown_canary, not as an SLI event);
// and increments between the state write and the metric update, like any
// counter increments not yet scraped before a crash, are never seen by
// Prometheus (under-counted, never double-counted).
//
// A message can overtake Sent: the relay may publish and the consumer read
// the canary between the sender's COMMIT and its call to Sent. The sender
// therefore calls Expect before COMMIT; an arrival of an expected canary is
// parked in memory (KindPending) and processed by Sent, with its original
// consumed stamp, as if it had come just after. If the insert fails the
// sender calls Abandon, and a parked arrival (a COMMIT that succeeded
// although it reported an error) is skipped as unknown_canary, as before.
// Parking, not waiting: the consumer never blocks on the sender.

// ErrUnknownCanary is returned by Await for a canary id the tracker does not
// know (never sent through it, or forgotten long after it resolved).
var ErrUnknownCanary = errors.New("unknown canary")

// Kind classifies an arrival.
type Kind int

// Arrival kinds.
const (
	// KindFirst is the first arrival of a tracked canary: judged and observed.
	KindFirst Kind = iota + 1
	// KindDuplicate is a second or later arrival of a canary: counted as a
	// duplicate, never as an SLI event.
	KindDuplicate
	// KindReplay is a message at an offset already processed before a
	// restart: ignore it silently, it was counted the first time.
	KindReplay
	// KindUnknown is a canary of this instance that the tracker has no
	// record of; counted as skipped with reason unknown_canary.
	KindUnknown
	// KindPending is a canary whose insert is committing (Expect called,
	// Sent not yet): the arrival is parked and resolved by Sent.
	KindPending
)

func (k Kind) String() string {
	switch k {
	case KindFirst:
		return "first"
	case KindDuplicate:
		return "duplicate"
	case KindReplay:
		return "replay"
	case KindUnknown:
		return "unknown"
	case KindPending:
		return "pending"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// SegmentResult is one segment of one canary as far as it is known.
type SegmentResult struct {
	Segment  string        `json:"segment"`
	Measured bool          `json:"measured"`           // both stamps known, Duration valid
	Duration time.Duration `json:"duration,omitempty"` // end stamp minus start stamp
	Budget   time.Duration `json:"budget,omitempty"`
	Budgeted bool          `json:"budgeted"`
	// Outcome is "good" or "bad" once the SLI event was counted, "" if
	// the segment is not budgeted or not (yet) judged.
	Outcome string `json:"outcome,omitempty"`
	// JudgedAt is when the SLI event was counted (an arrival, or a
	// deadline that passed): burn rates over a window count it then.
	JudgedAt time.Time `json:"judged_at,omitzero"`
	// Skew is true when the duration is negative (suspected clock skew).
	Skew bool `json:"skew,omitempty"`
	// MissingStamp names a stamp the arrived message did not carry, which
	// leaves this segment unmeasured.
	MissingStamp string `json:"missing_stamp,omitempty"`
}

// Outcome is what Arrived made of one message.
type Outcome struct {
	Kind     Kind
	CanaryID string
	// Late is true when the canary arrived after its end_to_end deadline
	// (it was, or is now, bad end to end), or after being declared lost.
	Late bool
	// OutOfOrder is true when a canary with a higher Seq of the same key
	// arrived earlier.
	OutOfOrder bool
	// Segments is set for KindFirst: every segment, insert_to_commit first.
	Segments []SegmentResult
}

// Canary states in a Report.
const (
	StateInFlight = "in_flight"
	StateArrived  = "arrived"
	StateLate     = "late" // arrived after its end_to_end deadline
	StateLost     = "lost"
)

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
	// Where, for a canary in flight, is the segment it is waiting in as
	// far as the evidence goes, and Deadline when that segment's budget
	// runs out (zero for a segment without a budget).
	Where    string    `json:"where,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// TrackerOptions configures a Tracker.
type TrackerOptions struct {
	Pipeline *config.Pipeline
	Instance string
	Metrics  *Metrics
	Now      func() time.Time
	Logger   *slog.Logger
	// OnDone, optional, is called once per canary when it is final (arrived
	// and judged, or lost), outside the tracker's lock: the demo prints a
	// line per canary from it.
	OnDone func(Report)
	// StatePath is the file for the persisted state; "" keeps it in memory
	// only (tests, and `check`, which must not disturb the service's file).
	StatePath string
	// LookupStamps, optional, is called (outside the tracker's lock) for
	// canaries whose current segment's deadline passed without arrival, to
	// learn stamps observable without the message (polling: published_at
	// read back by primary key, already converted to the prober clock). It
	// returns the stamps found, maybe none. It is retried with backoff
	// while the canary stays stuck before its last segment.
	LookupStamps func(ctx context.Context, c Canary) (map[string]time.Time, error)
}

// Lookup retry backoff: the first lookup happens at the deadline, retries
// double (with jitter) from lookupBackoffMin so a long stall costs a few
// queries per canary, not four a second.
const (
	lookupBackoffMin = 500 * time.Millisecond
	lookupBackoffMax = 30 * time.Second
)

// lookupTimeoutMax bounds each lookup (further bounded by the budget of the
// segment it is to prove progress in) and all the lookups of one Sweep
// together: a hung database must not hold up the deadlines, which are what
// turns a stall into bad events.
const lookupTimeoutMax = 2 * time.Second

// Tracker follows the canaries of one pipeline from Sent to arrival or
// loss. It is safe for concurrent use.
type Tracker struct {
	p        *config.Pipeline
	plan     segmentPlan
	instance string
	m        *Metrics
	now      func() time.Time
	log      *slog.Logger
	path     string
	lookup   func(ctx context.Context, c Canary) (map[string]time.Time, error)
	lost     time.Duration
	skewTol  time.Duration // negatives within it are noise, not skew
	forget   time.Duration // how long resolved canaries are kept for duplicates
	onDone   func(Report)
	// lookupTimeout is lookupTimeoutMax; tests shorten it.
	lookupTimeout time.Duration

	mu       sync.Mutex
	canaries map[string]*canaryState
	lastSeq  map[string]uint64
	next     map[int]int64
	dirty    bool // state changed since the last write (offsets from Skipped)
	waiters  map[string][]chan Report
	// lookupWaits spaces the lookups of each canary; in memory only (a
	// restart starts each canary's backoff again).
	lookupWaits map[string]*backoff.ExponentialBackOff
	// expected holds the canaries between Expect and Sent, with the
	// arrivals that overtook Sent (parked, in arrival order).
	expected map[string][]Arrival
	// last sent, received and success times, persisted for the gauges.
	lastSent, lastReceived, lastSuccess time.Time
}

// NewTracker creates the tracker of one pipeline and loads its state file
// if there is one. Canaries whose deadlines passed while the prober was down
// are resolved by the first Sweep.
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
	if _, ok := opts.Metrics.SegmentLatency[opts.Pipeline.Name]; !ok {
		return nil, fmt.Errorf("pipeline %q: tracker: metrics were not created for this pipeline", opts.Pipeline.Name)
	}
	t := &Tracker{
		p:        opts.Pipeline,
		onDone:   opts.OnDone,
		skewTol:  time.Duration(opts.Pipeline.Relay.SkewTolerance),
		plan:     planSegments(opts.Pipeline),
		instance: opts.Instance,
		m:        opts.Metrics,
		now:      opts.Now,
		log:      opts.Logger.With("pipeline", opts.Pipeline.Name),
		path:     opts.StatePath,
		lookup:   opts.LookupStamps,
		lost:     time.Duration(opts.Pipeline.Canary.LostAfter),
		forget:   2 * time.Duration(opts.Pipeline.Canary.LostAfter),
		canaries: make(map[string]*canaryState),
		lastSeq:  make(map[string]uint64),
		next:     make(map[int]int64),
		waiters:  make(map[string][]chan Report),

		lookupWaits: make(map[string]*backoff.ExponentialBackOff),
		expected:    make(map[string][]Arrival),

		lookupTimeout: lookupTimeoutMax,
	}
	if t.path != "" {
		st, err := loadState(t.path)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: %w", t.p.Name, err)
		}
		if st != nil {
			if err := t.restore(st); err != nil {
				return nil, err
			}
		}
	}
	t.m.InFlight.WithLabelValues(t.p.Name).Set(float64(t.inFlightLocked()))
	for g, ts := range map[*prometheus.GaugeVec]time.Time{t.m.LastSent: t.lastSent, t.m.LastReceived: t.lastReceived, t.m.LastSuccess: t.lastSuccess} {
		if !ts.IsZero() {
			g.WithLabelValues(t.p.Name).Set(unixSeconds(ts))
		}
	}
	return t, nil
}

func (t *Tracker) restore(st *stateFile) error {
	if st.Pipeline != t.p.Name {
		return fmt.Errorf("pipeline %q: state file %s belongs to pipeline %q", t.p.Name, t.path, st.Pipeline)
	}
	for p, o := range st.NextOffsets {
		t.next[p] = o
	}
	// The pipeline's last times, whichever instance id wrote them.
	t.lastSent, t.lastReceived, t.lastSuccess = st.LastSent, st.LastReceived, st.LastSuccess
	if st.Instance != t.instance {
		// A renamed instance: its old canaries now look foreign on the
		// topic, so tracking them would only produce false losses.
		t.log.Warn("state file written by another instance id; forgetting its canaries",
			"file", t.path, "state_instance", st.Instance, "instance", t.instance)
		return nil
	}
	for _, c := range st.Canaries {
		if c.Stamps == nil {
			c.Stamps = make(map[string]time.Time)
		}
		if c.Segments == nil {
			c.Segments = make(map[string]*segmentState)
		}
		t.canaries[c.ID] = c
	}
	for k, v := range st.LastSeq {
		t.lastSeq[k] = v
	}
	t.log.Info("tracker state loaded", "file", t.path, "canaries", len(t.canaries), "in_flight", t.inFlightLocked())
	return nil
}

// effects are metric updates applied only after the state that implies them
// is durable (see the package comment on restarts).
type effects []func()

func (e *effects) add(f func()) { *e = append(*e, f) }

func (e effects) apply() {
	for _, f := range e {
		f()
	}
}

// Sent records a committed canary and persists it durably before
// returning, so a restart right after still knows it. insert_to_commit is
// observed (and judged, if budgeted) here. If the write fails the canary is
// still tracked in memory and the error says so.
func (t *Tracker) Sent(c Canary) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	parked := t.expected[c.ID]
	delete(t.expected, c.ID)
	if _, ok := t.canaries[c.ID]; ok {
		return nil // already recorded: Sent is idempotent
	}
	r := &canaryState{
		ID: c.ID, Seq: c.Seq, Key: c.Key, RowID: c.RowID, InsertStarted: c.InsertStarted,
		Stamps:   map[string]time.Time{config.StampCommit: c.Committed},
		Segments: make(map[string]*segmentState),
	}
	t.canaries[c.ID] = r
	t.lastSent = c.Committed
	var fx effects
	t.judge(r, t.plan.insert, c.InsertStarted, c.Committed, &fx)
	name := t.p.Name
	fx.add(func() {
		t.m.CanariesSent.WithLabelValues(name).Inc()
		t.m.LastSent.WithLabelValues(name).Set(unixSeconds(c.Committed))
	})
	for _, a := range parked {
		// Arrivals that overtook Sent, resolved now in arrival order;
		// their offsets were advanced when they were parked.
		out := Outcome{CanaryID: a.CanaryID}
		t.arrivedKnown(r, a, &out, &fx)
		t.log.Debug("parked canary arrival resolved", "canary", c.ID, "kind", out.Kind, "late", out.Late)
	}
	inFlight := t.inFlightLocked()
	fx.add(func() { t.m.InFlight.WithLabelValues(name).Set(float64(inFlight)) })
	err := t.persistLocked()
	fx.apply()
	if err != nil {
		return fmt.Errorf("pipeline %q: canary %s is tracked in memory only: %w", name, c.ID, err)
	}
	return nil
}

// Expect announces a canary whose insert is about to commit, so that its
// arrival, should it overtake Sent, is parked instead of being taken for
// an unknown canary. Every Expect is followed by Sent or Abandon.
func (t *Tracker) Expect(canaryID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.expected[canaryID]; !ok {
		t.expected[canaryID] = nil
	}
}

// Abandon withdraws an Expect whose insert failed. An arrival parked for it
// (a COMMIT that took effect although it reported an error) is skipped as
// an unknown canary, which is what it would have been without Expect.
func (t *Tracker) Abandon(canaryID string) {
	t.mu.Lock()
	parked, ok := t.expected[canaryID]
	delete(t.expected, canaryID)
	t.mu.Unlock()
	if !ok {
		return
	}
	for _, a := range parked {
		t.log.Warn("canary arrived although its insert reported a failure; skipped",
			"canary", a.CanaryID, "seq", a.Seq, "partition", a.Partition, "offset", a.Offset)
		t.m.MessagesSkipped.WithLabelValues(t.p.Name, ReasonUnknownCanary).Inc()
	}
}

// ResetOffset makes next the next offset to read from a partition, even
// if it is below the stored one: the consumer found the stored offset
// beyond the partition's end (the topic was deleted and recreated), and
// the messages of the new partition must not be taken for replays.
func (t *Tracker) ResetOffset(partition int, next int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next[partition] = next
	t.dirty = true
}

// Skipped records that the message at this offset was read and skipped
// (not one of our canaries), so a restart does not read and count it again.
// It reports whether the offset was already processed before a restart; if
// so the caller must not count the skip again. The offset is written with
// the next state write, not synchronously: losing it re-counts one skip.
func (t *Tracker) Skipped(partition int, offset int64) (replay bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isReplay(partition, offset) {
		return true
	}
	t.advance(partition, offset)
	t.dirty = true
	return false
}

func (t *Tracker) isReplay(partition int, offset int64) bool {
	next, ok := t.next[partition]
	return ok && offset < next
}

func (t *Tracker) advance(partition int, offset int64) {
	if next, ok := t.next[partition]; !ok || offset+1 > next {
		t.next[partition] = offset + 1
	}
}

// Arrived classifies a consumed canary of this instance, resolves and
// observes its segments, and persists the result before counting it.
func (t *Tracker) Arrived(a Arrival) Outcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := Outcome{CanaryID: a.CanaryID}
	if t.isReplay(a.Partition, a.Offset) {
		out.Kind = KindReplay
		return out
	}
	t.advance(a.Partition, a.Offset)
	name := t.p.Name
	var fx effects
	r, ok := t.canaries[a.CanaryID]
	if parked, expected := t.expected[a.CanaryID]; !ok && expected {
		// Overtook Sent: Sent resolves it (see the package comment).
		t.expected[a.CanaryID] = append(parked, a)
		t.dirty = true
		out.Kind = KindPending
		return out
	}
	if !ok {
		out.Kind = KindUnknown
		t.log.Warn("canary of this instance not in the tracker's state; skipped",
			"canary", a.CanaryID, "seq", a.Seq, "partition", a.Partition, "offset", a.Offset)
		fx.add(func() { t.m.MessagesSkipped.WithLabelValues(name, ReasonUnknownCanary).Inc() })
	} else {
		t.arrivedKnown(r, a, &out, &fx)
	}
	if err := t.persistLocked(); err != nil {
		t.log.Error("persisting tracker state failed; a restart may recount this canary", "canary", a.CanaryID, "err", err)
	}
	fx.apply()
	return out
}

// arrivedKnown classifies and resolves an arrival of a tracked canary.
func (t *Tracker) arrivedKnown(r *canaryState, a Arrival, out *Outcome, fx *effects) {
	name := t.p.Name
	if r.Arrived {
		out.Kind = KindDuplicate
		t.log.Debug("duplicate canary", "canary", a.CanaryID, "partition", a.Partition, "offset", a.Offset)
		fx.add(func() { t.m.CanariesDuplicate.WithLabelValues(name).Inc() })
		return
	}
	out.Kind = KindFirst
	t.first(r, a, out, fx)
}

// first resolves a canary's first arrival.
func (t *Tracker) first(r *canaryState, a Arrival, out *Outcome, fx *effects) {
	name := t.p.Name
	r.Arrived = true
	r.ResolvedAt = a.Consumed
	r.Stamps[config.StampConsume] = a.Consumed
	t.mergeStamps(r, a.Stamps)

	key := cmp.Or(a.Key, r.Key)
	if last, ok := t.lastSeq[key]; ok && r.Seq < last {
		r.OutOfOrder = true
		out.OutOfOrder = true
		t.log.Info("canary arrived out of order", "canary", r.ID, "seq", r.Seq, "key", key, "after_seq", last)
		fx.add(func() { t.m.CanariesOutOfOrder.WithLabelValues(name).Inc() })
	} else {
		t.lastSeq[key] = r.Seq
	}

	out.Late = r.Lost || a.Consumed.After(r.Stamps[config.StampCommit].Add(t.plan.endToEnd.budget))
	if out.Late {
		// Once per canary: first runs once, at its first arrival.
		fx.add(func() { t.m.CanariesLate.WithLabelValues(name).Inc() })
	}
	t.resolveAll(r, fx)
	if len(t.missingStamps(r)) > 0 && t.lookup != nil {
		// A polling relay's published_at is read back, not carried by the
		// message, and the relay may not have committed it yet: Sweep
		// looks it up and judges the segments then.
		r.PendingLookup = true
		r.Lookups, r.NextLookup = 0, time.Time{}
	} else {
		t.finalize(r, fx)
	}
	for _, s := range t.plan.all() {
		out.Segments = append(out.Segments, t.finalResult(r, s))
	}
	e2eGood := r.segment(config.SegmentEndToEnd).Outcome == slo.OutcomeGood
	t.lastReceived = a.Consumed
	if e2eGood {
		t.lastSuccess = a.Consumed
	}
	inFlight := t.inFlightLocked()
	fx.add(func() {
		t.m.CanariesReceived.WithLabelValues(name).Inc()
		t.m.LastReceived.WithLabelValues(name).Set(unixSeconds(a.Consumed))
		if e2eGood {
			t.m.LastSuccess.WithLabelValues(name).Set(unixSeconds(a.Consumed))
		}
		t.m.InFlight.WithLabelValues(name).Set(float64(inFlight))
	})
}

// mergeStamps adds the pipeline's stamps among found. A stamp already known
// is kept: segments may already have been judged against it.
func (t *Tracker) mergeStamps(r *canaryState, found map[string]time.Time) {
	for s, ts := range found {
		if _, known := r.Stamps[s]; !known && t.plan.isMiddleStamp(s) {
			r.Stamps[s] = ts
		}
	}
}

// resolveAll observes every segment whose stamps are known and judges those
// not judged yet, except for a canary already declared lost: its unjudged
// segments are not counted (the blame went to the segment it was stuck in).
func (t *Tracker) resolveAll(r *canaryState, fx *effects) {
	for _, s := range t.plan.pipelineSegments() {
		t.resolve(r, s, !r.Lost, fx)
	}
}

func (t *Tracker) missingStamps(r *canaryState) []string {
	var out []string
	for _, s := range t.plan.middleStamps() {
		if _, ok := r.Stamps[s]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// finalize ends an arrived canary's resolution: stamps still missing are
// counted (their segments stay unjudged) and `check` is told.
func (t *Tracker) finalize(r *canaryState, fx *effects) {
	r.PendingLookup = false
	name := t.p.Name
	for _, s := range t.missingStamps(r) {
		t.log.Warn("canary arrived without a configured stamp; its segments are not judged", "canary", r.ID, "stamp", s)
		fx.add(func() { t.m.StampsMissing.WithLabelValues(name, s).Inc() })
	}
	t.notify(r, fx)
}

// resolve observes a segment whose stamps are both known and, if count and
// it is budgeted and not yet judged, judges it. It returns the segment's
// result either way.
func (t *Tracker) resolve(r *canaryState, s segment, count bool, fx *effects) SegmentResult {
	from, okF := r.Stamps[s.from]
	to, okT := r.Stamps[s.to]
	if okF && okT {
		if count {
			t.judge(r, s, from, to, fx)
		} else {
			t.observe(r, s, to.Sub(from), fx)
		}
	}
	return t.result(r, s)
}

// judge observes a segment of known duration and counts its SLI event once.
func (t *Tracker) judge(r *canaryState, s segment, from, to time.Time, fx *effects) {
	d := to.Sub(from)
	t.observe(r, s, d, fx)
	st := r.segment(s.name)
	if !s.budgeted || st.Outcome != "" {
		return
	}
	// d <= budget holds for a negative d too: skewed stamps are counted
	// good (see the package comment), and flagged by observe.
	outcome := slo.OutcomeBad
	if d <= s.budget {
		outcome = slo.OutcomeGood
	}
	st.Outcome, st.JudgedAt = outcome, t.now()
	t.count(s.name, outcome, fx)
}

func (t *Tracker) count(segment, outcome string, fx *effects) {
	name := t.p.Name
	fx.add(func() { t.m.SLIEvents.WithLabelValues(name, segment, outcome).Inc() })
}

// observe records a segment's duration once: in the histogram, or, if
// negative, as suspected clock skew (never clamped to zero, which would
// flatter the segment).
func (t *Tracker) observe(r *canaryState, s segment, d time.Duration, fx *effects) {
	st := r.segment(s.name)
	if st.Observed {
		return
	}
	st.Observed = true
	name := t.p.Name
	if t.isSkew(d) {
		t.log.Warn("negative segment: clock skew suspected", "canary", r.ID, "segment", s.name, "duration", d)
		fx.add(func() { t.m.ClockSkew.WithLabelValues(name, s.name).Inc() })
		return
	}
	fx.add(func() { t.m.ObserveLatency(name, s.name, d) })
}

// isSkew reports whether a segment is negative beyond the tolerance.
func (t *Tracker) isSkew(d time.Duration) bool { return d < -t.skewTol }

func (t *Tracker) result(r *canaryState, s segment) SegmentResult {
	res := SegmentResult{Segment: s.name, Budget: s.budget, Budgeted: s.budgeted}
	from, okF := r.Stamps[s.from]
	if s.from == stampInsert {
		from, okF = r.InsertStarted, true
	}
	to, okT := r.Stamps[s.to]
	if okF && okT {
		res.Measured, res.Duration = true, to.Sub(from)
		res.Skew = t.isSkew(res.Duration)
	}
	res.Outcome, res.JudgedAt = r.segment(s.name).Outcome, r.segment(s.name).JudgedAt
	return res
}

// finalResult is result plus, for an arrived canary no longer waiting for a
// lookup, the stamp whose absence left the segment unmeasured.
func (t *Tracker) finalResult(r *canaryState, s segment) SegmentResult {
	res := t.result(r, s)
	if !r.Arrived || r.PendingLookup || res.Measured || s.from == stampInsert {
		return res
	}
	if _, ok := r.Stamps[s.from]; !ok {
		res.MissingStamp = s.from
	} else {
		res.MissingStamp = s.to
	}
	return res
}

func (r *canaryState) segment(name string) *segmentState {
	st, ok := r.Segments[name]
	if !ok {
		st = &segmentState{}
		r.Segments[name] = st
	}
	return st
}

// lookupJob is a canary to look stamps up for, and what was found.
type lookupJob struct {
	c       Canary
	timeout time.Duration
	done    bool // the lookup ran to an answer (stamps, none, or an error)
	stamps  map[string]time.Time
	err     error
}

// arrivedLookupWindow bounds how long after arrival a missing stamp is
// looked up (the polling relay commits published_at just after sending)
// before the canary's segments next to it are given up as unmeasurable.
const arrivedLookupWindow = 10 * time.Second

// needsLookup says whether Sweep should look stamps up for r now: an
// arrived canary still missing stamps, or one that has not arrived and
// whose current segment's deadline passed (to learn whether it really is
// stuck there before blaming that segment).
func (t *Tracker) needsLookup(r *canaryState, now time.Time) bool {
	if r.Lost && !r.Arrived || now.Before(r.NextLookup) {
		return false
	}
	if r.Arrived {
		return r.PendingLookup
	}
	s := t.plan.stuck(r.Stamps)
	if s.to == config.StampConsume {
		return false // only the message itself can end the last segment
	}
	if !s.budgeted {
		return now.After(r.Stamps[config.StampCommit].Add(t.plan.endToEnd.budget))
	}
	return now.After(r.Stamps[s.from].Add(s.budget))
}

// Sweep resolves what time alone decides: segments whose deadline passed,
// canaries lost after lost_after, and forgets resolved canaries once
// duplicates of them are no longer plausible. Stamps are looked up first
// (outside the lock, so a slow database does not block arrivals) for
// canaries whose current segment's deadline passed, so that the blame lands
// on the segment they are really stuck in, and for arrived canaries still
// missing a stamp.
//
// The whole sweep judges one instant, taken before the lookups: a deadline
// that passes while they run is left to the next sweep, which looks the
// canary up first. (Judging it now would blame its relay segment without
// the lookup that might prove the row published.) Lookups are bounded
// (lookupTimeoutMax, each also by its segment's budget), so a hung
// database delays the deadline pass by at most that, never stops it.
func (t *Tracker) Sweep(ctx context.Context) {
	t.mu.Lock()
	now := t.now()
	var jobs []*lookupJob
	if t.lookup != nil {
		for _, r := range t.canaries {
			if t.needsLookup(r, now) {
				jobs = append(jobs, &lookupJob{c: r.canary(t.p.Name), timeout: t.lookupTimeoutFor(r)})
			}
		}
	}
	t.mu.Unlock()
	t.runLookups(ctx, jobs)

	t.mu.Lock()
	defer t.mu.Unlock()
	var fx effects
	changed := t.dirty
	name := t.p.Name
	for _, j := range jobs {
		r, ok := t.canaries[j.c.ID]
		if !ok || !j.done {
			continue // retried by a later sweep, without counting an attempt
		}
		if !r.Arrived && r.Lost || r.Arrived && !r.PendingLookup {
			continue // resolved meanwhile
		}
		changed = true
		r.Lookups++
		wait, ok := t.lookupWaits[r.ID]
		if !ok {
			wait = retry.Backoff(lookupBackoffMin, lookupBackoffMax)
			t.lookupWaits[r.ID] = wait
		}
		r.NextLookup = now.Add(wait.NextBackOff())
		if r.Arrived {
			// One last try at the end of the window, then give up.
			r.NextLookup = minTime(r.NextLookup, r.Stamps[config.StampConsume].Add(arrivedLookupWindow))
		}
		if j.err != nil {
			// The canary stays where we last saw it: unable to prove
			// progress, the deadline below blames its current segment.
			t.log.Warn("looking up canary stamps failed", "canary", r.ID, "err", j.err)
		}
		t.mergeStamps(r, j.stamps)
		t.resolveAll(r, &fx)
		if r.Arrived && (len(t.missingStamps(r)) == 0 || now.Sub(r.Stamps[config.StampConsume]) >= arrivedLookupWindow) {
			t.finalize(r, &fx)
		}
	}

	ids := make([]string, 0, len(t.canaries))
	for id := range t.canaries {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic logs and effects
	for _, id := range ids {
		r := t.canaries[id]
		if r.Arrived && r.PendingLookup && now.Sub(r.Stamps[config.StampConsume]) > arrivedLookupWindow {
			// The last lookup did not happen (cancelled sweep, or a
			// restart without LookupStamps): give up all the same.
			t.finalize(r, &fx)
			changed = true
		}
		if r.Arrived || r.Lost {
			if !r.PendingLookup {
				delete(t.lookupWaits, id)
			}
			if !r.PendingLookup && now.Sub(r.Stamps[config.StampCommit]) > t.forget {
				delete(t.canaries, id)
				changed = true
			}
			continue
		}
		commit := r.Stamps[config.StampCommit]
		if e2e := t.plan.endToEnd; now.After(commit.Add(e2e.budget)) && r.segment(e2e.name).Outcome == "" {
			r.segment(e2e.name).Outcome, r.segment(e2e.name).JudgedAt = slo.OutcomeBad, now
			t.count(e2e.name, slo.OutcomeBad, &fx)
			changed = true
			t.log.Info("canary missed its end_to_end deadline", "canary", r.ID, "seq", r.Seq, "budget", e2e.budget)
		}
		if s := t.plan.stuck(r.Stamps); s.budgeted && r.segment(s.name).Outcome == "" && now.After(r.Stamps[s.from].Add(s.budget)) {
			r.segment(s.name).Outcome, r.segment(s.name).JudgedAt = slo.OutcomeBad, now
			t.count(s.name, slo.OutcomeBad, &fx)
			changed = true
			t.log.Info("canary stuck past a segment deadline", "canary", r.ID, "seq", r.Seq, "segment", s.name, "budget", s.budget)
		}
		if now.Sub(commit) > t.lost {
			r.Lost = true
			r.ResolvedAt = now
			changed = true
			t.log.Warn("canary lost", "canary", r.ID, "seq", r.Seq, "lost_after", t.lost)
			fx.add(func() { t.m.CanariesLost.WithLabelValues(name).Inc() })
			t.notify(r, &fx)
		}
	}
	if !changed {
		return
	}
	inFlight := t.inFlightLocked()
	fx.add(func() { t.m.InFlight.WithLabelValues(name).Set(float64(inFlight)) })
	if err := t.persistLocked(); err != nil {
		t.log.Error("persisting tracker state failed", "err", err)
	}
	fx.apply()
}

// lookupTimeoutFor bounds one lookup of r: lookupTimeout, or less if the
// segment it is stuck in has a shorter budget (a lookup slower than the
// budget it is to judge is of no use).
func (t *Tracker) lookupTimeoutFor(r *canaryState) time.Duration {
	d := t.lookupTimeout
	if r.Arrived {
		return d
	}
	if s := t.plan.stuck(r.Stamps); s.budgeted {
		return min(d, s.budget)
	}
	if e2e := t.plan.endToEnd; e2e.budgeted {
		return min(d, e2e.budget)
	}
	return d
}

// runLookups runs the jobs in Seq order, each bounded by its timeout and
// all of them together by lookupTimeout; those not reached are left for a
// later sweep.
func (t *Tracker) runLookups(ctx context.Context, jobs []*lookupJob) {
	if len(jobs) == 0 {
		return
	}
	slices.SortFunc(jobs, func(a, b *lookupJob) int { return cmp.Compare(a.c.Seq, b.c.Seq) })
	all, cancel := context.WithTimeout(ctx, t.lookupTimeout)
	defer cancel()
	for _, j := range jobs {
		if all.Err() != nil {
			return
		}
		lctx, cancel := context.WithTimeout(all, j.timeout)
		j.stamps, j.err = t.lookup(lctx, j.c)
		cancel()
		// A lookup cut short by the service stopping proves nothing.
		j.done = ctx.Err() == nil
		if j.err != nil && lctx.Err() != nil {
			j.err = fmt.Errorf("lookup gave up after %s: %w", j.timeout, j.err)
		}
	}
}

// Flush writes the state if something changed since the last write (skipped
// messages' offsets); the service calls it on shutdown.
func (t *Tracker) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.dirty {
		return nil
	}
	if err := t.persistLocked(); err != nil {
		return fmt.Errorf("pipeline %q: %w", t.p.Name, err)
	}
	return nil
}

func (r *canaryState) canary(pipeline string) Canary {
	return Canary{ID: r.ID, Seq: r.Seq, Pipeline: pipeline, Key: r.Key, RowID: r.RowID,
		InsertStarted: r.InsertStarted, Committed: r.Stamps[config.StampCommit]}
}

// rowID returns the outbox row id Sent recorded for a canary, if it is
// tracked: the consumer reads published_at back by it on arrival.
func (t *Tracker) rowID(canaryID string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.canaries[canaryID]
	if !ok || r.RowID == "" {
		return "", false
	}
	return r.RowID, true
}

// StartOffsets returns, per partition, the next offset to read: the one
// after the last message processed. Partitions never read are absent.
func (t *Tracker) StartOffsets() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]int64, len(t.next))
	for p, o := range t.next {
		out[p] = o
	}
	return out
}

// InFlight is the number of canaries sent that have neither arrived nor
// been declared lost.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlightLocked()
}

func (t *Tracker) inFlightLocked() int {
	n := 0
	for _, r := range t.canaries {
		if !r.Arrived && !r.Lost {
			n++
		}
	}
	return n
}

// Recent returns up to n final canaries (arrived and no longer waiting for
// a stamp lookup, or lost), newest first, from those still remembered
// (about 2 x lost_after).
func (t *Tracker) Recent(n int) []Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rs []*canaryState
	for _, r := range t.canaries {
		if r.Arrived && !r.PendingLookup || r.Lost {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *canaryState) int {
		return cmp.Or(b.ResolvedAt.Compare(a.ResolvedAt), cmp.Compare(b.Seq, a.Seq))
	})
	out := make([]Report, 0, min(n, len(rs)))
	for _, r := range rs[:min(n, len(rs))] {
		out = append(out, t.report(r))
	}
	return out
}

// Await returns the canary's report once it is final (arrived and no
// longer waiting for a stamp lookup, or lost), or the context's error. It
// is how `check` waits for its one canary.
func (t *Tracker) Await(ctx context.Context, canaryID string) (Report, error) {
	t.mu.Lock()
	r, ok := t.canaries[canaryID]
	if !ok {
		t.mu.Unlock()
		return Report{}, fmt.Errorf("pipeline %q: canary %s: %w", t.p.Name, canaryID, ErrUnknownCanary)
	}
	if r.Arrived && !r.PendingLookup || r.Lost {
		rep := t.report(r)
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
		return Report{}, fmt.Errorf("pipeline %q: await canary %s: %w", t.p.Name, canaryID, ctx.Err())
	}
}

func (t *Tracker) notify(r *canaryState, fx *effects) {
	if t.onDone != nil {
		rep, done := t.report(r), t.onDone
		fx.add(func() { done(rep) })
	}
	ws := t.waiters[r.ID]
	if len(ws) == 0 {
		return
	}
	rep := t.report(r)
	for _, ch := range ws {
		ch <- rep // buffered, one send per waiter
	}
	delete(t.waiters, r.ID)
}

func (t *Tracker) report(r *canaryState) Report {
	commit := r.Stamps[config.StampCommit]
	rep := Report{
		ID: r.ID, Seq: r.Seq, Pipeline: t.p.Name, Committed: commit, OutOfOrder: r.OutOfOrder,
		State: StateInFlight, Segments: make(map[string]SegmentResult),
	}
	consumed, arrived := r.Stamps[config.StampConsume]
	switch {
	case arrived && (r.Lost || consumed.After(commit.Add(t.plan.endToEnd.budget))):
		rep.State, rep.Consumed = StateLate, consumed
	case arrived:
		rep.State, rep.Consumed = StateArrived, consumed
	case r.Lost:
		rep.State = StateLost
	}
	for _, s := range t.plan.all() {
		rep.Segments[s.name] = t.finalResult(r, s)
	}
	if rep.State == StateInFlight {
		s := t.plan.stuck(r.Stamps)
		rep.Where = s.name
		if s.budgeted {
			rep.Deadline = r.Stamps[s.from].Add(s.budget)
		}
	}
	return rep
}

// InFlightReports returns the canaries in flight, oldest first.
func (t *Tracker) InFlightReports() []Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rs []*canaryState
	for _, r := range t.canaries {
		if !r.Arrived && !r.Lost {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *canaryState) int { return cmp.Compare(a.Seq, b.Seq) })
	out := make([]Report, 0, len(rs))
	for _, r := range rs {
		out = append(out, t.report(r))
	}
	return out
}

// LastReceived is when the last canary first arrived; zero before any.
func (t *Tracker) LastReceived() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastReceived
}

// persistLocked writes the whole state atomically; a no-op without a path.
func (t *Tracker) persistLocked() error {
	if t.path == "" {
		t.dirty = false
		return nil
	}
	st := stateFile{
		Version: stateVersion, Pipeline: t.p.Name, Instance: t.instance,
		Canaries: make([]*canaryState, 0, len(t.canaries)), LastSeq: t.lastSeq, NextOffsets: t.next,
		LastSent: t.lastSent, LastReceived: t.lastReceived, LastSuccess: t.lastSuccess,
	}
	for _, r := range t.canaries {
		st.Canaries = append(st.Canaries, r)
	}
	slices.SortFunc(st.Canaries, func(a, b *canaryState) int { return cmp.Compare(a.Seq, b.Seq) })
	data, err := json.Marshal(&st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := writeFileAtomic(t.path, data); err != nil {
		return fmt.Errorf("write state %s: %w", t.path, err)
	}
	t.dirty = false
	return nil
}

func unixSeconds(ts time.Time) float64 { return float64(ts.UnixNano()) / 1e9 }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
