package judge

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// Plans of the tests, by the pipelines they stand for.
func planOf(kind string) Plan {
	budgets := map[string]time.Duration{"end_to_end": 2 * time.Second, "insert_to_commit": ms(100)}
	var stamps, after, lookup []string
	switch kind {
	case "schemaA": // polling, a read header, published_at
		stamps = []string{StampCommit, "read", StampPublish, StampConsume}
		after, lookup = []string{StampPublish}, []string{StampPublish}
		budgets["commit_to_read"], budgets["read_to_publish"], budgets["publish_to_consume"] = time.Second, ms(500), ms(500)
	case "schemaB": // polling, published_at
		stamps = []string{StampCommit, StampPublish, StampConsume}
		after, lookup = []string{StampPublish}, []string{StampPublish}
		budgets["commit_to_publish"], budgets["publish_to_consume"] = time.Second, ms(500)
	case "cdc": // the record timestamp, or a header
		stamps = []string{StampCommit, StampPublish, StampConsume}
		budgets["commit_to_publish"], budgets["publish_to_consume"] = time.Second, ms(500)
	default:
		panic(kind)
	}
	return NewPlan(stamps, func(s string) (time.Duration, bool) { b, ok := budgets[s]; return b, ok },
		"insert_to_commit", "end_to_end", after, lookup)
}

// jh drives a judge with an explicit clock.
type jh struct {
	t   testing.TB
	cfg Config
	j   *Judge
	fx  []Effect
	off int64
}

func newJH(t testing.TB, kind string) *jh {
	cfg := Config{Plan: planOf(kind), SkewTolerance: ms(20), MaxSkew: time.Minute, LostAfter: time.Minute,
		Forget: 2 * time.Minute, ArrivedLookupWindow: 10 * time.Second, FloodSkips: 100}
	if kind == "schemaA" || kind == "schemaB" {
		cfg.SkewTolerance = ms(50)
	}
	return &jh{t: t, cfg: cfg, j: New(cfg, nil, t0)}
}

func (h *jh) add(fx []Effect) { h.fx = append(h.fx, fx...) }

// send commits canary id at t0+at, COMMIT taking width to return.
func (h *jh) send(id string, at, width time.Duration) {
	h.add(h.j.Sent(Sent{ID: id, Key: "k", RowID: id, Seq: uint64(len(h.j.st.Canaries) + 1),
		InsertStarted: t0.Add(at - ms(5)), CommitSent: t0.Add(at), Committed: t0.Add(at + width)}))
}

// arrive consumes id at t0+at with stamps at t0+offsets.
func (h *jh) arrive(id string, at time.Duration, stamps map[string]time.Duration) Kind {
	st := map[string]time.Time{}
	for k, d := range stamps {
		st[k] = t0.Add(d)
	}
	c := h.j.st.Canaries[id]
	seq := uint64(0)
	if c != nil {
		seq = c.Seq
	}
	kind, fx := h.j.Arrived(Arrival{CanaryID: id, Key: "k", Seq: seq, Partition: 0, Offset: h.off, Consumed: t0.Add(at), Stamps: st})
	h.off++
	h.add(fx)
	return kind
}

// restart persists the judge's state at persisted, as the prober writes it
// (through JSON), and starts a new judge from it at at: the prober was down
// in between.
func (h *jh) restart(persisted, at time.Duration) {
	h.t.Helper()
	h.j.MarkPersisted(t0.Add(persisted))
	data, err := json.Marshal(h.j.State())
	if err != nil {
		h.t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		h.t.Fatal(err)
	}
	h.j = New(h.cfg, &st, t0.Add(at))
}

func (h *jh) tick(at time.Duration) { h.add(h.j.Tick(t0.Add(at))) }

func (h *jh) pos(at time.Duration, caughtUp bool, lag int64) {
	h.j.Position(Position{At: t0.Add(at), CaughtUp: caughtUp, Lag: lag})
}

// ticksWithPositions ticks every 100ms from..to with a position sample
// every 500ms that says caughtUp.
func (h *jh) ticksWithPositions(from, to time.Duration, caughtUp bool) {
	for at := from; at <= to; at += ms(100) {
		if at%ms(500) == 0 {
			h.pos(at, caughtUp, map[bool]int64{true: 0, false: 3}[caughtUp])
		}
		h.tick(at)
	}
}

