package judge

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Config is what the judge needs of a pipeline's configuration.
type Config struct {
	Plan Plan
	// SkewTolerance: a segment negative by less than this (plus the error
	// bounds of its stamps) is measurement noise, measured as 0.
	SkewTolerance time.Duration
	// MaxSkew: a stamp further than this outside [commit, consume] is
	// invalid rather than skewed.
	MaxSkew time.Duration
	// LostAfter: a canary not arrived this long after its commit is lost.
	LostAfter time.Duration
	// Forget: a final canary is remembered this long after its commit, to
	// recognise its duplicates.
	Forget time.Duration
	// ArrivedLookupWindow: how long after arrival a lookup stamp that
	// reads absent is asked for again before it is given up as missing.
	ArrivedLookupWindow time.Duration
	// LookupSettle: how long after arrival the first lookup of an arrived
	// canary waits, so that the relay, which writes published_at after
	// the broker's ack, has written it. It also spaces the retries of an
	// answer that found no stamp: settle, then twice, four times... that,
	// up to LookupRetryMax.
	LookupSettle time.Duration
	// FloodSkips: readers behind with a backlog of at least this many
	// messages (or after this many that were not our canaries since they
	// were last caught up) are the prober's own lag.
	FloodSkips int

	// mutation, set only by the model test, breaks one rule on purpose to
	// prove the test notices.
	mutation string
}

// Sent is a canary whose insert committed. A journal line holds it as it
// is (the prober's committed-canary line), named as Canary names the same
// fields.
type Sent struct {
	ID            string    `json:"id"`
	Seq           uint64    `json:"seq"`
	Key           string    `json:"key"`
	RowID         string    `json:"row_id,omitempty"`
	InsertStarted time.Time `json:"insert_started"` // before the insert was sent
	CommitSent    time.Time `json:"commit_sent"`    // before the statement that commits was sent (a lone INSERT, or COMMIT)
	Committed     time.Time `json:"committed"`      // when it returned
}

// Arrival is a canary's message as consumed, with the stamps it carries
// (already on the prober clock).
type Arrival struct {
	CanaryID  string
	Key       string
	Seq       uint64
	Partition int
	Offset    int64
	Consumed  time.Time
	Stamps    map[string]time.Time
	// Unparseable names stamps whose header was there but held no time:
	// invalid, not missing.
	Unparseable []string
}

// Kind classifies an arrival.
type Kind int

// Arrival kinds.
const (
	KindFirst     Kind = iota + 1 // the first arrival of a known canary: judged
	KindDuplicate                 // a later arrival: counted, never judged again
	KindReplay                    // an offset processed before a restart: ignored
	KindUnknown                   // a canary of this instance without a record: skipped
	KindPending                   // overtook Sent: parked, resolved by Sent
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
	return "Kind(?)"
}

// Position is where the prober's readers of the canary topic were: at At
// (before the high watermarks were read), CaughtUp says whether every
// partition had been processed up to its high watermark. A message acked
// before At was therefore processed if CaughtUp. Lag is how many messages
// were left to process, summed over the partitions.
type Position struct {
	At       time.Time
	CaughtUp bool
	Lag      int64
	// Failed: the high watermarks could not be read. No evidence of where
	// the readers were, but evidence that the brokers may have been out of
	// reach of the relay's producer too.
	Failed bool
}

// brokerReconnectGrace is how long after the prober last failed to reach
// the brokers a relay's producer may still be holding a record it stamped
// at send: a Kafka producer reconnects and retries with backoff (Connect's
// defaults reach seconds), so a record sent just after an outage can wait
// too.
const brokerReconnectGrace = 10 * time.Second

// farFuture stands for "as of now" where only the order of events matters.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// position is the judge's memory of the readers' positions.
type position struct {
	caughtUpAsOf time.Time // latest At with CaughtUp
	// behindSince and behindAt span the current streak of samples that
	// found the readers behind; zero when the latest was caught up. A
	// single behind sample is ordinary (a canary published a moment ago,
	// not yet fetched); a streak across a deadline is a lag.
	behindSince, behindAt time.Time
	sampledSince          bool  // a sample was taken since the start
	caughtUp              bool  // caught up at least once since the start
	skips                 int   // non-canary messages since the last caught-up sample
	lag                   int64 // messages left to process at the latest sample
	lastFailed            bool  // the latest sample failed (State.Unreachable)
}

// Judge is the pure state machine. Not safe for concurrent use: the shell
// serialises events.
type Judge struct {
	cfg          Config
	st           *State
	started      time.Time
	expected     map[string][]Arrival // between Expect and Sent, with parked arrivals
	lookupsAsked map[string]bool      // lookups asked for and not answered
	pos          position
	fx           []Effect
	// changed holds the canaries changed (or forgotten) since the last
	// MarkPersisted, metaChanged whether anything else in the state did:
	// what the shell must persist, in O(change) rather than O(state).
	changed     map[string]struct{}
	metaChanged bool
	// restarted: this process resumed a state after a downtime, so its
	// readers have a backlog of their own to catch up on.
	restarted bool
	// open and forgetting index the canaries for Tick (index.go).
	open       []*Canary
	forgetting forgetQueue
	forgetFrom time.Time // forgetting[0].Committed, see forgetFromChanged
}

// New resumes from a state (nil: a fresh one) at now, the process's start.
// The span since the state's last write is recorded as the prober's
// downtime.
func New(cfg Config, st *State, now time.Time) *Judge {
	if st == nil {
		st = &State{}
	}
	if st.Canaries == nil {
		st.Canaries = map[string]*Canary{}
	}
	if st.LastSeq == nil {
		st.LastSeq = map[string]uint64{}
	}
	if st.Next == nil {
		st.Next = map[int]int64{}
	}
	j := &Judge{cfg: cfg, st: st, started: now, expected: map[string][]Arrival{}, lookupsAsked: map[string]bool{},
		changed: map[string]struct{}{}}
	if !st.AliveAt.IsZero() && st.AliveAt.Before(now) {
		st.Downtimes = append(st.Downtimes, Interval{From: st.AliveAt, To: now})
		j.metaChanged, j.restarted = true, true
	}
	// Keep only the downtimes a remembered canary can span.
	horizon := now.Add(-cfg.Forget - cfg.LostAfter)
	kept := len(st.Downtimes)
	st.Downtimes = slices.DeleteFunc(st.Downtimes, func(iv Interval) bool { return iv.To.Before(horizon) })
	if len(st.Downtimes) != kept {
		j.metaChanged = true
	}
	kept = len(st.Unreachable)
	st.Unreachable = slices.DeleteFunc(st.Unreachable, func(iv Interval) bool { return iv.To.Before(horizon) })
	if len(st.Unreachable) != kept {
		j.metaChanged = true
	}
	j.index()
	return j
}

