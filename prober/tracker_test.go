package prober

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Segment names of testPipeline.
const (
	segInsert  = config.SegmentInsertToCommit
	segRead    = "commit_to_read"
	segRelay   = "read_to_publish"
	segBroker  = "publish_to_consume"
	segE2E     = config.SegmentEndToEnd
	segPublish = "commit_to_publish" // plainPipeline only
)

// plainPipeline has no extra stamp: commit_to_publish, publish_to_consume.
func plainPipeline() config.Pipeline {
	p := testPipeline()
	p.Name = "payments"
	p.Relay.Stamps = nil
	p.Budgets = config.Budgets{
		segE2E:     config.Duration(2 * time.Second),
		segPublish: config.Duration(time.Second),
		segBroker:  config.Duration(500 * time.Millisecond),
	}
	return p
}

// harness drives trackers of one pipeline with an injected clock, across
// simulated restarts (each with a fresh registry, as a new process has).
type harness struct {
	t       *testing.T
	p       config.Pipeline
	now     time.Time
	path    string
	lookup  func(ctx context.Context, c Canary) (map[string]time.Time, error)
	metrics []*Metrics // one per process, oldest first
	tr      *Tracker
	offset  int64
}

func newHarness(t *testing.T, p config.Pipeline, persist bool) *harness {
	t.Helper()
	h := &harness{t: t, p: p, now: t0}
	if persist {
		h.path = filepath.Join(t.TempDir(), p.Name+".json")
	}
	h.restart()
	return h
}

