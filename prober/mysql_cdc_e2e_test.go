package prober

// The CDC path on MariaDB: the stack's MariaDB 10.11 (row-based binlog) ->
// Debezium's MariaDB connector with the outbox EventRouter on the stack's
// Kafka Connect worker -> Kafka -> the prober. The connector has the
// recommended configuration (deploy/local/connect/
// outbox-connector-mariadb.json, docs/mysql.md) with the test's own topic
// prefix, server id and schema history topic, created over the worker's
// REST API and deleted with the test. Skips without the stack's MariaDB or
// worker (fails in CI).

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

// mariaDBCDC is one test's MariaDB database with Debezium's outbox table,
// its topics, and a running connector with the recommended configuration.
type mariaDBCDC struct {
	s             stacktest.Stack
	dsn           string
	admin         *sql.DB
	aggregateType string
	topic         string
	connector     *stacktest.Connector
}

func newMariaDBCDC(t *testing.T, s stacktest.Stack) *mariaDBCDC {
	t.Helper()
	m := s.MySQL(t)
	s.ConnectURL(t)
	names := stacktest.NewConnectorNames(t)
	p := &mariaDBCDC{s: s, aggregateType: names.Name + "-canary"}
	p.dsn, p.admin = m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	p.topic = "outbox.event." + p.aggregateType
	s.NewTopicNamed(t, p.topic, 1, nil)
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	// Debezium wants the tables' history kept forever.
	s.NewTopicNamed(t, names.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
	cfg := m.MariaDBConnector(t, s, p.dsn, names)
	user, password := m.NewCDCUser(t)
	cfg["database.user"], cfg["database.password"] = user, password
	p.connector = s.NewConnector(t, names.Name, cfg)
	p.connector.WaitRunning(t)
	// RUNNING comes before the connector reads the binlog; a canary
	// committed in between would be before its start position.
	start := time.Now()
	m.StreamingBinlog(t, p.connector, user)
	t.Logf("connector %s reads the binlog %s after RUNNING", names.Name, time.Since(start).Round(time.Millisecond))
	return p
}

// config is a cdc pipeline on the table: uuid ids, insert-then-delete
// canaries, the record timestamp as the publish stamp.
func (p *mariaDBCDC) config(t *testing.T, schedule, budgets string) *config.Config {
	t.Helper()
	yml := fmt.Sprintf(`instance_id: e2e
signing_key: {value: %q}
pipelines:
  - name: e2e
    database: {dsn: {value: %q}, clock_offset_interval: 10s}
    outbox:
      table: outbox
      id_generation: uuid
      columns: {id: id, route: aggregatetype, key: aggregateid, event_type: type, payload: payload}
    relay: {kind: cdc, published_stamp: record_timestamp}
    canary: {schedule: %q, lost_after: 2m, delete_after_insert: true, aggregate_type: %s}
    kafka: {brokers: [%s], topic: %s}
    budgets: %s
`, e2eKey, p.dsn, schedule, p.aggregateType, strings.Join(p.s.KafkaBrokers, ", "), p.topic, budgets)
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yml)
	}
	return cfg
}