// State is the judge's state, for the shell to persist.
func (j *Judge) State() *State { return j.st }

// Canary returns a canary's record (nil if unknown). Callers must not
// change it.
func (j *Judge) Canary(id string) *Canary { return j.st.Canaries[id] }

// Canaries returns every remembered canary by sequence number.
func (j *Judge) Canaries() []*Canary {
	out := slices.Collect(maps.Values(j.st.Canaries))
	slices.SortFunc(out, bySeq)
	return out
}

func (j *Judge) take() []Effect {
	fx := j.fx
	j.fx = nil
	return fx
}

func (j *Judge) emit(e Effect) { j.fx = append(j.fx, e) }

// Expect announces a canary whose insert is about to commit, so that an
// arrival overtaking Sent is parked rather than taken for unknown.
func (j *Judge) Expect(id string) {
	if _, ok := j.expected[id]; !ok {
		j.expected[id] = nil
	}
}

// Abandon withdraws an Expect whose insert failed; an arrival parked for it
// (a COMMIT that took effect although it reported an error) is unknown.
func (j *Judge) Abandon(id string) []Effect {
	parked, ok := j.expected[id]
	delete(j.expected, id)
	if ok {
		for range parked {
			j.emit(Effect{Kind: EffectUnknownCanary, Canary: id})
		}
	}
	return j.take()
}

// Sent records a committed canary and judges insert_to_commit.
func (j *Judge) Sent(s Sent) []Effect {
	parked := j.expected[s.ID]
	delete(j.expected, s.ID)
	if _, ok := j.st.Canaries[s.ID]; ok {
		return nil // Sent is idempotent
	}
	c := &Canary{ID: s.ID, Seq: s.Seq, Key: s.Key, RowID: s.RowID,
		InsertStarted: s.InsertStarted, CommitSent: s.CommitSent, Committed: s.Committed}
	j.st.Canaries[s.ID] = c
	j.opened(c)
	j.st.LastSent = s.Committed
	j.touch(c)
	j.metaChanged = true
	j.emit(Effect{Kind: EffectSent, Canary: c.ID, At: s.Committed})
	ins := j.cfg.Plan.Insert
	d := s.Committed.Sub(s.InsertStarted)
	j.observe(c, ins, d)
	if ins.Budgeted {
		j.decide(c, ins.Name, outcomeOf(d, ins.Budget), "", s.Committed)
	}
	for _, a := range parked {
		j.arrived(c, a)
	}
	return j.take()
}

func outcomeOf(d, budget time.Duration) string {
	if d <= budget {
		return Good
	}
	return Bad
}

// Arrived classifies a consumed canary of this instance and judges what
// its stamps prove.
func (j *Judge) Arrived(a Arrival) (Kind, []Effect) {
	if j.isReplay(a.Partition, a.Offset) {
		return KindReplay, nil
	}
	j.advance(a.Partition, a.Offset)
	c, ok := j.st.Canaries[a.CanaryID]
	if parked, expected := j.expected[a.CanaryID]; !ok && expected {
		j.expected[a.CanaryID] = append(parked, a)
		return KindPending, j.take()
	}
	if !ok {
		j.emit(Effect{Kind: EffectUnknownCanary, Canary: a.CanaryID})
		return KindUnknown, j.take()
	}
	kind := j.arrived(c, a)
	return kind, j.take()
}

// Skipped records that every message of a partition below next was
// processed, skips of them not our canaries (the canaries came through
// Arrived). It never moves a partition's next offset back.
func (j *Judge) Skipped(partition int, next int64, skips int) {
	j.advance(partition, next-1)
	j.pos.skips += skips
}

// ResetOffset makes next the next offset of a partition even if lower (the
// topic was recreated).
func (j *Judge) ResetOffset(partition int, next int64) {
	j.st.Next[partition] = next
	j.metaChanged = true
}

// NextOffsets returns, per partition, the next offset to process.
func (j *Judge) NextOffsets() map[int]int64 { return maps.Clone(j.st.Next) }

// NextOffset returns a partition's next offset to process, if it has one.
func (j *Judge) NextOffset(partition int) (int64, bool) {
	next, ok := j.st.Next[partition]
	return next, ok
}

func (j *Judge) isReplay(partition int, offset int64) bool {
	next, ok := j.st.Next[partition]
	return ok && offset < next
}

func (j *Judge) advance(partition int, offset int64) {
	if next, ok := j.st.Next[partition]; !ok || offset+1 > next {
		j.st.Next[partition] = offset + 1
		j.metaChanged = true
	}
}

// Position records where the readers were.
func (j *Judge) Position(p Position) []Effect {
	if p.Failed {
		j.brokersUnreachable(p.At)
		return nil
	}
	j.pos.lastFailed = false
	if p.At.After(j.started) || p.At.Equal(j.started) {
		j.pos.sampledSince = true
	}
	if p.CaughtUp {
		if p.At.After(j.pos.caughtUpAsOf) {
			j.pos.caughtUpAsOf = p.At
		}
		if !p.At.Before(j.started) {
			j.pos.caughtUp = true
		}
		j.pos.skips = 0
		j.pos.behindSince, j.pos.behindAt = time.Time{}, time.Time{}
		return nil
	}
	j.pos.lag = p.Lag
	if j.pos.behindSince.IsZero() {
		j.pos.behindSince = p.At
	}
	if p.At.After(j.pos.behindAt) {
		j.pos.behindAt = p.At
	}
	return nil
}

// brokersUnreachable records a failed sample at t: it extends the current
// streak, or starts one, and forgets streaks no open canary can reach.
func (j *Judge) brokersUnreachable(t time.Time) {
	u := j.st.Unreachable
	if n := len(u); j.pos.lastFailed && n > 0 {
		if t.After(u[n-1].To) {
			u[n-1].To = t
		}
	} else {
		u = append(u, Interval{From: t, To: t})
	}
	j.pos.lastFailed = true
	horizon := t.Add(-j.cfg.LostAfter - brokerReconnectGrace - time.Minute)
	for len(u) > 0 && u[0].To.Before(horizon) {
		u = u[1:]
	}
	j.st.Unreachable = u
	j.metaChanged = true
}

