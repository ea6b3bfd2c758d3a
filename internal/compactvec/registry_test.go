package compactvec

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The registry's checks still hold for the vectors it streams: a name
// registered twice, or again with other labels, is refused; unregistered,
// a vector's family is gone and another vector of its shape may take it.
func TestRegistryRefusesWhatAPrometheusRegistryRefuses(t *testing.T) {
	r := NewRegistry()
	a := NewCounterVec("x_total", "X.", []string{"pipeline"})
	a.WithLabelValues("orders").Inc()
	if err := r.Register(a); err != nil {
		t.Fatal(err)
	}
	var already prometheus.AlreadyRegisteredError
	if err := r.Register(a); !errors.As(err, &already) {
		t.Errorf("the same vector again: %v, want AlreadyRegisteredError", err)
	}
	if err := r.Register(NewCounterVec("x_total", "X.", []string{"pipeline", "other"})); err == nil {
		t.Error("the same name with other labels: registered")
	}
	if err := r.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_total", Help: "X."})); err == nil {
		t.Error("the same name by a client_golang collector: registered")
	}
	mfs, err := r.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "x_total" || mfs[0].GetType() != dto.MetricType_COUNTER ||
		len(mfs[0].Metric) != 1 || mfs[0].Metric[0].GetCounter().GetValue() != 1 {
		t.Fatalf("Gather = %v, %v; want x_total with one series at 1", mfs, err)
	}
	if !r.Unregister(a) {
		t.Fatal("Unregister: false")
	}
	if mfs, err := r.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("Gather after Unregister = %v, %v; want nothing", mfs, err)
	}
	if err := r.Register(NewCounterVec("x_total", "X.", []string{"pipeline"})); err != nil {
		t.Errorf("the name once free: %v", err)
	}
}

// What Gather returns is the caller's: a later scrape, which reuses the
// buffers a family is written into, does not change it.
func TestGatheredFamiliesOutliveTheNextScrape(t *testing.T) {
	r := NewRegistry()
	c := NewCounterVec("c_total", "C.", []string{"k"})
	g := NewGaugeVec("g", "G.", []string{"k"})
	r.MustRegister(c, g)
	c.WithLabelValues("a").Add(1)
	g.WithLabelValues("a").Set(5)
	first, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c.WithLabelValues("a").Add(1)
	g.WithLabelValues("a").Set(7)
	c.WithLabelValues("b").Add(1)
	if err := r.Stream(func(*dto.MetricFamily) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := first[0].Metric[0].GetCounter().GetValue(); got != 1 || len(first[0].Metric) != 1 {
		t.Errorf("first gather's counter = %v (%d series), want 1 (1)", got, len(first[0].Metric))
	}
	if got := first[1].Metric[0].GetGauge().GetValue(); got != 5 {
		t.Errorf("first gather's gauge = %v, want 5", got)
	}
}
