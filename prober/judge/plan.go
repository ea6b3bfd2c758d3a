package judge

import "time"

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