// publishMayBeHeld says whether a canary missing from the topic as of
// asOf may still have passed its publish stamp: the stamp is taken at send
// (not after the ack, as published_at is), and the brokers were out of the
// prober's reach at some point between a little before the canary's commit
// and asOf (or the prober was down then, and cannot tell), so the relay's
// producer may hold the stamped record. Which side of the stamp it is on
// is then unknown.
func (j *Judge) publishMayBeHeld(c *Canary, asOf time.Time) bool {
	if j.cfg.Plan.AfterEvent[StampPublish] || j.cfg.mutation == "ignore_outage" {
		return false
	}
	from := c.CommitSent.Add(-brokerReconnectGrace)
	for _, iv := range slices.Concat(j.st.Unreachable, j.st.Downtimes) {
		if !iv.To.Before(from) && !iv.From.After(asOf) {
			return true
		}
	}
	return false
}

// relayExcuse says why a publish-side segment of a canary (one that ends
// at publish or before it) over its budget is not the relay's to answer
// for, or "" when it is. The relay may have been waiting on the brokers (a
// polling relay that fails to send re-reads the row later and stamps the
// later read):
//   - ReasonBrokersUnreachable: the segment overlapped a time the prober
//     could not reach the brokers, widened by brokerReconnectGrace on both
//     sides;
//   - ReasonProberDown: the prober was down within that grace of the
//     segment, so an outage may have begun and ended unseen, and the
//     segment's time after the downtime (and the grace) is within budget.
//     Past that, the wait is the relay's: a relay that stalls or drops a
//     row across a prober restart is still charged, only later.
//
// end is the latest the segment can have ended.
func (j *Judge) relayExcuse(c *Canary, s Segment, end time.Time) string {
	p := j.cfg.Plan
	if i := p.index(s.To); i < 1 || i > p.index(StampPublish) {
		return ""
	}
	from := j.commitPoint(c)
	if s.From != StampCommit {
		from, _ = j.point(c, s.From)
	}
	if t, ok := j.point(c, s.To); ok && t.Before(end) {
		end = t
	}
	if j.brokersOutBetween(from, end) {
		return ReasonBrokersUnreachable
	}
	if start := j.relayClockFrom(from, end); start.After(from) && !end.After(start.Add(s.Budget)) {
		return ReasonProberDown
	}
	return ""
}

// relayClockFrom is when the relay's time in a publish-side segment that
// spans [from, to] starts to count: from, or, when the prober was down
// within brokerReconnectGrace of the span, the end of that downtime plus
// the grace. A broker outage that began and ended while the prober was
// down leaves no trace it can read, yet the relay re-reads what it failed
// to send then; after the grace, the relay had the brokers back.
func (j *Judge) relayClockFrom(from, to time.Time) time.Time {
	start := from
	for _, d := range j.st.Downtimes {
		if !d.To.Add(brokerReconnectGrace).Before(from) && !d.From.Add(-brokerReconnectGrace).After(to) && d.To.Add(brokerReconnectGrace).After(start) {
			start = d.To.Add(brokerReconnectGrace)
		}
	}
	return start
}

// brokersOutBetween says whether the prober failed to reach the brokers
// at some point within brokerReconnectGrace of [from, to].
func (j *Judge) brokersOutBetween(from, to time.Time) bool {
	if j.cfg.mutation == "charge_relay_in_outage" || j.cfg.mutation == "ignore_outage" {
		return false
	}
	for _, iv := range j.st.Unreachable {
		if !iv.To.Add(brokerReconnectGrace).Before(from) && !iv.From.Add(-brokerReconnectGrace).After(to) {
			return true
		}
	}
	return false
}

// arrived resolves the first (or a later) arrival of a known canary.
func (j *Judge) arrived(c *Canary, a Arrival) Kind {
	if c.Arrived {
		j.emit(Effect{Kind: EffectDuplicate, Canary: c.ID})
		return KindDuplicate
	}
	j.touch(c)
	j.metaChanged = true // the last sequence of the key, the last times
	c.Arrived, c.Consumed, c.Partition, c.Offset = true, a.Consumed, a.Partition, a.Offset
	c.Tainted = j.trouble(c, a.Consumed)
	for name, t := range a.Stamps {
		j.addStamp(c, name, t, 0, a.Consumed)
	}
	for _, name := range a.Unparseable {
		if j.cfg.Plan.index(name) > 0 && name != StampConsume && !c.Stamps.Has(name) && !c.Invalid.Has(name) {
			c.Invalid.Set(name, InvalidUnparseable)
			j.emit(Effect{Kind: EffectStampInvalid, Canary: c.ID, Stamp: name, Reason: InvalidUnparseable})
		}
	}
	key := cmp.Or(a.Key, c.Key)
	if last, ok := j.st.LastSeq[key]; ok && c.Seq < last {
		c.OutOfOrder = true
		j.emit(Effect{Kind: EffectOutOfOrder, Canary: c.ID})
	} else {
		j.st.LastSeq[key] = c.Seq
	}
	j.emit(Effect{Kind: EffectReceived, Canary: c.ID, At: a.Consumed})
	e2e := j.cfg.Plan.EndToEnd
	late := c.Lost || (e2e.Budgeted && a.Consumed.After(c.Committed.Add(e2e.Budget)))
	j.st.LastReceived = a.Consumed
	j.judgeArrived(c, a.Consumed)
	// Late counts canaries already counted bad; one left unjudged (the
	// prober was down, or its own backlog held it) was counted nowhere.
	if v := c.Verdicts.find(e2e.Name); late && (v == nil || v.Outcome != Unjudged) {
		j.emit(Effect{Kind: EffectLate, Canary: c.ID})
	}
	if v := c.Verdicts.find(e2e.Name); v != nil && v.Outcome == Good {
		j.st.LastSuccess = a.Consumed
	}
	if j.lookupWanted(c) {
		// Asked for by a later Tick, once the relay has had time to
		// write the stamp: the shell reads the stamps of every canary due
		// at a tick in one query.
		c.Lookup.Pending = true
		c.Lookup.Due, c.Lookup.Retries = a.Consumed.Add(j.cfg.LookupSettle), 0
	} else {
		j.finalize(c, a.Consumed)
	}
	return KindFirst
}

