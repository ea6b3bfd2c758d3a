package prober

// End-to-end tests of the prober on the project's real PostgreSQL and Kafka,
// with the reference relay (internal/relay) running in-process. Start the
// stack with `deploy/local/stack.sh up` (or `make test`), then
// `go test ./prober/ -run E2E`. Without the stack they skip (and fail in CI).
//
// Each test gets a fresh database and a fresh topic; the relay's topic
// template routes every row there. TestDisruptiveServerRestarts restarts the shared
// servers, so it is not parallel.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

// e2eWait bounds every wait for an expected state.
const e2eWait = 45 * time.Second

const e2eKey = "e2e-signing-key"

// e2eOutbox is one fresh database with one outbox table and its relay.
type e2eOutbox struct {
	dsn     string
	topic   string
	pool    *pgxpool.Pool
	relay   *relay.Relay
	brokers []string
}

// newOutbox creates a database with the schema and a one-partition topic,
// and starts the reference relay on it (polling every 20ms) unless columns
// is nil.
func newOutbox(t *testing.T, s stacktest.Stack, schema string, columns *relay.Columns) *e2eOutbox {
	t.Helper()
	ctx := context.Background()
	o := &e2eOutbox{dsn: s.NewDatabase(t), topic: s.NewTopic(t, 1, nil), brokers: s.KafkaBrokers}
	pool, err := pgxpool.New(ctx, o.dsn)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	o.pool = pool
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatalf("load the outbox schema: %v", err)
	}
	if columns == nil {
		return o
	}
	w := relay.NewKafkaWriter(s.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.New(relay.Config{Columns: *columns, TopicTemplate: o.topic, PollInterval: 20 * time.Millisecond, MaxBackoff: time.Second},
		pool, w, testLogger(t, "relay"), nil, nil)
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	o.relay = r
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return o
}

// testLogger logs to the test at warn level (debug with E2E_DEBUG=1).
func testLogger(t *testing.T, component string) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("E2E_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level})).With("component", component)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pipelineYAML is a pipeline on seed schema A or B with small budgets.
type pipelineYAML struct {
	Table, Route, EventType, Schedule string
	Budgets                           map[string]string
	LostAfter                         string
	Extra                             string // more YAML under the pipeline
	// Relay is the relay's YAML; default polling with the relay's read
	// header as an extra stamp.
	Relay string
}

func (o *e2eOutbox) config(t *testing.T, py pipelineYAML) *config.Config {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "instance_id: e2e\nsigning_key: {value: %q}\npipelines:\n  - name: e2e\n", e2eKey)
	fmt.Fprintf(&b, "    database: {dsn: {value: %q}, clock_offset_interval: 10s}\n", o.dsn)
	fmt.Fprintf(&b, "    outbox:\n      table: %s\n      columns: {route: %s", cmp.Or(py.Table, "outbox"), cmp.Or(py.Route, "aggregate_type"))
	if py.EventType != "" {
		fmt.Fprintf(&b, ", event_type: %s", py.EventType)
	}
	fmt.Fprintf(&b, "}\n    relay: %s\n", cmp.Or(py.Relay, "{kind: polling, stamps: [{name: read, header: outbox-relay-read-at}]}"))
	fmt.Fprintf(&b, "    canary: {schedule: %q, lost_after: %s}\n", cmp.Or(py.Schedule, "@every 1s"), cmp.Or(py.LostAfter, "30s"))
	fmt.Fprintf(&b, "    kafka: {brokers: [%s], topic: %s}\n", strings.Join(o.brokers, ", "), o.topic)
	b.WriteString("    budgets:\n")
	keys := make([]string, 0, len(py.Budgets))
	for k := range py.Budgets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s: %s\n", k, py.Budgets[k])
	}
	b.WriteString(py.Extra)
	cfg, err := config.Load([]byte(b.String()))
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, b.String())
	}
	return cfg
}

