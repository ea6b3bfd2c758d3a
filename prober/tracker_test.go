package prober

// Tests of the tracker, the shell around the judge: the fence, persistence
// across restarts, the lookups, the callbacks. The judge's rules are
// tested in package judge, against a model.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// plainPipeline has no extra stamp and takes the publish stamp from the
// record: commit_to_publish, publish_to_consume.
func plainPipeline() config.Pipeline {
	p := testPipeline()
	p.Name = "payments"
	p.Relay = config.Relay{Kind: config.RelayCDC, PublishedStamp: config.PublishedFromRecordTimestamp,
		MaxClockSkew: config.Duration(time.Minute)}
	p.Budgets = config.Budgets{
		config.SegmentEndToEnd: config.Duration(2 * time.Second),
		"commit_to_publish":    config.Duration(time.Second),
		"publish_to_consume":   config.Duration(500 * time.Millisecond),
	}
	return p
}

// errStampAbsent is what a harness lookup returns for a stamp that is not
// there (yet).
var errStampAbsent = errors.New("stamp absent")

// harness drives trackers of one pipeline with an injected clock, across
// simulated restarts (each with a fresh registry, as a new process has).
type harness struct {
	t      *testing.T
	p      config.Pipeline
	mu     sync.Mutex
	now    time.Time
	path   string
	lookup func(ctx context.Context, c Canary) (LookupResult, error)
	// lookups reads for every tracker of the harness, each round at once
	// (no spacing: the tests' clock jumps ahead of real time).
	lookups *Lookups
	metrics []*Metrics // one per process, oldest first
	tr      *Tracker
	offset  int64
	logs    *stacktest.SyncBuffer
	onDone  func(Report)
	// commitDelay is the trackers' CommitDelay: newHarness writes every
	// change at once, as most tests assume; group commit has its own.
	commitDelay time.Duration
}

func newHarness(t *testing.T, p config.Pipeline, persist bool) *harness {
	t.Helper()
	h := &harness{t: t, p: p, now: t0, logs: &stacktest.SyncBuffer{}, commitDelay: -1}
	h.lookups = NewLookups(LookupsOptions{Interval: -1, Read: h.read})
	if persist {
		h.path = filepath.Join(t.TempDir(), p.Name+".json")
	}
	h.restart()
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
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
		Pipeline: &h.p, Instance: "test-1", Metrics: m, Now: h.clock, Logger: h.logs.Logger(),
		StatePath: h.path, CommitDelay: h.commitDelay, OnDone: func(r Report) {
			if h.onDone != nil {
				h.onDone(r)
			}
		},
		Lookups: h.lookups,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.metrics, h.tr = append(h.metrics, m), tr
}

// persistTo makes a tracker that kept its state in memory write it to
// path from now on, with a journal beside it.
func (h *harness) persistTo(path string) {
	h.t.Helper()
	h.tr.store.path = path
	sj, err := openStateJournal(path+journalSuffix, h.logs.Logger())
	if err != nil {
		h.t.Fatal(err)
	}
	sj.loaded()
	h.tr.store.journal = sj
}

// segments lists the tracker's journal segments, oldest first.
func (h *harness) segments() []string {
	h.t.Helper()
	names, err := filepath.Glob(h.path + journalSuffix + ".*")
	if err != nil {
		h.t.Fatal(err)
	}
	return names
}

// syncs is how many fsyncs the tracker made, of snapshots and journal.
func (h *harness) syncs() int64 {
	return h.tr.store.stats.syncs + h.tr.store.journal.syncCount()
}

// read plays the database one canary at a time, by h.lookup.
func (h *harness) read(ctx context.Context, cs []Canary) (map[string]LookupResult, error) {
	found := map[string]LookupResult{}
	for _, c := range cs {
		if h.lookup == nil {
			continue
		}
		res, err := h.lookup(ctx, c)
		switch {
		case errors.Is(err, errStampAbsent):
		case err != nil:
			return nil, err
		default:
			found[c.ID] = res
		}
	}
	return found, nil
}

