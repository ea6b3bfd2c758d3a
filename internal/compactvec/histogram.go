package compactvec

import (
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// HistogramOpts are a histogram family's options: classic buckets and
// native (sparse, exponential) buckets both, as client_golang's
// HistogramOpts with the same names describe them.
type HistogramOpts struct {
	Name, Help  string
	ConstLabels prometheus.Labels
	// Buckets are the classic upper bounds, sorted (+Inf is implied).
	Buckets []float64
	// NativeBucketFactor (> 1) picks the native resolution: the largest
	// schema whose bucket growth is at most the factor.
	NativeBucketFactor float64
	// NativeMaxBuckets caps the native buckets of a series (0: no cap).
	// Beyond it, a series whose last reset is NativeMinResetDuration old
	// is reset (as client_golang does, a counter reset to Prometheus);
	// otherwise its buckets are merged in pairs (the schema goes down by
	// one), and it is reset once NativeMinResetDuration has passed.
	NativeMaxBuckets       int
	NativeMinResetDuration time.Duration
}

// nativeZeroThreshold is client_golang's default: only 0 (and values
// below 2^-128) fall in the zero bucket.
const nativeZeroThreshold = prometheus.DefNativeHistogramZeroThreshold

// Schemas of native histograms, as Prometheus defines them.
const (
	minSchema = -4
	maxSchema = 8
)

// fracBounds[s] are, for schema s > 0, the lower bounds of the buckets
// within one power of two, as fractions of it in [0.5, 1): a value's
// bucket is found from its frexp fraction without a logarithm, so values
// on a bound are where the Prometheus specification puts them. Each
// schema's odd bounds are the previous schema's, for precision.
var fracBounds = func() [][]float64 {
	out := make([][]float64, maxSchema+1)
	n := 1
	for s := range out {
		bounds := []float64{0.5}
		growth := math.Exp2(math.Exp2(float64(-s)))
		for j := 0; j < n-1; j++ {
			if (j+1)%2 == 0 {
				bounds = append(bounds, out[s-1][j/2+1])
			} else {
				bounds = append(bounds, bounds[j]*growth)
			}
		}
		out[s] = bounds
		n *= 2
	}
	return out
}()

// schemaFor is the largest schema whose bucket growth 2^(2^-schema) is at
// most factor.
func schemaFor(factor float64) (int32, error) {
	if factor <= 1 {
		return 0, errors.New("native bucket factor must be above 1")
	}
	floor := math.Floor(math.Log2(math.Log2(factor)))
	return int32(min(maxSchema, max(minSchema, -floor))), nil
}

// nativeKey is the index of the native bucket of |v| at schema.
func nativeKey(v float64, schema int32) int {
	inf := math.IsInf(v, 0)
	if inf {
		v = math.MaxFloat64
	}
	frac, exp := math.Frexp(math.Abs(v))
	var key int
	if schema > 0 {
		bounds := fracBounds[schema]
		key = sort.SearchFloat64s(bounds, frac) + (exp-1)*len(bounds)
	} else {
		key = exp
		if frac == 0.5 {
			key--
		}
		key = (key + (1 << -schema) - 1) >> -schema
	}
	if inf {
		key++
	}
	return key
}

// nativeBucket is one populated native bucket.
type nativeBucket struct {
	key   int32
	count uint64
}

// nativeBuckets are one side's populated buckets, sorted by key: a
// latency histogram fills a few dozen, a slice costs 16 bytes each where
// client_golang's two sync.Maps cost about 260.
type nativeBuckets []nativeBucket

func (b *nativeBuckets) add(key int32, n uint64) (created bool) {
	i, found := slices.BinarySearchFunc(*b, key, func(e nativeBucket, k int32) int { return int(e.key) - int(k) })
	if found {
		(*b)[i].count += n
		return false
	}
	*b = slices.Insert(*b, i, nativeBucket{key: key, count: n})
	return true
}

// halve merges the buckets in pairs, for a schema one lower.
func (b nativeBuckets) halve() nativeBuckets {
	var out nativeBuckets
	for _, e := range b {
		k := e.key
		if k > 0 {
			k++
		}
		out.add(k/2, e.count)
	}
	return out
}

// spans encodes the buckets as Prometheus's exposition does: a gap of up
// to two empty buckets stays in the span (as empty buckets), a longer one
// starts a new span; counts are deltas from the previous bucket's.
func (b nativeBuckets) spans() ([]*dto.BucketSpan, []int64) {
	if len(b) == 0 {
		return nil, nil
	}
	var (
		spans  []*dto.BucketSpan
		deltas []int64
		prev   int64
		next   int32
	)
	appendDelta := func(count int64) {
		*spans[len(spans)-1].Length++
		deltas = append(deltas, count-prev)
		prev = count
	}
	for i, e := range b {
		gap := e.key - next
		if i == 0 || gap > 2 {
			spans = append(spans, &dto.BucketSpan{Offset: new(gap), Length: new(uint32(0))})
		} else {
			for range gap {
				appendDelta(0)
			}
		}
		appendDelta(int64(e.count))
		next = e.key + 1
	}
	return spans, deltas
}

// HistogramVec is a histogram family by label values.
type HistogramVec struct {
	*vec[Histogram]
	opts   HistogramOpts
	schema int32
}

// NewHistogramVec creates a histogram family; register it as any
// collector. Bad options (no bucket factor above 1, unsorted buckets)
// are an error.
func NewHistogramVec(o HistogramOpts, labels []string) (*HistogramVec, error) {
	schema, err := schemaFor(o.NativeBucketFactor)
	if err != nil {
		return nil, err
	}
	if !slices.IsSorted(o.Buckets) || slices.ContainsFunc(o.Buckets, math.IsNaN) {
		return nil, errors.New("classic buckets must be sorted numbers")
	}
	o.Buckets = slices.Clone(o.Buckets)
	if n := len(o.Buckets); n > 0 && math.IsInf(o.Buckets[n-1], +1) {
		o.Buckets = o.Buckets[:n-1] // implied
	}
	v := &HistogramVec{vec: newVecConst[Histogram](o.Name, o.Help, labels, o.ConstLabels), opts: o, schema: schema}
	v.newSeries = func(lvs []string) *Histogram {
		h := &Histogram{vec: v, lvs: lvs, classic: make([]uint64, len(o.Buckets))}
		h.resetLocked(v.now())
		return h
	}
	v.metric = func(h *Histogram) prometheus.Metric { return h }
	v.labelValues = func(h *Histogram) []string { return h.lvs }
	return v, nil
}

// WithLabelValues returns the series of the label values, created empty
// if new; it panics on a wrong number of values, as client_golang does.
func (v *HistogramVec) WithLabelValues(lvs ...string) *Histogram { return v.withLabelValues(lvs) }

// GetMetricWithLabelValues is WithLabelValues with an error, not a panic.
func (v *HistogramVec) GetMetricWithLabelValues(lvs ...string) (*Histogram, error) { return v.get(lvs) }

// Len is the number of series.
func (v *HistogramVec) Len() int { return v.count() }

// Histogram is one series of a HistogramVec. Observations are rare (a
// canary's segments) and scrapes rarer: one mutex guards it all.
type Histogram struct {
	vec *HistogramVec
	lvs []string

	mu       sync.Mutex
	resetAt  time.Time // created, or last reset: the created timestamp
	count    uint64
	sum      float64
	classic  []uint64 // per bounded bucket, not cumulative (+Inf's is the rest of count)
	schema   int32
	zero     uint64
	positive nativeBuckets
	negative nativeBuckets
	widened  bool // the schema was lowered: reset once NativeMinResetDuration has passed
}

var _ prometheus.Observer = (*Histogram)(nil)

// resetLocked empties the series at now.
func (h *Histogram) resetLocked(now time.Time) {
	h.resetAt, h.count, h.sum, h.zero = now, 0, 0, 0
	clear(h.classic)
	h.schema, h.positive, h.negative, h.widened = h.vec.schema, nil, nil, false
}

// Observe adds one observation.
func (h *Histogram) Observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resetIfDueLocked()
	h.observeLocked(v)
}

