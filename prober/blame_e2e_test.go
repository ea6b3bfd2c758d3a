package prober

// The blame rule (package judge) on the project's real stack: each case of
// issue 9 that was reproduced on real servers, run again against them. Start
// the stack with `deploy/local/stack.sh up && deploy/local/connect.sh up` (or
// `make test`), then `go test ./prober/ -run Blame`. Without the stack they
// skip (and fail in CI).
//
// TestDisruptiveBlame* stop the shared PostgreSQL or Kafka, so `make test`
// runs them after the other tests, one package at a time. None assumes how
// long a server takes to stop or start: each waits for the event (the stack
// script returns once the server is down or answers again) and derives what
// the verdicts must be from the times it measured.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

// relayPublishedAt is a polling relay whose publish stamp is published_at
// and that adds no stamp of its own.
const relayPublishedAt = "{kind: polling, published_stamp: published_at}"

// await waits for a canary to be final and returns its report.
func await(t *testing.T, tr *Tracker, id string) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	rep, err := tr.Await(ctx, id)
	if err != nil {
		t.Fatalf("canary %s: %v", id, err)
	}
	return rep
}

// describe is a report in one line: each segment's measure and verdict.
func describe(p *config.Pipeline, rep Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s:", rep.ID, rep.State)
	for _, name := range p.Segments() {
		s := rep.Segments[name]
		took := s.Took(time.Millisecond)
		verdict := s.Outcome
		if s.Reason != "" {
			verdict += "(" + s.Reason + ")"
		}
		fmt.Fprintf(&b, " %s %s %s;", name, took, verdict)
	}
	return b.String()
}

// histogram reads one segment's latency histogram.
func histogram(t *testing.T, m *Metrics, pipeline, segment string) *dto.Histogram {
	t.Helper()
	var out dto.Metric
	h, ok := m.SegmentLatency[pipeline][segment]
	if !ok {
		t.Fatalf("no latency histogram for %s/%s", pipeline, segment)
	}
	if err := h.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram()
}

// noNegativeLatency fails when a segment's histogram holds a negative
// observation: its native buckets have a negative side, or its sum is
// below zero.
func noNegativeLatency(t *testing.T, m *Metrics, p *config.Pipeline) {
	t.Helper()
	for _, seg := range p.Segments() {
		h := histogram(t, m, p.Name, seg)
		if len(h.GetNegativeSpan()) > 0 || h.GetSampleSum() < 0 {
			t.Errorf("%s latency histogram holds negative observations: sum %v, negative spans %v", seg, h.GetSampleSum(), h.GetNegativeSpan())
		}
	}
}

