package prober

// Tests of the lookups shared by the pipelines on one outbox table, with a
// played database; lookups against PostgreSQL run in the end-to-end tests.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// publishedPipeline is a polling pipeline whose publish stamp is the
// row's published_at, with a read header: commit_to_read,
// read_to_publish, publish_to_consume.
func publishedPipeline(name string) config.Pipeline {
	p := testPipeline()
	p.Name = name
	p.Relay.PublishedStamp, p.Relay.MaxClockSkew = config.PublishedFromColumn, config.Duration(time.Minute)
	return p
}

// onTable makes the harness's trackers hand their lookups to l, as a
// pipeline does with the others on its outbox table.
func (h *harness) onTable(l *Lookups) *harness {
	h.lookups = l
	h.restart()
	return h
}

// arrivedAndDue sends a canary at +at, has it arrive 400ms later (read
// 100ms after its commit) and sweeps once its published_at is due: the
// judge asks for it.
func (h *harness) arrivedAndDue(id string, seq uint64, at time.Duration) {
	h.t.Helper()
	h.at(at)
	c := h.send(id, seq)
	h.at(at + 400*time.Millisecond)
	h.arrive(c, map[string]time.Duration{"read": 100 * time.Millisecond})
	h.sweep(at + 400*time.Millisecond + lookupSettle)
}

// playedTable plays an outbox table: every canary read has published_at
// 300ms after its commit, unless fail or unavailable say otherwise. It
// records each call.
type playedTable struct {
	mu          sync.Mutex
	calls       [][]Canary
	fail        error
	unavailable map[string]error // by canary id
	called      chan []Canary    // optional, each call
}

func (pt *playedTable) read(_ context.Context, cs []Canary) (map[string]LookupResult, error) {
	pt.mu.Lock()
	pt.calls = append(pt.calls, slices.Clone(cs))
	fail := pt.fail
	pt.mu.Unlock()
	if pt.called != nil {
		pt.called <- slices.Clone(cs)
	}
	if fail != nil {
		return nil, fail
	}
	found := map[string]LookupResult{}
	for _, c := range cs {
		if err := pt.unavailable[c.ID]; err != nil {
			found[c.ID] = LookupResult{Unavailable: err}
			continue
		}
		found[c.ID] = LookupResult{Stamps: map[string]time.Time{config.StampPublish: c.Committed.Add(300 * time.Millisecond)}}
	}
	return found, nil
}

func canaryIDs(cs []Canary) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Pipeline + "/" + c.ID
	}
	return out
}

func TestTheCanariesOfTwoPipelinesOnOneTableAreReadInOneCall(t *testing.T) {
	table := &playedTable{}
	l := NewLookups(LookupsOptions{Read: table.read})
	orders := newHarness(t, publishedPipeline("orders"), false).onTable(l)
	invoices := newHarness(t, publishedPipeline("invoices"), false).onTable(l)
	orders.arrivedAndDue("o1", 1, 0)
	invoices.arrivedAndDue("i1", 1, 0)
	invoices.arrivedAndDue("i2", 2, 100*time.Millisecond)

	l.round(context.Background(), l.take())

	if len(table.calls) != 1 {
		t.Fatalf("%d calls, want one for both pipelines: %v", len(table.calls), table.calls)
	}
	if got, want := canaryIDs(table.calls[0]), []string{"orders/o1", "invoices/i1", "invoices/i2"}; !slices.Equal(got, want) {
		t.Errorf("read %v, want %v", got, want)
	}
	for _, c := range []struct {
		h  *harness
		id string
	}{{orders, "o1"}, {invoices, "i1"}, {invoices, "i2"}} {
		rep, _ := c.h.tr.Report(c.id)
		if s := rep.Segments["read_to_publish"]; !s.Measured || s.Duration != 200*time.Millisecond || s.Outcome != "good" {
			t.Errorf("%s/%s read_to_publish = %+v, want 200ms good: its tracker got its answer", c.h.p.Name, c.id, s)
		}
	}
}