// trouble names the prober's own trouble that may have delayed the
// consumption of a canary up to at: a downtime since its commit, a
// restart it is still catching up from, or a flood of messages that are
// not its canaries. "" when there was none.
func (j *Judge) trouble(c *Canary, at time.Time) string {
	if j.cfg.mutation == "no_taint" {
		return ""
	}
	for _, d := range j.st.Downtimes {
		if d.To.After(c.CommitSent) && d.From.Before(at) {
			return ReasonProberDown
		}
	}
	if j.restarted && j.pos.sampledSince && !j.pos.caughtUp {
		return ReasonProberDown // catching up after the restart
	}
	// A backlog of that many messages is more than a stall of our own
	// canaries leaves behind: the readers chew through messages that are
	// not ours, and that wait is the prober's.
	if flood := int64(j.cfg.FloodSkips); flood > 0 && j.behind() && (int64(j.pos.skips) >= flood || j.pos.lag >= flood) {
		return ReasonProberLag
	}
	return ""
}

// behind reports whether the latest position sample had the readers
// behind the topic's end.
func (j *Judge) behind() bool { return !j.pos.behindSince.IsZero() }

// laggedAcross reports whether the readers have been behind, sample after
// sample, from before t until after it.
func (j *Judge) laggedAcross(t time.Time) bool {
	return j.behind() && !j.pos.behindSince.After(t) && j.pos.behindAt.After(t)
}

// addStamp records a middle stamp, unless it is implausible.
func (j *Judge) addStamp(c *Canary, name string, t time.Time, errBound time.Duration, now time.Time) {
	if j.cfg.Plan.index(name) <= 0 || name == StampConsume {
		return
	}
	if c.Stamps.Has(name) {
		return // segments may already have been judged against it
	}
	if c.Invalid.Has(name) {
		return
	}
	upper := now
	if c.Arrived {
		upper = c.Consumed
	}
	var reason string
	switch {
	case t.Before(c.CommitSent.Add(-j.cfg.MaxSkew - errBound)):
		reason = InvalidBeforeCommit
	case t.After(upper.Add(j.cfg.MaxSkew + errBound)):
		reason = InvalidAfterConsume
	}
	if reason != "" {
		c.Invalid.Set(name, reason)
		j.emit(Effect{Kind: EffectStampInvalid, Canary: c.ID, Stamp: name, Reason: reason})
		j.touch(c)
		return
	}
	// Room for every stamp the canary can get: one allocation, not one
	// per stamp.
	*c.Stamps.add(name, len(j.cfg.Plan.Middle())) = t
	if errBound > 0 {
		*c.StampError.add(name, len(j.cfg.Plan.Lookup)) = errBound
	}
	j.touch(c)
}

// lookupWanted reports whether a lookup stamp is still unknown (and not
// invalid).
func (j *Judge) lookupWanted(c *Canary) bool {
	for s := range j.cfg.Plan.Lookup {
		known := c.Stamps.Has(s)
		bad := c.Invalid.Has(s)
		if !known && !bad {
			return true
		}
	}
	return false
}

// askLookup asks the shell to look the canary's stamps up, unless a
// lookup is under way or not due yet.
func (j *Judge) askLookup(c *Canary, now time.Time) {
	if j.lookupsAsked[c.ID] || now.Before(c.Lookup.Due) {
		return
	}
	j.lookupsAsked[c.ID] = true
	j.emit(Effect{Kind: EffectLookup, Canary: c.ID})
}

// LookupRetryMax caps the spacing of a canary's lookups.
const LookupRetryMax = 10 * time.Second

// lookupRetryUnavailable spaces the lookups of a canary while the
// prober's own database cannot be read.
const lookupRetryUnavailable = time.Second

// retryLater spaces the next lookup of a canary whose last answer
// brought no stamp: LookupSettle, doubling with each such answer, capped.
func (j *Judge) retryLater(c *Canary, at time.Time) {
	d := j.cfg.LookupSettle
	for i := 0; i < c.Lookup.Retries && d < LookupRetryMax; i++ {
		d *= 2
	}
	c.Lookup.Retries++
	c.Lookup.Due = at.Add(min(d, LookupRetryMax))
}

// StampFound delivers looked-up stamps (on the prober clock, with the
// error bound of their conversion).
func (j *Judge) StampFound(id string, stamps map[string]time.Time, errBound time.Duration, at time.Time) []Effect {
	delete(j.lookupsAsked, id)
	c, ok := j.st.Canaries[id]
	if !ok || c.Final {
		return j.take()
	}
	c.Lookup.Attempts++
	c.Lookup.Unavailable = false
	for name, t := range stamps {
		if j.cfg.Plan.Lookup[name] {
			j.addStamp(c, name, t, errBound, at)
		}
	}
	j.touch(c)
	if c.Arrived {
		j.judgeArrived(c, at)
		if !j.lookupWanted(c) {
			j.finalize(c, at)
		}
	}
	return j.take()
}

// StampAbsent reports that a lookup found no stamp (published_at still
// NULL, or the row gone).
func (j *Judge) StampAbsent(id string, at time.Time) []Effect {
	delete(j.lookupsAsked, id)
	if c, ok := j.st.Canaries[id]; ok && !c.Final {
		c.Lookup.Attempts++
		c.Lookup.Unavailable = false
		j.retryLater(c, at)
		j.touch(c)
	}
	return j.take()
}

// StampUnavailable reports that a lookup could not be made because the
// prober's own dependency is down: it is retried, and never taken for a
// missing stamp.
func (j *Judge) StampUnavailable(id string, at time.Time) []Effect {
	delete(j.lookupsAsked, id)
	if c, ok := j.st.Canaries[id]; ok && !c.Final {
		c.Lookup.Unavailable = true
		c.Lookup.Due = at.Add(min(max(j.cfg.LookupSettle, lookupRetryUnavailable), LookupRetryMax))
		j.touch(c)
	}
	return j.take()
}