// restart starts a new "process": new registry and metrics, a new tracker
// loading the same state file.
func (h *harness) restart() {
	h.t.Helper()
	m, err := NewMetrics(prometheus.NewPedanticRegistry(), []config.Pipeline{h.p})
	if err != nil {
		h.t.Fatal(err)
	}
	tr, err := NewTracker(TrackerOptions{
		Pipeline: &h.p, Instance: "test-1", Metrics: m, Now: func() time.Time { return h.now },
		StatePath: h.path, LookupStamps: func(ctx context.Context, c Canary) (map[string]time.Time, error) {
			if h.lookup == nil {
				return nil, nil
			}
			return h.lookup(ctx, c)
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.metrics, h.tr = append(h.metrics, m), tr
}

func (h *harness) m() *Metrics { return h.metrics[len(h.metrics)-1] }

// at sets the clock to t0 + d.
func (h *harness) at(d time.Duration) { h.now = t0.Add(d) }

func (h *harness) sweep(d time.Duration) {
	h.at(d)
	h.tr.Sweep(context.Background())
}

// send records a canary committed now, inserted 50ms earlier.
func (h *harness) send(id string, seq uint64) Canary {
	h.t.Helper()
	c := Canary{ID: id, Seq: seq, Pipeline: h.p.Name, Key: "k", RowID: fmt.Sprint(seq),
		InsertStarted: h.now.Add(-50 * time.Millisecond), Committed: h.now}
	if err := h.tr.Sent(c); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// arrive delivers c at the next offset, consumed now, with stamps given as
// offsets from its commit.
func (h *harness) arrive(c Canary, stamps map[string]time.Duration) Outcome {
	a := Arrival{CanaryID: c.ID, Seq: c.Seq, Key: c.Key, Partition: 0, Offset: h.offset, Consumed: h.now,
		Stamps: map[string]time.Time{}}
	h.offset++
	for s, d := range stamps {
		a.Stamps[s] = c.Committed.Add(d)
	}
	return h.tr.Arrived(a)
}

// sli sums good and bad events of a segment over every process so far.
func (h *harness) sli(seg string) [2]float64 {
	var out [2]float64
	for _, m := range h.metrics {
		out[0] += testutil.ToFloat64(m.SLIEvents.WithLabelValues(h.p.Name, seg, slo.OutcomeGood))
		out[1] += testutil.ToFloat64(m.SLIEvents.WithLabelValues(h.p.Name, seg, slo.OutcomeBad))
	}
	return out
}

func (h *harness) sum(vec func(*Metrics) *prometheus.CounterVec, labels ...string) float64 {
	var n float64
	for _, m := range h.metrics {
		n += testutil.ToFloat64(vec(m).WithLabelValues(append([]string{h.p.Name}, labels...)...))
	}
	return n
}

// observed is the histogram sample count of a segment over every process.
func (h *harness) observed(seg string) uint64 {
	h.t.Helper()
	var n uint64
	for _, m := range h.metrics {
		var pb dto.Metric
		if err := m.SegmentLatency[h.p.Name].WithLabelValues(seg).(prometheus.Metric).Write(&pb); err != nil {
			h.t.Fatal(err)
		}
		n += pb.GetHistogram().GetSampleCount()
	}
	return n
}

var healthy = map[string]time.Duration{"read": 300 * time.Millisecond, config.StampPublish: 600 * time.Millisecond}

func TestTrackerSegments(t *testing.T) {
	type want = map[string][2]float64 // segment -> {good, bad}; absent = none
	cases := []struct {
		name     string
		pipeline func() config.Pipeline
		persist  bool
		run      func(t *testing.T, h *harness)
		want     want
		observed map[string]uint64 // absent = 0
	}{
		{
			name: "A healthy canary is good on every segment and its segments add up to end to end.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				out := h.arrive(c, healthy)
				if out.Kind != KindFirst || out.Late || out.OutOfOrder {
					t.Errorf("outcome = %+v, want a first, timely, in-order arrival", out)
				}
				var sum, e2e time.Duration
				for _, s := range out.Segments {
					switch s.Segment {
					case segRead, segRelay, segBroker:
						sum += s.Duration
					case segE2E:
						e2e = s.Duration
					}
				}
				if sum != e2e || e2e != 800*time.Millisecond {
					t.Errorf("chain sums to %v, end to end is %v, want both 800ms", sum, e2e)
				}
				h.sweep(10 * time.Minute) // nothing more to count, ever
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesLate }); got != 0 {
					t.Errorf("late = %v, want 0 for a timely canary", got)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name:     "Without extra stamps commit_to_publish and publish_to_consume add up to end to end.",
			pipeline: plainPipeline,
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(700 * time.Millisecond)
				out := h.arrive(c, map[string]time.Duration{config.StampPublish: 450 * time.Millisecond})
				d := map[string]time.Duration{}
				for _, s := range out.Segments {
					d[s.Segment] = s.Duration
				}
				if d[segPublish]+d[segBroker] != d[segE2E] {
					t.Errorf("%v + %v != %v", d[segPublish], d[segBroker], d[segE2E])
				}
			},
			want:     want{segPublish: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segPublish: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A canary past its deadlines is bad at each deadline, and its late arrival is observed once and not counted again.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.sweep(time.Second) // exactly at commit_to_read's deadline: not yet late
				if got := h.sli(segRead); got != [2]float64{} {
					t.Fatalf("commit_to_read at its deadline = %v, want nothing yet", got)
				}
				h.sweep(time.Second + time.Millisecond)
				if got := h.sli(segRead); got != [2]float64{0, 1} {
					t.Fatalf("commit_to_read just past its deadline = %v, want bad", got)
				}
				h.sweep(2*time.Second + time.Millisecond)
				if got := h.sli(segE2E); got != [2]float64{0, 1} {
					t.Fatalf("end_to_end just past its deadline = %v, want bad (not at lost_after)", got)
				}
				h.at(3 * time.Second)
				out := h.arrive(c, map[string]time.Duration{"read": 1500 * time.Millisecond, config.StampPublish: 1700 * time.Millisecond})
				if !out.Late || out.Kind != KindFirst {
					t.Errorf("outcome = %+v, want a late first arrival", out)
				}
				h.at(3100 * time.Millisecond)
				h.arrive(c, nil) // a duplicate of a late canary is not late again
				h.sweep(3 * time.Minute)
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesLate }); got != 1 {
					t.Errorf("late = %v, want 1: counted once per canary", got)
				}
			},
			// read_to_publish (200ms) and publish_to_consume (1.3s) had not
			// started as far as the prober could see: judged on arrival.
			want:     want{segInsert: {1, 0}, segRead: {0, 1}, segRelay: {1, 0}, segBroker: {0, 1}, segE2E: {0, 1}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A canary that never arrives is lost after lost_after, with only its stuck segment and end to end bad.",
			run: func(t *testing.T, h *harness) {
				h.send("a", 1)
				for d := time.Duration(0); d <= 2*time.Minute; d += 250 * time.Millisecond {
					h.sweep(d)
					if d == 59*time.Second && h.tr.InFlight() != 1 {
						t.Fatalf("in flight before lost_after = %d, want 1", h.tr.InFlight())
					}
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesLost }); got != 1 {
					t.Errorf("lost = %v, want 1", got)
				}
				if n, g := h.tr.InFlight(), testutil.ToFloat64(h.m().InFlight.WithLabelValues("orders")); n != 0 || g != 0 {
					t.Errorf("in flight = %d (gauge %v), want 0", n, g)
				}
				if r := h.tr.Recent(1); len(r) != 1 || r[0].State != StateLost {
					t.Errorf("recent = %+v, want the lost canary", r)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {0, 1}, segE2E: {0, 1}},
			observed: map[string]uint64{segInsert: 1},
		},
		{
			name: "A canary that arrives after being declared lost feeds the histograms and counts no SLI event.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				for d := time.Duration(0); d <= 61*time.Second; d += time.Second {
					h.sweep(d)
				}
				h.at(90 * time.Second)
				if out := h.arrive(c, healthy); out.Kind != KindFirst || !out.Late {
					t.Errorf("outcome = %+v, want a late first arrival", out)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesLate }); got != 1 {
					t.Errorf("late = %v, want 1", got)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {0, 1}, segE2E: {0, 1}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A duplicate is counted as such and never as a second SLI event.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				h.arrive(c, healthy)
				h.at(900 * time.Millisecond)
				if out := h.arrive(c, healthy); out.Kind != KindDuplicate {
					t.Errorf("second arrival kind = %v, want duplicate", out.Kind)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesDuplicate }); got != 1 {
					t.Errorf("duplicates = %v, want 1", got)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesReceived }); got != 1 {
					t.Errorf("received = %v, want 1", got)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A canary arriving after a later canary of its key is out of order, and both are judged once.",
			run: func(t *testing.T, h *harness) {
				c1 := h.send("a", 1)
				h.at(100 * time.Millisecond)
				c2 := h.send("b", 2)
				h.at(800 * time.Millisecond)
				if out := h.arrive(c2, healthy); out.OutOfOrder {
					t.Errorf("the later canary was flagged out of order")
				}
				h.at(900 * time.Millisecond)
				if out := h.arrive(c1, healthy); !out.OutOfOrder || out.Kind != KindFirst {
					t.Errorf("outcome = %+v, want a first arrival out of order", out)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.CanariesOutOfOrder }); got != 1 {
					t.Errorf("out of order = %v, want 1", got)
				}
			},
			want:     want{segInsert: {2, 0}, segRead: {2, 0}, segRelay: {2, 0}, segBroker: {2, 0}, segE2E: {2, 0}},
			observed: map[string]uint64{segInsert: 2, segRead: 2, segRelay: 2, segBroker: 2, segE2E: 2},
		},
		{
			name:    "After a restart, a message below the stored next offset is a replay and counts nothing.",
			persist: true,
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				h.offset = 41
				h.arrive(c, healthy)
				h.restart()
				if got := h.tr.StartOffsets(); !maps.Equal(got, map[int]int64{0: 42}) {
					t.Errorf("start offsets = %v, want partition 0 at 42", got)
				}
				h.offset = 41
				if out := h.arrive(c, healthy); out.Kind != KindReplay {
					t.Errorf("re-read message kind = %v, want replay", out.Kind)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name:    "A restart between Sent and arrival still counts exactly one SLI event per segment.",
			persist: true,
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.restart()
				if h.tr.InFlight() != 1 {
					t.Fatalf("in flight after restart = %d, want 1", h.tr.InFlight())
				}
				h.at(800 * time.Millisecond)
				if out := h.arrive(c, healthy); out.Kind != KindFirst {
					t.Errorf("kind = %v, want first", out.Kind)
				}
				h.restart()
				h.sweep(5 * time.Minute)
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name:    "A deadline that passed while the prober was down is bad on the first Sweep after restart, once.",
			persist: true,
			run: func(t *testing.T, h *harness) {
				h.send("a", 1)
				h.at(5 * time.Second) // down from 0 to 5s
				h.restart()
				h.sweep(5 * time.Second)
				if got := h.sli(segE2E); got != [2]float64{0, 1} {
					t.Fatalf("end_to_end after the first sweep = %v, want bad", got)
				}
				h.sweep(6 * time.Second)
				h.restart()
				h.sweep(7 * time.Second)
			},
			want:     want{segInsert: {1, 0}, segRead: {0, 1}, segE2E: {0, 1}},
			observed: map[string]uint64{segInsert: 1},
		},
		{
			name: "A negative segment counts suspected skew, is not observed, and is good.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				out := h.arrive(c, map[string]time.Duration{"read": 600 * time.Millisecond, config.StampPublish: 300 * time.Millisecond})
				if s := out.Segments[slices.IndexFunc(out.Segments, func(s SegmentResult) bool { return s.Segment == segRelay })]; !s.Skew || s.Duration != -300*time.Millisecond {
					t.Errorf("read_to_publish = %+v, want -300ms flagged as skew, not clamped", s)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.ClockSkew }, segRelay); got != 1 {
					t.Errorf("skew suspected = %v, want 1", got)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A segment negative within the skew tolerance is observed as measured and not flagged as skew.",
			run: func(t *testing.T, h *harness) {
				h.p.Relay.SkewTolerance = config.Duration(50 * time.Millisecond)
				h.restart()
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				out := h.arrive(c, map[string]time.Duration{"read": 600 * time.Millisecond, config.StampPublish: 598 * time.Millisecond})
				if s := out.Segments[slices.IndexFunc(out.Segments, func(s SegmentResult) bool { return s.Segment == segRelay })]; s.Skew || s.Duration != -2*time.Millisecond {
					t.Errorf("read_to_publish = %+v, want -2ms measured, not flagged", s)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.ClockSkew }, segRelay); got != 0 {
					t.Errorf("skew suspected = %v, want 0 within the tolerance", got)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A looked-up publish stamp moves the blame of a broker stall to publish_to_consume, and nothing else is counted if it is lost.",
			run: func(t *testing.T, h *harness) {
				var calls []time.Time
				h.lookup = func(_ context.Context, c Canary) (map[string]time.Time, error) {
					calls = append(calls, h.now)
					return map[string]time.Time{config.StampPublish: c.Committed.Add(400 * time.Millisecond)}, nil
				}
				h.send("a", 1)
				h.sweep(999 * time.Millisecond)
				if len(calls) != 0 {
					t.Fatalf("looked up before any deadline passed")
				}
				h.sweep(1001 * time.Millisecond)
				if len(calls) != 1 {
					t.Fatalf("lookups = %d, want 1 at commit_to_read's deadline", len(calls))
				}
				if got := h.sli(segBroker); got != [2]float64{0, 1} {
					t.Fatalf("publish_to_consume = %v, want bad as soon as the stall is proven", got)
				}
				for d := time.Second; d <= 2*time.Minute; d += 250 * time.Millisecond {
					h.sweep(d)
				}
				if len(calls) != 1 {
					t.Errorf("lookups = %d, want no more once publish is known", len(calls))
				}
			},
			want:     want{segInsert: {1, 0}, segBroker: {0, 1}, segE2E: {0, 1}},
			observed: map[string]uint64{segInsert: 1},
		},
		{
			name:     "A deadline that passes while a lookup runs is judged by the next sweep, after its own lookup, not blamed on the relay.",
			pipeline: plainPipeline,
			run: func(t *testing.T, h *harness) {
				var looked []string
				h.lookup = func(_ context.Context, c Canary) (map[string]time.Time, error) {
					looked = append(looked, c.ID)
					h.now = h.now.Add(600 * time.Millisecond) // a slow database
					return map[string]time.Time{config.StampPublish: c.Committed.Add(400 * time.Millisecond)}, nil
				}
				h.send("a", 1)
				h.at(500 * time.Millisecond)
				h.send("b", 2)
				// a's commit_to_publish deadline (1s) has passed, b's (1.5s)
				// passes during a's lookup, which ends at 1.601s.
				h.sweep(1001 * time.Millisecond)
				if got := h.sli(segPublish); got != [2]float64{1, 0} {
					t.Fatalf("commit_to_publish after the first sweep = %v, want a's good and b not judged yet", got)
				}
				h.sweep(1700 * time.Millisecond)
				if !slices.Equal(looked, []string{"a", "b"}) {
					t.Errorf("looked up %v, want a then b", looked)
				}
			},
			// Both published at +400ms and stuck in the broker since.
			want:     want{segPublish: {2, 0}, segBroker: {0, 2}},
			observed: map[string]uint64{segInsert: 2, segPublish: 2},
		},
		{
			name: "A lookup that finds no publish stamp leaves the blame on the relay.",
			run: func(t *testing.T, h *harness) {
				h.lookup = func(context.Context, Canary) (map[string]time.Time, error) { return nil, nil }
				h.send("a", 1)
				for d := time.Duration(0); d <= 2*time.Minute; d += 250 * time.Millisecond {
					h.sweep(d)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {0, 1}, segE2E: {0, 1}},
			observed: map[string]uint64{segInsert: 1},
		},
		{
			name: "A failing lookup leaves the blame on the relay.",
			run: func(t *testing.T, h *harness) {
				h.lookup = func(context.Context, Canary) (map[string]time.Time, error) { return nil, errors.New("db down") }
				h.send("a", 1)
				h.sweep(1001 * time.Millisecond)
			},
			want:     want{segInsert: {1, 0}, segRead: {0, 1}},
			observed: map[string]uint64{segInsert: 1},
		},
		{
			name: "A stamp missing from the message leaves its two segments unjudged and is counted.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				h.arrive(c, map[string]time.Duration{config.StampPublish: 600 * time.Millisecond})
				// The stamp is looked up for a while (the lookup finds
				// nothing: a header stamp is only in the message), then
				// given up on.
				for d := time.Second; d <= 15*time.Second; d += 250 * time.Millisecond {
					h.sweep(d)
				}
				r := h.tr.Recent(1)[0]
				for _, s := range r.Segments {
					if (s.Segment == segRead || s.Segment == segRelay) != (s.MissingStamp == "read") {
						t.Errorf("%s: missing stamp %q", s.Segment, s.MissingStamp)
					}
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.StampsMissing }, "read"); got != 1 {
					t.Errorf("stamps missing{read} = %v, want 1", got)
				}
			},
			want:     want{segInsert: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segBroker: 1, segE2E: 1},
		},
		{
			name:     "A polling canary's publish stamp is looked up after arrival and its segments judged then.",
			pipeline: plainPipeline,
			run: func(t *testing.T, h *harness) {
				h.lookup = func(_ context.Context, c Canary) (map[string]time.Time, error) {
					if h.now.Before(t0.Add(time.Second)) {
						return nil, nil // the relay has not committed published_at yet
					}
					return map[string]time.Time{config.StampPublish: c.Committed.Add(450 * time.Millisecond)}, nil
				}
				c := h.send("a", 1)
				h.at(700 * time.Millisecond)
				if out := h.arrive(c, nil); out.Kind != KindFirst {
					t.Fatalf("kind = %v", out.Kind)
				}
				done := make(chan Report, 1)
				go func() {
					r, err := h.tr.Await(context.Background(), "a")
					if err != nil {
						t.Error(err)
					}
					done <- r
				}()
				h.sweep(750 * time.Millisecond) // lookup finds nothing yet
				h.sweep(800 * time.Millisecond) // backing off: no lookup
				h.sweep(2 * time.Second)        // past the jittered backoff (500ms ± 50%)
				r := <-done
				if s := r.Segments[segPublish]; !s.Measured || s.Duration != 450*time.Millisecond || s.Outcome != slo.OutcomeGood {
					t.Errorf("report commit_to_publish = %+v, want 450ms good", s)
				}
			},
			want:     want{segPublish: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segPublish: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A canary of this instance missing from the state is skipped as unknown, not an SLI event.",
			run: func(t *testing.T, h *harness) {
				h.at(time.Second)
				out := h.arrive(Canary{ID: "ghost", Seq: 7, Key: "k", Committed: t0}, healthy)
				if out.Kind != KindUnknown {
					t.Errorf("kind = %v, want unknown", out.Kind)
				}
				if got := h.sum(func(m *Metrics) *prometheus.CounterVec { return m.MessagesSkipped }, ReasonUnknownCanary); got != 1 {
					t.Errorf("skipped unknown_canary = %v, want 1", got)
				}
			},
		},
		{
			name: "A resolved canary is forgotten after twice lost_after; a copy arriving later is unknown.",
			run: func(t *testing.T, h *harness) {
				c := h.send("a", 1)
				h.at(800 * time.Millisecond)
				h.arrive(c, healthy)
				h.sweep(2*time.Minute + time.Second)
				if out := h.arrive(c, healthy); out.Kind != KindUnknown {
					t.Errorf("kind = %v, want unknown once forgotten", out.Kind)
				}
			},
			want:     want{segInsert: {1, 0}, segRead: {1, 0}, segRelay: {1, 0}, segBroker: {1, 0}, segE2E: {1, 0}},
			observed: map[string]uint64{segInsert: 1, segRead: 1, segRelay: 1, segBroker: 1, segE2E: 1},
		},
		{
			name: "A slow insert transaction is bad on insert_to_commit at Sent.",
			run: func(t *testing.T, h *harness) {
				c := Canary{ID: "a", Seq: 1, Key: "k", InsertStarted: t0.Add(-time.Second), Committed: t0}
				if err := h.tr.Sent(c); err != nil {
					t.Fatal(err)
				}
			},
			want:     want{segInsert: {0, 1}},
			observed: map[string]uint64{segInsert: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPipeline()
			if tc.pipeline != nil {
				p = tc.pipeline()
			}
			h := newHarness(t, p, tc.persist)
			tc.run(t, h)
			for _, seg := range append([]string{segInsert}, p.Segments()...) {
				if got := h.sli(seg); got != tc.want[seg] {
					t.Errorf("%s SLI events {good, bad} = %v, want %v", seg, got, tc.want[seg])
				}
				if got := h.observed(seg); got != tc.observed[seg] {
					t.Errorf("%s observed %d times, want %d", seg, got, tc.observed[seg])
				}
			}
		})
	}
}

