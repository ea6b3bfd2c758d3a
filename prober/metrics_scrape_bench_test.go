package prober

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
)

// BenchmarkScrapeOf300Pipelines is one scrape of the prober's own metrics
// for 300 pipelines, every latency histogram with observations from 1 ms
// to 1 s 5 % apart, through MetricsHandler as the service serves them: in
// the text format a plain scrape asks for, and in the protobuf one
// Prometheus asks for when native histograms are enabled; plain and
// gzipped. Prometheus scrapes every
// 15 to 60 s, so a scrape's CPU counts beside the pipelines'.
func BenchmarkScrapeOf300Pipelines(b *testing.B) {
	plain, streamed := prometheus.NewRegistry(), compactvec.NewRegistry()
	observedMetrics(b, tee{plain, streamed}, 300)
	// The registry the service runs with (streamed: compactvec.Registry),
	// and client_golang's, which gathers every series before writing one.
	for _, reg := range []struct {
		name string
		g    prometheus.Gatherer
	}{{"stream", streamed}, {"registry", plain}} {
		handler := MetricsHandler(reg.g)
		for _, format := range []struct{ name, accept, encoding string }{
			{"text", "text/plain;version=0.0.4", ""},
			{"protobuf", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", ""},
			// Prometheus asks for gzip unless told not to (enable_compression).
			{"text-gzip", "text/plain;version=0.0.4", "gzip"},
			{"protobuf-gzip", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "gzip"},
		} {
			b.Run(reg.name+"/"+format.name, func(b *testing.B) {
				var size int
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
					req.Header.Set("Accept", format.accept)
					if format.encoding != "" {
						req.Header.Set("Accept-Encoding", format.encoding)
					}
					rec := httptest.NewRecorder()
					handler.ServeHTTP(rec, req)
					body, _ := io.ReadAll(rec.Result().Body)
					if rec.Code != http.StatusOK || len(body) == 0 {
						b.Fatalf("scrape: %d, %d bytes", rec.Code, len(body))
					}
					size = len(body)
				}
				b.ReportMetric(float64(size), "bytes/scrape")
			})
		}
	}
}