func TestAFailedReadIsUnavailableForTheCanariesOfEveryPipelineInIt(t *testing.T) {
	cases := []struct {
		name string
		fail error
		// unavailable: canaries answered as not readable, one by one.
		unavailable map[string]error
		// wantUnknown: the canaries whose stamp ends unknown; the others
		// are measured.
		wantUnknown []string
	}{
		{"A batch that fails is unavailable for every canary of every pipeline in it, never missing.",
			errors.New("read published_at: dial tcp: connection refused"), nil, []string{"o1", "i1"}},
		{"A canary unavailable on its own (its pipeline's clock offset not measured) leaves the others found.",
			nil, map[string]error{"o1": errClockUnmeasured}, []string{"o1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			table := &playedTable{fail: tc.fail, unavailable: tc.unavailable}
			l := NewLookups(LookupsOptions{Read: table.read})
			hs := map[string]*harness{
				"o1": newHarness(t, publishedPipeline("orders"), false).onTable(l),
				"i1": newHarness(t, publishedPipeline("invoices"), false).onTable(l),
			}
			for id, h := range hs {
				h.arrivedAndDue(id, 1, 0)
			}
			l.round(context.Background(), l.take())
			if len(table.calls) != 1 {
				t.Fatalf("%d calls, want one", len(table.calls))
			}
			for id, h := range hs {
				// Nothing answers the asks after this round: the canary
				// ends when it would be lost.
				h.sweep(time.Duration(h.p.Canary.LostAfter) + time.Second)
				rep, ok := h.tr.Report(id)
				if !ok || rep.State != StateArrived {
					t.Fatalf("%s: report %+v (%t), want arrived and final", id, rep, ok)
				}
				s := rep.Segments["read_to_publish"]
				if slices.Contains(tc.wantUnknown, id) {
					if s.Outcome != "unjudged" || s.Reason != "unknown" || s.MissingStamp != "" {
						t.Errorf("%s read_to_publish = %+v, want unjudged (unknown), no missing stamp", id, s)
					}
				} else if !s.Measured || s.Outcome != "good" {
					t.Errorf("%s read_to_publish = %+v, want measured and good", id, s)
				}
				if got := testutil.ToFloat64(h.m().StampsMissing.WithLabelValues(h.p.Name, config.StampPublish)); got != 0 {
					t.Errorf("%s: stamps missing = %v, want 0: a stamp not read is not missing", id, got)
				}
			}
		})
	}
}

func TestARoundStartsAtOnceWhenIdleAndOtherwiseGathersUntilTheInterval(t *testing.T) {
	clock := &fakeClock{t: t0}
	waits := make(chan time.Duration, 1)
	fire := make(chan time.Time)
	table := &playedTable{called: make(chan []Canary, 10)}
	// A read of i1 before the test fires the interval's timer is early.
	var intervalRanOut, earlyRead atomic.Bool
	read := func(ctx context.Context, cs []Canary) (map[string]LookupResult, error) {
		if !intervalRanOut.Load() && slices.ContainsFunc(cs, func(c Canary) bool { return c.ID == "i1" }) {
			earlyRead.Store(true)
		}
		return table.read(ctx, cs)
	}
	l := NewLookups(LookupsOptions{Read: read, Interval: time.Second, Now: clock.Now,
		After: func(d time.Duration) <-chan time.Time { waits <- d; return fire }})
	orders := newHarness(t, publishedPipeline("orders"), false).onTable(l)
	invoices := newHarness(t, publishedPipeline("invoices"), false).onTable(l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	call := func(what string) []string {
		t.Helper()
		select {
		case cs := <-table.called:
			return canaryIDs(cs)
		case <-time.After(30 * time.Second):
			t.Fatalf("no read %s", what)
			return nil
		}
	}
	noWait := func(what string) {
		t.Helper()
		select {
		case d := <-waits:
			t.Fatalf("%s waited %v, want none", what, d)
		default:
		}
	}

	orders.arrivedAndDue("o1", 1, 0)
	if got := call("of a canary asked on an idle table"); !slices.Equal(got, []string{"orders/o1"}) {
		t.Errorf("first round read %v, want orders/o1", got)
	}
	noWait("A canary asked on an idle table")

	clock.Advance(200 * time.Millisecond)
	orders.arrivedAndDue("o2", 2, time.Second)
	select {
	case d := <-waits:
		if d != 800*time.Millisecond {
			t.Errorf("the round waits %v, want 800ms: the interval (1s) after the last round, asked 200ms after it", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a canary asked 200ms after a round did not wait for the interval")
	}
	clock.Advance(300 * time.Millisecond)
	invoices.arrivedAndDue("i1", 1, 0)
	clock.Advance(500 * time.Millisecond)
	// The loop must still be parked on the interval's timer, the ask for i1
	// queued behind it: it takes the timer's firing, and nothing read i1
	// before.
	intervalRanOut.Store(true)
	select {
	case fire <- clock.Now():
	case <-time.After(30 * time.Second):
		t.Fatal("the loop was not waiting for the interval when it ran out")
	}
	if got := call("once the interval ran out"); !slices.Equal(got, []string{"orders/o2", "invoices/i1"}) {
		t.Errorf("second round read %v, want orders/o2 and invoices/i1 in one call", got)
	}
	if earlyRead.Load() {
		t.Error("i1 was read before the interval ran out")
	}

	clock.Advance(5 * time.Second)
	orders.arrivedAndDue("o3", 3, 2*time.Second)
	if got := call("of a canary asked long after the last round"); !slices.Equal(got, []string{"orders/o3"}) {
		t.Errorf("third round read %v, want orders/o3", got)
	}
	noWait("A canary asked long after the last round")
}

func TestACanaryNoLongerWantedIsDroppedNotRead(t *testing.T) {
	table := &playedTable{}
	l := NewLookups(LookupsOptions{Read: table.read})
	h := newHarness(t, publishedPipeline("orders"), false).onTable(l)
	h.arrivedAndDue("o1", 1, 0)
	asked := l.take()
	// The canary became final (given up when it would be lost) between
	// the ask and the round.
	h.sweep(time.Duration(h.p.Canary.LostAfter) + time.Second)
	l.round(context.Background(), asked)
	if len(table.calls) != 0 {
		t.Errorf("read %v, want nothing: no canary of the round was still wanted", table.calls)
	}
}
