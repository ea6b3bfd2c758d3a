package compactvec

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Registry is a prometheus.Registry that writes the families of the
// vectors of this package itself, one family at a time (Stream), instead
// of gathering every series into one slice of metric objects first.
//
// At 300 pipelines a registry's Gather made about 58 000 metric objects,
// 27 MB, all alive until the scrape was encoded: a garbage collection in
// the middle of the scrape saw them as live heap and set its next target
// (GOGC) on top of them, which is what set the prober's peak RSS, and the
// registry's per-series checks (a hash of every series' labels, one map
// entry each) were most of a scrape's CPU. Here a family's series are
// written into buffers reused from family to family and from scrape to
// scrape, encoded, and dropped; only the largest family's worth is held.
//
// The registry's checks still apply to what can go wrong: each vector's
// descriptor is registered with the inner registry (describe-only), so a
// name registered twice or with other labels is refused at Register, as
// before; a vector's series are unique by construction (a map by label
// values), and their label values checked as UTF-8 when created.
type Registry struct {
	inner *prometheus.Registry

	mu  sync.Mutex
	own []family // by name

	// One Stream at a time: they share the buffers.
	streaming sync.Mutex
	buf       buffers
}

// family is a vector of this package, as a registry sees it.
type family interface {
	prometheus.Collector
	familyName() string
	familyHelp() string
	familyType() dto.MetricType
	// appendMetrics writes every series of the vector into b, in the
	// order a registry sorts them to.
	appendMetrics(b *buffers)
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{inner: prometheus.NewRegistry()} }

// describeOnly stands for a vector in the inner registry: its
// descriptor, for the registry's consistency checks, and no series.
type describeOnly struct{ f family }

func (d describeOnly) Describe(ch chan<- *prometheus.Desc) { d.f.Describe(ch) }
func (describeOnly) Collect(chan<- prometheus.Metric)      {}

// Register implements prometheus.Registerer.
func (r *Registry) Register(c prometheus.Collector) error {
	f, ok := c.(family)
	if !ok {
		return r.inner.Register(c)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.own, func(o family) bool { return o == f }) {
		return prometheus.AlreadyRegisteredError{ExistingCollector: c, NewCollector: c}
	}
	if err := r.inner.Register(describeOnly{f}); err != nil {
		return err
	}
	// After the vectors of the same name: a family spread over several
	// keeps their order of registration.
	i, _ := slices.BinarySearchFunc(r.own, f.familyName(), func(o family, name string) int {
		if c := strings.Compare(o.familyName(), name); c != 0 {
			return c
		}
		return -1
	})
	r.own = slices.Insert(r.own, i, f)
	return nil
}

// MustRegister implements prometheus.Registerer.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (r *Registry) Unregister(c prometheus.Collector) bool {
	f, ok := c.(family)
	if !ok {
		return r.inner.Unregister(c)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.own, func(o family) bool { return o == f })
	if i < 0 {
		return false
	}
	r.own = slices.Delete(r.own, i, i+1)
	return r.inner.Unregister(describeOnly{f})
}

