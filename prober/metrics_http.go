package prober

import (
	"net/http"

	"github.com/klauspost/compress/gzhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// MetricsHandler serves what g gathers as a scraper asks for it:
// OpenMetrics or protobuf when asked (so exemplars and native histograms
// reach a scraper that wants them), gzipped when the scraper accepts it,
// as Prometheus does unless told not to.
//
// A g that streams its families (compactvec.Registry, the service's) is
// written one family at a time, never holding every series' metric object
// at once (see compactvec.Registry for what that saved at 300 pipelines);
// any other through promhttp.
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
	if s, ok := g.(streamer); ok {
		return gzipped(streamHandler{s})
	}
	return gzipped(promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true, DisableCompression: true}))
}

// streamer gathers family by family (compactvec.Registry).
type streamer interface {
	Stream(each func(*dto.MetricFamily) error) error
}

// streamHandler is promhttp.HandlerFor with EnableOpenMetrics, writing
// each family as it is gathered: the same formats, headers and name[]
// filter. An error before the first family is a 500, as promhttp's; one
// after it ends the response early, as promhttp's does (a scraper sees a
// truncated body and fails the scrape).
type streamHandler struct{ s streamer }

func (h streamHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	format := expfmt.NegotiateAccept(req.Header, expfmt.DefaultOpenMetricsAcceptedFormats()...)
	var filter map[string]bool
	if req.URL != nil {
		if names := req.URL.Query()["name[]"]; len(names) > 0 {
			filter = make(map[string]bool, len(names))
			for _, n := range names {
				filter[n] = true
			}
		}
	}
	var enc expfmt.Encoder
	err := h.s.Stream(func(mf *dto.MetricFamily) error {
		if filter != nil && !filter[mf.GetName()] {
			return nil
		}
		if enc == nil {
			w.Header().Add("Vary", "Accept")
			w.Header().Set("Content-Type", string(format))
			enc = expfmt.NewEncoder(w, format)
		}
		return enc.Encode(mf)
	})
	if err != nil {
		if enc == nil {
			http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		}
		return
	}
	if enc == nil { // no family at all, or none the filter asked for
		w.Header().Add("Vary", "Accept")
		w.Header().Set("Content-Type", string(format))
		enc = expfmt.NewEncoder(w, format)
	}
	if c, ok := enc.(expfmt.Closer); ok {
		_ = c.Close() // OpenMetrics' "# EOF"
	}
}