// LookupWanted reports whether the canary still wants a lookup; the shell
// retries a lookup that it could not deliver (its process stopping) while
// this holds.
func (j *Judge) LookupWanted(id string) bool {
	c, ok := j.st.Canaries[id]
	return ok && !c.Final && j.lookupWanted(c)
}

// LookupDropped tells the judge a lookup it asked for will not be answered
// (the shell gave up on it without an answer); it may be asked again.
func (j *Judge) LookupDropped(id string) { delete(j.lookupsAsked, id) }

// commitPoint is when segments from commit start: COMMIT sent, an upper
// bound on their length, so that a relay reading the row before our client
// hears COMMIT return is never taken for skew.
func (j *Judge) commitPoint(c *Canary) time.Time {
	if j.cfg.mutation == "commit_returned" {
		return c.Committed
	}
	return c.CommitSent
}

// effPoint is point, except that a stamp written after its event (a
// published_at) that lies after the next stamp of the chain by no more
// than the tolerance is taken at the next stamp: its event cannot have
// come later, and the segments then add up to end to end. Beyond the
// tolerance it is stamp order (see late).
func (j *Judge) effPoint(c *Canary, stamp string) (time.Time, bool) {
	t, ok := j.point(c, stamp)
	if !ok || !j.cfg.Plan.AfterEvent[stamp] {
		return t, ok
	}
	i := j.cfg.Plan.index(stamp)
	if i < 0 || i+1 >= len(j.cfg.Plan.Stamps) {
		return t, ok
	}
	if n, okN := j.point(c, j.cfg.Plan.Stamps[i+1]); okN && n.Before(t) && !j.late(c, stamp) {
		return n, true
	}
	return t, ok
}

// point is a stamp's time as used to measure segments: commit's start
// (an upper bound for segments from commit), consume, or a middle stamp.
func (j *Judge) point(c *Canary, stamp string) (time.Time, bool) {
	switch stamp {
	case StampCommit:
		return j.commitPoint(c), true
	case StampConsume:
		return c.Consumed, c.Arrived
	}
	t, ok := c.Stamps.Get(stamp)
	return t, ok
}

// measurement is what a canary's stamps say about one segment.
type measurement struct {
	status   int           // one of the m* constants
	duration time.Duration // mMeasured: the duration; mBound: its upper bound; mSkew/mOrder: the negative raw value
	reason   string        // mUnjudged: why
}

const (
	mWait     = iota // a stamp may still come (lookup pending)
	mMeasured        // duration is the segment's length
	mBound           // only an upper bound is known (a late stamp): good if within budget
	mSkew            // clocks disagree
	mOrder           // a stamp taken after its event made the segment negative
	mUnjudged        // cannot be judged (reason)
)

// measure evaluates a segment of an arrived canary.
func (j *Judge) measure(c *Canary, s Segment) measurement {
	if s.Name == j.cfg.Plan.EndToEnd.Name {
		return measurement{status: mMeasured, duration: c.Consumed.Sub(j.commitPoint(c))}
	}
	for _, st := range []string{s.From, s.To} {
		if _, ok := j.point(c, st); ok {
			continue
		}
		if c.Invalid.Has(st) {
			return measurement{status: mUnjudged, reason: ReasonInvalidStamp}
		}
		if j.cfg.Plan.Lookup[st] && !c.Final {
			return measurement{status: mWait}
		}
		if j.cfg.Plan.Lookup[st] && (c.Lookup.Unavailable || c.Lookup.Attempts == 0) {
			return measurement{status: mUnjudged, reason: ReasonUnknown}
		}
		return measurement{status: mUnjudged, reason: ReasonMissingStamp}
	}
	a, _ := j.effPoint(c, s.From)
	b, _ := j.effPoint(c, s.To)
	d := b.Sub(a)
	tol := j.cfg.SkewTolerance + c.stampError(s.From) + c.stampError(s.To)
	if d >= -tol && (j.skewed(c, s.From) || j.skewed(c, s.To)) {
		// A stamp whose clock contradicts its neighbour measures nothing
		// on either side of it.
		return measurement{status: mSkew, duration: d}
	}
	switch {
	case j.late(c, s.To):
		// The end stamp was taken after a later stamp's event: the true
		// end lies before the next stamp, which bounds the segment.
		next := j.cfg.Plan.Stamps[j.cfg.Plan.index(s.To)+1]
		n, _ := j.point(c, next)
		return measurement{status: mBound, duration: max(n.Sub(a), 0)}
	case d >= 0:
		return measurement{status: mMeasured, duration: d}
	case d >= -tol:
		return measurement{status: mMeasured, duration: 0} // noise: the stamps are that precise
	case j.cfg.Plan.AfterEvent[s.From] && j.cfg.mutation != "order_as_skew":
		return measurement{status: mOrder, duration: d}
	}
	return measurement{status: mSkew, duration: d}
}

// skewed reports whether a stamp from another clock (a relay header, a
// record timestamp) contradicts the known stamps around it beyond the
// tolerance: its clock disagrees with ours.
func (j *Judge) skewed(c *Canary, stamp string) bool {
	p := j.cfg.Plan
	if stamp == StampCommit || stamp == StampConsume || p.AfterEvent[stamp] {
		return false
	}
	t, ok := j.point(c, stamp)
	if !ok {
		return false
	}
	i := p.index(stamp)
	if prev := j.knownBefore(c, stamp); prev.Sub(t) > j.cfg.SkewTolerance+c.stampError(stamp) {
		return true
	}
	for k := i + 1; k < len(p.Stamps); k++ {
		n, ok := j.point(c, p.Stamps[k])
		if !ok {
			continue
		}
		if p.AfterEvent[p.Stamps[k]] {
			continue // a late stamp bounds nothing from below
		}
		return t.Sub(n) > j.cfg.SkewTolerance+c.stampError(stamp)+c.stampError(p.Stamps[k])
	}
	return false
}

// knownBefore is the latest known stamp before stamp in the chain (commit
// at least): a lower bound of stamp's event.
func (j *Judge) knownBefore(c *Canary, stamp string) time.Time {
	for i := j.cfg.Plan.index(stamp) - 1; i > 0; i-- {
		if t, ok := j.point(c, j.cfg.Plan.Stamps[i]); ok {
			return t
		}
	}
	return c.CommitSent
}

