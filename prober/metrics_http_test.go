package prober

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
)

// scrape gets /metrics from h as a scraper accepting encoding would.
func scrape(t *testing.T, h http.Handler, accept, encoding string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", accept)
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d: %s", rec.Code, rec.Body)
	}
	return rec.Result()
}

// A scraper that accepts gzip gets what one that does not gets, gzipped
// once; one that does not gets it plain, and told that the body varies
// with Accept-Encoding; the format is still negotiated.
func TestMetricsHandlerCompressesForScrapersThatAcceptIt(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := testPipeline(), testPipeline()
	b.Name = "payments"
	if _, err := NewMetrics(reg, []config.Pipeline{a, b}); err != nil {
		t.Fatal(err)
	}
	h := MetricsHandler(reg)
	const openMetrics = "application/openmetrics-text;version=1.0.0"

	plain := scrape(t, h, openMetrics, "")
	if enc := plain.Header.Get("Content-Encoding"); enc != "" {
		t.Errorf("Content-Encoding %q for a scraper that accepts none", enc)
	}
	if ct := plain.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("Content-Type %q, want OpenMetrics as asked", ct)
	}
	// A cache between scraper and prober must not hand a gzipped body to
	// a scraper that did not ask for one.
	if vary := plain.Header.Values("Vary"); !slices.ContainsFunc(vary, func(v string) bool { return strings.Contains(v, "Accept-Encoding") }) {
		t.Errorf("Vary %q lacks Accept-Encoding", vary)
	}
	want, _ := io.ReadAll(plain.Body)
	if !bytes.Contains(want, []byte(`outbox_canary_canaries_sent_total{pipeline="payments"}`)) {
		t.Fatalf("the plain scrape lacks a pipeline's series:\n%.500s", want)
	}

	// Prometheus with its zstd feature on offers both: gzip is what the
	// prober's scrapes are measured with.
	zipped := scrape(t, h, openMetrics, "zstd,gzip")
	if enc := zipped.Header.Get("Content-Encoding"); enc != "gzip" {
		t.Fatalf("Content-Encoding %q for a scraper that accepts zstd and gzip, want gzip", enc)
	}
	if ct := zipped.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("gzipped Content-Type %q, want OpenMetrics as asked", ct)
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the gzipped scrape unzips to %d bytes that differ from the plain %d", len(got), len(want))
	}
}

// tee registers every collector with each of its registerers.
type tee []prometheus.Registerer

func (t tee) Register(c prometheus.Collector) error {
	for _, r := range t {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (t tee) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t tee) Unregister(c prometheus.Collector) bool {
	ok := true
	for _, r := range t {
		ok = r.Unregister(c) && ok
	}
	return ok
}

// The service's registry writes its compact families one at a time
// (compactvec.Registry, MetricsHandler's stream): a scraper gets the same
// bytes as from a client_golang registry holding the same metrics, in
// every format, plain or gzipped, with the same headers, and the name[]
// filter works alike.
func TestAStreamedScrapeIsTheRegistrysScrape(t *testing.T) {
	plain, streamed := prometheus.NewRegistry(), compactvec.NewRegistry()
	observedMetrics(t, tee{plain, streamed}, 3)
	// A collector of client_golang's beside the compact ones, its family
	// between theirs in name order.
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outbox_canary_l_other", Help: "Another collector's."}, []string{"x"})
	other.WithLabelValues("b").Set(2)
	other.WithLabelValues("a").Set(1)
	if err := (tee{plain, streamed}).Register(other); err != nil {
		t.Fatal(err)
	}
	want, got := MetricsHandler(plain), MetricsHandler(streamed)
	for _, accept := range []string{
		"text/plain;version=0.0.4",
		"application/openmetrics-text;version=1.0.0",
		"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
		"*/*",
	} {
		for _, encoding := range []string{"", "gzip"} {
			for _, url := range []string{"/metrics", "/metrics?name[]=outbox_canary_canaries_sent_total&name[]=outbox_canary_l_other"} {
				get := func(h http.Handler) (*http.Response, []byte) {
					req := httptest.NewRequest(http.MethodGet, url, nil)
					req.Header.Set("Accept", accept)
					if encoding != "" {
						req.Header.Set("Accept-Encoding", encoding)
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					res := rec.Result()
					body := res.Body
					if res.Header.Get("Content-Encoding") == "gzip" {
						gz, err := gzip.NewReader(res.Body)
						if err != nil {
							t.Fatal(err)
						}
						body = gz
					}
					b, err := io.ReadAll(body)
					if err != nil {
						t.Fatal(err)
					}
					return res, b
				}
				wantRes, wantBody := get(want)
				gotRes, gotBody := get(got)
				if gotRes.StatusCode != wantRes.StatusCode || len(wantBody) < 100 {
					t.Fatalf("%s %s %s: status %d, want %d (%d bytes)", accept, encoding, url, gotRes.StatusCode, wantRes.StatusCode, len(wantBody))
				}
				for _, h := range []string{"Content-Type", "Content-Encoding", "Vary"} {
					if g, w := gotRes.Header.Values(h), wantRes.Header.Values(h); !slices.Equal(g, w) {
						t.Errorf("%s %s %s: %s %q, want %q", accept, encoding, url, h, g, w)
					}
				}
				if !bytes.Equal(gotBody, wantBody) {
					t.Errorf("%s %s %s: the streamed scrape differs from the registry's (%d bytes, want %d)", accept, encoding, url, len(gotBody), len(wantBody))
				}
			}
		}
	}
	// Gather, for callers that keep what they gather, gathers the same.
	wantMF, err := plain.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gotMF, err := streamed.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(gotMF) != len(wantMF) {
		t.Fatalf("Gather: %d families, want %d", len(gotMF), len(wantMF))
	}
	for i := range wantMF {
		if g, w := gotMF[i].String(), wantMF[i].String(); g != w {
			t.Errorf("Gather: family %d differs:\n%.300s\nwant\n%.300s", i, g, w)
		}
	}
}