// TestE2EBlameRelayMarkingAfterItsBatchIsStampOrderNotSkew: a relay that
// writes published_at after its whole batch was acknowledged, plus a
// delay (the reference relay's mark delay), so every canary is consumed
// before its row says published. The database clock is this machine's,
// measured with an error bound of microseconds: the negative
// publish_to_consume is stamp order, never clock skew and never a latency,
// and the segments on either side of publish are judged by what can be
// proven: the publish lies between commit and consume, so end to end
// bounds both; within a budget that is good, beyond it unjudged
// (stamp_order), never bad.
func TestE2EBlameRelayMarkingAfterItsBatchIsStampOrderNotSkew(t *testing.T) {
	s := stacktest.Load(t)
	cases := []struct {
		name    string
		budgets map[string]string
	}{
		{"Budgets above end to end: both segments are proven good.",
			map[string]string{"commit_to_publish": "5s", "publish_to_consume": "5s", "end_to_end": "10s"}},
		{"A commit_to_publish budget below end to end cannot be proven either way: unjudged, not bad.",
			map[string]string{"commit_to_publish": "1ms", "publish_to_consume": "5s", "end_to_end": "10s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cols := relay.SchemaAColumns()
			o := newOutbox(t, s, outboxsql.SchemaA, &cols)
			const markDelay = 600 * time.Millisecond
			if err := o.relay.Faults().SetMarkDelay(markDelay); err != nil {
				t.Fatal(err)
			}
			// Stamps commit, publish (published_at), consume.
			cfg := o.config(t, pipelineYAML{Relay: relayPublishedAt, Budgets: tc.budgets})
			p := &cfg.Pipelines[0]
			r := startService(t, cfg, t.TempDir(), true)
			tr, m := r.tracker(t), r.svc.Metrics()
			waitFor(t, "the database clock offset to be measured", func() bool { _, ok := r.svc.pipes[0].clock.Current(); return ok })

			const n = 4
			orders := 0
			for range n {
				counted := r.counter(m.StampOrder, "publish_to_consume")
				rep := await(t, tr, r.send(t).ID)
				t.Log(describe(p, rep))
				c2p, p2c, e2e := rep.Segments["commit_to_publish"], rep.Segments["publish_to_consume"], rep.Segments["end_to_end"]
				for _, sr := range rep.Segments {
					if sr.Skew || sr.Duration < 0 || sr.Reason == judge.ReasonClockSkew {
						t.Errorf("canary %s segment %s: %+v: want no skew and no negative duration", rep.ID, sr.Segment, sr)
					}
				}
				if !p2c.StampOrder || r.counter(m.StampOrder, "publish_to_consume") == counted {
					// Only possible when the consumer read the record more
					// than the mark delay after its send: a loaded machine,
					// not a wrong rule. (Within the skew tolerance after the
					// consumption, published_at is measured as the
					// consumption, and reported as stamp order.)
					t.Logf("canary %s: publish_to_consume not in stamp order beyond the tolerance (%+v)", rep.ID, p2c)
					continue
				}
				orders++
				if p2c.Measured || p2c.Duration != 0 {
					t.Errorf("canary %s: publish_to_consume in stamp order has a duration: %+v", rep.ID, p2c)
				}
				wantOutcome := func(budget time.Duration) (string, string) {
					if e2e.Duration <= budget {
						return judge.Good, ""
					}
					return judge.Unjudged, judge.ReasonStampOrder
				}
				if out, why := wantOutcome(c2p.Budget); !c2p.Bound || c2p.Duration != e2e.Duration || c2p.Outcome != out || c2p.Reason != why {
					t.Errorf("canary %s: commit_to_publish %+v, want bounded by end to end (%s) and %s %s", rep.ID, c2p, e2e.Duration, out, why)
				}
				if out, why := wantOutcome(p2c.Budget); p2c.Outcome != out || p2c.Reason != why {
					t.Errorf("canary %s: publish_to_consume %s %s, want %s %s (end to end %s, budget %s)", rep.ID, p2c.Outcome, p2c.Reason, out, why, e2e.Duration, p2c.Budget)
				}
			}
			off, _ := r.svc.pipes[0].clock.Current()
			skew := 0.0
			for _, seg := range p.Segments() {
				skew += r.counter(m.ClockSkew, seg)
			}
			t.Logf("mark delay %s, %d canaries: stamp order on %d (counter %v), clock skew suspected %v, DB clock offset %s ± %s; "+
				"commit_to_publish good %v unjudged %v bad %v; histogram counts commit_to_publish %d, publish_to_consume %d, end_to_end %d",
				markDelay, n, orders, r.counter(m.StampOrder, "publish_to_consume"), skew, off.Offset, off.Error,
				r.sli("commit_to_publish", slo.OutcomeGood), r.counter(m.CanariesUnjudged, "commit_to_publish", judge.ReasonStampOrder), r.sli("commit_to_publish", slo.OutcomeBad),
				histogram(t, m, p.Name, "commit_to_publish").GetSampleCount(), histogram(t, m, p.Name, "publish_to_consume").GetSampleCount(),
				histogram(t, m, p.Name, "end_to_end").GetSampleCount())
			if orders == 0 {
				t.Fatalf("no canary was consumed before its published_at, with a mark delay of %s", markDelay)
			}
			if skew != 0 {
				t.Errorf("clock skew suspected %v times, want 0: a late published_at is stamp order", skew)
			}
			if got := r.counter(m.StampOrder, "publish_to_consume"); got != float64(orders) {
				t.Errorf("stamp order counted %v times, want %d (one per canary in stamp order)", got, orders)
			}
			// A segment in stamp order is not observed, and the bound of
			// commit_to_publish is not a latency either.
			for _, seg := range []string{"commit_to_publish", "publish_to_consume"} {
				if got := histogram(t, m, p.Name, seg).GetSampleCount(); got != uint64(n-orders) {
					t.Errorf("%s observed %d times, want %d (the canaries not in stamp order)", seg, got, n-orders)
				}
			}
			if got := histogram(t, m, p.Name, "end_to_end").GetSampleCount(); got != n {
				t.Errorf("end_to_end observed %d times, want %d", got, n)
			}
			noNegativeLatency(t, m, p)
			if got := r.counter(m.StampsMissing, config.StampPublish); got != 0 {
				t.Errorf("stamps missing = %v, want 0: the relay marks every row, late", got)
			}
			if orders == n {
				for _, seg := range p.Segments() {
					if bad := r.sli(seg, slo.OutcomeBad); bad != 0 {
						t.Errorf("%s: %v bad events, want none: nothing proves a canary late", seg, bad)
					}
				}
			}
		})
	}
}

