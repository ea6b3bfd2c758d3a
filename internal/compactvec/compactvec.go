// Package compactvec holds counters, gauges and histograms by label
// values in a few words a series, for families with many series that
// change rarely: at 300 pipelines the prober exports about 27 000 counters
// and gauges and 1 200 latency histograms. client_golang keeps a counter
// as a metric object with its own label pairs and created timestamp,
// about 600 bytes, and a histogram's native buckets in two sync.Maps,
// about 260 bytes a bucket; together 27 MB, most of the prober's heap that
// does not grow with its canaries. Here a series is its values, its label
// values (the caller's strings, not copies) and a map slot; label pairs
// are made at scrape time, the way exporters that hold their own state
// expose it.
//
// The methods mirror client_golang's vectors, a counter or gauge is a
// prometheus.Counter or prometheus.Gauge, and what a registry gathers is
// what client_golang's would (the tests compare the two), so the two are
// exchangeable at call sites and in testutil.
package compactvec

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// keySeparator cannot occur in valid UTF-8, so joined label values are
// unambiguous (client_golang hashes with the same separator).
const keySeparator = "\xff"

// vec is what counter and gauge vectors share: the series by joined
// label values.
type vec[S any] struct {
	desc      *prometheus.Desc
	name      string
	labels    int
	now       func() time.Time
	newSeries func(lvs []string) *S
	metric    func(*S) prometheus.Metric

	mu     sync.RWMutex
	series map[string]*S
}

func newVec[S any](name, help string, labels []string) *vec[S] {
	return newVecConst[S](name, help, labels, nil)
}

func newVecConst[S any](name, help string, labels []string, constLabels prometheus.Labels) *vec[S] {
	return &vec[S]{
		desc:   prometheus.NewDesc(name, help, labels, constLabels),
		name:   name,
		labels: len(labels),
		now:    time.Now,
		series: map[string]*S{},
	}
}

// get returns the series of lvs, creating it at zero. The lookup of an
// existing series allocates nothing: the key is joined on the stack.
func (v *vec[S]) get(lvs []string) (*S, error) {
	if len(lvs) != v.labels {
		return nil, fmt.Errorf("%s: %d label values for %d labels", v.name, len(lvs), v.labels)
	}
	var buf [128]byte
	key := buf[:0]
	for i, lv := range lvs {
		if i > 0 {
			key = append(key, keySeparator...)
		}
		key = append(key, lv...)
	}
	v.mu.RLock()
	s, ok := v.series[string(key)]
	v.mu.RUnlock()
	if ok {
		return s, nil
	}
	for _, lv := range lvs {
		if !utf8.ValidString(lv) { // nor then can it hold the separator
			return nil, fmt.Errorf("%s: label value %q is not valid UTF-8", v.name, lv)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.series[string(key)]; ok {
		return s, nil
	}
	s = v.newSeries(append(make([]string, 0, len(lvs)), lvs...))
	v.series[string(key)] = s
	return s, nil
}

func (v *vec[S]) withLabelValues(lvs []string) *S {
	s, err := v.get(lvs)
	if err != nil {
		panic(err) // as client_golang's WithLabelValues: a programming error
	}
	return s
}

// delete removes the series of lvs, reporting whether there was one.
func (v *vec[S]) delete(lvs []string) bool {
	if len(lvs) != v.labels {
		return false
	}
	key := strings.Join(lvs, keySeparator)
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.series[key]
	delete(v.series, key)
	return ok
}

// Describe implements prometheus.Collector.
func (v *vec[S]) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector: every series, as a constant
// metric made now.
func (v *vec[S]) Collect(ch chan<- prometheus.Metric) {
	v.mu.RLock()
	all := make([]*S, 0, len(v.series))
	for _, s := range v.series {
		all = append(all, s)
	}
	v.mu.RUnlock()
	for _, s := range all {
		ch <- v.metric(s)
	}
}

// count is the number of series (for tests and benchmarks).
func (v *vec[S]) count() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.series)
}

// value is a float64 changed atomically, as client_golang keeps one.
type value struct{ bits atomic.Uint64 }

func (x *value) load() float64 { return math.Float64frombits(x.bits.Load()) }

func (x *value) store(f float64) { x.bits.Store(math.Float64bits(f)) }

func (x *value) add(f float64) {
	for {
		old := x.bits.Load()
		if x.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+f)) {
			return
		}
	}
}

// CounterVec is a counter family by label values.
type CounterVec struct{ *vec[Counter] }