// Gather implements prometheus.Gatherer: every family, as a registry
// gathers them, in metric objects of their own (for tests and callers
// that keep what they gather; /metrics uses Stream).
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	var out []*dto.MetricFamily
	err := r.Stream(func(mf *dto.MetricFamily) error {
		c := &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit}
		for _, m := range mf.Metric {
			// A copy whose fields point into the buffers: the buffers'
			// values are only read, and the next Stream reuses them, so
			// the copy's own values are taken from them now.
			c.Metric = append(c.Metric, cloneMetric(m))
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// Stream calls each with every family with at least one series, in name
// order as a registry gathers them. The family passed and its metrics are
// valid only during the call. An error of the inner registry's Gather
// comes back before each is called; one of each stops the stream.
func (r *Registry) Stream(each func(*dto.MetricFamily) error) error {
	inner, err := r.inner.Gather()
	if err != nil {
		return err
	}
	r.mu.Lock()
	own := slices.Clone(r.own)
	r.mu.Unlock()

	r.streaming.Lock()
	defer r.streaming.Unlock()
	b := &r.buf
	var mf dto.MetricFamily
	for len(own) > 0 || len(inner) > 0 {
		if len(own) == 0 || (len(inner) > 0 && inner[0].GetName() < own[0].familyName()) {
			if err := each(inner[0]); err != nil {
				return err
			}
			inner = inner[1:]
			continue
		}
		name := own[0].familyName()
		if len(inner) > 0 && inner[0].GetName() == name {
			return fmt.Errorf("metric family %s is collected by both a compact vector and another collector", name)
		}
		n := 1
		for n < len(own) && own[n].familyName() == name {
			n++
		}
		b.reset()
		for _, f := range own[:n] {
			f.appendMetrics(b)
		}
		if n > 1 {
			// Vectors of one family (const labels of their own) answer one
			// after the other: sorted here as a registry sorts a family.
			slices.SortStableFunc(b.family, compareLabels)
		}
		if len(b.family) > 0 {
			help, typ := own[0].familyHelp(), own[0].familyType()
			mf = dto.MetricFamily{Name: &name, Help: &help, Type: &typ, Metric: b.family}
			if err := each(&mf); err != nil {
				return err
			}
		}
		own = own[n:]
	}
	b.reset()
	return nil
}

// compareLabels orders metrics of one family as a registry does: by their
// label values, labels in name order.
func compareLabels(a, b *dto.Metric) int {
	for i := range min(len(a.Label), len(b.Label)) {
		if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.Label), len(b.Label))
}

// cloneMetric copies what this package writes into a metric.
func cloneMetric(m *dto.Metric) *dto.Metric {
	c := &dto.Metric{}
	for _, p := range m.Label {
		c.Label = append(c.Label, &dto.LabelPair{Name: new(p.GetName()), Value: new(p.GetValue())})
	}
	switch {
	case m.Counter != nil:
		c.Counter = &dto.Counter{Value: new(m.Counter.GetValue())}
		if t := m.Counter.CreatedTimestamp; t != nil {
			c.Counter.CreatedTimestamp = &timestamppb.Timestamp{Seconds: t.Seconds, Nanos: t.Nanos}
		}
	case m.Gauge != nil:
		c.Gauge = &dto.Gauge{Value: new(m.Gauge.GetValue())}
	case m.Histogram != nil:
		c.Histogram = m.Histogram // written afresh at each scrape, never reused
	}
	return c
}

// chunk is how many values a buffer allocates at once.
const chunk = 512

// pool hands out values from chunks that are reused after reset: a
// value's address stays valid until then.
type pool[T any] struct {
	chunks [][]T
	c, i   int
}

func (p *pool[T]) next() *T {
	if p.c == len(p.chunks) {
		p.chunks = append(p.chunks, make([]T, chunk))
	}
	x := &p.chunks[p.c][p.i]
	var zero T
	*x = zero
	if p.i++; p.i == chunk {
		p.c, p.i = p.c+1, 0
	}
	return x
}

// slice returns n consecutive values (n <= chunk).
func (p *pool[T]) slice(n int) []T {
	if p.i+n > chunk {
		p.c, p.i = p.c+1, 0
	}
	if p.c == len(p.chunks) {
		p.chunks = append(p.chunks, make([]T, chunk))
	}
	s := p.chunks[p.c][p.i : p.i+n : p.i+n]
	clear(s)
	if p.i += n; p.i == chunk {
		p.c, p.i = p.c+1, 0
	}
	return s
}

func (p *pool[T]) reset() { p.c, p.i = 0, 0 }

// buffers are what one family's series are written into.
type buffers struct {
	family   []*dto.Metric
	metrics  pool[dto.Metric]
	pairs    pool[dto.LabelPair]
	pairPtrs pool[*dto.LabelPair]
	counters pool[exposedCounter]
	gauges   pool[exposedGauge]
}

func (b *buffers) reset() {
	clear(b.family)
	b.family = b.family[:0]
	b.metrics.reset()
	b.pairs.reset()
	b.pairPtrs.reset()
	b.counters.reset()
	b.gauges.reset()
}

// metric returns a new metric of the family, with the label pairs of a
// series of v with label values lvs.
func (b *buffers) metric(pairs []labelSlot, lvs []string) *dto.Metric {
	if len(pairs) > chunk {
		panic(errors.New("compactvec: more labels than a buffer chunk"))
	}
	m := b.metrics.next()
	values := b.pairs.slice(len(pairs))
	ptrs := b.pairPtrs.slice(len(pairs))
	for i, slot := range pairs {
		p := &values[i]
		p.Name = slot.name
		if slot.variable >= 0 {
			p.Value = &lvs[slot.variable]
		} else {
			p.Value = slot.constant
		}
		ptrs[i] = p
	}
	m.Label = ptrs
	b.family = append(b.family, m)
	return m
}

// The vectors as families of a Registry.

func (v *vec[S]) familyName() string { return v.name }
func (v *vec[S]) familyHelp() string { return v.help }

func (*CounterVec) familyType() dto.MetricType   { return dto.MetricType_COUNTER }
func (*GaugeVec) familyType() dto.MetricType     { return dto.MetricType_GAUGE }
func (*HistogramVec) familyType() dto.MetricType { return dto.MetricType_HISTOGRAM }

func (v *CounterVec) appendMetrics(b *buffers) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.exposed {
		m := b.metric(v.pairs, c.lvs)
		e := b.counters.next()
		e.value = c.val.load()
		created := time.Unix(0, c.created)
		e.created.Seconds, e.created.Nanos = created.Unix(), int32(created.Nanosecond())
		e.counter.Value, e.counter.CreatedTimestamp = &e.value, &e.created
		m.Counter = &e.counter
	}
}

func (v *GaugeVec) appendMetrics(b *buffers) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, g := range v.exposed {
		m := b.metric(v.pairs, g.lvs)
		e := b.gauges.next()
		e.value = g.val.load()
		e.gauge.Value = &e.value
		m.Gauge = &e.gauge
	}
}

// appendMetrics of histograms writes each with Write, which makes its
// buckets afresh: they are few (a vector per pipeline, a series per
// segment).
func (v *HistogramVec) appendMetrics(b *buffers) {
	v.mu.RLock()
	all := slices.Clone(v.exposed)
	v.mu.RUnlock()
	for _, h := range all {
		m := b.metrics.next()
		if err := h.Write(m); err != nil {
			continue // Write fails on nothing today
		}
		b.family = append(b.family, m)
	}
}
