package judge

import (
	"fmt"
	"time"
)

// EffectKind says what an Effect asks the shell to do.
type EffectKind int

// Effect kinds. The shell persists the state before applying any of them,
// so a crash can lose an effect (under-count) but never repeat one.
const (
	// Verdict: a segment's outcome (Good or Bad: an SLI event; Unjudged:
	// counted by Reason).
	EffectVerdict EffectKind = iota + 1
	// Observe: a segment's measured Duration, for the latency histogram.
	EffectObserve
	// Skew: a segment measured negative beyond tolerance by stamps from
	// clocks that disagree (Duration, negative).
	EffectSkew
	// StampOrder: a segment measured negative because a stamp was taken
	// after its event (Duration, negative): not skew.
	EffectStampOrder
	// StampInvalid: a stamp (Stamp) outside the plausible range (Reason).
	EffectStampInvalid
	// StampMissing: an arrived canary without a configured stamp (Stamp),
	// which the relay did not provide.
	EffectStampMissing
	// Sent, Received, Late, Lost, Duplicate, OutOfOrder: the canary
	// lifecycle counters (Received and Late at the canary's first arrival).
	EffectSent
	EffectReceived
	EffectLate
	EffectLost
	EffectDuplicate
	EffectOutOfOrder
	// UnknownCanary: a canary of this instance that the judge has no record
	// of (skipped, not an SLI event).
	EffectUnknownCanary
	// Lookup: look the canary's lookup stamps up and report back with
	// StampFound, StampAbsent or StampUnavailable. Asked for by Tick
	// only, once due (an arrived canary: LookupSettle after its arrival;
	// a retry: spaced by the answers without a stamp), so the shell can
	// read the stamps of every canary of one Tick in one query.
	EffectLookup
	// Final: nothing more will be decided about the canary.
	EffectFinal
)

var effectNames = map[EffectKind]string{
	EffectVerdict: "verdict", EffectObserve: "observe", EffectSkew: "skew", EffectStampOrder: "stamp_order",
	EffectStampInvalid: "stamp_invalid", EffectStampMissing: "stamp_missing", EffectSent: "sent",
	EffectReceived: "received", EffectLate: "late", EffectLost: "lost", EffectDuplicate: "duplicate",
	EffectOutOfOrder: "out_of_order", EffectUnknownCanary: "unknown_canary", EffectLookup: "lookup", EffectFinal: "final",
}

func (k EffectKind) String() string {
	if n, ok := effectNames[k]; ok {
		return n
	}
	return fmt.Sprintf("EffectKind(%d)", int(k))
}

// Effect is one thing the shell must do after an event.
type Effect struct {
	Kind     EffectKind
	Canary   string
	Segment  string
	Outcome  string // EffectVerdict: Good, Bad or Unjudged
	Reason   string
	Stamp    string
	Duration time.Duration
	At       time.Time
}

func (e Effect) String() string {
	s := e.Kind.String() + " " + e.Canary
	if e.Segment != "" {
		s += " " + e.Segment
	}
	if e.Outcome != "" {
		s += " " + e.Outcome
	}
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Stamp != "" {
		s += " stamp " + e.Stamp
	}
	if e.Kind == EffectObserve || e.Kind == EffectSkew || e.Kind == EffectStampOrder {
		s += " " + e.Duration.String()
	}
	return s
}