func (h *Histogram) observeLocked(v float64) {
	o := &h.vec.opts
	h.count++
	h.sum += v
	if math.IsNaN(v) {
		return // counted and summed, in the +Inf bucket and no native one (as client_golang)
	}
	if i, _ := slices.BinarySearch(o.Buckets, v); i < len(o.Buckets) {
		h.classic[i]++
	}
	var created bool
	switch key := int32(nativeKey(v, h.schema)); {
	case v > nativeZeroThreshold:
		created = h.positive.add(key, 1)
	case v < -nativeZeroThreshold:
		created = h.negative.add(key, 1)
	default:
		h.zero++
	}
	if created && o.NativeMaxBuckets > 0 && len(h.positive)+len(h.negative) > o.NativeMaxBuckets {
		h.limitLocked(v)
	}
}

// limitLocked brings the native buckets under the cap after v made one
// too many: a reset if the last is NativeMinResetDuration old (v is then
// observed again, alone), else buckets twice as wide (once: a series still
// over the cap widens again at its next new bucket, as client_golang's).
func (h *Histogram) limitLocked(v float64) {
	if now := h.vec.now(); now.Sub(h.resetAt) >= h.vec.opts.NativeMinResetDuration {
		h.resetLocked(now)
		h.observeLocked(v)
		return
	}
	if h.schema > minSchema {
		h.schema--
		h.positive, h.negative = h.positive.halve(), h.negative.halve()
		h.widened = true
	}
}

