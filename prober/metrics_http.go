package prober

import (
	"net/http"

	"github.com/klauspost/compress/gzhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves what g gathers as a scraper asks for it:
// OpenMetrics or protobuf when asked (so exemplars and native histograms
// reach a scraper that wants them), compressed when the scraper accepts
// it, as Prometheus does unless told not to.
//
// The compression is klauspost/compress's gzhttp rather than promhttp's
// own (compress/gzip at its default level), which at 300 pipelines was
// most of a scrape: see BenchmarkScrapeOf300Pipelines and
// docs/benchmarks.txt.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return gzhttp.GzipHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true, DisableCompression: true}))
}