// running is a started service.
type running struct {
	svc    *Service
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startService(t *testing.T, cfg *config.Config, stateDir string, noSchedule bool) *running {
	t.Helper()
	svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), Logger: testLogger(t, "prober"),
		StateDir: stateDir, NoSchedule: noSchedule})
	if err != nil {
		t.Fatalf("new service: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{svc: svc, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = svc.Run(ctx) }()
	t.Cleanup(r.stop)
	waitFor(t, "the service's database and Kafka to answer", func() bool { ok, _ := svc.Dependencies(); return ok })
	return r
}

func (r *running) stop() {
	r.once.Do(func() { r.cancel(); <-r.done })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", e2eWait, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *running) counter(c *compactvec.CounterVec, labels ...string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(append([]string{"e2e"}, labels...)...))
}

func (r *running) sli(segment, outcome string) float64 {
	return r.counter(r.svc.Metrics().SLIEvents, segment, outcome)
}

// badSince returns, for each of segments, the bad SLI events counted after
// this call: a test's own canaries, apart from those before them (a first
// canary a loaded machine made late).
func (r *running) badSince(segments ...string) func(segment string) float64 {
	before := map[string]float64{}
	for _, s := range segments {
		before[s] = r.sli(s, slo.OutcomeBad)
	}
	return func(segment string) float64 { return r.sli(segment, slo.OutcomeBad) - before[segment] }
}

func (r *running) tracker(t *testing.T) *Tracker {
	tr, err := r.svc.Tracker("e2e")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func (r *running) send(t *testing.T) Canary {
	t.Helper()
	c, err := r.svc.Send(context.Background(), "e2e")
	if err != nil {
		t.Fatalf("send canary: %v", err)
	}
	return c
}

func segmentOf(rep Report, name string) SegmentResult { return rep.Segments[name] }

// publishedAfterFetch reports whether the relay marked a canary's
// published_at after the prober had fetched it, by more than the skew
// tolerance: the relay marks it after the broker's ack, and the prober's
// consume stamp is taken when its fetch's answer is read, which on a
// loaded machine can come first. publish_to_consume is then stamp order,
// unmeasured as the judge documents, and the canary proves nothing of the
// segments' arithmetic.
func publishedAfterFetch(rep Report) bool {
	sr := segmentOf(rep, "publish_to_consume")
	return !sr.Measured && sr.StampOrder && !sr.Skew
}

// measuredOf is the final canaries of Recent(n) whose every segment was
// measured (see publishedAfterFetch), and how many were left out.
func measuredOf(tr *Tracker, n int) (measured []Report, ordered int) {
	for _, rep := range tr.Recent(n) {
		if rep.State == StateArrived && publishedAfterFetch(rep) {
			ordered++
			continue
		}
		measured = append(measured, rep)
	}
	return measured, ordered
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestE2EHealthyFlowOnSchemasAAndB(t *testing.T) {
	s := stacktest.Load(t)
	cases := []struct {
		name    string
		schema  string
		columns relay.Columns
		yaml    pipelineYAML
	}{
		{"Seed schema A, routed by aggregate type, splits commit to publish at the relay's read stamp.",
			outboxsql.SchemaA, relay.SchemaAColumns(), pipelineYAML{}},
		{"Seed schema B, routed by event type, is measured end to end as well.",
			outboxsql.SchemaB, relay.SchemaBColumns(), pipelineYAML{Route: "event_type", EventType: "event_type"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newOutbox(t, s, tc.schema, &tc.columns)
			py := tc.yaml
			// Budgets a loaded machine keeps: the test is about the stamps
			// and the segments' arithmetic, not the stack's speed.
			py.Budgets = map[string]string{"end_to_end": "60s", "commit_to_read": "60s", "publish_to_consume": "60s"}
			py.LostAfter = "2m"
			r := startService(t, o.config(t, py), t.TempDir(), false)
			tr := r.tracker(t)
			waitFor(t, "three canaries to arrive, measured", func() bool { m, _ := measuredOf(tr, 10); return len(m) >= 3 })
			reps, ordered := measuredOf(tr, 10)
			t.Logf("%d canaries measured, %d left out: published_at marked after the prober fetched them", len(reps), ordered)
			for _, rep := range reps {
				if rep.State != StateArrived {
					t.Errorf("canary %s: status %s, want arrived", rep.ID, rep.State)
				}
				var sum time.Duration
				for _, seg := range []string{"commit_to_read", "read_to_publish", "publish_to_consume"} {
					sr := segmentOf(rep, seg)
					if !sr.Measured {
						t.Fatalf("canary %s: segment %s unmeasured (missing stamp %q)", rep.ID, seg, sr.MissingStamp)
					}
					sum += sr.Duration
				}
				e2e := segmentOf(rep, "end_to_end")
				if d := (sum - e2e.Duration).Abs(); d > time.Microsecond {
					t.Errorf("canary %s: segments sum to %s, end_to_end is %s", rep.ID, sum, e2e.Duration)
				}
				if e2e.Outcome != slo.OutcomeGood {
					t.Errorf("canary %s: end_to_end outcome %q after %s, want good", rep.ID, e2e.Outcome, e2e.Duration)
				}
			}
			// /metrics counts a verdict with the batch that writes it, up to
			// prober.DefaultCommitDelay (and a sweep) after the status shows it.
			waitFor(t, "three good end_to_end events on /metrics", func() bool { return r.sli("end_to_end", slo.OutcomeGood) >= 3 })
			if bad := r.sli("end_to_end", slo.OutcomeBad); bad != 0 {
				t.Errorf("bad end_to_end events = %v, want 0 on a healthy pipeline", bad)
			}
			if got := testutil.ToFloat64(r.svc.Metrics().DBClockOffsetError.WithLabelValues("e2e")); got <= 0 {
				t.Errorf("db clock offset error = %v, want a measured positive bound", got)
			}
		})
	}
}

func TestE2ERelayDelayIsBlamedOnCommitToPublish(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	cfg := o.config(t, pipelineYAML{Schedule: "@every 1s", Budgets: map[string]string{"end_to_end": "10s"}})
	// No extra stamp: the segments are commit_to_publish and publish_to_consume.
	cfg.Pipelines[0].Relay.Stamps = nil
	r := startService(t, cfg, t.TempDir(), true)
	tr := r.tracker(t)

	// The relay writes published_at after the broker's ack, so a fast
	// consumer can read a canary before it: publish_to_consume is then
	// negative by stamp order and unmeasured, as documented. Such a canary
	// says nothing about the delay; the next ones are measured instead.
	measure := func() (c2p, p2c []time.Duration) {
		for attempt := 0; len(c2p) < 3; attempt++ {
			if attempt == 20 {
				t.Fatalf("only %d of 20 canaries had both segments measured", len(c2p))
			}
			c := r.send(t)
			ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
			rep, err := tr.Await(ctx, c.ID)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			a, b := segmentOf(rep, "commit_to_publish"), segmentOf(rep, "publish_to_consume")
			if !b.Measured && b.StampOrder {
				t.Logf("canary %s consumed before the relay wrote published_at (stamp order); not measured", c.ID)
				continue
			}
			if !a.Measured || !b.Measured {
				t.Fatalf("canary %s: publish stamp missing: %+v", c.ID, rep.Segments)
			}
			c2p, p2c = append(c2p, a.Duration), append(p2c, b.Duration)
		}
		return c2p, p2c
	}
	c0, p0 := measure()
	// Well above what a loaded machine adds to a median of three, so
	// that a quarter of it bounds that noise.
	const delay = 4 * time.Second
	if err := o.relay.Faults().SetPublishDelay(delay); err != nil {
		t.Fatal(err)
	}
	c1, p1 := measure()
	dc, dp := median(c1)-median(c0), median(p1)-median(p0)
	t.Logf("relay delay %s: commit_to_publish median %s -> %s (+%s), publish_to_consume %s -> %s (+%s)",
		delay, median(c0), median(c1), dc, median(p0), median(p1), dp)
	if dc < delay*8/10 {
		t.Errorf("commit_to_publish grew by %s, want at least 0.8 x %s", dc, delay)
	}
	if dp > delay/4 {
		t.Errorf("publish_to_consume grew by %s, want well below %s: the delay is the relay's", dp, delay)
	}
}

func TestE2EPausedRelayTurnsCanariesBadAtTheirDeadlineAndCountsLateArrivalsOnce(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "1s"}, LostAfter: "5m"})
	r := startService(t, cfg, t.TempDir(), true)
	m := r.svc.Metrics()

	o.relay.Faults().Pause()
	const n = 3
	for range n {
		r.send(t)
	}
	stacktest.Eventually(t, e2eWait, "every paused canary to turn bad", func() (bool, string) {
		return r.sli("end_to_end", slo.OutcomeBad) == n, fmt.Sprintf("bad %v; in flight %+v", r.sli("end_to_end", slo.OutcomeBad), r.tracker(t).InFlightReports())
	})
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v while bad events appeared; a stall must be counted at the deadline, not at lost_after", lost)
	}
	o.relay.Faults().Resume()
	waitFor(t, "the late canaries to arrive", func() bool { return r.counter(m.CanariesReceived) == n })
	// A double count would come from judging the late canaries again: a
	// sweep past their deadlines, or another arrival. Sweep now, then send
	// a marker canary behind them: once it is final, the consumer has
	// handled everything before it on the topic.
	r.tracker(t).Sweep()
	marker := r.send(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	markerReport, err := r.tracker(t).Await(ctx, marker.ID)
	if err != nil {
		t.Fatalf("the marker canary sent after the late ones: %v", err)
	}
	markerGood, markerBad := 0.0, 0.0
	switch segmentOf(markerReport, "end_to_end").Outcome {
	case slo.OutcomeGood:
		markerGood = 1
	case slo.OutcomeBad:
		markerBad = 1 // late on a loaded machine; still counted once
	default:
		t.Fatalf("the marker canary is final without an end_to_end outcome: %+v", markerReport)
	}
	good, bad := r.sli("end_to_end", slo.OutcomeGood)-markerGood, r.sli("end_to_end", slo.OutcomeBad)-markerBad
	if good+bad != n || bad != n {
		t.Errorf("end_to_end events good=%v bad=%v besides the marker's, want exactly %d bad: one per canary resolved", good, bad, n)
	}
	if dup := r.counter(m.CanariesDuplicate); dup != 0 {
		t.Errorf("duplicates = %v, want 0", dup)
	}
	for _, rep := range r.tracker(t).Recent(10) {
		if rep.ID == marker.ID {
			continue
		}
		if rep.State != StateLate {
			t.Errorf("canary %s: status %s, want late", rep.ID, rep.State)
		}
	}
}