// resetIfDueLocked resets a series whose buckets were widened once
// NativeMinResetDuration has passed since its last reset, back to the
// full resolution.
func (h *Histogram) resetIfDueLocked() {
	if now := h.vec.now(); h.widened && now.Sub(h.resetAt) >= h.vec.opts.NativeMinResetDuration {
		h.resetLocked(now)
	}
}

// Desc implements prometheus.Metric.
func (h *Histogram) Desc() *prometheus.Desc { return h.vec.desc }

// Write implements prometheus.Metric: classic and native buckets in one
// series, as client_golang writes a histogram with both.
func (h *Histogram) Write(out *dto.Metric) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resetIfDueLocked()
	o := &h.vec.opts
	his := &dto.Histogram{
		SampleCount:      new(h.count),
		SampleSum:        new(h.sum),
		CreatedTimestamp: timestamppb.New(h.resetAt),
		Bucket:           make([]*dto.Bucket, len(o.Buckets)),
		Schema:           new(h.schema),
		ZeroThreshold:    new(float64(nativeZeroThreshold)),
		ZeroCount:        new(h.zero),
	}
	// The classic buckets in three allocations rather than three each;
	// their upper bounds are the family's own.
	buckets := make([]dto.Bucket, len(o.Buckets))
	cumulative := make([]uint64, len(o.Buckets))
	var sum uint64
	for i := range o.Buckets {
		sum += h.classic[i]
		cumulative[i] = sum
		b := &buckets[i]
		b.CumulativeCount, b.UpperBound = &cumulative[i], &o.Buckets[i]
		his.Bucket[i] = b
	}
	his.NegativeSpan, his.NegativeDelta = h.negative.spans()
	his.PositiveSpan, his.PositiveDelta = h.positive.spans()
	out.Histogram = his
	out.Label = h.vec.labelPairs(h.lvs)
	return nil
}

// Describe implements prometheus.Collector: the series alone.
func (h *Histogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.vec.desc }

// Collect implements prometheus.Collector: the series alone.
func (h *Histogram) Collect(ch chan<- prometheus.Metric) { ch <- h }