// TestE2EBlameRelayDropIsChargedToThePublishSide: the reference relay's
// drop fault marks published_at but never sends the message. The row claims
// published; the topic, read to its end, says not: the relay's segment
// ending at publish is charged (read_to_publish when the relay's read
// stamp splits commit_to_publish), never publish_to_consume.
func TestE2EBlameRelayDropIsChargedToThePublishSide(t *testing.T) {
	s := stacktest.Load(t)
	cases := []struct {
		name    string
		stamps  bool // the relay's read header as an extra stamp
		budgets map[string]string
		charged string
	}{
		{"Without extra stamps the drop is charged to commit_to_publish.", false,
			map[string]string{"commit_to_publish": "1s", "publish_to_consume": "1s", "end_to_end": "2s"}, "commit_to_publish"},
		{"With the relay's read stamp the drop is charged to read_to_publish.", true,
			map[string]string{"commit_to_read": "1s", "read_to_publish": "1s", "publish_to_consume": "1s", "end_to_end": "2s"}, "read_to_publish"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cols := relay.SchemaAColumns()
			o := newOutbox(t, s, outboxsql.SchemaA, &cols)
			py := pipelineYAML{Budgets: tc.budgets, LostAfter: "6s"}
			if !tc.stamps {
				py.Relay = relayPublishedAt
			}
			cfg := o.config(t, py)
			p := &cfg.Pipelines[0]
			r := startService(t, cfg, t.TempDir(), true)
			tr, m := r.tracker(t), r.svc.Metrics()
			// A canary through first: the pipeline works, and the readers
			// have a position on the topic. On a loaded machine it may be
			// late: the counts below are the dropped canary's, from here.
			if rep := await(t, tr, r.send(t).ID); rep.State != StateArrived && rep.State != StateLate {
				t.Fatalf("first canary: %s", describe(p, rep))
			}
			badSince := r.badSince("publish_to_consume", tc.charged)
			if err := o.relay.Faults().DropNext(1); err != nil {
				t.Fatal(err)
			}
			c := r.send(t)
			waitFor(t, "the dropped canary's row to be marked published", func() bool {
				var published *time.Time
				err := o.pool.QueryRow(context.Background(), "SELECT published_at FROM outbox WHERE id = $1", c.RowID).Scan(&published)
				return err == nil && published != nil
			})
			rep := await(t, tr, c.ID) // final once lost
			t.Log(describe(p, rep))
			if rep.State != StateLost {
				t.Fatalf("dropped canary: state %s, want lost", rep.State)
			}
			if got := rep.Segments[tc.charged]; got.Outcome != judge.Bad {
				t.Errorf("%s: %+v, want bad: the relay claimed a publish the topic contradicts", tc.charged, got)
			}
			if got := rep.Segments["publish_to_consume"]; got.Outcome != "" {
				t.Errorf("publish_to_consume: %+v, want no outcome: the canary never reached Kafka", got)
			}
			if got := rep.Segments["end_to_end"]; got.Outcome != judge.Bad {
				t.Errorf("end_to_end: %+v, want bad", got)
			}
			if got := badSince("publish_to_consume"); got != 0 {
				t.Errorf("publish_to_consume bad events for the dropped canary = %v, want 0", got)
			}
			if got := badSince(tc.charged); got != 1 {
				t.Errorf("%s bad events for the dropped canary = %v, want 1", tc.charged, got)
			}
			if got := r.counter(m.CanariesLost); got != 1 {
				t.Errorf("lost = %v, want 1", got)
			}
		})
	}
}

