package prober

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testPipeline is a small pipeline with one extra stamp, so the segments are
// commit_to_read, read_to_publish, publish_to_consume and end_to_end.
func testPipeline() config.Pipeline {
	return config.Pipeline{
		Name:   "orders",
		Relay:  config.Relay{Kind: config.RelayPolling, Stamps: []config.Stamp{{Name: "read", Header: "x-read"}}},
		Canary: config.Canary{Key: "canary-key", LostAfter: config.Duration(time.Minute)},
		Budgets: config.Budgets{
			config.SegmentEndToEnd:       config.Duration(2 * time.Second),
			"commit_to_read":             config.Duration(time.Second),
			"read_to_publish":            config.Duration(500 * time.Millisecond),
			"publish_to_consume":         config.Duration(500 * time.Millisecond),
			config.SegmentInsertToCommit: config.Duration(300 * time.Millisecond),
		},
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg, []config.Pipeline{testPipeline()})
	if err != nil {
		t.Fatal(err)
	}
	touchLazySeries(m, "orders")
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsZeroState(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := NewMetrics(reg, []config.Pipeline{testPipeline()}); err != nil {
		t.Fatal(err)
	}
	// Build info carries the Go version, which changes with the toolchain.
	var names []string
	for _, m := range catalogue {
		if m.Name != slo.MetricBuildInfo {
			names = append(names, m.Name)
		}
	}
	var buf bytes.Buffer
	golden := filepath.Join("testdata", "metrics_zero.golden")
	if *update {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == slo.MetricBuildInfo {
				continue
			}
			if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./prober/ -run TestMetricsZeroState -update)", err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f, names...); err != nil {
		t.Fatalf("zero state drifted from %s (rerun with -update if intended): %v", golden, err)
	}
}

func TestMetricsRejectsADuplicatePipeline(t *testing.T) {
	p := testPipeline()
	_, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{p, p})
	if err == nil || !strings.Contains(err.Error(), `"orders" listed twice`) {
		t.Fatalf("err = %v, want the duplicate pipeline named", err)
	}
}

func TestMetricsTwoPipelinesHaveTheirOwnBuckets(t *testing.T) {
	a, b := testPipeline(), testPipeline()
	b.Name = "payments"
	b.Relay.Stamps = nil
	b.Budgets = config.Budgets{config.SegmentEndToEnd: config.Duration(3 * time.Second)}
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg, []config.Pipeline{a, b})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveLatency("payments", config.SegmentEndToEnd, 3*time.Second)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, mf := range mfs {
		if mf.GetName() != slo.MetricSegmentLatency {
			continue
		}
		for _, mm := range mf.GetMetric() {
			if labelValue(mm, slo.LabelPipeline) == "payments" && labelValue(mm, slo.LabelSegment) == config.SegmentEndToEnd {
				for _, bk := range mm.GetHistogram().GetBucket() {
					bounds = append(bounds, bk.GetUpperBound())
				}
				if got := mm.GetHistogram().GetSampleCount(); got != 1 {
					t.Errorf("sample count = %d, want 1", got)
				}
			}
		}
	}
	want := []float64{0.3, 0.75, 1.5, 2.25, 3, 4.5, 6, 15, 30}
	if !slices.Equal(bounds, want) {
		t.Errorf("payments buckets = %v, want %v", bounds, want)
	}
}