// NewCounterVec creates a counter family; register it as any collector.
func NewCounterVec(name, help string, labels []string) *CounterVec {
	v := &CounterVec{newVec[Counter](name, help, labels)}
	v.newSeries = func(lvs []string) *Counter {
		return &Counter{vec: v.vec, lvs: lvs, created: v.now().UnixNano()}
	}
	v.metric = (*Counter).constMetric
	return v
}

// WithLabelValues returns the series of the label values, created at 0 if
// new; it panics on a wrong number of values, as client_golang does.
func (v *CounterVec) WithLabelValues(lvs ...string) *Counter { return v.withLabelValues(lvs) }

// DeleteLabelValues removes the series of the label values, reporting
// whether there was one.
func (v *CounterVec) DeleteLabelValues(lvs ...string) bool { return v.delete(lvs) }

// Len is the number of series.
func (v *CounterVec) Len() int { return v.count() }

// Counter is one series of a CounterVec.
type Counter struct {
	vec     *vec[Counter]
	val     value
	created int64 // Unix nanoseconds, exported as the created timestamp
	lvs     []string
}

var _ prometheus.Counter = (*Counter)(nil)

// Inc adds 1.
func (c *Counter) Inc() { c.val.add(1) }

// Add adds f, which must not be negative.
func (c *Counter) Add(f float64) {
	if f < 0 {
		panic(fmt.Sprintf("%s: counter cannot decrease in value (Add %v)", c.vec.name, f))
	}
	c.val.add(f)
}

func (c *Counter) constMetric() prometheus.Metric {
	return prometheus.MustNewConstMetricWithCreatedTimestamp(c.vec.desc, prometheus.CounterValue,
		c.val.load(), time.Unix(0, c.created), c.lvs...)
}

// Desc implements prometheus.Metric.
func (c *Counter) Desc() *prometheus.Desc { return c.vec.desc }

// Write implements prometheus.Metric.
func (c *Counter) Write(m *dto.Metric) error { return c.constMetric().Write(m) }

// Describe implements prometheus.Collector: the series alone.
func (c *Counter) Describe(ch chan<- *prometheus.Desc) { ch <- c.vec.desc }

// Collect implements prometheus.Collector: the series alone.
func (c *Counter) Collect(ch chan<- prometheus.Metric) { ch <- c.constMetric() }

// GaugeVec is a gauge family by label values.
type GaugeVec struct{ *vec[Gauge] }

// NewGaugeVec creates a gauge family; register it as any collector.
func NewGaugeVec(name, help string, labels []string) *GaugeVec {
	v := &GaugeVec{newVec[Gauge](name, help, labels)}
	v.newSeries = func(lvs []string) *Gauge { return &Gauge{vec: v.vec, lvs: lvs} }
	v.metric = (*Gauge).constMetric
	return v
}

// WithLabelValues returns the series of the label values, created at 0 if
// new; it panics on a wrong number of values, as client_golang does.
func (v *GaugeVec) WithLabelValues(lvs ...string) *Gauge { return v.withLabelValues(lvs) }

// DeleteLabelValues removes the series of the label values, reporting
// whether there was one.
func (v *GaugeVec) DeleteLabelValues(lvs ...string) bool { return v.delete(lvs) }

// Len is the number of series.
func (v *GaugeVec) Len() int { return v.count() }

// Gauge is one series of a GaugeVec.
type Gauge struct {
	vec *vec[Gauge]
	val value
	lvs []string
}

var _ prometheus.Gauge = (*Gauge)(nil)

// Set sets the value.
func (g *Gauge) Set(f float64) { g.val.store(f) }

// Inc adds 1.
func (g *Gauge) Inc() { g.val.add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.val.add(-1) }

// Add adds f.
func (g *Gauge) Add(f float64) { g.val.add(f) }

// Sub subtracts f.
func (g *Gauge) Sub(f float64) { g.val.add(-f) }

// SetToCurrentTime sets the value to the Unix time in seconds.
func (g *Gauge) SetToCurrentTime() {
	g.val.store(float64(g.vec.now().UnixNano()) / 1e9)
}

func (g *Gauge) constMetric() prometheus.Metric {
	return prometheus.MustNewConstMetric(g.vec.desc, prometheus.GaugeValue, g.val.load(), g.lvs...)
}

// Desc implements prometheus.Metric.
func (g *Gauge) Desc() *prometheus.Desc { return g.vec.desc }

// Write implements prometheus.Metric.
func (g *Gauge) Write(m *dto.Metric) error { return g.constMetric().Write(m) }

// Describe implements prometheus.Collector: the series alone.
func (g *Gauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.vec.desc }

// Collect implements prometheus.Collector: the series alone.
func (g *Gauge) Collect(ch chan<- prometheus.Metric) { ch <- g.constMetric() }