func TestE2EDuplicatesAndForeignMessagesAreCountedAndSkipped(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "10s"}})
	r := startService(t, cfg, t.TempDir(), true)
	m := r.svc.Metrics()

	if err := o.relay.Faults().DuplicateNext(2); err != nil {
		t.Fatal(err)
	}
	r.send(t)
	r.send(t)
	waitFor(t, "two canaries and two duplicates", func() bool {
		return r.counter(m.CanariesReceived) == 2 && r.counter(m.CanariesDuplicate) == 2
	})

	ours, err := NewSigner([]byte(e2eKey))
	if err != nil {
		t.Fatal(err)
	}
	forger, _ := NewSigner([]byte("not-our-key"))
	encode := func(sg *Signer, p Payload) []byte {
		b, err := sg.Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	msgs := []kafka.Message{
		{Value: []byte("not json at all")},
		{Value: []byte(`{"some":"business event"}`)},
		{Value: encode(forger, Payload{CanaryID: "f1", Instance: "e2e", Pipeline: "e2e", Seq: 1})},
		{Value: encode(ours, Payload{CanaryID: "o1", Instance: "another-instance", Pipeline: "e2e", Seq: 1})},
		{Value: encode(ours, Payload{CanaryID: "p1", Instance: "e2e", Pipeline: "another-pipeline", Seq: 1})},
		{Value: encode(ours, Payload{CanaryID: "u1", Instance: "e2e", Pipeline: "e2e", Seq: 1})},
	}
	w := &kafka.Writer{Addr: kafka.TCP(o.brokers...), Topic: o.topic, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	c := r.send(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if _, err := r.tracker(t).Await(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	// Await returns as the tracker resolves the canary; its counters follow.
	waitFor(t, "the third canary and the foreign messages to be counted", func() bool {
		return r.counter(m.MessagesSkipped, ReasonUnknownCanary) == 1 && r.counter(m.CanariesReceived) == 3
	})
	want := map[string]float64{ReasonMalformed: 2, ReasonBadSignature: 1, ReasonForeignInstance: 1, ReasonUnknownPipeline: 1, ReasonUnknownCanary: 1}
	for reason, n := range want {
		if got := r.counter(m.MessagesSkipped, reason); got != n {
			t.Errorf("skipped %s = %v, want %v", reason, got, n)
		}
	}
	if got := r.counter(m.CanariesReceived); got != 3 {
		t.Errorf("received = %v, want 3 (forgeries must not count)", got)
	}
	if got := r.sli("end_to_end", slo.OutcomeGood) + r.sli("end_to_end", slo.OutcomeBad); got != 3 {
		t.Errorf("end_to_end SLI events = %v, want 3: duplicates are not SLI events", got)
	}
}

func TestE2EProberKilledMidFlightLosesAndDoubleCountsNothing(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "20s"}, LostAfter: "5m"})
	dir := t.TempDir()

	// First life: one canary arrives, two stay in flight behind a paused
	// relay, then the process "dies": no final flush.
	svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), Logger: testLogger(t, "prober-1"), StateDir: dir, NoSchedule: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.run(ctx, false) }()
	first := &running{svc: svc, cancel: cancel, done: done}
	t.Cleanup(first.stop)
	waitFor(t, "the first service's database and Kafka to answer", func() bool { ok, _ := svc.Dependencies(); return ok })
	first.send(t)
	waitFor(t, "the first canary", func() bool { return first.counter(svc.Metrics().CanariesReceived) == 1 })
	o.relay.Faults().Pause()
	first.send(t)
	first.send(t)
	first.stop()

	// Second life from the same state directory.
	second := startService(t, cfg, dir, true)
	if got := second.tracker(t).InFlight(); got != 2 {
		t.Fatalf("in flight after restart = %d, want 2", got)
	}
	o.relay.Faults().Resume()
	m := second.svc.Metrics()
	waitFor(t, "the two in-flight canaries", func() bool { return second.counter(m.CanariesReceived) == 2 })
	time.Sleep(500 * time.Millisecond)
	if got := second.sli("end_to_end", slo.OutcomeGood) + second.sli("end_to_end", slo.OutcomeBad); got != 2 {
		t.Errorf("end_to_end events after restart = %v, want 2 (the canary resolved before the kill must not count again)", got)
	}
	for _, c := range []*compactvec.CounterVec{m.CanariesDuplicate, m.CanariesLost} {
		if got := second.counter(c); got != 0 {
			t.Errorf("%v = %v, want 0", c, got)
		}
	}
	if got := second.counter(m.MessagesSkipped, ReasonUnknownCanary); got != 0 {
		t.Errorf("unknown canaries after restart = %v, want 0", got)
	}
}

