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
	"github.com/outbox-canary/outbox-canary/slo"
)

var update = flag.Bool("update", false, "rewrite golden files and docs/metrics.md")

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
	touchWatchers(m, "orders")
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

func TestLatencyBuckets(t *testing.T) {
	p := testPipeline()
	got := LatencyBuckets(&p)
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("buckets not sorted and unique: %v", got)
	}
	for _, s := range p.BudgetedSegments() {
		b, _ := p.Budget(s)
		if !slices.Contains(got, b.Seconds()) {
			t.Errorf("budget of %s (%v) is not a bucket bound: %v", s, b, got)
		}
	}
	for _, v := range got {
		if s := fmt.Sprint(v); len(s) > 8 {
			t.Errorf("bound %s has float noise", s)
		}
	}
}

// touchWatchers creates one series of every watcher vector, so that the
// registry exposes every family (for the lint and the docs).
func touchWatchers(m *Metrics, pipeline string) {
	m.DBClockOffset.WithLabelValues(pipeline)
	m.DBClockOffsetError.WithLabelValues(pipeline)
	m.BacklogRows.WithLabelValues(pipeline)
	m.OldestUnpublishedAge.WithLabelValues(pipeline)
	m.WatchErrors.WithLabelValues(pipeline, "database")
	m.SlotRetainedWAL.WithLabelValues(pipeline, "s")
	m.SlotUnconfirmedWAL.WithLabelValues(pipeline, "s")
	m.SlotActive.WithLabelValues(pipeline, "s")
	m.SlotWALStatus.WithLabelValues(pipeline, "s", "reserved")
	m.SlotSafeWALSize.WithLabelValues(pipeline, "s")
	m.OldestTransactionAge.WithLabelValues(pipeline)
	m.LongTransactions.WithLabelValues(pipeline)
	m.ConsumerLagMessages.WithLabelValues(pipeline, "g", "t")
	m.ConsumerLagSeconds.WithLabelValues(pipeline, "g", "t")
	m.ConnectorRunning.WithLabelValues(pipeline, "c")
	m.ConnectorTaskFailures.WithLabelValues(pipeline, "c")
	m.ConnectorRestarts.WithLabelValues(pipeline, "c")
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestMetricsDoc generates docs/metrics.md from what the registry really
// exposes, checks it agrees with Catalogue, and fails when the checked-in
// file drifted.
func TestMetricsDoc(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg, []config.Pipeline{testPipeline()})
	if err != nil {
		t.Fatal(err)
	}
	touchWatchers(m, "orders")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := make(map[string]MetricInfo, len(mfs))
	for _, mf := range mfs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		exposed[mf.GetName()] = MetricInfo{
			Name: mf.GetName(), Type: strings.ToLower(mf.GetType().String()), Help: mf.GetHelp(), Labels: labels,
		}
	}
	var doc bytes.Buffer
	doc.WriteString("<!-- Code generated by `make generate` (TestMetricsDoc in prober/metrics_test.go). DO NOT EDIT. -->\n\n")
	doc.WriteString("# Metrics exported by outbox-canary\n\n")
	doc.WriteString("Names come from `slo/metrics.go`, the contract that rules and dashboards read.\n")
	doc.WriteString("Labelled counters are created at zero for every pipeline (and segment, outcome, reason).\n\n")
	doc.WriteString("| name | type | labels | help |\n|---|---|---|---|\n")
	for _, c := range catalogue {
		e, ok := exposed[c.Name]
		if !ok {
			t.Errorf("%s is in the catalogue but the registry does not expose it", c.Name)
			continue
		}
		delete(exposed, c.Name)
		// The registry sorts label names; the catalogue keeps their meaning order.
		if e.Type != c.Type || e.Help != c.Help || !slices.Equal(e.Labels, slices.Sorted(slices.Values(c.Labels))) {
			t.Errorf("%s: registry says %+v, catalogue %+v", c.Name, e, c)
		}
		fmt.Fprintf(&doc, "| `%s` | %s | %s | %s |\n", e.Name, e.Type, strings.Join(c.Labels, ", "), strings.ReplaceAll(e.Help, "|", `\|`))
	}
	for name := range exposed {
		t.Errorf("%s is exposed but missing from the catalogue (and so from the docs)", name)
	}
	path := filepath.Join("..", "docs", "metrics.md")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, doc.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run `make generate`", err)
	}
	if !bytes.Equal(got, doc.Bytes()) {
		t.Fatalf("docs/metrics.md is out of date with the registry: run `make generate`")
	}
}