func (h *harness) m() *Metrics { return h.metrics[len(h.metrics)-1] }

// at sets the clock to t0 + d.
func (h *harness) at(d time.Duration) {
	h.mu.Lock()
	h.now = t0.Add(d)
	h.mu.Unlock()
}

func (h *harness) sweep(d time.Duration) {
	h.at(d)
	h.tr.Sweep()
}

// send records a canary committed now, inserted 50ms earlier.
func (h *harness) send(id string, seq uint64) Canary {
	h.t.Helper()
	now := h.clock()
	c := Canary{ID: id, Seq: seq, Pipeline: h.p.Name, Key: "k", RowID: id,
		InsertStarted: now.Add(-50 * time.Millisecond), CommitSent: now.Add(-time.Millisecond), Committed: now}
	if err := h.tr.Sent(c); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// arrive delivers c at the next offset, consumed now, with stamps given as
// offsets from its commit.
func (h *harness) arrive(c Canary, stamps map[string]time.Duration) Outcome {
	token, consumed := h.tr.BeginArrival(time.Time{})
	a := Arrival{CanaryID: c.ID, Seq: c.Seq, Key: c.Key, Partition: 0, Offset: h.offset, Consumed: consumed,
		Stamps: map[string]time.Time{}}
	h.offset++
	for s, d := range stamps {
		a.Stamps[s] = c.Committed.Add(d)
	}
	return h.tr.Arrived(token, a)
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

func TestTheFenceKeepsASweepFromJudgingPastAnArrivalNotYetHandedOver(t *testing.T) {
	h := newHarness(t, plainPipeline(), false)
	c := h.send("a", 1)
	// The message is fetched at 1.9s (end_to_end budget 2s); a sweep runs
	// at 2.5s before the arrival reaches the tracker (the consumer was
	// descheduled, or waited for the lock).
	h.at(1900 * time.Millisecond)
	token, consumed := h.tr.BeginArrival(time.Time{})
	h.sweep(2500 * time.Millisecond)
	if got := h.sli(config.SegmentEndToEnd); got != [2]float64{0, 0} {
		t.Fatalf("end_to_end events %v before the fenced arrival was handed over, want none", got)
	}
	h.tr.Arrived(token, Arrival{CanaryID: c.ID, Seq: 1, Key: "k", Offset: 0, Consumed: consumed,
		Stamps: map[string]time.Time{config.StampPublish: t0.Add(time.Second)}})
	if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
		t.Errorf("end_to_end events %v, want one good: it was consumed inside its budget", got)
	}
}

func TestTheFenceHoldsASweepAtAMessageItsReaderReceivedAndHasNotHandedOver(t *testing.T) {
	h := newHarness(t, plainPipeline(), false)
	c := h.send("a", 1)
	// The fetch's answer is read at 1.9s (end_to_end budget 2s); the
	// reader's goroutine hands the message over at 2.5s, after a sweep.
	received := t0.Add(1900 * time.Millisecond)
	handedOver := false
	h.tr.FenceFetched(func() (time.Time, bool) { return received, !handedOver })
	h.sweep(2500 * time.Millisecond)
	if got := h.sli(config.SegmentEndToEnd); got != [2]float64{0, 0} {
		t.Fatalf("end_to_end events %v before the received message was handed over, want none", got)
	}
	token, consumed := h.tr.BeginArrival(received)
	handedOver = true
	if !consumed.Equal(received) {
		t.Errorf("consume stamp %s, want the reader's %s", consumed, received)
	}
	h.tr.Arrived(token, Arrival{CanaryID: c.ID, Seq: 1, Key: "k", Offset: 0, Consumed: consumed,
		Stamps: map[string]time.Time{config.StampPublish: t0.Add(time.Second)}})
	if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
		t.Errorf("end_to_end events %v, want one good: it was received inside its budget", got)
	}
}

