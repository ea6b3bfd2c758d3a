package prober

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// The series one pipeline of the benchmark shape (testPipeline, as
// BenchmarkScrapeOf300Pipelines registers 300 of them) exposes in the text
// format. Before issue 27's cut it was 235: every segment's histogram
// carried the bounds of all five budgets (27 series each, where 12 are
// its own), and every budgeted segment had a zero counter for each of the
// nine unjudged reasons (now created when they first count). A new series per
// pipeline fails here first: docs/benchmarks.md has the figures by
// family (go test ./prober/ -run TestSeriesPerPipeline -v).
const seriesPerBenchmarkPipeline = 117

// seriesShapes are the configurations whose series per pipeline
// docs/benchmarks.md lists: the scrape benchmark's, the service
// benchmark's (make bench-service: a polling relay, three budgets) and the
// example configuration's.
func seriesShapes(t *testing.T) []struct {
	name      string
	pipelines []config.Pipeline
} {
	t.Helper()
	bench := make([]config.Pipeline, 300)
	for i := range bench {
		bench[i] = testPipeline()
		bench[i].Name = fmt.Sprintf("p%03d", i)
	}
	var yml strings.Builder
	yml.WriteString("instance_id: bench\nsigning_key: {value: k}\npipelines:\n")
	for i := range 300 {
		fmt.Fprintf(&yml, `  - name: p%03d
    database: {dsn: {value: "postgres://canary@db/bench"}}
    outbox: {table: r%d.outbox}
    relay: {kind: polling}
    canary: {aggregate_type: p%03[1]d, schedule: "@every 10s", lost_after: 5m}
    kafka: {brokers: [kafka:9092], topic: bench.p%03[1]d}
    budgets: {end_to_end: 5s, commit_to_publish: 2s, publish_to_consume: 1s}
`, i, i%10)
	}
	service, err := config.Load([]byte(yml.String()))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../examples/outbox-canary.yml")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := config.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name      string
		pipelines []config.Pipeline
	}{
		{"scrape benchmark (testPipeline)", bench},
		{"service benchmark (polling, 3 budgets)", service.Pipelines},
		{"examples/outbox-canary.yml", examples.Pipelines},
	}
}

// seriesByPipeline counts the series of each pipeline by family, as a
// text scrape of /metrics exposes them (a histogram's buckets, sum and
// count are a series each).
func seriesByPipeline(t *testing.T, g prometheus.Gatherer) map[string]map[string]int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	rec := httptest.NewRecorder()
	MetricsHandler(g).ServeHTTP(rec, req)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			p := labelValue(m, "pipeline")
			if p == "" {
				continue
			}
			if out[p] == nil {
				out[p] = map[string]int{}
			}
			n := 1
			if h := m.GetHistogram(); h != nil {
				n = len(h.GetBucket()) + 2 // +Inf among the buckets
			}
			out[p][name] += n
		}
	}
	return out
}

func total(families map[string]int) (n int) {
	for _, c := range families {
		n += c
	}
	return n
}

// TestSeriesPerPipeline counts the series a pipeline has from the start,
// by family (-v prints the figures): what it costs every Prometheus that
// scrapes the prober, before the series set once measured (the database
// clock, the dependencies, the watchers'), and holds the benchmark shape
// to its count.
func TestSeriesPerPipeline(t *testing.T) {
	for _, shape := range seriesShapes(t) {
		reg := compactvec.NewRegistry()
		m, err := NewMetrics(reg, shape.pipelines)
		if err != nil {
			t.Fatal(err)
		}
		// The service exports its SLOs' objective series beside them (the
		// schedule only sets their labels' values).
		scheduled := slices.Clone(shape.pipelines)
		for i := range scheduled {
			scheduled[i].Canary.Schedule = cmp.Or(scheduled[i].Canary.Schedule, "@every 10s")
			scheduled[i].SLO.Window = cmp.Or(scheduled[i].SLO.Window, config.Duration(30*24*time.Hour))
		}
		model, err := slo.FromConfig(&config.Config{Pipelines: scheduled})
		if err != nil {
			t.Fatal(err)
		}
		m.ExportObjectives(model, shape.pipelines)
		counts := seriesByPipeline(t, reg)
		first := counts[shape.pipelines[0].Name]
		var b strings.Builder
		fmt.Fprintf(&b, "%s, pipeline %s: %d series\n", shape.name, shape.pipelines[0].Name, total(first))
		for _, name := range slices.Sorted(maps.Keys(first)) {
			fmt.Fprintf(&b, "  %-48s %3d\n", name, first[name])
		}
		if len(shape.pipelines) <= 10 {
			for _, p := range shape.pipelines {
				fmt.Fprintf(&b, "  pipeline %s: %d series\n", p.Name, total(counts[p.Name]))
			}
		}
		t.Log(b.String())
		if shape.name == "scrape benchmark (testPipeline)" {
			if got := total(first); got != seriesPerBenchmarkPipeline {
				t.Errorf("a pipeline of the benchmark shape has %d series created at start, want %d (update docs/benchmarks.md and the constant if intended)", got, seriesPerBenchmarkPipeline)
			}
			// Same shape, same count: no pipeline pays for another's.
			for _, p := range shape.pipelines[1:] {
				if got := total(counts[p.Name]); got != total(first) {
					t.Errorf("pipeline %s has %d series, want %d", p.Name, got, total(first))
				}
			}
		}
	}
}
