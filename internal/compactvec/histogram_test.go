package compactvec

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// latencyOpts are the prober's latency histogram options for a pipeline
// with a 2 s budget.
func latencyOpts() HistogramOpts {
	return HistogramOpts{
		Name: "x_latency_seconds", Help: "Latency.", ConstLabels: prometheus.Labels{"pipeline": "orders"},
		Buckets:            []float64{0.2, 0.5, 1, 1.5, 2, 3, 4, 10, 20},
		NativeBucketFactor: 1.1, NativeMaxBuckets: 160, NativeMinResetDuration: time.Hour,
	}
}

// twin is the same family in client_golang's HistogramVec.
func twin(o HistogramOpts) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: o.Buckets,
		NativeHistogramBucketFactor: o.NativeBucketFactor, NativeHistogramMaxBucketNumber: uint32(o.NativeMaxBuckets),
		NativeHistogramMinResetDuration: o.NativeMinResetDuration,
	}, []string{"segment"})
}

// registeredTwins registers the family of o in client_golang's
// HistogramVec and in ours, each in a pedantic registry of its own.
func registeredTwins(t *testing.T, o HistogramOpts) (theirs, ours *prometheus.Registry, tv *prometheus.HistogramVec, ov *HistogramVec) {
	t.Helper()
	theirs, ours = prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	tv = twin(o)
	ov, err := NewHistogramVec(o, []string{"segment"})
	if err != nil {
		t.Fatal(err)
	}
	theirs.MustRegister(tv)
	ours.MustRegister(ov)
	return theirs, ours, tv, ov
}

// gather returns what reg exposes, created timestamps cleared (the two
// families are created at different instants).
func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			m.GetHistogram().CreatedTimestamp = nil
		}
	}
	return mfs
}

// observations are latencies as a pipeline sees them, and the values a
// bucket search gets wrong first: 0, classic and native bounds exactly
// and a step either side, tiny and huge values, negative ones (a
// histogram never gets them from the prober, but must bucket them right).
func observations(rng *rand.Rand, n int) []float64 {
	edges := []float64{0, 0.2, 0.5, 1, 1.5, 2, 20, 0.25, 0.125, math.Exp2(0.125), math.Exp2(-0.375), 1e-300, 1e300, -0.5, -3, math.SmallestNonzeroFloat64}
	var out []float64
	for _, e := range edges {
		out = append(out, e, math.Nextafter(e, math.Inf(1)), math.Nextafter(e, math.Inf(-1)))
	}
	for range n {
		out = append(out, math.Exp(rng.NormFloat64()*1.5-3)) // around 50 ms, a wide spread
	}
	return out
}

// The same observations give what client_golang's histogram gives:
// classic buckets, sum, count, native schema, zero bucket, spans and
// deltas, between scrapes and after them.
func TestHistogramExposedAsClientGolangExposesIt(t *testing.T) {
	theirs, ours, tv, ov := registeredTwins(t, latencyOpts())
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 3 {
		for _, seg := range []string{"end_to_end", "commit_to_publish", "empty"} {
			tv.WithLabelValues(seg)
			ov.WithLabelValues(seg)
			if seg == "empty" {
				continue
			}
			for _, v := range observations(rng, 500) {
				tv.WithLabelValues(seg).Observe(v)
				ov.WithLabelValues(seg).Observe(v)
			}
		}
		want, got := gather(t, theirs), gather(t, ours)
		if len(want) != len(got) {
			t.Fatalf("round %d: %d families, want %d", round, len(got), len(want))
		}
		for i := range want {
			if !proto.Equal(want[i], got[i]) {
				t.Fatalf("round %d: exposition differs\nclient_golang: %v\ncompactvec:    %v", round, want[i], got[i])
			}
		}
	}
}

// Past the bucket cap, buckets merge in pairs (a lower schema) as
// client_golang's do, before the reset duration has passed.
func TestHistogramPastTheCapWidensAsClientGolang(t *testing.T) {
	o := latencyOpts()
	o.NativeMaxBuckets = 20
	theirs, ours, tv, ov := registeredTwins(t, o)
	for v := 0.001; v < 100; v *= 1.07 {
		tv.WithLabelValues("s").Observe(v)
		ov.WithLabelValues("s").Observe(v)
	}
	want, got := gather(t, theirs), gather(t, ours)
	if !proto.Equal(want[0], got[0]) {
		t.Fatalf("exposition differs\nclient_golang: %v\ncompactvec:    %v", want[0], got[0])
	}
	if s := got[0].GetMetric()[0].GetHistogram().GetSchema(); s >= 3 {
		t.Errorf("schema %d after spreading over 5 decades with 20 buckets, want it lowered from 3", s)
	}
}

// A widened series resets to the full resolution once the reset duration
// has passed since its last reset, and a series over the cap after that
// long resets at once, keeping the observation that went over.
func TestHistogramResetsAfterTheMinimumDuration(t *testing.T) {
	o := latencyOpts()
	o.NativeMaxBuckets = 4
	v, err := NewHistogramVec(o, []string{"segment"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	v.now = func() time.Time { return now }
	h := v.WithLabelValues("s")
	for _, x := range []float64{0.001, 0.01, 0.1, 1, 10} {
		h.Observe(x)
	}
	if h.schema >= 3 || !h.widened || h.count != 5 {
		t.Fatalf("after 5 buckets over a cap of 4: schema %d, widened %t, count %d; want widened, 5 counted", h.schema, h.widened, h.count)
	}
	now = now.Add(time.Hour)
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram(); got.GetSchema() != 3 || got.GetSampleCount() != 0 || !got.GetCreatedTimestamp().AsTime().Equal(now) {
		t.Errorf("an hour later: schema %d, count %d, created %v; want reset to schema 3 at %v", got.GetSchema(), got.GetSampleCount(), got.GetCreatedTimestamp().AsTime(), now)
	}

	for _, x := range []float64{0.001, 0.01, 0.1, 1} {
		h.Observe(x)
	}
	now = now.Add(time.Hour)
	h.Observe(10)
	if h.schema != 3 || h.count != 1 || h.sum != 10 || !h.resetAt.Equal(now) {
		t.Errorf("over the cap an hour after the reset: schema %d, count %d, sum %v, reset at %v; want a reset keeping the 10 alone", h.schema, h.count, h.sum, h.resetAt)
	}
}

func TestHistogramRefusesBadOptions(t *testing.T) {
	for name, mutate := range map[string]func(*HistogramOpts){
		"factor 1":         func(o *HistogramOpts) { o.NativeBucketFactor = 1 },
		"unsorted buckets": func(o *HistogramOpts) { o.Buckets = []float64{1, 0.5} },
	} {
		o := latencyOpts()
		mutate(&o)
		if _, err := NewHistogramVec(o, []string{"segment"}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