func TestE2EStoredOffsetBeyondTheEndOfARecreatedTopicIsReset(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "10s"}})
	// The state of a prober that had read 1000 messages of the topic
	// before it was deleted and recreated (empty: offsets from 0 again).
	dir := t.TempDir()
	state := `{"version":2,"pipeline":"e2e","instance":"e2e","judge":{"canaries":{},"next_offset_by_partition":{"0":1000}}}`
	if err := os.WriteFile(filepath.Join(dir, "e2e.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startService(t, cfg, dir, true)
	m := r.svc.Metrics()
	c := r.send(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	rep, err := r.tracker(t).Await(ctx, c.ID)
	if err != nil {
		t.Fatalf("canary after the topic was recreated: %v", err)
	}
	if rep.State != StateArrived {
		t.Errorf("canary state %s, want arrived", rep.State)
	}
	if got := r.counter(m.OffsetResets); got != 1 {
		t.Errorf("offset resets = %v, want 1", got)
	}
	if got := r.tracker(t).StartOffsets()[0]; got >= 1000 {
		t.Errorf("stored next offset = %d, want the recreated partition's", got)
	}
}

func TestE2ECanariesInsertIntoAllThreeOutboxTables(t *testing.T) {
	s := stacktest.Load(t)
	cases := []struct {
		name, schema, yaml string
		deleteAfter        bool
	}{
		{"Seed schema A gets a row with aggregate type, key and payload.", outboxsql.SchemaA, `
    outbox: {table: outbox}
    relay: {kind: polling}`, false},
		{"Seed schema B gets a row routed by its event type.", outboxsql.SchemaB, `
    outbox: {table: outbox, columns: {route: event_type, event_type: event_type}}
    relay: {kind: polling}`, false},
		{"Debezium's table gets a row with a prober-made uuid and its type column.", outboxsql.DebeziumOutbox, `
    outbox: {table: public.outbox, id_generation: uuid, columns: {route: aggregatetype, key: aggregateid, event_type: type}}
    relay: {kind: cdc}`, false},
		{"Debezium's table with delete_after_insert stays empty.", outboxsql.DebeziumOutbox, `
    outbox: {table: outbox, id_generation: uuid, columns: {route: aggregatetype, key: aggregateid, event_type: type}}
    relay: {kind: cdc}`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := s.NewDatabase(t)
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if _, err := pool.Exec(ctx, tc.schema); err != nil {
				t.Fatal(err)
			}
			yaml := fmt.Sprintf("instance_id: e2e\nsigning_key: {value: k}\npipelines:\n  - name: e2e\n    database: {dsn: {value: %q}}%s\n    canary: {delete_after_insert: %t}\n    kafka: {brokers: [\"127.0.0.1:1\"], topic: t}\n    budgets: {end_to_end: 1s}\n",
				dsn, tc.yaml, tc.deleteAfter)
			cfg, err := config.Load([]byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			p := &cfg.Pipelines[0]
			metrics, err := NewMetrics(prometheus.NewRegistry(), cfg.Pipelines)
			if err != nil {
				t.Fatal(err)
			}
			signer, _ := NewSigner([]byte("k"))
			snd, err := NewSender(SenderOptions{Pipeline: p, Instance: "e2e", DB: postgres.NewOutboxDB(pool), Signer: signer, Metrics: metrics})
			if err != nil {
				t.Fatal(err)
			}
			c, err := snd.Send(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Committed.After(c.InsertStarted) || c.RowID == "" {
				t.Errorf("canary %+v: want a row id and commit after insert start", c)
			}
			var count int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&count); err != nil {
				t.Fatal(err)
			}
			if tc.deleteAfter {
				if count != 0 {
					t.Errorf("rows = %d, want 0 after delete_after_insert", count)
				}
				return
			}
			if count != 1 {
				t.Fatalf("rows = %d, want 1", count)
			}
			col := p.Outbox.Columns
			q := fmt.Sprintf("SELECT %s::text, %s, %s, %s::text FROM outbox", postgres.QuoteIdent(col.ID), postgres.QuoteIdent(col.Route), postgres.QuoteIdent(col.Key), postgres.QuoteIdent(col.Payload))
			var id, route, key, payload string
			if err := pool.QueryRow(ctx, q).Scan(&id, &route, &key, &payload); err != nil {
				t.Fatal(err)
			}
			if id != c.RowID || route != p.Canary.AggregateType || key != p.Canary.Key {
				t.Errorf("row (%s, %s, %s), want (%s, %s, %s)", id, route, key, c.RowID, p.Canary.AggregateType, p.Canary.Key)
			}
			got, err := signer.Decode([]byte(payload))
			if err != nil || got.CanaryID != c.ID || got.Seq != c.Seq {
				t.Errorf("payload %s decodes to %+v, %v; want canary %s", payload, got, err, c.ID)
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(payload), &raw); err != nil {
				t.Errorf("payload is not a JSON object: %v", err)
			}
			if col.EventType != "" && col.EventType != col.Route {
				var et string
				if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT %s FROM outbox", postgres.QuoteIdent(col.EventType))).Scan(&et); err != nil || et != p.Canary.EventType {
					t.Errorf("event type %q (%v), want %q", et, err, p.Canary.EventType)
				}
			}
		})
	}
}

// TestDisruptiveServerRestarts restarts the shared PostgreSQL and Kafka, so it is
// not parallel, and runs last in this file.
func TestDisruptiveServerRestarts(t *testing.T) {
	s := stacktest.Load(t)
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	// lost_after outlasts any restart: a canary sent while a server is
	// down arrives once it is back, however slowly a loaded machine
	// restarts it.
	cfg := o.config(t, pipelineYAML{Schedule: "@every 1s", Budgets: map[string]string{"end_to_end": "10s"}, LostAfter: "5m"})
	r := startService(t, cfg, t.TempDir(), false)
	m := r.svc.Metrics()
	tr := r.tracker(t)

	newGoodAfter := func(since time.Time) func() bool {
		return func() bool {
			for _, rep := range tr.Recent(5) {
				if rep.Committed.After(since) && rep.State == StateArrived {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, "a first good canary", newGoodAfter(time.Time{}))

	// Each server stays down until the prober has noticed, then comes
	// back: a restart quicker than the prober's next insert or check
	// (PostgreSQL restarts in well under a second) leaves no trace to
	// test for, however correct the prober is.
	t.Cleanup(func() { s.Script(t, "start-postgres"); s.Script(t, "start-kafka") }) // no-ops when they run
	dbTrace := func() float64 {
		return r.counter(m.CanaryInsertFailures) + r.counter(m.DependencyErrors, DependencyDatabase)
	}
	before := dbTrace()
	s.Script(t, "stop-postgres")
	waitFor(t, "the PostgreSQL outage in the metrics (insert failures or database errors)", func() bool { return dbTrace() > before })
	s.Script(t, "start-postgres")
	restarted := time.Now()
	waitFor(t, "a good canary after the PostgreSQL restart", newGoodAfter(restarted))
	t.Logf("PostgreSQL restart: insert failures %v, database watch errors %v",
		r.counter(m.CanaryInsertFailures), r.counter(m.DependencyErrors, DependencyDatabase))

	before = r.counter(m.DependencyErrors, DependencyKafka)
	s.Script(t, "stop-kafka")
	waitFor(t, "the Kafka outage in the metrics (kafka dependency errors)", func() bool {
		return r.counter(m.DependencyErrors, DependencyKafka) > before
	})
	s.Script(t, "start-kafka")
	restarted = time.Now()
	waitFor(t, "a good canary after the Kafka restart", newGoodAfter(restarted))
	t.Logf("Kafka restart: consumer errors %v", r.counter(m.DependencyErrors, DependencyKafka))
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v, want 0: canaries sent during the restarts arrive later", lost)
	}
}

func TestE2ERotatingTheSigningKeyTurnsNoCanaryInFlightIntoAForgery(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	for _, tc := range []struct {
		name       string
		keepOldKey bool
		wantBadSig float64
	}{
		{"With the old key among previous_signing_keys the canaries in flight arrive as ours.", true, 0},
		{"Without it they are forgeries: the case the list is for.", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cols := relay.SchemaAColumns()
			o := newOutbox(t, s, outboxsql.SchemaA, &cols)
			dir := t.TempDir()
			o.relay.Faults().Pause()
			before := startService(t, o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "30s"}, LostAfter: "5m"}), dir, true)
			before.send(t)
			before.send(t)
			before.stop()

			// The operator rotates the key while two canaries are in flight.
			cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "30s"}, LostAfter: "5m"})
			cfg.SigningKey = config.InlineSecret("rotated-signing-key")
			if tc.keepOldKey {
				cfg.PreviousSigningKeys = []config.Secret{config.InlineSecret(e2eKey)}
			}
			after := startService(t, cfg, dir, true)
			m := after.svc.Metrics()
			o.relay.Faults().Resume()
			after.send(t) // signed with the new key
			waitFor(t, "the three canaries to be read", func() bool {
				return after.counter(m.CanariesReceived)+after.counter(m.MessagesSkipped, ReasonBadSignature) == 3
			})
			if got := after.counter(m.MessagesSkipped, ReasonBadSignature); got != tc.wantBadSig {
				t.Errorf("bad signatures = %v, want %v", got, tc.wantBadSig)
			}
			if got := after.counter(m.CanariesReceived); got != 3-tc.wantBadSig {
				t.Errorf("received = %v, want %v", got, 3-tc.wantBadSig)
			}
		})
	}
}