func TestARestartLosesNoVerdictAndRepeatsNone(t *testing.T) {
	h := newHarness(t, plainPipeline(), true)
	a := h.send("a", 1)
	b := h.send("b", 2)
	h.at(300 * time.Millisecond)
	h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
	// kill -9 here, back 10s later: b was published meanwhile.
	h.at(10 * time.Second)
	h.restart()
	if out := h.tr.Arrived(0, Arrival{CanaryID: "a", Seq: 1, Key: "k", Offset: 0, Consumed: t0.Add(10 * time.Second)}); out.Kind != KindReplay {
		t.Errorf("a's offset after the restart is %v, want a replay", out.Kind)
	}
	h.sweep(10*time.Second + 100*time.Millisecond)
	h.arrive(b, map[string]time.Duration{config.StampPublish: 200 * time.Millisecond})
	if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
		t.Errorf("end_to_end events over both processes %v, want a's good only", got)
	}
	if got := testutil.ToFloat64(h.m().CanariesUnjudged.WithLabelValues(h.p.Name, config.SegmentEndToEnd, judge.ReasonProberDown)); got != 1 {
		t.Errorf("b's end_to_end unjudged as prober_down %v times, want once: the prober's downtime is nobody's segment", got)
	}
	if got := h.sli("commit_to_publish"); got != [2]float64{2, 0} {
		t.Errorf("commit_to_publish events %v, want both good: the relay was fine", got)
	}
}

func TestTheGaugesComeBackAfterARestart(t *testing.T) {
	h := newHarness(t, plainPipeline(), true)
	c := h.send("a", 1)
	h.at(300 * time.Millisecond)
	h.arrive(c, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
	before := map[string]float64{}
	gauges := map[string]*compactvec.GaugeVec{"last_sent": h.m().LastSent, "last_received": h.m().LastReceived, "last_success": h.m().LastSuccess}
	for name, g := range gauges {
		before[name] = testutil.ToFloat64(g.WithLabelValues(h.p.Name))
	}
	h.restart()
	for name, g := range gauges {
		// The times the first process saw, not zero (the stall alert
		// would go blind) and not the restart's own time (a stall would
		// look fresh).
		if got := testutil.ToFloat64(g.WithLabelValues(h.p.Name)); got == 0 || got != before[name] {
			t.Errorf("%s after the restart = %v, want %v as before it", name, got, before[name])
		}
	}
}

func TestAStateFileThisReleaseCannotUseIsMovedAsideAndCounted(t *testing.T) {
	cases := []struct {
		name, content, reason string
	}{
		{"A truncated file is moved aside as corrupt.", `{"version":2,"pipe`, StateResetCorrupt},
		{"An older release's file is moved aside.", `{"version":1,"pipeline":"payments","canaries":[]}`, StateResetVersion},
		{"A newer release's file is moved aside.", `{"version":99,"pipeline":"payments"}`, StateResetVersion},
		{"Another pipeline's file is moved aside.", `{"version":2,"pipeline":"orders","judge":{"canaries":{}}}`, StateResetPipeline},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "payments.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			h := &harness{t: t, p: plainPipeline(), now: t0, path: path, logs: &stacktest.SyncBuffer{}, commitDelay: -1}
			h.restart() // must not fail: the service never bricks on its own file
			if got := testutil.ToFloat64(h.m().StateResets.WithLabelValues("payments", tc.reason)); got != 1 {
				t.Errorf("state resets{reason=%s} = %v, want 1", tc.reason, got)
			}
			entries, _ := os.ReadDir(dir)
			var aside []string
			for _, e := range entries {
				aside = append(aside, e.Name())
			}
			if len(entries) != 1 || !strings.HasPrefix(aside[0], "payments.json."+tc.reason+"-") {
				t.Errorf("directory holds %v, want only the file moved aside with its reason and a timestamp", aside)
			}
			if !strings.Contains(h.logs.String(), "moved aside") {
				t.Errorf("not logged:\n%s", h.logs.String())
			}
			h.send("a", 1) // and the pipeline works afresh
			if _, err := os.Stat(path); err != nil {
				t.Errorf("no new state file: %v", err)
			}
		})
	}
}