// late reports whether stamp was taken after its event and after the next
// stamp of the chain too (published_at marked after consumption).
func (j *Judge) late(c *Canary, stamp string) bool {
	if !j.cfg.Plan.AfterEvent[stamp] {
		return false
	}
	i := j.cfg.Plan.index(stamp)
	if i < 0 || i+1 >= len(j.cfg.Plan.Stamps) {
		return false
	}
	t, ok := j.point(c, stamp)
	n, okN := j.point(c, j.cfg.Plan.Stamps[i+1])
	if !ok || !okN {
		return false
	}
	return t.Sub(n) > j.cfg.SkewTolerance+c.stampError(stamp)
}

// judgeArrived judges every segment of an arrived canary its stamps decide.
func (j *Judge) judgeArrived(c *Canary, now time.Time) {
	for s := range j.cfg.Plan.eachSegment {
		if c.decided(s.Name) && j.verdict(c, s.Name).Observed {
			continue
		}
		m := j.measure(c, s)
		endsAtConsume := s.To == StampConsume
		switch m.status {
		case mWait:
			continue
		case mMeasured:
			// A wait in the topic that the prober's own downtime or backlog
			// may have made long is no latency of the pipeline's: it would
			// put our downtime into Kafka's histogram. Likewise a relay's
			// wait on brokers out of reach is no latency of the relay's.
			ours := endsAtConsume && c.Tainted != "" && (!s.Budgeted || m.duration > s.Budget)
			excuse := ""
			if !ours && s.Budgeted && m.duration > s.Budget {
				excuse = j.relayExcuse(c, s, c.Consumed)
			}
			if ours || excuse != "" {
				j.markObserved(c, s)
			} else {
				j.observe(c, s, m.duration)
			}
			if s.Budgeted {
				out, reason := outcomeOf(m.duration, s.Budget), ""
				switch {
				case ours:
					out, reason = Unjudged, c.Tainted
				case excuse != "":
					out, reason = Unjudged, excuse
				}
				j.decide(c, s.Name, out, reason, now)
			}
		case mBound:
			j.markObserved(c, s)
			if s.Budgeted {
				if m.duration <= s.Budget {
					j.decide(c, s.Name, Good, "", now)
				} else {
					j.decide(c, s.Name, Unjudged, ReasonStampOrder, now)
				}
			}
		case mOrder:
			if !j.verdict(c, s.Name).Observed {
				j.emit(Effect{Kind: EffectStampOrder, Canary: c.ID, Segment: s.Name, Duration: m.duration})
			}
			j.markObserved(c, s)
			// The true start lies after the commit: that bounds the
			// segment from above. (Not after a relay's stamp in between:
			// its clock may be off by anything below max_clock_skew
			// without contradicting its neighbours.)
			if s.Budgeted {
				p := j.commitPoint(c)
				to, _ := j.point(c, s.To)
				switch {
				case to.Sub(p) <= s.Budget:
					j.decide(c, s.Name, Good, "", now)
				default:
					j.decide(c, s.Name, Unjudged, ReasonStampOrder, now)
				}
			}
		case mSkew:
			if !j.verdict(c, s.Name).Observed && m.duration < 0 {
				j.emit(Effect{Kind: EffectSkew, Canary: c.ID, Segment: s.Name, Duration: m.duration})
			}
			j.markObserved(c, s)
			if s.Budgeted {
				j.decide(c, s.Name, Unjudged, ReasonClockSkew, now)
			}
		case mUnjudged:
			if s.Budgeted {
				j.decide(c, s.Name, Unjudged, m.reason, now)
			}
		}
	}
}

// observe records a segment's duration once.
func (j *Judge) observe(c *Canary, s Segment, d time.Duration) {
	v := j.verdict(c, s.Name)
	if v.Observed {
		return
	}
	v.Observed = true
	j.touch(c)
	j.emit(Effect{Kind: EffectObserve, Canary: c.ID, Segment: s.Name, Duration: d})
}

func (j *Judge) markObserved(c *Canary, s Segment) {
	if v := j.verdict(c, s.Name); !v.Observed {
		v.Observed = true
		j.touch(c)
	}
}

// verdict returns a segment's verdict to be set (see Canary.verdict).
func (j *Judge) verdict(c *Canary, segment string) *Verdict {
	return c.verdict(segment, len(j.cfg.Plan.Chain)+2) // the chain, insert_to_commit and end_to_end
}

// decide sets a segment's outcome once and emits it.
func (j *Judge) decide(c *Canary, segment, outcome, reason string, at time.Time) {
	v := j.verdict(c, segment)
	if v.Outcome != "" {
		return
	}
	if j.cfg.mutation != "" {
		outcome, reason = j.mutateVerdict(segment, outcome, reason)
	}
	v.Outcome, v.Reason, v.At = outcome, reason, at
	j.touch(c)
	j.emit(Effect{Kind: EffectVerdict, Canary: c.ID, Segment: segment, Outcome: outcome, Reason: reason, At: at})
}

// finalize ends a canary: segments it entered and that are still undecided
// get their reason, stamps the relay did not provide are counted.
func (j *Judge) finalize(c *Canary, now time.Time) {
	if c.Final {
		return
	}
	c.Lookup.Pending = false
	delete(j.lookupsAsked, c.ID)
	if c.Arrived {
		for _, st := range j.cfg.Plan.Middle() {
			known := c.Stamps.Has(st)
			bad := c.Invalid.Has(st)
			unread := j.cfg.Plan.Lookup[st] && (c.Lookup.Unavailable || c.Lookup.Attempts == 0)
			if !known && !bad && !unread {
				j.emit(Effect{Kind: EffectStampMissing, Canary: c.ID, Stamp: st})
			}
		}
		c.Final = true // measure() now reports missing stamps as such
		j.judgeArrived(c, now)
	} else {
		entered := j.entered(c)
		for i, s := range j.cfg.Plan.Chain {
			if i > entered || !s.Budgeted || c.decided(s.Name) {
				continue
			}
			reason := ReasonLost
			if i == entered {
				reason = ReasonUnknown // it was there or further, nothing says which
			}
			j.decide(c, s.Name, Unjudged, reason, now)
		}
		if e := j.cfg.Plan.EndToEnd; e.Budgeted && !c.decided(e.Name) {
			j.decide(c, e.Name, Unjudged, ReasonLost, now)
		}
	}
	c.Final, c.FinalAt = true, now
	j.closed(c)
	j.touch(c)
	j.emit(Effect{Kind: EffectFinal, Canary: c.ID, At: now})
}

