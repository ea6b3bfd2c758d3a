package retry

import (
	"testing"
	"time"
)

func TestBackoffDoublesWithJitterUpToItsCeiling(t *testing.T) {
	b := Backoff(100*time.Millisecond, time.Second)
	wantMid := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	spread := false
	for round := 0; round < 50; round++ {
		b.Reset()
		for i, mid := range wantMid {
			mid *= time.Millisecond
			got := b.NextBackOff()
			if got < mid/2 || got > mid*3/2 {
				t.Fatalf("wait %d = %s, want within ±50%% of %s", i+1, got, mid)
			}
			if got != mid {
				spread = true
			}
		}
	}
	if !spread {
		t.Error("every wait was exactly the nominal one: no jitter")
	}
}
