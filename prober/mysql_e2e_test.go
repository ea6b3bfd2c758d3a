package prober

// The prober on MariaDB 10.11 of the local stack (`deploy/local/stack.sh
// up`): the same engine, judge and metrics as on PostgreSQL, the database
// reached through the MySQL family of internal/outboxdb, as the
// least-privilege user canary, behind the reference relay on MySQL. Skips
// without the stack's MariaDB (fails in CI).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

// newMySQLOutbox is newOutbox on MariaDB: a database with the schema, a
// one-partition topic, and the reference relay on MySQL polling every
// 20ms.
func newMySQLOutbox(t *testing.T, s stacktest.Stack, schema stacktest.Schema, columns relay.Columns) *e2eOutbox {
	t.Helper()
	m := s.MySQL(t)
	dsn, _ := m.FreshOutbox(t, schema)
	o := &e2eOutbox{dsn: dsn, topic: s.NewTopic(t, 1, nil), brokers: s.KafkaBrokers}
	db, err := mysql.Open(config.Database{DSN: config.InlineSecret(dsn)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := relay.NewKafkaWriter(s.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.NewOn(relay.Config{Columns: columns, TopicTemplate: o.topic, PollInterval: 20 * time.Millisecond, MaxBackoff: time.Second},
		relay.MySQLStore(db.SQL()), w, testLogger(t, "relay"), nil, nil)
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	o.relay = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return o
}

func TestE2EMariaDBPollingPipelineDeliversEveryCanaryGood(t *testing.T) {
	s := stacktest.Load(t)
	cases := []struct {
		name    string
		schema  stacktest.Schema
		columns relay.Columns
		yaml    pipelineYAML
	}{
		{"Seed schema A on MariaDB, routed by aggregate type, splits commit to publish at the relay's read stamp.",
			stacktest.MySQLSeedA, relay.SchemaAColumns(), pipelineYAML{}},
		{"Seed schema B on MariaDB, routed by event type, is measured end to end as well.",
			stacktest.MySQLSeedB, relay.SchemaBColumns(), pipelineYAML{Route: "event_type", EventType: "event_type"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newMySQLOutbox(t, s, tc.schema, tc.columns)
			py := tc.yaml
			// Budgets a loaded machine keeps, as on PostgreSQL.
			py.Budgets = map[string]string{"end_to_end": "60s", "commit_to_read": "60s", "publish_to_consume": "60s"}
			py.LostAfter = "2m"
			py.Schedule = "@every 1s"
			cfg := o.config(t, py)
			if kind, _ := cfg.Pipelines[0].Database.Family(); kind != config.KindMySQL {
				t.Fatalf("database kind %q, want mysql from the DSN", kind)
			}
			r := startService(t, cfg, t.TempDir(), false)
			tr := r.tracker(t)
			const want = 10
			waitFor(t, fmt.Sprintf("%d canaries to arrive, measured", want), func() bool { m, _ := measuredOf(tr, 3*want); return len(m) >= want })
			reps, ordered := measuredOf(tr, 3*want)
			t.Logf("%d canaries measured, %d left out: published_at marked after the prober fetched them", len(reps), ordered)

			bySegment := map[string][]time.Duration{}
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
					bySegment[seg] = append(bySegment[seg], sr.Duration)
				}
				e2e := segmentOf(rep, "end_to_end")
				bySegment["end_to_end"] = append(bySegment["end_to_end"], e2e.Duration)
				if d := (sum - e2e.Duration).Abs(); d > time.Microsecond {
					t.Errorf("canary %s: segments sum to %s, end_to_end is %s", rep.ID, sum, e2e.Duration)
				}
				if e2e.Outcome != slo.OutcomeGood {
					t.Errorf("canary %s: end_to_end outcome %q after %s, want good", rep.ID, e2e.Outcome, e2e.Duration)
				}
			}
			for _, seg := range []string{"commit_to_read", "read_to_publish", "publish_to_consume", "end_to_end"} {
				t.Logf("MariaDB %s: %s p50 %s p99 %s over %d canaries", tc.schema.Name, seg,
					quantile(bySegment[seg], 0.5), quantile(bySegment[seg], 0.99), len(bySegment[seg]))
			}
			waitFor(t, "good end_to_end events on /metrics", func() bool { return r.sli("end_to_end", slo.OutcomeGood) >= want })
			if bad := r.sli("end_to_end", slo.OutcomeBad); bad != 0 {
				t.Errorf("bad end_to_end events = %v, want 0 on a healthy pipeline", bad)
			}
			// The offset of MariaDB's clock (SYSDATE(6)) was measured, with
			// an error bound.
			if got := r.counter(r.svc.Metrics().DependencyErrors, DependencyDBClock); got != 0 {
				t.Errorf("db_clock errors = %v, want 0", got)
			}
			off, ok := r.svc.pipes[0].clock.Current()
			if !ok || off.Error <= 0 || off.Offset.Abs() > off.Error+time.Millisecond {
				t.Errorf("database clock offset %v ± %v (measured %t): want a measured bound around 0 (same machine)", off.Offset, off.Error, ok)
			}
		})
	}
}

// A paused relay on MariaDB: every canary turns bad at its deadline, and
// the relay's segment is charged (commit_to_publish), not the broker's
// (publish_to_consume); once the relay resumes the late canaries arrive
// and are counted once.
func TestE2EMariaDBPausedRelayIsChargedToTheRelaysSegment(t *testing.T) {
	s := stacktest.Load(t)
	o := newMySQLOutbox(t, s, stacktest.MySQLSeedA, relay.SchemaAColumns())
	cfg := o.config(t, pipelineYAML{Relay: relayPublishedAt, LostAfter: "5m",
		Budgets: map[string]string{"commit_to_publish": "1s", "publish_to_consume": "1s", "end_to_end": "2s"}})
	p := &cfg.Pipelines[0]
	r := startService(t, cfg, t.TempDir(), true)
	tr, m := r.tracker(t), r.svc.Metrics()
	// A canary through first: the pipeline works and the readers have a
	// position on the topic. It may be late on a loaded machine: the
	// counts below are the paused canaries', from here.
	if rep := await(t, tr, r.send(t).ID); rep.State != StateArrived && rep.State != StateLate {
		t.Fatalf("first canary: %s", describe(p, rep))
	}
	badSince := r.badSince("commit_to_publish", "publish_to_consume", "end_to_end")
	received := r.counter(m.CanariesReceived)

	o.relay.Faults().Pause()
	const n = 3
	var sent []Canary
	for range n {
		sent = append(sent, r.send(t))
	}
	stacktest.Eventually(t, e2eWait, "every paused canary to be charged to commit_to_publish", func() (bool, string) {
		return badSince("commit_to_publish") == n, fmt.Sprintf("bad commit_to_publish %v; in flight %+v",
			badSince("commit_to_publish"), tr.InFlightReports())
	})
	if got := badSince("publish_to_consume"); got != 0 {
		t.Errorf("publish_to_consume bad events = %v while the relay was paused, want 0: the canaries never reached Kafka", got)
	}
	if got := badSince("end_to_end"); got != n {
		t.Errorf("end_to_end bad events = %v, want %d", got, n)
	}
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v: a stall is counted at the deadline, not at lost_after", lost)
	}
	for _, c := range sent {
		rep, ok := tr.Report(c.ID)
		if !ok {
			t.Fatalf("canary %s: no report", c.ID)
		}
		if got := rep.Segments["commit_to_publish"]; got.Outcome != judge.Bad {
			t.Errorf("canary %s: commit_to_publish %+v, want bad (%s)", c.ID, got, describe(p, rep))
		}
	}

	o.relay.Faults().Resume()
	waitFor(t, "the late canaries to arrive", func() bool { return r.counter(m.CanariesReceived) == received+n })
	for _, c := range sent {
		rep := await(t, tr, c.ID)
		t.Log(describe(p, rep))
		if rep.State != StateLate {
			t.Errorf("canary %s: state %s, want late", c.ID, rep.State)
		}
	}
	if got := badSince("commit_to_publish"); got != n {
		t.Errorf("commit_to_publish bad events = %v after the late arrivals, want still %d: one verdict per canary", got, n)
	}
	if dup := r.counter(m.CanariesDuplicate); dup != 0 {
		t.Errorf("duplicates = %v, want 0", dup)
	}
}