func TestTrackerAwait(t *testing.T) {
	h := newHarness(t, testPipeline(), false)
	if _, err := h.tr.Await(context.Background(), "nope"); !errors.Is(err, ErrUnknownCanary) {
		t.Errorf("await unknown: err = %v, want ErrUnknownCanary", err)
	}
	c := h.send("a", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.tr.Await(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("await cancelled: err = %v, want context.Canceled", err)
	}
	done := make(chan Report, 1)
	go func() {
		r, err := h.tr.Await(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	h.at(800 * time.Millisecond)
	h.arrive(c, healthy)
	r := <-done
	if r.State != StateArrived || r.Segments[segE2E].Duration != 800*time.Millisecond || r.Segments[segE2E].Outcome != slo.OutcomeGood {
		t.Errorf("report = %+v, want arrived, end to end 800ms good", r)
	}
	if again, err := h.tr.Await(context.Background(), "a"); err != nil || again.State != StateArrived {
		t.Errorf("await after arrival = %+v, %v; want the report at once", again, err)
	}
}

func TestTrackerSweepJudgesDeadlinesWhenEveryLookupHangs(t *testing.T) {
	h := newHarness(t, plainPipeline(), false)
	h.tr.lookupTimeout = 20 * time.Millisecond // lookupTimeoutMax is 2s
	lookups := make(chan bool, 10)
	h.lookup = func(ctx context.Context, _ Canary) (map[string]time.Time, error) {
		_, bounded := ctx.Deadline()
		lookups <- bounded
		<-ctx.Done() // a hung database
		return nil, ctx.Err()
	}
	for i, id := range []string{"a", "b", "c"} {
		h.send(id, uint64(i+1))
	}
	h.at(2001 * time.Millisecond)
	done := make(chan struct{})
	go func() { defer close(done); h.tr.Sweep(context.Background()) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Sweep did not return while its lookups hung")
	}
	if bounded := <-lookups; !bounded {
		t.Error("the lookup's context has no deadline")
	}
	if got := h.sli(segE2E); got != [2]float64{0, 3} {
		t.Errorf("end_to_end = %v, want 3 bad: deadlines are judged although no lookup answered", got)
	}
	// Unable to prove progress, the blame stays on the relay.
	if got := h.sli(segPublish); got != [2]float64{0, 3} {
		t.Errorf("commit_to_publish = %v, want 3 bad", got)
	}
}

func TestTrackerRestoresTheLastTimesAfterARestart(t *testing.T) {
	gauges := func(h *harness) [3]float64 {
		m := h.m()
		return [3]float64{
			testutil.ToFloat64(m.LastSent.WithLabelValues(h.p.Name)),
			testutil.ToFloat64(m.LastReceived.WithLabelValues(h.p.Name)),
			testutil.ToFloat64(m.LastSuccess.WithLabelValues(h.p.Name)),
		}
	}
	h := newHarness(t, testPipeline(), true)
	c := h.send("a", 1)
	h.at(800 * time.Millisecond)
	h.arrive(c, healthy)
	h.at(5 * time.Second)
	h.send("b", 2)
	h.at(8 * time.Second)
	h.arrive(Canary{ID: "b", Seq: 2, Key: "k", Committed: t0.Add(5 * time.Second)}, healthy) // late: not a success
	want := [3]float64{unixSeconds(t0.Add(5 * time.Second)), unixSeconds(t0.Add(8 * time.Second)), unixSeconds(t0.Add(800 * time.Millisecond))}
	if got := gauges(h); got != want {
		t.Fatalf("gauges {sent, received, success} before the restart = %v, want %v", got, want)
	}
	h.restart()
	if got := gauges(h); got != want {
		t.Errorf("gauges {sent, received, success} after the restart = %v, want %v: the stall alert needs them", got, want)
	}

	// A state file written before the times were persisted still loads.
	if err := os.WriteFile(h.path, []byte(`{"version":1,"pipeline":"orders","instance":"test-1","canaries":[],"next_offset_by_partition":{"0":7}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if got := gauges(h); got != [3]float64{} {
		t.Errorf("gauges from a file without times = %v, want 0s", got)
	}
	if got := h.tr.StartOffsets()[0]; got != 7 {
		t.Errorf("next offset = %d, want 7 from the older file", got)
	}
}

func TestTrackerArrivalThatOvertakesSent(t *testing.T) {
	counter := func(h *harness, vec func(*Metrics) *prometheus.CounterVec, labels ...string) float64 {
		return h.sum(vec, labels...)
	}
	received := func(m *Metrics) *prometheus.CounterVec { return m.CanariesReceived }
	skipped := func(m *Metrics) *prometheus.CounterVec { return m.MessagesSkipped }
	duplicate := func(m *Metrics) *prometheus.CounterVec { return m.CanariesDuplicate }
	lost := func(m *Metrics) *prometheus.CounterVec { return m.CanariesLost }
	c := Canary{ID: "a", Seq: 1, Pipeline: "orders", Key: "k", RowID: "1", InsertStarted: t0.Add(-50 * time.Millisecond), Committed: t0}

	t.Run("An arrival between COMMIT and Sent is parked and resolved by Sent with its own consumed stamp.", func(t *testing.T) {
		h := newHarness(t, testPipeline(), true)
		h.tr.Expect(c.ID)
		h.at(800 * time.Millisecond)
		if out := h.arrive(c, healthy); out.Kind != KindPending {
			t.Fatalf("kind = %v, want pending", out.Kind)
		}
		if got := counter(h, skipped, ReasonUnknownCanary); got != 0 {
			t.Fatalf("skipped unknown_canary = %v, want 0", got)
		}
		h.at(900 * time.Millisecond) // Sent runs later than the arrival
		if err := h.tr.Sent(c); err != nil {
			t.Fatal(err)
		}
		h.at(950 * time.Millisecond)
		h.arrive(c, healthy) // a duplicate after Sent
		for d := time.Second; d <= 90*time.Second; d += 10 * time.Second {
			h.sweep(d) // past lost_after: it must not be lost
		}
		if got := [3]float64{counter(h, received), counter(h, duplicate), counter(h, lost)}; got != [3]float64{1, 1, 0} {
			t.Errorf("{received, duplicate, lost} = %v, want {1, 1, 0}", got)
		}
		if got := h.sli(segE2E); got != [2]float64{1, 0} {
			t.Errorf("end_to_end = %v, want one good event", got)
		}
		if r := h.tr.Recent(1); len(r) != 1 || r[0].Segments[segE2E].Duration != 800*time.Millisecond {
			t.Errorf("recent = %+v, want end_to_end measured to the parked consumed stamp (800ms)", r)
		}
		h.restart()
		if out := h.arrive(Canary{ID: "a", Seq: 1, Key: "k", Committed: t0}, healthy); out.Kind == KindReplay {
			t.Errorf("offset of the next message taken for a replay")
		}
	})

	t.Run("A parked arrival whose insert then reports a failure is skipped as unknown.", func(t *testing.T) {
		h := newHarness(t, testPipeline(), false)
		h.tr.Expect(c.ID)
		h.at(800 * time.Millisecond)
		if out := h.arrive(c, healthy); out.Kind != KindPending {
			t.Fatalf("kind = %v, want pending", out.Kind)
		}
		h.tr.Abandon(c.ID)
		if got := counter(h, skipped, ReasonUnknownCanary); got != 1 {
			t.Errorf("skipped unknown_canary = %v, want 1", got)
		}
		if got := counter(h, received); got != 0 {
			t.Errorf("received = %v, want 0", got)
		}
		h.at(900 * time.Millisecond)
		if out := h.arrive(c, healthy); out.Kind != KindUnknown {
			t.Errorf("kind after Abandon = %v, want unknown", out.Kind)
		}
	})
}

func TestTrackerResetOffsetAllowsLowerOffsets(t *testing.T) {
	h := newHarness(t, testPipeline(), true)
	h.tr.Skipped(0, 999)
	h.tr.ResetOffset(0, 0)
	if err := h.tr.Flush(); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if h.tr.Skipped(0, 0) {
		t.Error("offset 0 of a recreated partition taken for a replay")
	}
}

func TestTrackerSkippedOffsetsSurviveARestart(t *testing.T) {
	h := newHarness(t, testPipeline(), true)
	if h.tr.Skipped(3, 10) {
		t.Fatal("first skip reported as a replay")
	}
	if err := h.tr.Flush(); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if !h.tr.Skipped(3, 10) {
		t.Error("skip of an offset processed before the restart not reported as a replay")
	}
	if h.tr.Skipped(3, 11) {
		t.Error("a new offset reported as a replay")
	}
}

func TestTrackerRefusesAnotherPipelinesState(t *testing.T) {
	h := newHarness(t, testPipeline(), true)
	h.send("a", 1)
	other := plainPipeline()
	m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{other})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewTracker(TrackerOptions{Pipeline: &other, Instance: "test-1", Metrics: m, StatePath: h.path})
	if err == nil {
		t.Fatal("a tracker loaded another pipeline's state file")
	}
}

// BenchmarkTrackerPersist measures one durable state write (what every
// Sent and Arrived costs) with a realistic state: a canary every 5s kept
// for 2 x lost_after of 5m is about 120 canaries.
func BenchmarkTrackerPersist(b *testing.B) {
	p := testPipeline()
	p.Canary.LostAfter = config.Duration(5 * time.Minute)
	m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{p})
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	tr, err := NewTracker(TrackerOptions{Pipeline: &p, Instance: "bench", Metrics: m,
		Now: func() time.Time { return now }, StatePath: filepath.Join(b.TempDir(), "orders.json")})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 120 {
		c := Canary{ID: fmt.Sprintf("c%03d", i), Seq: uint64(i), Key: "k", InsertStarted: now, Committed: now}
		if err := tr.Sent(c); err != nil {
			b.Fatal(err)
		}
		tr.Arrived(Arrival{CanaryID: c.ID, Key: "k", Offset: int64(i), Consumed: now.Add(time.Second),
			Stamps: map[string]time.Time{"read": now, config.StampPublish: now}})
		now = now.Add(5 * time.Second)
	}
	b.ResetTimer()
	for b.Loop() {
		tr.mu.Lock()
		err := tr.persistLocked()
		tr.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
}