func TestE2EATopicRecreatedWhileItIsReadIsReadAgainFromItsStart(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	cols := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &cols)
	cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "30s"}, LostAfter: "5m"})
	logs := &stacktest.SyncBuffer{}
	svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), Logger: logs.Logger(), StateDir: t.TempDir(), NoSchedule: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &running{svc: svc}
	waitFor(t, "the service's database and Kafka to answer", func() bool { ok, _ := svc.Dependencies(); return ok })
	tr := r.tracker(t)
	await := func(c Canary) {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, e2eWait)
		defer acancel()
		if _, err := tr.Await(actx, c.ID); err != nil {
			t.Fatalf("canary %s: %v\n%s", c.ID, err, logs.String())
		}
	}
	for range 3 {
		await(r.send(t))
	}
	// The topic is deleted and recreated under the running readers: its
	// offsets start again at 0, below the ones already read.
	s.RecreateTopic(t, o.topic, 1)
	c := r.send(t)
	await(c)
	if rep, _ := tr.Report(c.ID); rep.State != StateArrived {
		t.Errorf("the canary after the recreation is %s, want arrived", rep.State)
	}
	if got := r.counter(svc.Metrics().OffsetResets); got < 1 {
		t.Errorf("offset resets = %v, want the reset counted", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "recreated") {
		t.Errorf("the reset was not logged at warn level:\n%s", logs.String())
	}
}
