package prober

// Tests of the service's wiring. Those that need PostgreSQL use the
// project's stack (`deploy/local/stack.sh up`) and skip without it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// fakeClock is an injected clock shared with the service's goroutines.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestConsumerStampsQueuedCanariesWithoutWaitingForPublishedAt(t *testing.T) {
	clock := &fakeClock{t: t0}
	svc, err := New(Options{Config: unitConfig(t, ""), Registerer: prometheus.NewRegistry(), StateDir: "-", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.closePools()
	pr := svc.pipes[0]
	// The database, played: published_at by row id, absent while NULL.
	var mu sync.Mutex
	published := map[string]time.Time{}
	// Each round at once: the test's clock runs ahead of real time.
	pr.lookups.interval = -1
	pr.lookups.read = func(_ context.Context, cs []Canary) (map[string]LookupResult, error) {
		mu.Lock()
		defer mu.Unlock()
		found := map[string]LookupResult{}
		for _, c := range cs {
			if ts, ok := published[c.RowID]; ok {
				found[c.ID] = LookupResult{Stamps: map[string]time.Time{config.StampPublish: ts}}
			}
		}
		return found, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pr.lookups.Run(ctx)
	signer, _ := NewSigner([]byte("unit-key"))
	var msgs []kafka.Message
	for i, id := range []string{"a", "b"} {
		c := Canary{ID: id, Seq: uint64(i + 1), Pipeline: "orders", Key: "k", RowID: fmt.Sprint(i + 1),
			InsertStarted: t0.Add(-time.Millisecond), CommitSent: t0, Committed: t0}
		if err := pr.tracker.Sent(c); err != nil {
			t.Fatal(err)
		}
		value, err := signer.Encode(Payload{CanaryID: id, Instance: "unit", Pipeline: "orders", Seq: c.Seq})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Partition: 0, Offset: int64(i), Key: []byte("k"), Value: value,
			Headers: []kafka.Header{{Key: "outbox-relay-read-at", Value: []byte(t0.Add(50 * time.Millisecond).Format(time.RFC3339Nano))}}})
	}
	// a's relay has not committed published_at yet, and b is queued
	// behind a on the partition: the consumer must not wait for it.
	clock.Advance(300 * time.Millisecond)
	pr.consumer.Handle(context.Background(), kafkaclient.Message{Message: msgs[0]})
	clock.Advance(10 * time.Millisecond)
	pr.consumer.Handle(context.Background(), kafkaclient.Message{Message: msgs[1]})
	mu.Lock()
	published["1"], published["2"] = t0.Add(200*time.Millisecond), t0.Add(100*time.Millisecond)
	mu.Unlock()
	reports := map[string]Report{}
	deadline := time.Now().Add(testWait)
	for _, id := range []string{"a", "b"} {
		for {
			actx, acancel := context.WithTimeout(ctx, 50*time.Millisecond)
			r, err := pr.tracker.Await(actx, id)
			acancel()
			if err == nil {
				reports[id] = r
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("canary %s not final within %s of sweeps: %v", id, testWait, err)
			}
			clock.Advance(500 * time.Millisecond) // past each lookup's backoff
			pr.tracker.Sweep()
		}
	}
	if got := reports["a"].Consumed.Sub(t0); got != 300*time.Millisecond {
		t.Errorf("a consumed at +%v, want +300ms: stamped when read", got)
	}
	if got := reports["b"].Consumed.Sub(t0); got != 310*time.Millisecond {
		t.Errorf("b consumed at +%v, want +310ms: stamped when read, not after a's lookup", got)
	}
	for id, r := range reports {
		if seg := r.Segments["publish_to_consume"]; !seg.Measured {
			t.Errorf("canary %s: publish_to_consume unmeasured: %+v", id, seg)
		}
	}
}

// countingQuerier counts the queries of the clock estimator and can fail
// them while its pings (it is the database's pinger too, counting them)
// work.
type countingQuerier struct {
	outboxdb.DB
	pool  *pgxpool.Pool
	mu    sync.Mutex
	n     int
	pings int
	fail  bool
}

func (q *countingQuerier) Ping(ctx context.Context) error {
	q.mu.Lock()
	q.pings++
	q.mu.Unlock()
	return q.pool.Ping(ctx)
}

func (q *countingQuerier) pinged() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pings
}

