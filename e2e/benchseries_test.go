package e2e

import (
	"maps"
	"slices"
	"strings"
)

// seriesCount is issue 27's count of the series one pipeline costs on
// /metrics, by family, before and after its cut, for the shapes
// TestSeriesPerPipeline (prober/series_test.go) counts. The figures are
// that test's output on the two revisions, written here by hand: the count
// does not depend on the machine, and the test holds the scrape
// benchmark's shape to its figure.
type seriesCount struct {
	Command string `json:"command"`
	Before  string `json:"before_revision"`
	After   string `json:"after_revision"`
	// Target is the issue's: half of before, for the scrape benchmark's
	// shape (Shapes[0]).
	Shapes []seriesCountShape `json:"shapes"`
	// NotCreated says which series are no longer exposed, and why nothing
	// that reads /metrics misses them.
	NotCreated []string `json:"not_created"`
	// Scrape is BenchmarkScrapeOf300Pipelines at both revisions, one run
	// each, back to back.
	Scrape *seriesCountScrape `json:"scrape,omitempty"`
}

type seriesCountShape struct {
	Name   string         `json:"name"`
	Before map[string]int `json:"before"` // by family
	After  map[string]int `json:"after"`
}

type seriesCountScrape struct {
	Command string                  `json:"command"`
	Machine string                  `json:"machine"`
	Cases   []seriesCountScrapeCase `json:"cases"`
	Notes   []string                `json:"notes,omitempty"`
}

type seriesCountScrapeCase struct {
	Name        string  `json:"name"` // the sub-benchmark
	BeforeNsOp  float64 `json:"before_ns_op"`
	AfterNsOp   float64 `json:"after_ns_op"`
	BeforeBOp   float64 `json:"before_b_op"`
	AfterBOp    float64 `json:"after_b_op"`
	BeforeBytes float64 `json:"before_bytes_scrape"`
	AfterBytes  float64 `json:"after_bytes_scrape"`
}

func sumSeries(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// renderSeriesTarget is the row of "Against the targets".
func renderSeriesTarget(p func(string, ...any), s *seriesCount) {
	if len(s.Shapes) == 0 {
		return
	}
	sh := s.Shapes[0]
	before, after := sumSeries(sh.Before), sumSeries(sh.After)
	p("| series per pipeline on `/metrics`, %s | half of before (issue 27) | %s%d, before %d (%.0f %%) |\n",
		sh.Name, mark(2*after <= before), after, before, 100*float64(after)/float64(before))
}

func renderSeries(p func(string, ...any), s *seriesCount) {
	p("## Series per pipeline on `/metrics`\n\n")
	p("The series one pipeline has from the start, by family, in a text scrape (a histogram's buckets, `_sum` and `_count` are a series each), at %s (before) and %s (after): `%s`. ", s.Before, s.After, s.Command)
	p("The series the service sets once measured (the database clock offset and its error, `outbox_canary_dependency_up` and its errors, the watchers') are not in them and did not change.\n\n")
	families := map[string]bool{}
	for _, sh := range s.Shapes {
		for f := range sh.Before {
			families[f] = true
		}
		for f := range sh.After {
			families[f] = true
		}
	}
	p("| family |")
	for _, sh := range s.Shapes {
		p(" %s: before | after |", sh.Name)
	}
	p("\n|---|")
	p("%s\n", strings.Repeat("---:|---:|", len(s.Shapes)))
	for _, f := range slices.Sorted(maps.Keys(families)) {
		changed := false
		for _, sh := range s.Shapes {
			changed = changed || sh.Before[f] != sh.After[f]
		}
		if !changed {
			continue
		}
		p("| `%s` |", f)
		for _, sh := range s.Shapes {
			p(" %d | %d |", sh.Before[f], sh.After[f])
		}
		p("\n")
	}
	p("| the other families, unchanged |")
	for _, sh := range s.Shapes {
		n := 0
		for f, v := range sh.After {
			if sh.Before[f] == v {
				n += v
			}
		}
		p(" %d | %d |", n, n)
	}
	p("\n| **total** |")
	for _, sh := range s.Shapes {
		p(" **%d** | **%d** (%.0f %%) |", sumSeries(sh.Before), sumSeries(sh.After), 100*float64(sumSeries(sh.After))/float64(sumSeries(sh.Before)))
	}
	p("\n\n")
	p("No longer created, and why nothing that reads `/metrics` misses them (the rules in `alerts/`, the dashboards in `dashboards/`, the status page, which reads the prober itself, and the runbooks in docs/alerts.md):\n\n")
	for _, n := range s.NotCreated {
		p("- %s\n", n)
	}
	p("\n")
	if sc := s.Scrape; sc != nil {
		p("`BenchmarkScrapeOf300Pipelines` (one scrape of 300 pipelines of the scrape benchmark's shape through the service's handler), before and after, run back to back on %s: `%s`.\n\n", sc.Machine, sc.Command)
		p("| scrape | ns/op before | after | B/op before | after | bytes/scrape before | after |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range sc.Cases {
			p("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", c.Name, c.BeforeNsOp, c.AfterNsOp, c.BeforeBOp, c.AfterBOp, c.BeforeBytes, c.AfterBytes)
		}
		p("\n")
		for _, n := range sc.Notes {
			p("%s\n\n", n)
		}
	}
}