func (h *jh) found(id string, at, stamp time.Duration) {
	h.add(h.j.StampFound(id, map[string]time.Time{StampPublish: t0.Add(stamp)}, ms(1), t0.Add(at)))
}

// verdicts renders a canary's verdict effects: segment=good|bad|unjudged(reason).
func (h *jh) verdicts(id string) string {
	var out []string
	for _, e := range h.fx {
		if e.Kind == EffectVerdict && e.Canary == id {
			v := e.Outcome
			if e.Reason != "" {
				v += "(" + e.Reason + ")"
			}
			out = append(out, e.Segment+"="+v)
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func (h *jh) count(kind EffectKind, id string) int {
	n := 0
	for _, e := range h.fx {
		if e.Kind == kind && (id == "" || e.Canary == id) {
			n++
		}
	}
	return n
}

func (h *jh) observed(id, segment string) (time.Duration, bool) {
	for _, e := range h.fx {
		if e.Kind == EffectObserve && e.Canary == id && e.Segment == segment {
			return e.Duration, true
		}
	}
	return 0, false
}

func (h *jh) want(id, verdicts string) {
	h.t.Helper()
	if got := h.verdicts(id); got != verdicts {
		h.t.Errorf("verdicts of %s:\n got  %s\n want %s\neffects: %v", id, got, verdicts, h.fx)
	}
}

func TestJudgeScenarios(t *testing.T) {
	cases := []struct {
		name string
		kind string
		run  func(h *jh)
	}{
		{"A healthy polling canary is good on every segment, judged when published_at is read back.", "schemaA", func(h *jh) {
			h.send("a", 0, ms(2))
			h.arrive("a", ms(700), map[string]time.Duration{"read": ms(300)})
			h.want("a", "commit_to_read=good end_to_end=good insert_to_commit=good")
			h.found("a", ms(710), ms(600))
			h.want("a", "commit_to_read=good end_to_end=good insert_to_commit=good publish_to_consume=good read_to_publish=good")
			if d, _ := h.observed("a", "commit_to_read"); d != ms(300) {
				h.t.Errorf("commit_to_read observed %s, want 300ms from COMMIT sent", d)
			}
		}},
		{"A CDC canary stuck in consumption is charged to publish_to_consume only, once, never to the relay.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			h.ticksWithPositions(0, ms(400), true)
			// The broker stalls our fetches: the readers lag from 0.5s on.
			h.ticksWithPositions(ms(500), ms(4900), false)
			h.want("a", "end_to_end=bad insert_to_commit=good publish_to_consume=bad")
			h.arrive("a", ms(5000), map[string]time.Duration{StampPublish: ms(200)})
			h.want("a", "commit_to_publish=good end_to_end=bad insert_to_commit=good publish_to_consume=bad")
		}},
		{"A CDC canary that the prober cannot place gets no blame before it arrives, and is judged by its stamps.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			for at := ms(100); at < ms(5000); at += ms(100) {
				h.tick(at) // no position: the prober cannot reach the brokers
			}
			h.want("a", "end_to_end=bad insert_to_commit=good")
			h.arrive("a", ms(5000), map[string]time.Duration{StampPublish: ms(200)})
			h.want("a", "commit_to_publish=good end_to_end=bad insert_to_commit=good publish_to_consume=bad")
		}},
		{"A paused relay is charged to the relay at its deadline, proven by the caught-up topic; the late arrival adds the later segment only.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			h.ticksWithPositions(ms(100), ms(1000), true)
			h.want("a", "insert_to_commit=good")
			h.ticksWithPositions(ms(1100), ms(2100), true)
			h.want("a", "commit_to_publish=bad end_to_end=bad insert_to_commit=good")
			h.arrive("a", ms(6000), map[string]time.Duration{StampPublish: ms(5990)})
			h.want("a", "commit_to_publish=bad end_to_end=bad insert_to_commit=good publish_to_consume=good")
		}},
		{"A CDC canary stamped at send and held by the producer through a broker outage is not charged to the relay; its stamps judge it.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			for at := ms(100); at <= ms(3000); at += ms(100) {
				if at%ms(500) == 0 {
					h.j.Position(Position{At: t0.Add(at), Failed: true}) // the brokers are out of reach
				}
				h.tick(at)
			}
			// The readers reconnect before the relay's producer re-sends: the
			// topic is caught up without the canary.
			h.ticksWithPositions(ms(3100), ms(5000), true)
			h.want("a", "end_to_end=bad insert_to_commit=good")
			if seg, _ := h.j.Where(h.j.st.Canaries["a"]); seg != "" {
				h.t.Errorf("Where = %q, want unknown: the record may be in the producer, past its publish stamp", seg)
			}
			h.arrive("a", ms(5500), map[string]time.Duration{StampPublish: ms(150)})
			h.want("a", "commit_to_publish=good end_to_end=bad insert_to_commit=good publish_to_consume=bad")
		}},
		{"A published_at canary caught up without it after a broker outage is not charged to the relay: it may be re-reading the row after failed sends.", "schemaB", func(h *jh) {
			h.send("a", 0, ms(2))
			for at := ms(100); at <= ms(3000); at += ms(100) {
				if at%ms(500) == 0 {
					h.j.Position(Position{At: t0.Add(at), Failed: true})
				}
				h.tick(at)
			}
			h.ticksWithPositions(ms(3100), ms(5000), true)
			h.want("a", "end_to_end=bad insert_to_commit=good")
			if seg, _ := h.j.Where(h.j.st.Canaries["a"]); seg != "" {
				h.t.Errorf("Where places the canary in %s: the relay may be waiting on the brokers", seg)
			}
			// Published after the outage: the relay's long segment is the
			// brokers', the wait in the topic is measured.
			h.arrive("a", ms(5200), nil)
			h.found("a", ms(5300), ms(5100))
			h.tick(ms(6000))
			h.want("a", "commit_to_publish=unjudged(brokers_unreachable) end_to_end=bad insert_to_commit=good publish_to_consume=good")
		}},
		{"A canary committed well after a broker outage is charged to the relay as ever.", "schemaB", func(h *jh) {
			for at := ms(100); at <= ms(3000); at += ms(100) {
				if at%ms(500) == 0 {
					h.j.Position(Position{At: t0.Add(at), Failed: true})
				}
			}
			h.send("a", ms(20000), ms(2))
			h.ticksWithPositions(ms(20100), ms(23000), true)
			h.want("a", "commit_to_publish=bad end_to_end=bad insert_to_commit=good")
		}},
		{"A published_at the topic contradicts is a relay's drop, charged to the relay; the canary is lost with no Kafka verdict.", "schemaB", func(h *jh) {
			h.send("a", 0, ms(2))
			h.ticksWithPositions(ms(100), ms(1000), true) // looks published_at up at the 1s deadline
			h.found("a", ms(1010), ms(80))                // the relay claims it published at 80ms
			h.ticksWithPositions(ms(1100), ms(61000), true)
			h.want("a", "commit_to_publish=bad end_to_end=bad insert_to_commit=good")
			if h.count(EffectLost, "a") != 1 || h.count(EffectFinal, "a") != 1 {
				h.t.Errorf("want the canary lost and final once: %v", h.fx)
			}
		}},
		{"A canary consumed inside its budget is good even if the tick comes later.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			h.arrive("a", ms(1990), map[string]time.Duration{StampPublish: ms(1500)})
			h.tick(ms(3000))
			h.want("a", "commit_to_publish=bad end_to_end=good insert_to_commit=good publish_to_consume=good")
		}},
		{"A published_at marked after consumption is stamp order: no skew, no negative latency, the segments judged by what is proven.", "schemaB", func(h *jh) {
			h.send("a", 0, ms(2))
			h.arrive("a", ms(300), nil)
			h.found("a", ms(310), ms(900)) // marked 600ms after consumption
			h.want("a", "commit_to_publish=good end_to_end=good insert_to_commit=good publish_to_consume=good")
			if h.count(EffectSkew, "") != 0 || h.count(EffectStampOrder, "a") != 1 {
				h.t.Errorf("want one stamp order and no skew: %v", h.fx)
			}
			for _, e := range h.fx {
				if e.Kind == EffectObserve && e.Duration < 0 {
					h.t.Errorf("a negative latency was observed: %v", e)
				}
			}
			if _, ok := h.observed("a", "publish_to_consume"); ok {
				h.t.Error("publish_to_consume was observed although only its bound is known")
			}
		}},
		{"A relay that reads the row before COMMIT returns is no skew: segments from commit start at COMMIT sent.", "cdc", func(h *jh) {
			h.send("a", 0, ms(150)) // a loaded database: COMMIT returns after 150ms
			h.arrive("a", ms(200), map[string]time.Duration{StampPublish: ms(50)})
			h.want("a", "commit_to_publish=good end_to_end=good insert_to_commit=bad publish_to_consume=good")
			if h.count(EffectSkew, "") != 0 {
				h.t.Errorf("skew counted for a stamp inside the commit interval: %v", h.fx)
			}
		}},
		{"A relay stamp far outside the canary's life is invalid, counted, and its segments unjudged.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			h.arrive("a", ms(300), map[string]time.Duration{StampPublish: 24 * 365 * time.Hour})
			h.want("a", "commit_to_publish=unjudged(invalid_stamp) end_to_end=good insert_to_commit=good publish_to_consume=unjudged(invalid_stamp)")
			if h.count(EffectStampInvalid, "a") != 1 || h.count(EffectStampMissing, "a") != 0 {
				h.t.Errorf("want one invalid stamp and no missing stamp: %v", h.fx)
			}
		}},
		{"A relay clock far behind shows as skew on the segment it makes negative, and both segments of its stamp are unjudged, never observed.", "cdc", func(h *jh) {
			h.send("a", ms(1000), ms(2))
			h.arrive("a", ms(1300), map[string]time.Duration{StampPublish: ms(700)})
			h.want("a", "commit_to_publish=unjudged(clock_skew) end_to_end=good insert_to_commit=good publish_to_consume=unjudged(clock_skew)")
			if h.count(EffectSkew, "a") != 1 {
				h.t.Errorf("want one skew: %v", h.fx)
			}
		}},
		{"A published_at that cannot be read because our database is down is retried, then unknown, never missing.", "schemaB", func(h *jh) {
			h.send("a", 0, ms(2))
			h.arrive("a", ms(300), nil)
			for at := ms(400); at < ms(61000); at += ms(500) {
				h.add(h.j.StampUnavailable("a", t0.Add(at)))
				h.tick(at + ms(100))
			}
			h.want("a", "commit_to_publish=unjudged(unknown) end_to_end=good insert_to_commit=good publish_to_consume=unjudged(unknown)")
			if h.count(EffectStampMissing, "a") != 0 {
				h.t.Errorf("a stamp we could not read was counted missing: %v", h.fx)
			}
		}},
		{"A published_at the relay never writes is missing once the lookups keep finding NULL.", "schemaB", func(h *jh) {
			h.send("a", 0, ms(2))
			h.arrive("a", ms(300), nil)
			for at := ms(400); at < ms(12000); at += ms(500) {
				h.add(h.j.StampAbsent("a", t0.Add(at)))
				h.tick(at + ms(100))
			}
			h.want("a", "commit_to_publish=unjudged(missing_stamp) end_to_end=good insert_to_commit=good publish_to_consume=unjudged(missing_stamp)")
			if h.count(EffectStampMissing, "a") != 1 {
				h.t.Errorf("want the missing stamp counted once: %v", h.fx)
			}
		}},
		{"Readers behind a flood of foreign messages are the prober's own lag, charged to nobody.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			for at := ms(100); at < ms(4000); at += ms(100) {
				if at%ms(500) == 0 {
					h.pos(at, false, 5000)
				}
				h.tick(at)
			}
			h.want("a", "end_to_end=unjudged(prober_lag) insert_to_commit=good publish_to_consume=unjudged(prober_lag)")
		}},
		{"A duplicate and a replayed offset count nothing twice; an older canary after a newer one is out of order.", "cdc", func(h *jh) {
			h.send("a", 0, ms(2))
			h.send("b", ms(100), ms(2))
			h.arrive("b", ms(300), map[string]time.Duration{StampPublish: ms(200)})
			h.arrive("a", ms(310), map[string]time.Duration{StampPublish: ms(100)})
			if k := h.arrive("a", ms(320), map[string]time.Duration{StampPublish: ms(100)}); k != KindDuplicate {
				h.t.Errorf("second arrival kind %v, want duplicate", k)
			}
			if k, _ := h.j.Arrived(Arrival{CanaryID: "a", Offset: 0, Consumed: t0.Add(ms(330))}); k != KindReplay {
				h.t.Errorf("an offset below the next one is %v, want replay", k)
			}
			if h.count(EffectOutOfOrder, "a") != 1 || h.count(EffectDuplicate, "a") != 1 {
				h.t.Errorf("want one out of order and one duplicate: %v", h.fx)
			}
			h.want("a", "commit_to_publish=good end_to_end=good insert_to_commit=good publish_to_consume=good")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(newJH(t, tc.kind)) })
	}
}

