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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// keySeparator cannot occur in valid UTF-8, so joined label values are
// unambiguous (client_golang hashes with the same separator).
const keySeparator = "\xff"

// vec is what counter, gauge and histogram vectors share: the series by
// joined label values, and in the order a registry sorts them to.
type vec[S any] struct {
	desc        *prometheus.Desc
	name, help  string
	labels      int
	now         func() time.Time
	newSeries   func(lvs []string) *S
	metric      func(*S) prometheus.Metric
	labelValues func(*S) []string
	pairs       []labelSlot

	mu     sync.RWMutex
	series map[string]*S
	// exposed holds the series in the registry's order: a registry sorts
	// every family at each gather, and at 300 pipelines sorting series
	// collected in map order was a fifth of a scrape's CPU, where sorted
	// input costs one pass. That holds within one collector: a family
	// spread over several (the prober's latency histograms, one vector per
	// pipeline) reaches the sort in the order the collectors answer.
	exposed []*S
}

// labelSlot is one label pair of a series as exposed: its name, and its
// value's index in the series' label values, or a constant value.
type labelSlot struct {
	name     *string
	variable int // -1 for a constant label
	constant *string
}

func newVecConst[S any](name, help string, labels []string, constLabels prometheus.Labels) *vec[S] {
	labels = slices.Clone(labels) // its strings are the exposed names
	var pairs []labelSlot
	for i := range labels {
		pairs = append(pairs, labelSlot{name: &labels[i], variable: i})
	}
	for l, value := range constLabels {
		pairs = append(pairs, labelSlot{name: new(l), variable: -1, constant: new(value)})
	}
	// As client_golang orders a metric's label pairs.
	slices.SortFunc(pairs, func(a, b labelSlot) int { return strings.Compare(*a.name, *b.name) })
	return &vec[S]{
		desc:   prometheus.NewDesc(name, help, labels, constLabels),
		name:   name,
		help:   help,
		labels: len(labels),
		now:    time.Now,
		pairs:  pairs,
		series: map[string]*S{},
	}
}

// labelPairs are the label pairs of a series with label values lvs, in
// two allocations; names and values are shared, not copied.
func (v *vec[S]) labelPairs(lvs []string) []*dto.LabelPair {
	values := make([]dto.LabelPair, len(v.pairs))
	out := make([]*dto.LabelPair, len(v.pairs))
	for i, slot := range v.pairs {
		p := &values[i]
		p.Name = slot.name
		if slot.variable >= 0 {
			p.Value = &lvs[slot.variable]
		} else {
			p.Value = slot.constant
		}
		out[i] = p
	}
	return out
}

// compareExposed orders label values as a registry orders series: by
// label value, labels taken in name order (constant ones are the same for
// every series).
func (v *vec[S]) compareExposed(a, b []string) int {
	for _, slot := range v.pairs {
		if slot.variable >= 0 {
			if c := strings.Compare(a[slot.variable], b[slot.variable]); c != 0 {
				return c
			}
		}
	}
	return 0
}

// exposedIndex is where a series with label values lvs is, or would be,
// in v.exposed. The caller holds v.mu.
// (A search by hand: slices.BinarySearchFunc would pass lvs to a func
// value, moving the caller's label values to the heap at every lookup.)
func (v *vec[S]) exposedIndex(lvs []string) (int, bool) {
	low, high := 0, len(v.exposed)
	for low < high {
		mid := int(uint(low+high) >> 1)
		if v.compareExposed(v.labelValues(v.exposed[mid]), lvs) < 0 {
			low = mid + 1
		} else {
			high = mid
		}
	}
	return low, low < len(v.exposed) && v.compareExposed(v.labelValues(v.exposed[low]), lvs) == 0
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
	i, _ := v.exposedIndex(lvs)
	v.exposed = slices.Insert(v.exposed, i, s)
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
	if _, ok := v.series[key]; !ok {
		return false
	}
	delete(v.series, key)
	if i, ok := v.exposedIndex(lvs); ok {
		v.exposed = slices.Delete(v.exposed, i, i+1)
	}
	return true
}

// Describe implements prometheus.Collector.
func (v *vec[S]) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector: every series, in the order the
// registry sorts them to.
func (v *vec[S]) Collect(ch chan<- prometheus.Metric) {
	v.mu.RLock()
	all := slices.Clone(v.exposed)
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
	v := &CounterVec{newVecConst[Counter](name, help, labels, nil)}
	v.newSeries = func(lvs []string) *Counter {
		return &Counter{vec: v.vec, lvs: lvs, created: v.now().UnixNano()}
	}
	v.metric = func(c *Counter) prometheus.Metric { return c }
	v.labelValues = func(c *Counter) []string { return c.lvs }
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

// Desc implements prometheus.Metric.
func (c *Counter) Desc() *prometheus.Desc { return c.vec.desc }

// exposedCounter is what a counter writes, in one allocation.
type exposedCounter struct {
	counter dto.Counter
	value   float64
	created timestamppb.Timestamp
}

// Write implements prometheus.Metric: what client_golang's constant
// counter with a created timestamp writes.
func (c *Counter) Write(m *dto.Metric) error {
	e := &exposedCounter{value: c.val.load()}
	created := time.Unix(0, c.created)
	e.created.Seconds, e.created.Nanos = created.Unix(), int32(created.Nanosecond())
	e.counter.Value, e.counter.CreatedTimestamp = &e.value, &e.created
	m.Counter = &e.counter
	m.Label = c.vec.labelPairs(c.lvs)
	return nil
}

// Describe implements prometheus.Collector: the series alone.
func (c *Counter) Describe(ch chan<- *prometheus.Desc) { ch <- c.vec.desc }

// Collect implements prometheus.Collector: the series alone.
func (c *Counter) Collect(ch chan<- prometheus.Metric) { ch <- c }

// GaugeVec is a gauge family by label values.
type GaugeVec struct{ *vec[Gauge] }

// NewGaugeVec creates a gauge family; register it as any collector.
func NewGaugeVec(name, help string, labels []string) *GaugeVec {
	v := &GaugeVec{newVecConst[Gauge](name, help, labels, nil)}
	v.newSeries = func(lvs []string) *Gauge { return &Gauge{vec: v.vec, lvs: lvs} }
	v.metric = func(g *Gauge) prometheus.Metric { return g }
	v.labelValues = func(g *Gauge) []string { return g.lvs }
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

// Desc implements prometheus.Metric.
func (g *Gauge) Desc() *prometheus.Desc { return g.vec.desc }

// exposedGauge is what a gauge writes, in one allocation.
type exposedGauge struct {
	gauge dto.Gauge
	value float64
}

// Write implements prometheus.Metric: what client_golang's constant gauge
// writes.
func (g *Gauge) Write(m *dto.Metric) error {
	e := &exposedGauge{value: g.val.load()}
	e.gauge.Value = &e.value
	m.Gauge = &e.gauge
	m.Label = g.vec.labelPairs(g.lvs)
	return nil
}

// Describe implements prometheus.Collector: the series alone.
func (g *Gauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.vec.desc }

// Collect implements prometheus.Collector: the series alone.
func (g *Gauge) Collect(ch chan<- prometheus.Metric) { ch <- g }
