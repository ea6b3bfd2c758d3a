package prober

import (
	"net/http"

	"github.com/klauspost/compress/gzhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves what g gathers as a scraper asks for it:
// OpenMetrics or protobuf when asked (so exemplars and native histograms
// reach a scraper that wants them), gzipped when the scraper accepts it,
// as Prometheus does unless told not to.
//
// The gzip is klauspost/compress's gzhttp rather than promhttp's own
// (compress/gzip at its default level), which at 300 pipelines was most
// of a text scrape: see BenchmarkScrapeOf300Pipelines and
// docs/benchmarks.txt.
//
// It is gzip alone: gzhttp also offers zstd, and prefers it, but
// Prometheus asks for zstd only behind a feature flag and the prober's
// scrapes are measured with gzip.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	gzipped, err := gzhttp.NewWrapper(gzhttp.EnableZstd(false))
	if err != nil {
		panic(err) // the options are constant
	}
	return gzipped(promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true, DisableCompression: true}))
}
