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
