package prober

import (
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// stampInsert names the moment before BEGIN, the start of insert_to_commit.
// It is not one of the pipeline's stamps: the prober's own transaction is
// measured at Sent, before the pipeline is involved.
const stampInsert = "insert"

// segment is one measured interval of a canary between two named stamps.
type segment struct {
	name     string
	from, to string
	budget   time.Duration
	budgeted bool
}

// segmentPlan is a pipeline's segments, derived once from its stamp order,
// so that an extra stamp in the configuration splits a segment without any
// new code.
type segmentPlan struct {
	stamps   []string  // StampOrder: commit, extra stamps..., publish, consume
	insert   segment   // insert_to_commit, resolved at Sent
	chain    []segment // consecutive stamp pairs, in pipeline order
	endToEnd segment   // commit to consume, both on the prober clock
}

func planSegments(p *config.Pipeline) segmentPlan {
	mk := func(name, from, to string) segment {
		b, ok := p.Budget(name)
		return segment{name: name, from: from, to: to, budget: b, budgeted: ok}
	}
	stamps := p.StampOrder()
	plan := segmentPlan{
		stamps:   stamps,
		insert:   mk(config.SegmentInsertToCommit, stampInsert, config.StampCommit),
		endToEnd: mk(config.SegmentEndToEnd, config.StampCommit, config.StampConsume),
	}
	for i := 1; i < len(stamps); i++ {
		plan.chain = append(plan.chain, mk(config.SegmentName(stamps[i-1], stamps[i]), stamps[i-1], stamps[i]))
	}
	return plan
}

// pipelineSegments is every segment the tracker resolves after Sent: the
// chain, then end to end.
func (p *segmentPlan) pipelineSegments() []segment {
	return append(p.chain[:len(p.chain):len(p.chain)], p.endToEnd)
}

// all is every segment in report order: insert_to_commit first.
func (p *segmentPlan) all() []segment {
	return append([]segment{p.insert}, p.pipelineSegments()...)
}

// middleStamps are the stamps the pipeline, not the prober, provides.
func (p *segmentPlan) middleStamps() []string {
	return p.stamps[1 : len(p.stamps)-1]
}

func (p *segmentPlan) isMiddleStamp(name string) bool {
	for _, s := range p.middleStamps() {
		if s == name {
			return true
		}
	}
	return false
}

// stuck returns the chain segment a canary that has not arrived is waiting
// in: the one that starts at the latest stamp it is known to have passed.
// Stamps are taken as the furthest proof of progress: a polling pipeline
// whose published_at was read back has passed every earlier stamp too, even
// those (like a relay read header) that only the message carries.
func (p *segmentPlan) stuck(known map[string]time.Time) segment {
	idx := 0
	for i, s := range p.stamps[:len(p.stamps)-1] {
		if _, ok := known[s]; ok {
			idx = i
		}
	}
	return p.chain[idx]
}