func TestJudgeRestartsWithoutLosingOrRepeatingAVerdict(t *testing.T) {
	h := newJH(t, "cdc")
	h.send("a", 0, ms(2))
	h.send("b", ms(100), ms(2))
	h.arrive("a", ms(300), map[string]time.Duration{StampPublish: ms(200)})
	// The prober is down from 0.5s to 10s; b was published at 150ms and
	// waited in the topic.
	before := len(h.fx)
	h.restart(ms(500), 10*time.Second)
	if k, fx := h.j.Arrived(Arrival{CanaryID: "a", Offset: 0, Consumed: t0.Add(10 * time.Second)}); k != KindReplay || len(fx) != 0 {
		t.Errorf("a replay after the restart: %v %v", k, fx)
	}
	h.tick(10*time.Second + ms(50))
	h.arrive("b", 10*time.Second+ms(100), map[string]time.Duration{StampPublish: ms(150)})
	h.want("a", "commit_to_publish=good end_to_end=good insert_to_commit=good publish_to_consume=good")
	h.want("b", "commit_to_publish=good end_to_end=unjudged(prober_down) insert_to_commit=good publish_to_consume=unjudged(prober_down)")
	for _, seg := range []string{"publish_to_consume", "end_to_end"} {
		if d, ok := h.observed("b", seg); ok {
			t.Errorf("b's %s observed as %s: the prober's downtime went into the pipeline's histogram", seg, d)
		}
	}
	if _, ok := h.observed("b", "commit_to_publish"); !ok {
		t.Error("b's commit_to_publish, before the prober's downtime, was not observed")
	}
	for _, e := range h.fx[before:] {
		if e.Canary == "a" {
			t.Errorf("canary a, final before the restart, emitted again: %v", e)
		}
	}
}

