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

// MinBadEvents is how many bad events the long window must hold for the
// alert to fire: as many as a window full of canaries (Long / interval of
// them) needs to cross the threshold. On a Prometheus that holds less
// than the long window, the ratio alone is judged on fewer events and one
// late canary could cross it; requiring this count means an alert fires
// only when it would have fired had the missing part of the window been
// all good. On a full window the ratio condition implies it: interval is
// the longest gap between canaries, so the window holds at least
// Long / interval events.
func (a BurnAlert) MinBadEvents(s SLO, interval time.Duration) *big.Rat {
	n := new(big.Rat).SetFrac64(int64(a.Long), int64(interval))
	return n.Mul(n, a.Threshold(s))
}

// MinBadEventsExpr is MinBadEvents as PromQL that reads as its
// derivation: "(14.4 * (1 - 0.999)) * 360".
func (a BurnAlert) MinBadEventsExpr(s SLO, interval time.Duration) string {
	return a.ThresholdExpr(s) + " * " + FormatRat(new(big.Rat).SetFrac64(int64(a.Long), int64(interval)))
}
