package judge

import (
	"slices"
	"time"
)

// Stamp names the judge knows by role; the relay's extra stamps are named
// by the configuration and sit between commit and publish.
const (
	StampCommit  = "commit"
	StampPublish = "publish"
	StampConsume = "consume"
)

// Segment is one measured interval of a canary between two stamps.
type Segment struct {
	Name     string
	From, To string
	Budget   time.Duration
	Budgeted bool
}

// Plan is a pipeline's stamps and segments, derived once from its
// configuration, so an extra stamp splits a segment without new code.
type Plan struct {
	// Stamps in pipeline order: commit, extra stamps..., publish, consume.
	Stamps []string
	// Insert is insert_to_commit: the prober's own transaction, judged at
	// Sent from the insert's start to COMMIT returned.
	Insert Segment
	// Chain is the consecutive stamp pairs, in pipeline order.
	Chain []Segment
	// EndToEnd is commit to consume.
	EndToEnd Segment
	// AfterEvent marks stamps written after the event they name
	// (published_at: after the broker's ack).
	AfterEvent map[string]bool
	// Lookup marks stamps learnt by asking (published_at read back from the
	// row) rather than carried by the message.
	Lookup map[string]bool
}

// NewPlan builds a plan from the stamp order and the budgets; budget(name)
// returns a segment's budget and whether it has one.
func NewPlan(stamps []string, budget func(segment string) (time.Duration, bool), insertSegment, endToEnd string,
	afterEvent, lookup []string) Plan {
	mk := func(name, from, to string) Segment {
		b, ok := budget(name)
		return Segment{Name: name, From: from, To: to, Budget: b, Budgeted: ok}
	}
	p := Plan{
		Stamps:     append([]string(nil), stamps...),
		Insert:     mk(insertSegment, "insert", StampCommit),
		EndToEnd:   mk(endToEnd, StampCommit, StampConsume),
		AfterEvent: map[string]bool{},
		Lookup:     map[string]bool{},
	}
	for i := 1; i < len(stamps); i++ {
		p.Chain = append(p.Chain, mk(stamps[i-1]+"_to_"+stamps[i], stamps[i-1], stamps[i]))
	}
	for _, s := range afterEvent {
		p.AfterEvent[s] = true
	}
	for _, s := range lookup {
		p.Lookup[s] = true
	}
	return p
}

// Segments is every segment judged after Sent: the chain, then end to end.
func (p *Plan) Segments() []Segment {
	return append(append([]Segment(nil), p.Chain...), p.EndToEnd)
}

// eachSegment yields what Segments returns without building a slice
// (the judge walks them at every arrival).
func (p *Plan) eachSegment(yield func(Segment) bool) {
	for _, s := range p.Chain {
		if !yield(s) {
			return
		}
	}
	yield(p.EndToEnd)
}

// All is every segment in report order, insert_to_commit first.
func (p *Plan) All() []Segment {
	return append([]Segment{p.Insert}, p.Segments()...)
}

// Middle is the stamps the pipeline, not the prober, provides.
func (p *Plan) Middle() []string { return p.Stamps[1 : len(p.Stamps)-1] }

func (p *Plan) index(stamp string) int {
	for i, s := range p.Stamps {
		if s == stamp {
			return i
		}
	}
	return -1
}

// segmentTo is the chain segment that ends at stamp index i (i >= 1).
func (p *Plan) segmentTo(i int) Segment { return p.Chain[i-1] }

// UnjudgedReasons lists the reasons a segment of the plan can be left
// unjudged for, in the order of Reasons(); nil for a segment that is
// always judged (insert_to_commit: its two ends are the prober's, at
// Sent). The prober creates its unjudged counters at zero for these
// alone, so it need not export series that can never count.
//
// End to end is always measured (both ends are the prober's clock): only
// the prober's own trouble or a loss leaves it unjudged. A chain segment
// has a stamp of the pipeline at one end at least, so its stamps may be
// invalid, missing, late or skewed, and a lost canary may leave it unknown
// or lost; the prober's trouble excuses only the segment that ends at
// consume (the wait in the topic), the brokers' outage only one that ends
// at or before publish (the relay's wait on them), and the prober's
// downtime both (it cannot tell whether the brokers were out meanwhile).
func (p *Plan) UnjudgedReasons(segment string) []string {
	if segment == p.EndToEnd.Name {
		return []string{ReasonProberDown, ReasonProberLag, ReasonLost}
	}
	i := slices.IndexFunc(p.Chain, func(s Segment) bool { return s.Name == segment })
	if i < 0 {
		return nil
	}
	out := make([]string, 0, len(Reasons()))
	for _, r := range Reasons() {
		switch r {
		case ReasonProberLag:
			if p.Chain[i].To != StampConsume {
				continue
			}
		case ReasonProberDown:
			if p.Chain[i].To != StampConsume && p.index(p.Chain[i].To) > p.index(StampPublish) {
				continue
			}
		case ReasonBrokersUnreachable:
			if p.index(p.Chain[i].To) > p.index(StampPublish) {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// Skewable reports whether a segment can be measured negative by clocks
// that disagree or by a stamp taken after its event (EffectSkew,
// EffectStampOrder): only chain segments, which have a stamp of the
// pipeline at one end; end to end and insert_to_commit have the prober's
// at both.
func (p *Plan) Skewable(segment string) bool {
	return slices.ContainsFunc(p.Chain, func(s Segment) bool { return s.Name == segment })
}