// A broker outage that begins and ends while the prober is down leaves no
// failed position sample, yet the relay re-reads what it failed to send
// then. Across the downtime and brokerReconnectGrace after it, the relay's
// wait is not charged; past that it is, only later (model seeds 3451 and
// 5662 at -model.runs=6000 before this rule).
func TestARelayWaitAcrossTheProbersDowntimeIsChargedOnlyPastTheGrace(t *testing.T) {
	h := newJH(t, "schemaB") // a published_at stamp: taken after the ack, never held by a producer
	h.send("a", 0, ms(2))
	h.arrive("a", ms(300), nil)
	h.found("a", ms(400), ms(200))
	down := 10 * time.Second // down from 0.5s to 10s
	h.restart(ms(500), down)
	// The relay's time starts to count at down + grace: commit_to_publish's
	// 1s budget runs out at 21s for a canary committed before then.
	chargeable := down + brokerReconnectGrace + time.Second
	h.send("b", down+ms(200), ms(2))
	h.send("c", down+ms(300), ms(2))
	h.send("d", down+ms(400), ms(2))
	h.ticksWithPositions(down+ms(500), down+ms(1500), true)
	h.arrive("b", down+ms(2100), nil)
	h.found("b", down+ms(2200), down+ms(2000))
	h.want("b", "commit_to_publish=unjudged(prober_down) end_to_end=good insert_to_commit=good publish_to_consume=good")
	h.ticksWithPositions(down+ms(1600), chargeable-ms(500), true)
	if got := h.verdicts("d"); strings.Contains(got, "commit_to_publish") {
		t.Errorf("d charged before the relay had the brokers back for its budget: %s", got)
	}
	if seg, deadline := h.j.Where(h.j.st.Canaries["d"]); seg != "commit_to_publish" || !deadline.Equal(t0.Add(chargeable)) {
		t.Errorf("Where(d) = %s, %s; want commit_to_publish, %s", seg, deadline.Sub(t0), chargeable)
	}
	h.ticksWithPositions(chargeable-ms(400), chargeable+ms(1000), true)
	h.want("d", "commit_to_publish=bad end_to_end=bad insert_to_commit=good")
	h.arrive("c", chargeable+ms(1100), nil)
	h.found("c", chargeable+ms(1200), chargeable+ms(1000))
	h.want("c", "commit_to_publish=bad end_to_end=bad insert_to_commit=good publish_to_consume=good")
}

