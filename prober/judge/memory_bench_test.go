package judge

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkRememberedCanaryHeap reports the live heap each remembered
// canary costs: the prober remembers every canary for lost_after +
// forget, 6000 of them at ten pipelines sending one a second. Each canary
// is taken through a polling pipeline's life (Sent, arrival with a read
// header, the published_at lookup with its error bound, every verdict),
// with an id as long as the prober's UUIDs.
func BenchmarkRememberedCanaryHeap(b *testing.B) {
	const remembered = 6000
	cfg := Config{Plan: planOf("schemaA"), SkewTolerance: ms(50), MaxSkew: time.Minute, LostAfter: time.Minute,
		Forget: 24 * time.Hour, ArrivedLookupWindow: 10 * time.Second, FloodSkips: 100}
	var perCanary float64
	for b.Loop() {
		before := liveHeap()
		j := New(cfg, nil, t0)
		for i := range remembered {
			at := t0.Add(time.Duration(i) * time.Second)
			id := fmt.Sprintf("019ad2c4-0000-7000-8001-%012d", i)
			j.Sent(Sent{ID: id, Key: "canary-key", RowID: fmt.Sprint(1000000 + i), Seq: uint64(i + 1),
				InsertStarted: at.Add(-ms(5)), CommitSent: at, Committed: at.Add(ms(1))})
			j.Arrived(Arrival{CanaryID: id, Key: "canary-key", Seq: uint64(i + 1), Offset: int64(i),
				Consumed: at.Add(ms(100)), Stamps: map[string]time.Time{"read": at.Add(ms(20))}})
			j.StampFound(id, map[string]time.Time{StampPublish: at.Add(ms(50))}, ms(1), at.Add(ms(700)))
			j.Tick(at.Add(ms(800)))
		}
		if c := j.Canary(fmt.Sprintf("019ad2c4-0000-7000-8001-%012d", remembered-1)); c == nil || !c.Final {
			b.Fatalf("the last canary is %+v, want it final", c)
		}
		perCanary = float64(liveHeap()-before) / remembered
		runtime.KeepAlive(j)
	}
	b.ReportMetric(perCanary, "B/canary")
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
