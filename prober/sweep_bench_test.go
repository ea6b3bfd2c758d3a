package prober

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// BenchmarkSweepRound is one round of the service's sweep over 300
// pipelines at one canary every 10s with lost_after 5m: each tracker
// remembers 60 final canaries (2 x lost_after) and has one in flight.
// State is kept in memory, so the figure is the CPU a round costs without
// the writes of a batch that falls due; at four rounds a second it must
// stay far below the 250ms tick for deadlines to be judged on time.
func BenchmarkSweepRound(b *testing.B) {
	const pipelines, remembered = 300, 60
	ps := make([]config.Pipeline, pipelines)
	for i := range ps {
		ps[i] = plainPipeline()
		ps[i].Name = fmt.Sprintf("p%03d", i)
		ps[i].Canary.LostAfter = config.Duration(5 * time.Minute)
	}
	m, err := NewMetrics(prometheus.NewRegistry(), ps)
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	clock := func() time.Time { return now }
	trackers := make([]*Tracker, pipelines)
	for i := range ps {
		tr, err := NewTracker(TrackerOptions{Pipeline: &ps[i], Instance: "bench", Metrics: m, Now: clock})
		if err != nil {
			b.Fatal(err)
		}
		for k := range remembered + 1 {
			at := t0.Add(time.Duration(k) * 10 * time.Second)
			id := fmt.Sprintf("c%d", k)
			if err := tr.Sent(Canary{ID: id, Seq: uint64(k + 1), Key: "k", InsertStarted: at, CommitSent: at, Committed: at}); err != nil {
				b.Fatal(err)
			}
			if k < remembered {
				token, _ := tr.BeginArrival(time.Time{})
				tr.Arrived(token, Arrival{CanaryID: id, Seq: uint64(k + 1), Key: "k", Offset: int64(k), Consumed: at.Add(50 * time.Millisecond),
					Stamps: map[string]time.Time{config.StampPublish: at.Add(20 * time.Millisecond)}})
			}
		}
		trackers[i] = tr
	}
	// Just after the last canary was sent, before its deadline.
	now = t0.Add(time.Duration(remembered)*10*time.Second + 100*time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		for _, tr := range trackers {
			tr.Sweep()
		}
	}
}