// startServiceWith is startService with a hook that changes the service
// before it runs.
func startServiceWith(t *testing.T, cfg *config.Config, stateDir string, noSchedule bool, hook func(*Service)) *running {
	t.Helper()
	svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), Logger: testLogger(t, "prober"),
		StateDir: stateDir, NoSchedule: noSchedule})
	if err != nil {
		t.Fatalf("new service: %v", err)
	}
	hook(svc)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{svc: svc, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = svc.Run(ctx) }()
	t.Cleanup(r.stop)
	waitFor(t, "the service's database and Kafka to answer", func() bool { ok, _ := svc.Dependencies(); return ok })
	return r
}

// heldLookup holds the first published_at lookup of an arrived canary
// until the test releases it, then runs the real lookup (against whatever
// state the database is in then) with a fresh timeout.
type heldLookup struct {
	armed    atomic.Bool
	held     chan Canary
	released chan struct{}
	result   chan error // of the held lookup, once released
}

func holdLookup(svc *Service) *heldLookup {
	h := &heldLookup{held: make(chan Canary, 1), released: make(chan struct{}), result: make(chan error, 1)}
	pr := svc.pipes[0]
	lookup := pr.lookups.read
	pr.lookups.read = func(ctx context.Context, cs []Canary) (map[string]LookupResult, error) {
		for _, c := range cs {
			rep, ok := pr.tracker.Report(c.ID)
			if ok && rep.State != StateInFlight && h.armed.CompareAndSwap(true, false) {
				h.held <- c
				<-h.released
				lctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
				defer cancel()
				res, err := lookup(lctx, cs)
				h.result <- err
				return res, err
			}
		}
		return lookup(ctx, cs)
	}
	return h
}