// A published_at marked after consumption but within the skew tolerance
// is measured as the consumption: reports must not show its segments as
// an exact latency and a 0s segment.
func TestAStampWithinToleranceAfterTheNextIsReportedAsABoundAndStampOrder(t *testing.T) {
	h := newJH(t, "schemaB") // tolerance 50ms
	h.send("a", 0, ms(2))
	h.arrive("a", ms(300), nil)
	h.found("a", ms(310), ms(330)) // marked 30ms after consumption
	h.want("a", "commit_to_publish=good end_to_end=good insert_to_commit=good publish_to_consume=good")
	views := map[string]SegmentView{}
	for _, v := range h.j.View(h.j.st.Canaries["a"]) {
		views[v.Name] = v
	}
	if v := views["commit_to_publish"]; !v.Bound || v.Measured || v.Duration != ms(300) {
		t.Errorf("commit_to_publish = %+v, want an upper bound of 300ms", v)
	}
	if v := views["publish_to_consume"]; !v.StampOrder || v.Raw != -ms(30) || v.Duration != 0 {
		t.Errorf("publish_to_consume = %+v, want measured as 0 and marked stamp order, 30ms negative", v)
	}
	if v := views["end_to_end"]; !v.Measured || v.Bound || v.StampOrder {
		t.Errorf("end_to_end = %+v, want measured", v)
	}
}

