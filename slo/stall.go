package slo

import (
	"math/big"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// StallThreshold is how long a pipeline may go without delivering a canary
// before it counts as stalled: the end-to-end budget plus missed canary
// intervals.
//
// A healthy pipeline delivers a canary at least every EndToEndBudget +
// CanaryInterval (one canary may be a whole budget late right after one
// that was on time), so no healthy gap reaches the threshold for missed >=
// 1. A gap longer than the threshold proves that at least missed canaries
// in a row are past their end-to-end deadline and none arrived. A pause
// of P in the relay makes a gap of at most P + CanaryInterval (the last
// canary before it may have arrived an interval before it began), so a
// pause shorter than EndToEndBudget + (missed-1) x CanaryInterval never
// reaches the threshold.
func (p Pipeline) StallThreshold(missed int) time.Duration {
	return p.EndToEndBudget + time.Duration(missed)*p.CanaryInterval
}

// StallTolerance is the longest relay pause StallThreshold(missed)
// ignores: EndToEndBudget + (missed-1) x CanaryInterval.
func (p Pipeline) StallTolerance(missed int) time.Duration {
	return p.StallThreshold(missed) - p.CanaryInterval
}

// StallBlameSegments are the segments a stalled canary can be stuck in,
// in pipeline order: the budgeted segments after commit, not end_to_end
// (which every stalled canary is over) and not insert_to_commit (the
// prober's own transaction, over before the canary exists).
func (p Pipeline) StallBlameSegments() []string {
	budgeted := map[string]bool{}
	for _, s := range p.SLOs {
		budgeted[s.Segment] = true
	}
	var out []string
	for _, seg := range p.Segments {
		if budgeted[seg] && seg != config.SegmentEndToEnd && seg != config.SegmentInsertToCommit {
			out = append(out, seg)
		}
	}
	return out
}

// MinBadEvents is how many bad canaries the long window must hold for
// the pair to fire: Threshold x Long / interval, as many as a window full
// of canaries (Long / interval of them) needs to cross the threshold.
//
// The rules judge the long window's ratio as bad / max(events, expected),
// expected = Long / interval: the ratio itself once the window holds a
// full window's canaries, bad / expected while it holds fewer (a fresh
// Prometheus, a prober that just started). "Ratio over the threshold and
// more than MinBadEvents bad" is the same condition: below expected
// events, more than Threshold x expected bad implies the ratio; at or
// above it, the ratio implies the count. So a pair fires on a young
// window only when it would have fired had the missing part been all
// good, and a full stall pages after the same number of bad canaries
// (the Workbook's detection time) whatever the window holds.
//
// Because Threshold x Long is budget_percent/100 x (1 - objective) x the
// SLO window for every pair, MinBadEvents is budget_percent/100 of the
// error budget counted in canaries: 2% and 5% for the pages, 10% for the
// tickets. That order is the Workbook's: after a full stall the pages
// fire first and the tickets later, from the first minute of data.
func (a BurnAlert) MinBadEvents(s SLO, interval time.Duration) *big.Rat {
	n := new(big.Rat).SetFrac64(int64(a.Long), int64(interval))
	return n.Mul(n, a.Threshold(s))
}

// MinBadEventsExpr is MinBadEvents as PromQL that reads as its
// derivation: "(14.4 * (1 - 0.999)) * 360".
func (a BurnAlert) MinBadEventsExpr(s SLO, interval time.Duration) string {
	return a.ThresholdExpr(s) + " * " + FormatRat(new(big.Rat).SetFrac64(int64(a.Long), int64(interval)))
}