// TestDisruptiveBlamePostgresStoppedDuringALookup stops the shared
// PostgreSQL while the published_at lookup of a canary that has arrived is
// under way: the prober cannot read the stamp because its own dependency is
// down, which says nothing about the relay. The stamp is never counted
// missing: the canary's publish-side segments are judged once the database
// is back within lost_after, or come out unknown when it is not.
func TestDisruptiveBlamePostgresStoppedDuringALookup(t *testing.T) {
	s := stacktest.Load(t)
	cases := []struct {
		name      string
		lostAfter time.Duration
		// restartFirst: start PostgreSQL again before the canary is final;
		// else only after it was given up at lost_after.
		restartFirst bool
	}{
		{"Back within lost_after, the stamp is read and the segments are judged.", 3 * time.Minute, true},
		{"Still down at lost_after, the segments are unknown, never a missing stamp.", 8 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cols := relay.SchemaAColumns()
			o := newOutbox(t, s, outboxsql.SchemaA, &cols)
			cfg := o.config(t, pipelineYAML{Relay: relayPublishedAt, LostAfter: tc.lostAfter.String(),
				Budgets: map[string]string{"commit_to_publish": "2s", "publish_to_consume": "1m", "end_to_end": "5s"}})
			p := &cfg.Pipelines[0]
			var hold *heldLookup
			r := startServiceWith(t, cfg, t.TempDir(), true, func(svc *Service) { hold = holdLookup(svc) })
			tr, m := r.tracker(t), r.svc.Metrics()
			waitFor(t, "the database clock offset to be measured", func() bool { _, ok := r.svc.pipes[0].clock.Current(); return ok })

			hold.armed.Store(true)
			c := r.send(t)
			var held Canary
			select {
			case held = <-hold.held:
			case <-time.After(e2eWait):
				t.Fatalf("no lookup of canary %s after its arrival within %s", c.ID, e2eWait)
			}
			if held.ID != c.ID {
				t.Fatalf("held the lookup of %s, want %s", held.ID, c.ID)
			}
			// The relay's mark is committed: the stamp is there to be read,
			// were the database up.
			waitFor(t, "the relay to commit published_at", func() bool {
				var published *time.Time
				err := o.pool.QueryRow(context.Background(), "SELECT published_at FROM outbox WHERE id = $1", c.RowID).Scan(&published)
				return err == nil && published != nil
			})
			t.Cleanup(func() { s.Script(t, "start-postgres") }) // a no-op when it runs
			stopAt := time.Now()
			s.Script(t, "stop-postgres")
			stopped := time.Now()
			close(hold.released)
			if err := <-hold.result; err == nil {
				t.Fatalf("the lookup on the stopped server returned %v, want a failure to read", err)
			} else {
				t.Logf("the lookup on the stopped server: %v", err)
			}

			var rep Report
			var back time.Time
			if tc.restartFirst {
				s.Script(t, "start-postgres")
				back = time.Now()
				rep = await(t, tr, c.ID)
			} else {
				rep = await(t, tr, c.ID)
				// The publish-side verdict is the one the stopped database
				// decides: it must come after the stop, never before.
				if at := rep.Segments["commit_to_publish"].JudgedAt; !at.After(stopped) {
					t.Fatalf("commit_to_publish judged at %s, not after the database stopped at %s", at.Format(time.StampMicro), stopped.Format(time.StampMicro))
				}
				s.Script(t, "start-postgres")
				back = time.Now()
			}
			t.Logf("PostgreSQL stopped in %s, down for %s; canary committed %s before the restart (lost_after %s)",
				stopped.Sub(stopAt).Round(time.Millisecond), back.Sub(stopped).Round(time.Millisecond),
				back.Sub(rep.Committed).Round(time.Millisecond), tc.lostAfter)
			t.Log(describe(p, rep))
			if got := r.counter(m.StampsMissing, config.StampPublish); got != 0 {
				t.Errorf("stamps missing = %v, want 0: the stamp could not be read, the relay wrote it", got)
			}
			if rep.State != StateArrived && rep.State != StateLate {
				t.Errorf("state %s, want arrived", rep.State)
			}
			if e2e := rep.Segments["end_to_end"]; e2e.Outcome == "" || e2e.Outcome == judge.Unjudged {
				t.Errorf("end_to_end %+v: needs no published_at, want it judged", e2e)
			}
			// Judged is required when the database was back with time to
			// spare: a lookup retry (at most judge.LookupRetryMax apart)
			// fell between the restart and the give-up at lost_after.
			mustJudge := back.Add(2 * judge.LookupRetryMax).Before(rep.Committed.Add(tc.lostAfter))
			for _, seg := range []string{"commit_to_publish", "publish_to_consume"} {
				sr := rep.Segments[seg]
				switch {
				case sr.MissingStamp != "" || sr.Reason == judge.ReasonMissingStamp:
					t.Errorf("%s: %+v: a stamp our own database could not give is not missing", seg, sr)
				case tc.restartFirst && mustJudge && (sr.Outcome == "" || sr.Reason == judge.ReasonUnknown):
					t.Errorf("%s: %+v: the database was back %s before the give-up, want it judged", seg, sr,
						rep.Committed.Add(tc.lostAfter).Sub(back).Round(time.Second))
				case !tc.restartFirst && (sr.Outcome != judge.Unjudged || sr.Reason != judge.ReasonUnknown):
					t.Errorf("%s: %+v: want unjudged (unknown), the stamp was never readable", seg, sr)
				}
			}
			if !tc.restartFirst {
				if got := r.counter(m.CanariesUnjudged, "commit_to_publish", judge.ReasonUnknown); got != 1 {
					t.Errorf("commit_to_publish unjudged unknown = %v, want 1", got)
				}
			}
		})
	}
}