// An unreachable MySQL database is a dependency outage: the service runs,
// says the database is down (without its password), and counts the
// failed inserts, which are no SLI events. No server is needed.
func TestAnUnreachableMySQLDatabaseIsADependencyOutageNotACrash(t *testing.T) {
	cfg, err := config.Load([]byte(`
instance_id: unit
signing_key: {value: unit-key}
pipelines:
  - name: orders
    database: {dsn: {value: "mysql://canary:hunter2@` + stacktest.ClosedAddr(t) + `/orders?timeout=1s"}}
    relay: {kind: polling}
    kafka: {brokers: ["127.0.0.1:1"], topic: canaries}
    budgets: {end_to_end: 2s}
`))
	if err != nil {
		t.Fatal(err)
	}
	logs := &stacktest.SyncBuffer{}
	svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), Logger: logs.Logger(), StateDir: "-", NoSchedule: true})
	if err != nil {
		t.Fatalf("new service: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	m := svc.Metrics()
	waitFor(t, "the database to be reported down", func() bool {
		ok, reasons := svc.Dependencies()
		return !ok && testutil.ToFloat64(m.DependencyErrors.WithLabelValues("orders", DependencyDatabase)) >= 1 && len(reasons) > 0
	})
	if _, err := svc.Send(context.Background(), "orders"); err == nil {
		t.Fatal("a canary insert into an unreachable database succeeded")
	} else if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("insert error %q shows the password", err)
	}
	if got := testutil.ToFloat64(m.CanaryInsertFailures.WithLabelValues("orders")); got != 1 {
		t.Errorf("insert failures = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.DependencyUp.WithLabelValues("orders", DependencyDatabase)); got != 0 {
		t.Errorf("database up = %v, want 0", got)
	}
	for _, outcome := range []string{slo.OutcomeGood, slo.OutcomeBad} {
		if got := testutil.ToFloat64(m.SLIEvents.WithLabelValues("orders", "end_to_end", outcome)); got != 0 {
			t.Errorf("%s end_to_end events = %v, want none: a failed insert says nothing of the pipeline", outcome, got)
		}
	}
	_, reasons := svc.Dependencies()
	if strings.Contains(logs.String()+strings.Join(reasons, " "), "hunter2") {
		t.Errorf("the password appears in the logs or the reasons:\n%s\n%v", logs.String(), reasons)
	}
}
