package judge

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTick is one sweep of a judge that remembers many final
// canaries and has a few in flight, as a pipeline does between canaries:
// lost_after 5m at one canary a second remembers 600 (Forget is twice
// lost_after), 50m or ten a second 6000. Nothing is due, so the figure is
// what a sweep costs for the canaries it has no business with.
func BenchmarkTick(b *testing.B) {
	for _, remembered := range []int{600, 6000} {
		b.Run(fmt.Sprintf("remembered=%d", remembered), func(b *testing.B) {
			h := newJH(b, "cdc")
			h.cfg.Forget = 24 * time.Hour
			h.j = New(h.cfg, nil, t0)
			const inFlight = 3
			for i := range remembered + inFlight {
				at := time.Duration(i) * time.Second
				id := fmt.Sprintf("c%d", i)
				h.send(id, at, ms(1))
				if i < remembered {
					h.arrive(id, at+ms(100), map[string]time.Duration{StampPublish: at + ms(50)})
				}
			}
			// Just after the last canary, before any deadline of those in flight.
			now := time.Duration(remembered+inFlight-1)*time.Second + ms(200)
			h.tick(now)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				h.j.Tick(t0.Add(now))
			}
		})
	}
}