// canaries_late_total counts canaries that were already counted bad: one
// that waited out the prober's downtime was not, and is not late.
func TestLateCountsOnlyCanariesCountedBad(t *testing.T) {
	lates := func(h *jh, id string) int {
		n := 0
		for _, e := range h.fx {
			if e.Kind == EffectLate && e.Canary == id {
				n++
			}
		}
		return n
	}
	h := newJH(t, "cdc")
	h.send("a", 0, ms(2))
	h.ticksWithPositions(ms(100), ms(2100), true)
	h.arrive("a", ms(6000), map[string]time.Duration{StampPublish: ms(5990)})
	h.want("a", "commit_to_publish=bad end_to_end=bad insert_to_commit=good publish_to_consume=good")
	if n := lates(h, "a"); n != 1 {
		t.Errorf("a canary counted bad and arriving after its deadline: %d late effects, want 1", n)
	}

	h = newJH(t, "cdc")
	h.send("b", ms(100), ms(2))
	h.restart(ms(500), 10*time.Second) // down from 0.5s to 10s
	h.tick(10*time.Second + ms(50))
	h.arrive("b", 10*time.Second+ms(100), map[string]time.Duration{StampPublish: ms(150)})
	h.want("b", "commit_to_publish=good end_to_end=unjudged(prober_down) insert_to_commit=good publish_to_consume=unjudged(prober_down)")
	if n := lates(h, "b"); n != 0 {
		t.Errorf("a canary unjudged prober_down: %d late effects, want 0", n)
	}
}

func TestUnjudgedReasonsAreListedOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		if seen[r] {
			t.Errorf("%s listed twice", r)
		}
		seen[r] = true
	}
	if fmt.Sprint(len(seen)) != "9" {
		t.Errorf("%d reasons, want the 9 the docs describe", len(seen))
	}
}