func (q *countingQuerier) Clock(ctx context.Context) (time.Time, error) {
	q.mu.Lock()
	q.n++
	fail := q.fail
	q.mu.Unlock()
	if fail {
		return time.Time{}, errors.New("clock_timestamp() refused")
	}
	return q.DB.Clock(ctx)
}

func (q *countingQuerier) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// explainOnly is a database that only explains errors, for tests that
// set its state by hand.
type explainOnly struct{ outboxdb.DB }

func (explainOnly) Explain(err error) error { return err }

func TestWatchDB(t *testing.T) {
	s := stacktest.Load(t)
	dsn := s.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Two pipelines on the one database, the second asking for a fresher
	// clock than the first.
	start := func(t *testing.T, fail bool) (*database, *countingQuerier, *fakeClock, *Metrics) {
		orders, payments := testPipeline(), testPipeline()
		payments.Name = "payments"
		orders.Database.ClockOffsetInterval = config.Duration(2 * time.Hour)
		payments.Database.ClockOffsetInterval = config.Duration(time.Hour)
		m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{orders, payments})
		if err != nil {
			t.Fatal(err)
		}
		clock := &fakeClock{t: t0}
		q := &countingQuerier{DB: postgres.NewOutboxDB(pool), pool: pool, fail: fail}
		d := newDatabase("test", q, []*config.Pipeline{&orders, &payments}, m, clock.Now, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); d.watch(ctx, 10*time.Millisecond) }()
		t.Cleanup(func() { cancel(); <-done })
		return d, q, clock, m
	}

	t.Run("Two pipelines on one database share one clock estimate, exported as the gauges of both.", func(t *testing.T) {
		d, q, _, m := start(t, false)
		waitFor(t, "the first estimate", func() bool { _, ok := d.clock.Current(); return ok })
		waitFor(t, "the database marked up", func() bool {
			return testutil.ToFloat64(m.DependencyUp.WithLabelValues("payments", DependencyDatabase)) == 1
		})
		pinged := q.pinged()
		waitFor(t, "ten pings more", func() bool { return q.pinged() >= pinged+10 })
		if got := q.count(); got != dbClockSamples {
			t.Errorf("%d clock queries, want %d: one estimate for the database, not one per pipeline", got, dbClockSamples)
		}
		off, _ := d.clock.Current()
		for _, p := range []string{"orders", "payments"} {
			if got := testutil.ToFloat64(m.DBClockOffsetError.WithLabelValues(p)); got != off.Error.Seconds() {
				t.Errorf("%s: clock offset error gauge %v, want the shared estimate's %v", p, got, off.Error.Seconds())
			}
			if got := testutil.ToFloat64(m.DependencyUp.WithLabelValues(p, DependencyDatabase)); got != 1 {
				t.Errorf("%s: database up = %v, want 1", p, got)
			}
		}
	})

	t.Run("The clock offset is estimated again once the injected clock passes the shortest clock_offset_interval.", func(t *testing.T) {
		_, q, clock, _ := start(t, false)
		waitFor(t, "the first estimate", func() bool { return q.count() >= dbClockSamples })
		clock.Advance(time.Hour)
		// With the wall clock it would take an hour.
		waitFor(t, "a second estimate", func() bool { return q.count() >= 2*dbClockSamples })
	})

	t.Run("A failed clock estimate is counted once per pipeline, as db_clock, and neither counts nor marks the database down.", func(t *testing.T) {
		_, _, _, m := start(t, true)
		waitFor(t, "two failed estimates", func() bool {
			return testutil.ToFloat64(m.DependencyErrors.WithLabelValues("payments", DependencyDBClock)) >= 2
		})
		for _, p := range []string{"orders", "payments"} {
			if got := testutil.ToFloat64(m.DependencyErrors.WithLabelValues(p, DependencyDBClock)); got < 2 {
				t.Errorf("%s: db_clock errors = %v, want them counted for every pipeline on the database", p, got)
			}
			if got := testutil.ToFloat64(m.DependencyErrors.WithLabelValues(p, DependencyDatabase)); got != 0 {
				t.Errorf("%s: database errors = %v, want 0: the database answered, only the estimate failed", p, got)
			}
			if got := testutil.ToFloat64(m.DependencyUp.WithLabelValues(p, DependencyDatabase)); got != 1 {
				t.Errorf("%s: database up = %v, want 1: the database answered, only the estimate failed", p, got)
			}
		}
	})
}

