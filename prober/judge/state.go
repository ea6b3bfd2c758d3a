package judge

import "time"

// Outcomes of a segment: an SLI event (good, bad) or not one (unjudged,
// with a reason).
const (
	Good     = "good"
	Bad      = "bad"
	Unjudged = "unjudged"
)

// Reasons a segment the canary entered is not an SLI event.
const (
	// ReasonProberDown: the prober was down, or catching up after a
	// restart, while the canary waited to be consumed; or, for a
	// publish-side segment, it was down while the relay may have waited
	// on brokers it could not see (an outage within its downtime).
	ReasonProberDown = "prober_down"
	// ReasonProberLag: the prober's readers were behind because of a flood
	// of messages that are not its canaries.
	ReasonProberLag = "prober_lag"
	// ReasonUnknown: the evidence could not be read because the prober's own
	// dependency (its database, its Kafka) was down.
	ReasonUnknown = "unknown"
	// ReasonInvalidStamp: a stamp far outside [commit, consume].
	ReasonInvalidStamp = "invalid_stamp"
	// ReasonMissingStamp: the relay did not provide a configured stamp.
	ReasonMissingStamp = "missing_stamp"
	// ReasonStampOrder: a stamp taken after its event left the segment's
	// duration undecidable against its budget.
	ReasonStampOrder = "stamp_order"
	// ReasonClockSkew: stamps from clocks that disagree.
	ReasonClockSkew = "clock_skew"
	// ReasonLost: the canary never arrived and the segment could not be
	// placed (its verdict went to the segment the canary was proven in).
	ReasonLost = "lost"
	// ReasonBrokersUnreachable: a publish-side segment over its budget
	// overlapped a time the prober could not reach the brokers: the relay
	// was waiting on them (a polling relay re-reads a row after a failed
	// send), which is the brokers' outage, not the relay's lag.
	ReasonBrokersUnreachable = "brokers_unreachable"
)

// Why a stamp is invalid.
const (
	InvalidBeforeCommit = "before_commit"
	InvalidAfterConsume = "after_consume"
	// InvalidUnparseable: the stamp's header is there but is no time.
	InvalidUnparseable = "unparseable"
)

// Reasons lists every unjudged reason, in the order the docs show them.
func Reasons() []string {
	return []string{ReasonProberDown, ReasonProberLag, ReasonUnknown, ReasonInvalidStamp,
		ReasonMissingStamp, ReasonStampOrder, ReasonClockSkew, ReasonLost, ReasonBrokersUnreachable}
}

// Verdict is what was decided about one segment of one canary; each field
// is set once.
type Verdict struct {
	// Outcome is Good, Bad or Unjudged once decided, "" before.
	Outcome string    `json:"outcome,omitempty"`
	Reason  string    `json:"reason,omitempty"` // why Unjudged
	At      time.Time `json:"at,omitzero"`      // when it was decided
	// Observed is set once the duration went into the latency histogram
	// (or was counted as skew or stamp order instead).
	Observed bool `json:"observed,omitempty"`
}

// Lookup is the state of looking up a canary's lookup stamps.
type Lookup struct {
	// Pending: a lookup stamp is still wanted.
	Pending bool      `json:"pending,omitempty"`
	Due     time.Time `json:"due,omitzero"` // not asked for before
	// Retries: answers without the stamp since the canary arrived (or
	// since it was sent), which space the next lookup further.
	Retries int `json:"retries,omitempty"`
	// Attempts that got an answer, and whether the last one could not be
	// made because the prober's own dependency was down.
	Attempts    int  `json:"attempts,omitempty"`
	Unavailable bool `json:"unavailable,omitempty"`
}

// Canary is one canary as the judge knows it. It is what the shell
// persists: everything needed to resume after kill -9 without losing or
// recounting a verdict.
type Canary struct {
	ID    string `json:"id"`
	Seq   uint64 `json:"seq"`
	Key   string `json:"key"`
	RowID string `json:"row_id,omitempty"`

	InsertStarted time.Time `json:"insert_started"`
	CommitSent    time.Time `json:"commit_sent"`
	Committed     time.Time `json:"committed"`

	// Stamps holds the middle stamps learnt so far, on the prober clock,
	// and StampError the error bound of each that has one (published_at:
	// the database clock offset's).
	Stamps     ByName[time.Time]     `json:"stamps,omitempty"`
	StampError ByName[time.Duration] `json:"stamp_error,omitempty"`
	// Invalid names stamps that were received but implausible, and why.
	Invalid ByName[string] `json:"invalid,omitempty"`

	Arrived   bool      `json:"arrived,omitempty"`
	Consumed  time.Time `json:"consumed,omitzero"`
	Partition int       `json:"partition,omitempty"`
	Offset    int64     `json:"offset,omitempty"`
	// Tainted names the prober's own trouble while the canary waited to be
	// consumed (prober_down, prober_lag), "" when there was none.
	Tainted string `json:"tainted,omitempty"`

	Lost       bool `json:"lost,omitempty"`
	OutOfOrder bool `json:"out_of_order,omitempty"`
	// Final: nothing more will be decided (arrived and judged, or lost).
	Final   bool      `json:"final,omitempty"`
	FinalAt time.Time `json:"final_at,omitzero"`

	// Verdicts holds a verdict for each segment the judge has looked at,
	// by segment name.
	Verdicts ByName[Verdict] `json:"verdicts,omitempty"`
	Lookup   Lookup          `json:"lookup,omitzero"`
}

// verdict returns the segment's verdict to be set, adding an empty one
// (with room for every segment of the plan, segments, at the first). The
// pointer is good until the next verdict added.
func (c *Canary) verdict(segment string, segments int) *Verdict {
	return c.Verdicts.add(segment, segments)
}

// stampError is the error bound of a stamp, 0 when it has none.
func (c *Canary) stampError(stamp string) time.Duration {
	d, _ := c.StampError.Get(stamp)
	return d
}

// decided reports whether a segment's outcome is set.
func (c *Canary) decided(segment string) bool {
	v := c.Verdicts.find(segment)
	return v != nil && v.Outcome != ""
}

// Interval is a span of time: a downtime of the prober, a streak of
// samples that could not reach the brokers.
type Interval struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// State is everything the judge keeps across restarts.
type State struct {
	Canaries map[string]*Canary `json:"canaries"`
	// LastSeq is the highest sequence number that arrived, per message key.
	LastSeq map[string]uint64 `json:"last_seq_by_key,omitempty"`
	// Next is the next offset to process, per partition of the canary
	// topic. Partitions are only ever added (the state store counts on it).
	Next map[int]int64 `json:"next_offset_by_partition,omitempty"`
	// Downtimes are the spans the prober was not running (from the last
	// state write of one process to the start of the next), newest last.
	Downtimes []Interval `json:"downtimes,omitempty"`
	// Unreachable are the streaks of position samples that could not
	// reach the brokers, oldest first, as long as an open canary can
	// need them: kept across restarts, so that a canary judged after one
	// is not charged to the relay for an outage the last process saw.
	Unreachable []Interval `json:"brokers_unreachable,omitempty"`
	// AliveAt is when the state was last written: after a crash, the
	// prober was down from at most then.
	AliveAt time.Time `json:"alive_at,omitzero"`
	// The last canary sent, received, and good end to end, for the
	// gauges the stall alert reads.
	LastSent     time.Time `json:"last_sent,omitzero"`
	LastReceived time.Time `json:"last_received,omitzero"`
	LastSuccess  time.Time `json:"last_success,omitzero"`
}