// entered is the index of the furthest chain segment a canary that has not
// arrived is known to have entered: the one it was charged in, else the one
// after the furthest stamp it passed (a published_at claim the topic
// contradicts is not progress).
func (j *Judge) entered(c *Canary) int {
	for i, s := range j.cfg.Plan.Chain {
		if v := c.Verdicts.find(s.Name); v != nil && v.Outcome == Bad {
			return i
		}
	}
	furthest := 0
	for i, s := range j.cfg.Plan.Chain {
		t, ok := c.Stamps.Get(s.To)
		if !ok {
			continue
		}
		if s.To == StampPublish && j.pos.caughtUpAsOf.After(t.Add(c.stampError(s.To))) {
			continue
		}
		furthest = max(furthest, i+1)
	}
	return min(furthest, len(j.cfg.Plan.Chain)-1)
}

// Tick judges what time alone decides at now: deadlines, lookups due,
// losses, and forgets old canaries. now must not pass an arrival the judge
// has not been told of (the shell's fence). It costs the canaries not
// final and those due to be forgotten, not every canary remembered.
func (j *Judge) Tick(now time.Time) []Effect {
	// Before the open ones, so that a canary made final at this tick is
	// forgotten at a later one at the earliest.
	j.forgetDue(now)
	j.tickOpen(now)
	return j.take()
}

func (j *Judge) tickArrived(c *Canary, now time.Time) {
	if !c.Lookup.Pending {
		j.finalize(c, now)
		return
	}
	// A stamp that reads absent is asked for again for a while (the relay
	// may not have committed it yet), then given up as missing. One that
	// could not be read (our own database down) or got no answer is asked
	// for until the canary would be lost, then it is unknown, never
	// missing.
	giveUp := now.Sub(c.Committed) > j.cfg.LostAfter
	if c.Lookup.Attempts > 0 && !c.Lookup.Unavailable && now.Sub(c.Consumed) >= j.cfg.ArrivedLookupWindow {
		giveUp = true
	}
	if giveUp {
		j.finalize(c, now)
		return
	}
	j.askLookup(c, now)
}

func (j *Judge) tickInFlight(c *Canary, now time.Time) {
	p := j.cfg.Plan
	e2e := p.EndToEnd
	if e2e.Budgeted && !c.decided(e2e.Name) && now.After(c.Committed.Add(e2e.Budget)) {
		if reason := j.trouble(c, now); reason != "" {
			j.decide(c, e2e.Name, Unjudged, reason, now)
		} else {
			j.decide(c, e2e.Name, Bad, "", now)
		}
	}
	j.blame(c, now)
	if len(p.Lookup) > 0 && j.lookupWanted(c) && len(p.Chain) > 0 {
		// Before arrival, a lookup stamp can prove progress (or expose a
		// false claim); ask once the first segment's deadline passed.
		first := p.Chain[0]
		if !first.Budgeted || now.After(c.Committed.Add(first.Budget)) {
			j.askLookup(c, now)
		}
	}
	if now.Sub(c.Committed) > j.cfg.LostAfter {
		c.Lost = true
		j.touch(c)
		j.emit(Effect{Kind: EffectLost, Canary: c.ID, At: now})
		j.finalize(c, now)
	}
}

// blame charges the segment a canary that has not arrived is proven to be
// stuck in (see the package documentation).
func (j *Judge) blame(c *Canary, now time.Time) {
	p := j.cfg.Plan
	pub := p.index(StampPublish)
	// The furthest stamp before publish (or publish itself) that the
	// canary is known to have passed, and when at the latest.
	last, lastAt := 0, c.Committed
	for i := 1; i <= pub; i++ {
		if t, ok := c.Stamps.Get(p.Stamps[i]); ok {
			last, lastAt = i, t.Add(c.stampError(p.Stamps[i]))
		}
	}
	if j.cfg.mutation == "first_unstamped" {
		// The old rule: the segment after the last known stamp, at its
		// deadline, whatever the topic says.
		seg := p.Chain[last]
		if last == pub {
			seg = p.segmentTo(pub + 1)
		}
		if seg.Budgeted && !c.decided(seg.Name) && now.After(lastAt.Add(seg.Budget)) {
			j.decide(c, seg.Name, Bad, "", now)
		}
		return
	}
	if j.cfg.mutation == "trust_claims" && last == pub {
		// Taking published_at at its word: the canary is in Kafka.
		if seg := p.segmentTo(pub + 1); seg.Budgeted && !c.decided(seg.Name) && now.After(lastAt.Add(seg.Budget)) {
			j.decide(c, seg.Name, Bad, "", now)
		}
		return
	}
	if j.pos.caughtUpAsOf.After(c.Committed) && !j.publishMayBeHeld(c, j.pos.caughtUpAsOf) {
		// Not published as of caughtUpAsOf: it was on the publish side
		// then, whatever came after.
		asOf := j.pos.caughtUpAsOf
		var seg Segment
		if last == pub {
			// A published_at the topic contradicts: the relay read the
			// row by then; it is stuck before the broker, since lastAt.
			seg = p.segmentTo(pub)
		} else {
			seg = p.Chain[last]
		}
		if seg.Budgeted && !c.decided(seg.Name) && asOf.After(j.relayClockFrom(lastAt, asOf).Add(seg.Budget)) && !j.brokersOutBetween(lastAt, asOf) {
			j.decide(c, seg.Name, Bad, "", now)
			return
		}
	}
	if p.EndToEnd.Budgeted && j.laggedAcross(c.Committed.Add(p.EndToEnd.Budget)) {
		// The canary may be waiting in the topic: consumption.
		seg := p.segmentTo(len(p.Stamps) - 1)
		if seg.Budgeted && !c.decided(seg.Name) {
			if reason := j.trouble(c, now); reason != "" {
				j.decide(c, seg.Name, Unjudged, reason, now)
			} else {
				j.decide(c, seg.Name, Bad, "", now)
			}
		}
	}
}