func TestCDCOnMariaDBCanariesAreMeasuredEndToEnd(t *testing.T) {
	s := stacktest.Load(t)
	p := newMariaDBCDC(t, s)
	cfg := p.config(t, "@every 1s", "{commit_to_publish: 60s, end_to_end: 60s}")
	admin := p.admin
	r := startService(t, cfg, t.TempDir(), false)
	tr, mt := r.tracker(t), r.svc.Metrics()
	const n = 10
	waitFor(t, fmt.Sprintf("%d canaries through Debezium on MariaDB", n), func() bool { return len(tr.Recent(2*n)) >= n })

	var c2p, p2c, e2e []time.Duration
	for _, rep := range tr.Recent(2 * n) {
		if rep.State != StateArrived {
			t.Errorf("canary %s: state %s, want arrived", rep.ID, rep.State)
		}
		a, b, e := segmentOf(rep, "commit_to_publish"), segmentOf(rep, "publish_to_consume"), segmentOf(rep, "end_to_end")
		if !e.Measured || e.Outcome != slo.OutcomeGood {
			t.Errorf("canary %s: end_to_end %+v, want measured and good", rep.ID, e)
		}
		if a.Measured && b.Measured {
			c2p, p2c = append(c2p, a.Duration), append(p2c, b.Duration)
		}
		e2e = append(e2e, e.Duration)
	}
	q := func(ds []time.Duration, f float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return quantile(ds, f)
	}
	t.Logf("Debezium on MariaDB, %d canaries: commit_to_publish p50 %s p99 %s (%d measured), publish_to_consume p50 %s p99 %s, end_to_end p50 %s p99 %s",
		len(e2e), q(c2p, .5), q(c2p, .99), len(c2p), q(p2c, .5), q(p2c, .99), q(e2e, .5), q(e2e, .99))
	if bad := r.sli("end_to_end", slo.OutcomeBad); bad != 0 {
		t.Errorf("bad end_to_end events = %v, want 0 on a healthy pipeline", bad)
	}
	if dup := r.counter(mt.CanariesDuplicate); dup != 0 {
		t.Errorf("duplicates = %v, want 0: the DELETE of each canary must not be published", dup)
	}
	if skipped := r.counter(mt.MessagesSkipped, ReasonMalformed); skipped != 0 {
		t.Errorf("malformed messages = %v, want 0: Debezium's JSON payload must decode", skipped)
	}
	var rows int
	if err := admin.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM outbox").Scan(&rows); err != nil || rows != 0 {
		t.Errorf("outbox rows = %d (%v), want 0 with canary.delete_after_insert", rows, err)
	}
}

// A paused Debezium connector on MariaDB: canaries committed meanwhile
// turn bad at their deadline, charged to commit_to_publish (the capture
// side: the prober's readers are caught up and the canary is not on the
// topic), never to publish_to_consume; once it resumes they arrive late,
// each counted once. Pausing stops Connect from polling the task, not
// Debezium from reading the binlog: the record timestamp (Debezium's read
// time) of a late canary is milliseconds after its commit, and the pause
// shows in publish_to_consume's measure. The verdict at the deadline, on
// evidence, is what charges the segment.
func TestCDCOnMariaDBAPausedConnectorIsChargedToCommitToPublish(t *testing.T) {
	s := stacktest.Load(t)
	p := newMariaDBCDC(t, s)
	cfg := p.config(t, "@every 1h", "{commit_to_publish: 5s, end_to_end: 8s}")
	pl := &cfg.Pipelines[0]
	r := startService(t, cfg, t.TempDir(), true)
	tr, m := r.tracker(t), r.svc.Metrics()
	// A canary through first: the connector streams and the readers have
	// a position on the topic.
	if rep := await(t, tr, r.send(t).ID); rep.State != StateArrived && rep.State != StateLate {
		t.Fatalf("first canary: %s", describe(pl, rep))
	}
	badSince := r.badSince("commit_to_publish", "publish_to_consume", "end_to_end")
	received := r.counter(m.CanariesReceived)

	p.connector.Pause(t)
	const n = 3
	var sent []Canary
	for range n {
		sent = append(sent, r.send(t))
	}
	stacktest.Eventually(t, time.Minute, "every canary of the pause to be charged to commit_to_publish, and bad end to end", func() (bool, string) {
		return badSince("commit_to_publish") == n && badSince("end_to_end") == n, fmt.Sprintf("bad commit_to_publish %v, end_to_end %v; in flight %+v",
			badSince("commit_to_publish"), badSince("end_to_end"), tr.InFlightReports())
	})
	if got := badSince("publish_to_consume"); got != 0 {
		t.Errorf("publish_to_consume bad events = %v while the connector was paused, want 0", got)
	}

	p.connector.Resume(t)
	waitFor(t, "the canaries of the pause to arrive", func() bool { return r.counter(m.CanariesReceived) == received+n })
	for _, c := range sent {
		rep := await(t, tr, c.ID)
		t.Log(describe(pl, rep))
		if rep.State != StateLate {
			t.Errorf("canary %s: state %s, want late", c.ID, rep.State)
		}
	}
	for _, seg := range []string{"commit_to_publish", "end_to_end"} {
		if got := badSince(seg); got != n {
			t.Errorf("%s bad events = %v after the late arrivals, want still %d: one verdict per canary", seg, got, n)
		}
	}
	if got := badSince("publish_to_consume"); got != 0 {
		t.Errorf("publish_to_consume bad events = %v after the late arrivals, want 0", got)
	}
	if dup := r.counter(m.CanariesDuplicate); dup != 0 {
		t.Errorf("duplicates = %v, want 0", dup)
	}
}