// BenchmarkJudgeCanary is one canary's life in the judge: Sent, arrival
// and a tick, one canary a second. The judge forgets a canary Forget (2m)
// after its commit, so past the first 120 iterations it remembers 120, as
// in service: the figure is the steady state's, not a pile that grows
// with b.N.
func BenchmarkJudgeCanary(b *testing.B) {
	h := newJH(&testing.T{}, "cdc")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		at := time.Duration(i) * time.Second
		id := fmt.Sprintf("c%d", i)
		h.fx = h.fx[:0]
		h.send(id, at, ms(1))
		h.arrive(id, at+ms(100), map[string]time.Duration{StampPublish: at + ms(50)})
		h.tick(at + ms(200))
	}
	b.ReportMetric(float64(len(h.j.st.Canaries)), "canaries_remembered")
}

func TestDeltaNamesOnlyWhatChangedSinceTheLastWrite(t *testing.T) {
	h := newJH(t, "cdc")
	ids := func(d Delta) string {
		var out []string
		for _, c := range d.Canaries {
			out = append(out, c.ID)
		}
		return fmt.Sprintf("canaries=%v forgotten=%v meta=%t", out, d.Forgotten, d.Meta)
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"A canary sent is written with the last sent time.", func() { h.send("a", 0, ms(2)); h.send("b", ms(100), ms(2)) },
			"canaries=[a b] forgotten=[] meta=true"},
		{"An arrival writes its canary and the offsets, not the others.",
			func() { h.arrive("a", ms(300), map[string]time.Duration{StampPublish: ms(200)}) }, "canaries=[a] forgotten=[] meta=true"},
		{"A sweep that decides nothing writes nothing.", func() { h.add(h.j.Tick(t0.Add(ms(400)))) }, "canaries=[] forgotten=[] meta=false"},
		{"A deadline passing writes the canary it judged.", func() { h.add(h.j.Tick(t0.Add(5 * time.Second))) }, "canaries=[b] forgotten=[] meta=false"},
		{"A loss writes the canary lost.", func() { h.add(h.j.Tick(t0.Add(90 * time.Second))) }, "canaries=[b] forgotten=[] meta=false"},
		{"Forgetting writes the ids forgotten.", func() { h.add(h.j.Tick(t0.Add(3 * time.Minute))) }, "canaries=[] forgotten=[a b] meta=false"},
	}
	for _, s := range steps {
		s.do()
		got := ids(h.j.Delta())
		if got != s.want || h.j.Dirty() != (s.want != "canaries=[] forgotten=[] meta=false") {
			t.Errorf("%s\n got %s (dirty %t)\nwant %s", s.name, got, h.j.Dirty(), s.want)
		}
		h.j.MarkPersisted(t0)
	}
}

func TestLookupsWaitForTheSettleTimeAndBackOffWhileTheStampIsAbsent(t *testing.T) {
	h := newJH(t, "schemaB")
	h.cfg.LookupSettle = ms(500)
	h.j = New(h.cfg, nil, t0)
	h.send("a", 0, ms(2))
	h.arrive("a", ms(300), nil)
	var asked []time.Duration
	for at := ms(300); at <= ms(12000); at += ms(100) {
		before := h.count(EffectLookup, "a")
		h.tick(at)
		if h.count(EffectLookup, "a") > before {
			asked = append(asked, at)
			h.add(h.j.StampAbsent("a", t0.Add(at)))
		}
	}
	// Arrived at 300ms: first asked at 800ms, then 500ms, 1s, 2s, 4s
	// after each answer without a stamp, until ArrivedLookupWindow (10s
	// after arrival) gives it up as missing.
	want := []time.Duration{ms(800), ms(1300), ms(2300), ms(4300), ms(8300)}
	if !slices.Equal(asked, want) {
		t.Errorf("lookups asked at %v, want %v", asked, want)
	}
	h.want("a", "commit_to_publish=unjudged(missing_stamp) end_to_end=good insert_to_commit=good publish_to_consume=unjudged(missing_stamp)")
}