// TestDisruptiveBlameCDCBrokerStall stops the shared Kafka broker while
// Debezium runs: canaries committed meanwhile are captured from the WAL
// and stamped by Debezium (the record timestamp, its processing time) but
// wait in its producer until the broker is back. The publish stamp is the
// relay's and on time; the wait is after it: publish_to_consume (and end
// to end) are bad, commit_to_publish is good, and nothing is charged to
// the relay. While the broker is down the prober has no position on the
// topic, so no segment but end to end is charged before the canaries
// arrive.
func TestDisruptiveBlameCDCBrokerStall(t *testing.T) {
	s := stacktest.Load(t)
	// A CreateTime canary topic: the record's timestamp is Debezium's
	// processing time, taken before the broker went away, so the wait lands
	// after the publish stamp, in the broker's segment. On the recommended
	// LogAppendTime topic the broker stamps on append, after it is back, so
	// the wait lands in commit_to_publish and is left unjudged
	// (brokers_unreachable), the rule
	// TestDisruptiveBlameKafkaStoppedBehindThePollingRelay proves.
	p := newCDCPipelineOn(t, s, nil, nil)
	// commit_to_publish gets room for Debezium capturing a commit late on
	// a loaded machine, and its deadline still falls while the broker is
	// down (it stays down past end_to_end's, then takes seconds to
	// start): the prober has no position then, so the deadline charges
	// nothing and the canary is judged on its stamp when it arrives.
	cfg := p.config(t, "@every 1s", "{commit_to_publish: 3s, publish_to_consume: 1s, end_to_end: 2s}")
	pc := &cfg.Pipelines[0]
	r := startService(t, cfg, t.TempDir(), true)
	tr, m := r.tracker(t), r.svc.Metrics()
	// A canary through first: Debezium's producer knows the topic's
	// partitions, and the pipeline works. On a loaded machine it may be
	// late: the counts below are the stall's canaries', from here.
	if rep := await(t, tr, r.send(t).ID); rep.State != StateArrived && rep.State != StateLate {
		t.Fatalf("first canary: %s", describe(pc, rep))
	} else {
		t.Logf("before the stall: %s", describe(pc, rep))
	}
	badSince := r.badSince("commit_to_publish", "publish_to_consume", "end_to_end")

	t.Cleanup(func() { s.Script(t, "start-kafka") }) // a no-op when it runs
	stopAt := time.Now()
	s.Script(t, "stop-kafka")
	stopped := time.Now()
	const n = 2
	var during []Canary
	for range n {
		during = append(during, r.send(t))
	}
	waitFor(t, "the canaries' end_to_end deadlines to pass", func() bool { return badSince("end_to_end") == n })
	for _, seg := range []string{"commit_to_publish", "publish_to_consume"} {
		if bad := badSince(seg); bad != 0 {
			t.Errorf("%s: %v bad events while the broker was down: nothing placed the canaries there", seg, bad)
		}
	}
	startAt := time.Now()
	s.Script(t, "start-kafka")
	back := time.Now()

	var worstP2C time.Duration
	for _, c := range during {
		rep := await(t, tr, c.ID)
		t.Log(describe(pc, rep))
		c2p, p2c, e2e := rep.Segments["commit_to_publish"], rep.Segments["publish_to_consume"], rep.Segments["end_to_end"]
		t.Logf("canary %s: committed %s after the stop began, Kafka back %s after its commit, consumed %s after it; commit_to_publish judged %s after it, publish_to_consume %s, end_to_end %s",
			c.ID, rep.Committed.Sub(stopAt).Round(time.Millisecond), back.Sub(rep.Committed).Round(time.Millisecond), rep.Consumed.Sub(rep.Committed).Round(time.Millisecond),
			c2p.JudgedAt.Sub(rep.Committed).Round(time.Millisecond), p2c.JudgedAt.Sub(rep.Committed).Round(time.Millisecond), e2e.JudgedAt.Sub(rep.Committed).Round(time.Millisecond))
		if !c2p.Measured || c2p.Outcome == judge.Bad {
			t.Errorf("canary %s: commit_to_publish %+v: Debezium stamped it on time, the relay is not to blame", c.ID, c2p)
		}
		if c2p.Measured && c2p.Duration <= c2p.Budget && c2p.Outcome != judge.Good {
			t.Errorf("canary %s: commit_to_publish %+v, want good", c.ID, c2p)
		}
		if !p2c.Measured || p2c.Outcome != judge.Bad {
			t.Errorf("canary %s: publish_to_consume %+v, want bad: it waited for the broker after its publish stamp", c.ID, p2c)
		}
		if e2e.Outcome != judge.Bad {
			t.Errorf("canary %s: end_to_end %+v, want bad", c.ID, e2e)
		}
		worstP2C = max(worstP2C, p2c.Duration)
	}
	t.Logf("Kafka stopped in %s, down %s, started in %s; worst publish_to_consume %s; SLI bad: commit_to_publish %v, publish_to_consume %v, end_to_end %v; lost %v, duplicates %v",
		stopped.Sub(stopAt).Round(time.Millisecond), startAt.Sub(stopped).Round(time.Millisecond), back.Sub(startAt).Round(time.Millisecond), worstP2C,
		r.sli("commit_to_publish", slo.OutcomeBad), r.sli("publish_to_consume", slo.OutcomeBad), r.sli("end_to_end", slo.OutcomeBad),
		r.counter(m.CanariesLost), r.counter(m.CanariesDuplicate))
	if bad := badSince("commit_to_publish"); bad != 0 {
		t.Errorf("commit_to_publish bad events = %v, want 0: the stall was the broker's", bad)
	}
	// The last arrival's counters move just after its report is final.
	waitFor(t, fmt.Sprintf("%d bad publish_to_consume events, one per canary of the stall", n), func() bool {
		return badSince("publish_to_consume") == n
	})
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v, want 0", lost)
	}
}

