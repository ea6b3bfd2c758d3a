package compactvec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// exposition renders what a registry exposes in the text format.
func exposition(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// The same operations on client_golang's vectors and on these expose the
// same text: the exchange is invisible to Prometheus.
func TestExposedAsClientGolangExposesIt(t *testing.T) {
	labels := []string{"pipeline", "segment"}
	theirs := prometheus.NewPedanticRegistry()
	tc := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_events_total", Help: "Events."}, labels)
	tg := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x_level", Help: "Level."}, labels)
	theirs.MustRegister(tc, tg)
	ours := prometheus.NewPedanticRegistry()
	oc := NewCounterVec("x_events_total", "Events.", labels)
	og := NewGaugeVec("x_level", "Level.", labels)
	ours.MustRegister(oc, og)

	for _, p := range []string{"orders", "payments", "ünïcode"} {
		for _, s := range []string{"end_to_end", "commit_to_publish"} {
			tc.WithLabelValues(p, s)
			oc.WithLabelValues(p, s)
		}
	}
	tc.WithLabelValues("orders", "end_to_end").Inc()
	oc.WithLabelValues("orders", "end_to_end").Inc()
	tc.WithLabelValues("payments", "end_to_end").Add(2.5)
	oc.WithLabelValues("payments", "end_to_end").Add(2.5)
	tg.WithLabelValues("orders", "end_to_end").Set(7)
	og.WithLabelValues("orders", "end_to_end").Set(7)
	tg.WithLabelValues("orders", "end_to_end").Sub(0.5)
	og.WithLabelValues("orders", "end_to_end").Sub(0.5)
	tg.WithLabelValues("payments", "x").Dec()
	og.WithLabelValues("payments", "x").Dec()

	want, got := exposition(t, theirs), exposition(t, ours)
	if got != want {
		t.Errorf("exposition differs\n--- client_golang:\n%s\n--- compactvec:\n%s", want, got)
	}
	if !strings.Contains(got, `x_events_total{pipeline="payments",segment="end_to_end"} 2.5`) {
		t.Errorf("the added value is missing:\n%s", got)
	}
	if problems, err := testutil.GatherAndLint(ours); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if oc.Len() != 6 || og.Len() != 2 {
		t.Errorf("series: %d counters, %d gauges; want 6 and 2", oc.Len(), og.Len())
	}
}

// A counter series keeps the time it was created, as client_golang's do,
// for Prometheus' created-timestamp ingestion.
func TestCounterCreatedTimestamp(t *testing.T) {
	v := NewCounterVec("x_total", "X.", []string{"a"})
	at := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	v.now = func() time.Time { return at }
	c := v.WithLabelValues("one")
	c.Inc()
	if got := testutil.ToFloat64(c); got != 1 {
		t.Errorf("value %v, want 1", got)
	}
	mfs, err := func() (g prometheus.Gatherer, err error) {
		r := prometheus.NewRegistry()
		return r, r.Register(v)
	}()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := mfs.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ct := fams[0].GetMetric()[0].GetCounter().GetCreatedTimestamp()
	if ct == nil || !ct.AsTime().Equal(at) {
		t.Errorf("created timestamp %v, want %v", ct, at)
	}
}

func TestWrongLabelValuesPanic(t *testing.T) {
	v := NewCounterVec("x_total", "X.", []string{"a", "b"})
	for name, lvs := range map[string][]string{"too few": {"one"}, "too many": {"one", "two", "three"}, "invalid UTF-8": {"one", "\xff"}} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("WithLabelValues(%q) did not panic", lvs)
				}
			}()
			v.WithLabelValues(lvs...)
		})
	}
	if v.Len() != 0 {
		t.Errorf("%d series after only bad calls, want 0", v.Len())
	}
}

func TestCounterRefusesToDecrease(t *testing.T) {
	c := NewCounterVec("x_total", "X.", []string{"a"}).WithLabelValues("one")
	defer func() {
		if recover() == nil {
			t.Error("Add(-1) did not panic")
		}
	}()
	c.Add(-1)
}

// Concurrent increments are not lost, and concurrent creation of one
// series makes one (run with -race).
func TestConcurrentIncrements(t *testing.T) {
	v := NewCounterVec("x_total", "X.", []string{"a"})
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				v.WithLabelValues("shared").Inc()
			}
		})
	}
	wg.Wait()
	if got := testutil.ToFloat64(v.WithLabelValues("shared")); got != goroutines*each {
		t.Errorf("counted %v, want %d", got, goroutines*each)
	}
	if v.Len() != 1 {
		t.Errorf("%d series, want 1", v.Len())
	}
}

// Finding an existing series allocates nothing: it is on the path of
// every canary.
func TestLookupAllocatesNothing(t *testing.T) {
	v := NewCounterVec("x_total", "X.", []string{"pipeline", "segment", "reason"})
	v.WithLabelValues("orders", "end_to_end", "prober_down")
	if n := testing.AllocsPerRun(100, func() { v.WithLabelValues("orders", "end_to_end", "prober_down").Inc() }); n != 0 {
		t.Errorf("%v allocations per lookup and increment, want 0", n)
	}
}

func TestDeleteLabelValues(t *testing.T) {
	v := NewGaugeVec("x", "X.", []string{"pipeline", "slot"})
	v.WithLabelValues("orders", "a").Set(1)
	v.WithLabelValues("orders", "b").Set(2)
	if !v.DeleteLabelValues("orders", "a") {
		t.Error("deleting an existing series reported none")
	}
	if v.DeleteLabelValues("orders", "a") || v.DeleteLabelValues("orders") {
		t.Error("deleting a missing series reported one")
	}
	if v.Len() != 1 || testutil.ToFloat64(v.WithLabelValues("orders", "b")) != 2 {
		t.Errorf("after the delete: %d series, b = %v; want 1 and 2", v.Len(), testutil.ToFloat64(v.WithLabelValues("orders", "b")))
	}
}

// collected is the label pairs of what c collects, in the order it
// collects them, as text.
func collected(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var out []string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(d.GetLabel()))
	}
	return out
}

// A family is collected in the order a registry sorts it to (label values,
// labels in name order, not in declared order), after creations in any
// order and deletions, so the registry's sort has nothing to do.
func TestCollectedInTheRegistrysOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counters := NewCounterVec("x_total", "X.", []string{"segment", "pipeline"})
	histograms, err := NewHistogramVec(latencyOpts(), []string{"segment"})
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		p, s := fmt.Sprintf("p%d", rng.IntN(40)), fmt.Sprintf("s%d", rng.IntN(7))
		if rng.IntN(4) == 0 {
			counters.DeleteLabelValues(s, p)
			continue
		}
		counters.WithLabelValues(s, p).Inc()
		histograms.WithLabelValues(s).Observe(rng.Float64())
	}
	for _, c := range []prometheus.Collector{counters, histograms} {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sorted []string
		for _, m := range mfs[0].GetMetric() {
			sorted = append(sorted, fmt.Sprint(m.GetLabel()))
		}
		if got := collected(t, c); !slices.Equal(got, sorted) {
			t.Errorf("collected %d series in another order than the registry's %d:\n%v\n%v", len(got), len(sorted), got, sorted)
		}
	}
	if n := counters.Len(); n < 100 {
		t.Errorf("only %d counter series: the test orders too few", n)
	}
}