// Where places a canary that has not arrived, as the evidence stands: the
// segment it is waiting in and when that segment's budget runs (or ran)
// out (zero when unknown); "" when it has arrived or is final, or when
// the evidence cannot tell (a record stamped at send while the brokers
// were out of reach, or a relay that may be waiting on them).
func (j *Judge) Where(c *Canary) (segment string, deadline time.Time) {
	if c.Arrived || c.Final {
		return "", time.Time{}
	}
	p := j.cfg.Plan
	consume := p.segmentTo(len(p.Stamps) - 1)
	// Charged by the consumption rule at end_to_end's deadline: that is
	// its deadline, the publish moment being unknown.
	lagDeadline := deadlineOf(p.EndToEnd, c.Committed)
	for _, s := range p.Chain {
		if v := c.Verdicts.find(s.Name); v != nil && v.Outcome == Bad {
			if s.Name == consume.Name {
				return s.Name, lagDeadline
			}
			return s.Name, deadlineOf(s, j.startOf(c, s.From))
		}
	}
	if j.behind() {
		return consume.Name, lagDeadline
	}
	if j.publishMayBeHeld(c, farFuture) {
		return "", time.Time{} // either side of a stamp taken at send
	}
	pub := p.index(StampPublish)
	last, lastAt := 0, c.Committed
	for i := 1; i <= pub; i++ {
		if t, ok := c.Stamps.Get(p.Stamps[i]); ok {
			last, lastAt = i, t.Add(c.stampError(p.Stamps[i]))
		}
	}
	if last == pub && !j.pos.caughtUpAsOf.After(lastAt) {
		return consume.Name, lagDeadline
	}
	if j.brokersOutBetween(lastAt, farFuture) {
		return "", time.Time{} // the relay may be waiting on the brokers
	}
	start := j.relayClockFrom(lastAt, farFuture)
	if last == pub {
		s := p.segmentTo(pub) // a claim the topic contradicts
		return s.Name, deadlineOf(s, start)
	}
	s := p.Chain[last]
	return s.Name, deadlineOf(s, start)
}

// startOf is the latest a canary can have passed stamp, as the blame
// counts it: COMMIT returned, or the stamp with its error bound; a stamp
// only the message carries counts from the latest known one before it.
func (j *Judge) startOf(c *Canary, stamp string) time.Time {
	if t, ok := c.Stamps.Get(stamp); ok {
		return t.Add(c.stampError(stamp))
	}
	at := c.Committed
	for i := 1; i < j.cfg.Plan.index(stamp); i++ {
		name := j.cfg.Plan.Stamps[i]
		if t, ok := c.Stamps.Get(name); ok {
			at = t.Add(c.stampError(name))
		}
	}
	return at
}

func deadlineOf(s Segment, from time.Time) time.Time {
	if !s.Budgeted {
		return time.Time{}
	}
	return from.Add(s.Budget)
}

// SegmentView is one segment of a canary as far as it is known, for
// reports.
type SegmentView struct {
	Segment
	// Measured: Duration is the segment's length (a negative within
	// tolerance counts as 0). Bound: Duration is only an upper bound (a
	// stamp taken after its event).
	Measured, Bound bool
	Duration        time.Duration
	// Skew or StampOrder: the stamps made the segment negative (Raw), by
	// clocks that disagree or by a stamp taken after its event. Measured
	// with StampOrder: negative within the tolerance, measured as 0.
	Skew, StampOrder bool
	Raw              time.Duration
	// MissingStamp names the stamp whose absence (or invalidity) leaves
	// the segment unmeasured, once nothing more is expected.
	MissingStamp string
	Verdict      Verdict
}

// View describes every segment of a canary, insert_to_commit first.
func (j *Judge) View(c *Canary) []SegmentView {
	var out []SegmentView
	for _, s := range j.cfg.Plan.All() {
		v := SegmentView{Segment: s}
		v.Verdict, _ = c.Verdicts.Get(s.Name)
		switch {
		case s.Name == j.cfg.Plan.Insert.Name:
			v.Measured, v.Duration = true, c.Committed.Sub(c.InsertStarted)
		case !c.Arrived && (s.To == StampConsume || s.Name == j.cfg.Plan.EndToEnd.Name):
			// not measurable before arrival
		default:
			m := j.measure(c, s)
			switch m.status {
			case mMeasured:
				v.Measured, v.Duration = true, m.duration
				// A stamp taken after its event, within the tolerance after
				// the next stamp, is measured as that stamp (effPoint): the
				// segment it ends is only bounded, the one it starts (0s)
				// is stamp order.
				if _, moved := j.movedBack(c, s.To); moved {
					v.Measured, v.Bound = false, true
				}
				if raw, moved := j.movedBack(c, s.From); moved {
					v.StampOrder, v.Raw = true, raw
				}
			case mBound:
				v.Bound, v.Duration = true, m.duration
			case mSkew:
				v.Skew, v.Raw = true, m.duration
			case mOrder:
				v.StampOrder, v.Raw = true, m.duration
			case mUnjudged:
				if c.Final || c.Arrived {
					v.MissingStamp = j.missingOf(c, s)
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// movedBack reports whether effPoint moved an after-event stamp back onto
// the next stamp, and by how much (negative: the next stamp minus it).
func (j *Judge) movedBack(c *Canary, stamp string) (time.Duration, bool) {
	t, ok := j.point(c, stamp)
	e, _ := j.effPoint(c, stamp)
	if !ok || !e.Before(t) {
		return 0, false
	}
	return e.Sub(t), true
}

// missingOf names the stamp of a segment that is not known.
func (j *Judge) missingOf(c *Canary, s Segment) string {
	for _, st := range []string{s.From, s.To} {
		if _, ok := j.point(c, st); !ok {
			return st
		}
	}
	return ""
}

// mutateVerdict breaks the rule as the model test's mutations that blame
// too little say.
func (j *Judge) mutateVerdict(segment, outcome, reason string) (string, string) {
	p := j.cfg.Plan
	publishSide, consumption := false, false
	for i, s := range p.Chain {
		if s.Name == segment {
			publishSide = i+1 <= p.index(StampPublish)
			consumption = s.To == StampConsume
		}
	}
	switch {
	case j.cfg.mutation == "always_unjudged",
		j.cfg.mutation == "never_charge_relay" && outcome == Bad && publishSide,
		j.cfg.mutation == "never_charge_consumption" && outcome == Bad && consumption:
		return Unjudged, ReasonUnknown
	}
	return outcome, reason
}