func TestAFailedStateWriteIsCountedAndTheCanaryKeptInMemory(t *testing.T) {
	h := newHarness(t, plainPipeline(), false)
	h.persistTo(filepath.Join(t.TempDir(), "missing-dir", "payments.json"))
	err := h.tr.Sent(Canary{ID: "a", Seq: 1, Key: "k", InsertStarted: t0, CommitSent: t0, Committed: t0})
	if err == nil || !strings.Contains(err.Error(), "tracked in memory only") {
		t.Fatalf("err = %v, want it to say the canary is tracked in memory only", err)
	}
	if got := testutil.ToFloat64(h.m().StateWriteFailures.WithLabelValues("payments")); got != 1 {
		t.Errorf("state write failures = %v, want 1", got)
	}
	if h.tr.InFlight() != 1 {
		t.Errorf("in flight %d, want the canary still tracked", h.tr.InFlight())
	}
}

// A read-only or full state directory fails every write: the log says so
// once, and once more when writes work again, as for a dependency.
func TestFailingStateWritesAreLoggedOnceAndTheirRecovery(t *testing.T) {
	h := newHarness(t, plainPipeline(), false)
	dir := filepath.Join(t.TempDir(), "missing-dir")
	h.persistTo(filepath.Join(dir, "payments.json"))
	for i, id := range []string{"a", "b", "c"} {
		if err := h.tr.Sent(Canary{ID: id, Seq: uint64(i + 1), Key: "k", InsertStarted: t0, CommitSent: t0, Committed: t0}); err == nil {
			t.Fatalf("Sent(%s) succeeded with no state directory", id)
		}
	}
	if got := strings.Count(h.logs.String(), "state writes failing"); got != 1 {
		t.Fatalf("%d warnings for 3 failed writes, want 1:\n%s", got, h.logs.String())
	}
	if strings.Contains(h.logs.String(), "state writes work again") {
		t.Fatalf("recovery logged while failing:\n%s", h.logs.String())
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.tr.Sent(Canary{ID: "d", Seq: 4, Key: "k", InsertStarted: t0, CommitSent: t0, Committed: t0}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(h.logs.String(), "state writes work again"); got != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", got, h.logs.String())
	}
}

func TestLookupsRunOutsideTheLockAndDecideWhenTheStampComes(t *testing.T) {
	p := testPipeline() // published_at with a read header
	p.Relay.PublishedStamp, p.Relay.MaxClockSkew = config.PublishedFromColumn, config.Duration(time.Minute)
	h := newHarness(t, p, false)
	var mu sync.Mutex
	published := map[string]time.Time{}
	started := make(chan string, 10)
	h.lookup = func(_ context.Context, c Canary) (LookupResult, error) {
		started <- c.ID
		mu.Lock()
		defer mu.Unlock()
		if ts, ok := published[c.ID]; ok {
			return LookupResult{Stamps: map[string]time.Time{config.StampPublish: ts}}, nil
		}
		return LookupResult{}, errStampAbsent
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.lookups.Run(ctx)
	c := h.send("a", 1)
	h.at(400 * time.Millisecond)
	h.arrive(c, map[string]time.Duration{"read": 100 * time.Millisecond})
	h.sweep(400*time.Millisecond + lookupSettle)
	receiveWithin(t, started, "the first lookup of published_at") // after the settle time; it reads NULL
	mu.Lock()
	published["a"] = t0.Add(300 * time.Millisecond)
	mu.Unlock()
	done := make(chan Report, 1)
	go func() {
		r, err := h.tr.Await(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// Each sweep asks again once the canary's backoff allows.
		h.at(h.clock().Sub(t0) + time.Second)
		h.tr.Sweep()
		select {
		case r := <-done:
			if s := r.Segments["read_to_publish"]; !s.Measured || s.Duration != 200*time.Millisecond || s.Outcome != "good" {
				t.Errorf("read_to_publish = %+v, want 200ms good once published_at was read", s)
			}
			return
		case <-started:
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("the canary never became final")
}

func TestAStampOurDatabaseCannotReadIsUnknownNotMissing(t *testing.T) {
	p := testPipeline() // published_at with a read header
	p.Relay.PublishedStamp, p.Relay.MaxClockSkew = config.PublishedFromColumn, config.Duration(time.Minute)
	h := newHarness(t, p, false)
	failed := make(chan struct{}, 10)
	h.lookup = func(context.Context, Canary) (LookupResult, error) {
		failed <- struct{}{}
		return LookupResult{}, errors.New("read published_at: dial tcp: connection refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.lookups.Run(ctx)
	c := h.send("a", 1)
	h.at(400 * time.Millisecond)
	h.arrive(c, map[string]time.Duration{"read": 100 * time.Millisecond})
	h.sweep(400*time.Millisecond + lookupSettle)
	receiveWithin(t, failed, "the failing lookup of published_at")
	h.sweep(time.Duration(p.Canary.LostAfter) + time.Second)
	rep, ok := h.tr.Report("a")
	if !ok || rep.State != StateArrived {
		t.Fatalf("report %+v (%t), want the canary arrived and final", rep, ok)
	}
	for _, seg := range []string{"read_to_publish", "publish_to_consume"} {
		if s := rep.Segments[seg]; s.Outcome != "unjudged" || s.Reason != "unknown" || s.MissingStamp != "" {
			t.Errorf("%s = %+v, want unjudged (unknown) and no missing stamp: the relay may well have written it", seg, s)
		}
	}
	if got := testutil.ToFloat64(h.m().StampsMissing.WithLabelValues(p.Name, config.StampPublish)); got != 0 {
		t.Errorf("stamps missing = %v, want 0", got)
	}
}

func TestTheDoneCallbackRunsOutsideTheLock(t *testing.T) {
	h := newHarness(t, plainPipeline(), false)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h.onDone = func(r Report) {
		if r.ID != "a" {
			return
		}
		entered <- struct{}{}
		<-release // a slow stdout, for a's line
	}
	a, b := h.send("a", 1), h.send("b", 2)
	h.at(300 * time.Millisecond)
	go h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
	receiveWithin(t, entered, "a's done callback")
	arrived := make(chan struct{})
	go func() {
		h.arrive(b, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
		close(arrived)
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("a second arrival waited for the first canary's callback: it runs under the lock")
	}
	close(release)
}

func TestIntegerStampsAreReadInTheUnitTheirSizeImplies(t *testing.T) {
	want := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	for v, exact := range map[string]time.Time{
		"1796040000":          want.Truncate(time.Second),
		"1796040000123":       want.Truncate(time.Millisecond),
		"1796040000123456":    want.Truncate(time.Microsecond),
		"1796040000123456789": want,
	} {
		if got, ok := parseStampValue(v); !ok || !got.Equal(exact) {
			t.Errorf("parseStampValue(%s) = %v, %t; want %v", v, got.UTC(), ok, exact)
		}
	}
	if got, _ := parseStampValue("9999999999999"); got.Year() != 2286 {
		t.Errorf("9999999999999 read as %v, want milliseconds (year 2286, then invalid by max_clock_skew)", got)
	}
}

// sent sums canaries_sent over every process so far.
func (h *harness) sent() float64 {
	var n float64
	for _, m := range h.metrics {
		n += testutil.ToFloat64(m.CanariesSent.WithLabelValues(h.p.Name))
	}
	return n
}

// testWait bounds a test's wait for a step of the code under test: long
// enough for a loaded machine, short of go test's timeout, so a step that
// never comes fails the test with its name instead of hanging it.
const testWait = 30 * time.Second

// receiveWithin waits for a value on ch, or fails the test after testWait.
func receiveWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testWait):
		t.Fatalf("%s: nothing within %s", what, testWait)
		var zero T
		return zero
	}
}