// TestDisruptiveBlameKafkaStoppedBehindThePollingRelay stops the shared
// Kafka broker for a minute behind the reference polling relay (stamps:
// its read header, then published_at). The relay reads every row, fails
// to send, rolls back and reads it again once the broker is back, so its
// read stamp is its last read: the whole wait lands in commit_to_read.
// The prober cannot reach the broker either, and the judge charges no
// relay segment for the outage (brokers_unreachable); end_to_end is bad,
// and no canary is lost. The page for the outage is the prober's Kafka
// dependency alert, routed to the brokers' owner (package alerts).
func TestDisruptiveBlameKafkaStoppedBehindThePollingRelay(t *testing.T) {
	s := stacktest.Load(t)
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	relaySegments := []string{"commit_to_read", "read_to_publish"}
	cfg := o.config(t, pipelineYAML{LostAfter: "5m", Budgets: map[string]string{
		"commit_to_read": "2s", "read_to_publish": "2s", "publish_to_consume": "2s", "end_to_end": "5s"}})
	p := &cfg.Pipelines[0]
	r := startService(t, cfg, t.TempDir(), true)
	tr, m := r.tracker(t), r.svc.Metrics()
	if rep := await(t, tr, r.send(t).ID); rep.State != StateArrived {
		t.Fatalf("first canary: %s", describe(p, rep))
	}
	badSince := r.badSince(append(relaySegments, "publish_to_consume", "end_to_end")...)
	kafkaUp := func() float64 { return testutil.ToFloat64(m.DependencyUp.WithLabelValues("e2e", DependencyKafka)) }

	const outage = 60 * time.Second
	t.Cleanup(func() { s.Script(t, "start-kafka") }) // a no-op when it runs
	s.Script(t, "stop-kafka")
	stopped := time.Now()
	var during []Canary
	sawDown := false
	for time.Since(stopped) < outage {
		during = append(during, r.send(t))
		sawDown = sawDown || kafkaUp() == 0
		time.Sleep(2 * time.Second) // the canary schedule, not a wait for an event
	}
	startAt := time.Now()
	s.Script(t, "start-kafka")
	back := time.Now()
	t.Logf("Kafka down %s, started in %s; %d canaries sent meanwhile", startAt.Sub(stopped).Round(time.Second), back.Sub(startAt).Round(time.Second), len(during))
	if !sawDown {
		t.Errorf("outbox_canary_dependency_up{dependency=kafka} never read 0 while the broker was down: the outage alert could not page")
	}

	excused := 0
	for _, c := range during {
		rep := await(t, tr, c.ID)
		t.Log(describe(p, rep))
		if rep.State != StateArrived && rep.State != StateLate {
			t.Errorf("canary %s: %s, want it delivered after the outage", c.ID, rep.State)
		}
		for _, seg := range relaySegments {
			sr := rep.Segments[seg]
			if sr.Outcome == judge.Bad {
				t.Errorf("canary %s: %s %+v: charged to the relay for the broker's outage", c.ID, seg, sr)
			}
			if sr.Reason == judge.ReasonBrokersUnreachable {
				excused++
			}
		}
	}
	for _, seg := range relaySegments {
		if bad := badSince(seg); bad != 0 {
			t.Errorf("%s: %v bad SLI events, want 0: the outage was the broker's", seg, bad)
		}
	}
	if excused == 0 {
		t.Errorf("no relay segment unjudged as %s: the outage never reached the relay's stamps", judge.ReasonBrokersUnreachable)
	}
	if bad := badSince("end_to_end"); bad == 0 {
		t.Errorf("end_to_end: no bad SLI event for a minute-long outage")
	}
	t.Logf("SLI bad since the stop: commit_to_read %v, read_to_publish %v, publish_to_consume %v, end_to_end %v; relay segments unjudged brokers_unreachable %d; lost %v",
		badSince("commit_to_read"), badSince("read_to_publish"), badSince("publish_to_consume"), badSince("end_to_end"), excused, r.counter(m.CanariesLost))
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v, want 0", lost)
	}
}
