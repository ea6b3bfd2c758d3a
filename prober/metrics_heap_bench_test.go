package prober

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// BenchmarkMetricsHeapPerPipeline reports the live heap the metrics of one
// pipeline cost: every series created at zero, and every latency histogram
// given observations from 1 ms to 1 s 5 % apart (native buckets are made
// as observed). At 300 pipelines this is most of the prober's heap that
// does not grow with the canaries remembered.
func BenchmarkMetricsHeapPerPipeline(b *testing.B) {
	const pipelines = 300
	var perPipeline float64
	for b.Loop() {
		before := liveHeap()
		m := observedMetrics(b, prometheus.NewRegistry(), pipelines)
		perPipeline = float64(liveHeap()-before) / pipelines
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perPipeline, "B/pipeline")
}

// observedMetrics registers the metrics of n pipelines in reg, every
// latency histogram given observations from 1 ms to 1 s 5 % apart.
func observedMetrics(b testing.TB, reg prometheus.Registerer, n int) *Metrics {
	ps := make([]config.Pipeline, n)
	for i := range ps {
		ps[i] = testPipeline()
		ps[i].Name = fmt.Sprintf("p%03d", i)
	}
	m, err := NewMetrics(reg, ps)
	if err != nil {
		b.Fatal(err)
	}
	for i := range ps {
		for _, s := range ps[i].Segments() {
			for d := time.Millisecond; d < time.Second; d = d * 21 / 20 {
				m.ObserveLatency(ps[i].Name, s, d)
			}
		}
	}
	return m
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