// twoDatabases is a configuration with orders and payments on one
// database and refunds on another (none of them reachable).
const twoDatabases = `
  - name: payments
    database: {dsn: {value: "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1"}, clock_offset_interval: 10m}
    relay: {kind: polling}
    kafka: {brokers: ["127.0.0.1:1"], topic: payments}
    budgets: {end_to_end: 2s}
  - name: refunds
    database: {dsn: {value: "postgres://u:hunter2@127.0.0.1:1/y?connect_timeout=1"}}
    relay: {kind: polling}
    kafka: {brokers: ["127.0.0.1:1"], topic: refunds}
    budgets: {end_to_end: 2s}
`

func TestPipelinesOnOneDatabaseShareItsHealthCheckAndClock(t *testing.T) {
	svc, err := New(Options{Config: unitConfig(t, twoDatabases), Registerer: prometheus.NewRegistry(), StateDir: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	orders, payments, refunds := svc.pipes[0], svc.pipes[1], svc.pipes[2]
	if len(svc.dbs) != 2 {
		t.Fatalf("%d databases watched, want 2", len(svc.dbs))
	}
	if orders.db != payments.db || orders.clock != payments.clock || orders.clock != orders.db.clock {
		t.Error("orders and payments, on one database, do not share its watcher and clock")
	}
	if refunds.db == orders.db || refunds.clock == orders.clock {
		t.Error("refunds, on another database, shares orders' watcher or clock")
	}
	// Before the first check, every pipeline says why, for check and /readyz.
	_, reasons := svc.Dependencies()
	for _, p := range []string{"orders", "payments", "refunds"} {
		if want := fmt.Sprintf("pipeline %q: database: database not reached yet", p); !slices.Contains(reasons, want) {
			t.Errorf("no reason %q in %q", want, reasons)
		}
	}
	if got := orders.db.clockEvery; got != time.Minute {
		t.Errorf("the shared clock is estimated every %s, want the shortest interval of its pipelines, 1m", got)
	}
}

func TestADatabaseChangeIsLoggedOnceNamingEveryPipelineItAffects(t *testing.T) {
	orders, payments := testPipeline(), testPipeline()
	payments.Name = "payments"
	m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{orders, payments})
	if err != nil {
		t.Fatal(err)
	}
	logs := &stacktest.SyncBuffer{}
	d := newDatabase("db.example:5432/shop as canary", explainOnly{}, []*config.Pipeline{&orders, &payments}, m, time.Now, logs.Logger())
	refused := errors.New("connection refused")
	d.set(refused)
	d.set(refused)
	for _, p := range []string{"orders", "payments"} {
		if got := testutil.ToFloat64(m.DependencyUp.WithLabelValues(p, DependencyDatabase)); got != 0 {
			t.Errorf("%s: database up = %v, want 0", p, got)
		}
	}
	if ok, why := d.status(); ok || !strings.Contains(why, "connection refused") {
		t.Errorf("status = %t, %q; want down, with the cause", ok, why)
	}
	if got := strings.Count(logs.String(), "database unreachable"); got != 1 {
		t.Errorf("%d lines say the database is unreachable, want 1 for both pipelines and both checks:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), `database="db.example:5432/shop as canary" pipelines="[orders payments]"`) {
		t.Errorf("the line does not name the database and the pipelines it affects:\n%s", logs.String())
	}
}

func TestOneSweepJudgesTheDeadlinesOfEveryPipeline(t *testing.T) {
	clock := &fakeClock{t: t0}
	svc, err := New(Options{Config: unitConfig(t, twoDatabases), Registerer: prometheus.NewRegistry(), StateDir: "-", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for _, pr := range svc.pipes {
		if err := pr.tracker.Sent(Canary{ID: pr.p.Name + "-1", Seq: 1, Pipeline: pr.p.Name, Key: "k",
			InsertStarted: t0, CommitSent: t0, Committed: t0.Add(time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(3 * time.Second) // past every end_to_end deadline (2s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.sweep(ctx, 10*time.Millisecond, time.Hour) }()
	defer func() { cancel(); <-done }()
	for _, pr := range svc.pipes {
		waitFor(t, pr.p.Name+"'s end_to_end deadline judged", func() bool {
			return testutil.ToFloat64(svc.Metrics().SLIEvents.WithLabelValues(pr.p.Name, config.SegmentEndToEnd, "bad")) == 1
		})
	}
}
