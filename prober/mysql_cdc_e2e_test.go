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
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

func TestCDCOnMariaDBCanariesAreMeasuredEndToEnd(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	s.ConnectURL(t)
	names := stacktest.NewConnectorNames(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	aggregateType := names.Name + "-canary"
	topic := "outbox.event." + aggregateType
	s.NewTopicNamed(t, topic, 1, nil)
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	// Debezium wants the tables' history kept forever.
	s.NewTopicNamed(t, names.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
	connector := s.NewConnector(t, names.Name, m.MariaDBConnector(t, s, dsn, names))
	connector.WaitRunning(t)

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
    canary: {schedule: "@every 1s", lost_after: 2m, delete_after_insert: true, aggregate_type: %s}
    kafka: {brokers: [%s], topic: %s}
    budgets: {commit_to_publish: 60s, end_to_end: 60s}
`, e2eKey, dsn, aggregateType, strings.Join(s.KafkaBrokers, ", "), topic)
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yml)
	}
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