func TestLatencyBucketsAreAroundTheSegmentsOwnBudget(t *testing.T) {
	p := testPipeline()
	p.Relay.Stamps = append(p.Relay.Stamps, config.Stamp{Name: "sent", Header: "x-sent"})
	delete(p.Budgets, config.SegmentInsertToCommit) // unbudgeted: end_to_end's bounds
	for _, tc := range []struct {
		segment string
		want    []float64
	}{
		{config.SegmentEndToEnd, []float64{0.2, 0.5, 1, 1.5, 2, 3, 4, 10, 20}},
		{"commit_to_read", []float64{0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 5, 10}},
		{"read_to_sent", []float64{0.2, 0.5, 1, 1.5, 2, 3, 4, 10, 20}},
		{config.SegmentInsertToCommit, []float64{0.2, 0.5, 1, 1.5, 2, 3, 4, 10, 20}},
	} {
		got := LatencyBuckets(&p, tc.segment)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: buckets = %v, want %v", tc.segment, got, tc.want)
		}
	}
	for _, s := range p.BudgetedSegments() {
		got := LatencyBuckets(&p, s)
		b, _ := p.Budget(s)
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Errorf("%s: buckets not sorted and unique: %v", s, got)
		}
		if !slices.Contains(got, b.Seconds()) {
			t.Errorf("%s: its budget (%v) is not a bucket bound: %v", s, b, got)
		}
		for _, v := range got {
			if s := fmt.Sprint(v); len(s) > 8 {
				t.Errorf("bound %s has float noise", s)
			}
		}
	}
	if got := LatencyBuckets(&config.Pipeline{}, config.SegmentEndToEnd); !slices.Equal(got, prometheus.DefBuckets) {
		t.Errorf("a pipeline without budgets: buckets = %v, want client_golang's default", got)
	}
}

// Every exposed latency histogram carries its own segment's budget as a
// bound, and no bound of another budget: what the within-budget fraction
// and the quantiles read is exact, and a segment does not pay for its
// neighbours' budgets in series.
func TestEverySegmentsHistogramHasItsOwnBudgetAsABound(t *testing.T) {
	a := testPipeline()
	b := testPipeline()
	b.Name = "payments"
	b.Relay.Stamps = nil
	b.Budgets = config.Budgets{config.SegmentEndToEnd: config.Duration(3 * time.Second), "commit_to_publish": config.Duration(1200 * time.Millisecond)}
	pipelines := []config.Pipeline{a, b}
	reg := prometheus.NewPedanticRegistry()
	if _, err := NewMetrics(reg, pipelines); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != slo.MetricSegmentLatency {
			continue
		}
		for _, mm := range mf.GetMetric() {
			pipeline, segment := labelValue(mm, slo.LabelPipeline), labelValue(mm, slo.LabelSegment)
			seen[pipeline+"/"+segment] = true
			p := &pipelines[slices.IndexFunc(pipelines, func(p config.Pipeline) bool { return p.Name == pipeline })]
			budget, ok := p.Budget(segment)
			if !ok {
				budget, _ = p.Budget(config.SegmentEndToEnd)
			}
			var bounds []float64
			for _, bk := range mm.GetHistogram().GetBucket() {
				bounds = append(bounds, bk.GetUpperBound())
			}
			if !slices.Contains(bounds, budget.Seconds()) {
				t.Errorf("%s/%s: budget %v is not a bound of %v", pipeline, segment, budget, bounds)
			}
			if want := LatencyBuckets(p, segment); !slices.Equal(bounds, want) {
				t.Errorf("%s/%s: bounds %v, want %v", pipeline, segment, bounds, want)
			}
		}
	}
	for _, p := range pipelines {
		for _, s := range append(p.Segments(), config.SegmentInsertToCommit) {
			if !seen[p.Name+"/"+s] {
				t.Errorf("%s/%s: no latency histogram exposed", p.Name, s)
			}
		}
	}
}

// touchLazySeries creates one series of every vector that is not created
// at zero (they appear once measured), so that the registry exposes every
// family for the lint.
func touchLazySeries(m *Metrics, pipeline string) {
	m.DBClockOffset.WithLabelValues(pipeline)
	m.DBClockOffsetError.WithLabelValues(pipeline)
	m.DependencyUp.WithLabelValues(pipeline, DependencyDatabase)
	m.DependencyErrors.WithLabelValues(pipeline, DependencyDatabase)
	m.CanariesUnjudged.WithLabelValues(pipeline, config.SegmentEndToEnd, judge.ReasonLost)
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
