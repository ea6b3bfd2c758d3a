package prober

// End-to-end tests of the CDC path on the project's real stack: PostgreSQL
// (wal_level=logical) -> Debezium 3.6.1 PostgreSQL connector with the outbox
// EventRouter on a Kafka Connect standalone worker (4.3.0: Debezium 3.6.1
// cannot run on 4.4.0, see deploy/local/connect/pom.xml) -> the 4.4.0 broker
// -> the prober. Start
// the stack and the worker with
//
//	deploy/local/stack.sh up && deploy/local/connect.sh up
//
// (connect.sh adds OUTBOX_CANARY_CONNECT_URL to .stack/env), then
// `go test ./prober/ -run CDC`. Without that URL they skip (and fail in CI).
//
// Each test gets a fresh database with Debezium's default outbox table, a
// canary aggregate type and canary topic of its own, and a connector of its
// own: the recommended configuration (deploy/local/connect/
// outbox-connector.json, explained in docs/cdc.md) with the test's own
// replication slot, publication and topic prefix, created through the
// worker's REST API and deleted, with its slot, before the database is
// dropped.
// TestDisruptiveConnectStopped stops the shared worker, so `make test` runs it
// after the others.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/diagnose"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/internal/watch"
	"github.com/outbox-canary/outbox-canary/slo"
)

// cdcPipeline is one test's database, topics and Debezium connector.
type cdcPipeline struct {
	s     stacktest.Stack
	dsn   string
	pool  *pgxpool.Pool
	topic string // the canary topic: outbox.event.<aggregateType>
	// aggregateType is the test's own canary aggregate type, so that the
	// router's default topic (outbox.event.<aggregate type>) is the test's.
	aggregateType string
	connector     *stacktest.Connector
	// startup is how long the connector took to stream: the scale of the
	// worker's and the database's speed right now.
	startup time.Duration
}

// recommendedCanaryTopic is the canary topic's configuration docs/cdc.md
// recommends: the broker's append time as the publish stamp, so that
// Debezium's queue is charged to commit_to_publish.
var recommendedCanaryTopic = map[string]string{"message.timestamp.type": "LogAppendTime"}

// newCDCPipeline creates a database with Debezium's outbox table, its canary
// topic (recommendedCanaryTopic) and heartbeat topic, and a connector with
// the recommended configuration (deploy/local/connect/outbox-connector.json)
// changed by edit (nil: as it is), and waits until the connector streams.
// Cleanup deletes the connector and drops its slot before the database goes.
func newCDCPipeline(t *testing.T, s stacktest.Stack, edit func(cfg map[string]string, names stacktest.ConnectorNames)) *cdcPipeline {
	t.Helper()
	return newCDCPipelineOn(t, s, recommendedCanaryTopic, edit)
}

// newCDCPipelineOn is newCDCPipeline with a canary topic of the given
// configuration.
func newCDCPipelineOn(t *testing.T, s stacktest.Stack, topicConfig map[string]string, edit func(cfg map[string]string, names stacktest.ConnectorNames)) *cdcPipeline {
	t.Helper()
	ctx := context.Background()
	s.ConnectURL(t) // skip before creating anything when there is no worker
	names := stacktest.NewConnectorNames(t)
	p := &cdcPipeline{s: s, dsn: s.NewDatabase(t), aggregateType: names.Name + "-canary"}
	p.topic = "outbox.event." + p.aggregateType
	pool, err := pgxpool.New(ctx, p.dsn)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	p.pool = pool
	if _, err := pool.Exec(ctx, outboxsql.DebeziumOutbox); err != nil {
		t.Fatalf("load Debezium's outbox table: %v", err)
	}
	// The test creates every topic the connector writes, rather than
	// letting Connect create them (topic.creation.*): they are deleted
	// with the test, where Connect's would pile up on the shared broker,
	// and a routing mistake fails the task at once instead of feeding a
	// topic that nobody reads.
	s.NewTopicNamed(t, p.topic, 1, topicConfig)
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	cfg := stacktest.RecommendedConnector(t, p.dsn, names)
	if edit != nil {
		edit(cfg, names)
	}
	p.connector = s.NewConnector(t, names.Name, cfg)
	p.startup = p.connector.WaitRunning(t)
	return p
}

func (p *cdcPipeline) slotActive(t *testing.T) bool {
	t.Helper()
	var active bool
	err := p.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, p.connector.Slot).Scan(&active)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("slot %s: %v", p.connector.Slot, err)
	}
	return active
}

// config is a CDC pipeline on Debezium's default table: uuid ids made by
// the prober, insert-then-delete canaries, the record timestamp as the
// publish stamp, and watchers sampling every second.
func (p *cdcPipeline) config(t *testing.T, schedule string, budgets string) *config.Config {
	t.Helper()
	yml := fmt.Sprintf(`instance_id: e2e
signing_key: {value: %q}
pipelines:
  - name: e2e
    database: {dsn: {value: %q}, clock_offset_interval: 10s}
    outbox:
      table: public.outbox
      id_generation: uuid
      columns: {id: id, route: aggregatetype, key: aggregateid, event_type: type, payload: payload}
    relay: {kind: cdc, published_stamp: record_timestamp}
    canary: {schedule: %q, lost_after: 2m, delete_after_insert: true, aggregate_type: %s}
    kafka: {brokers: [%s], topic: %s}
    budgets: %s
    watch: {interval: 1s, connect_url: %q, connector: %q, slot: %s}
`, e2eKey, p.dsn, schedule, p.aggregateType, strings.Join(p.s.KafkaBrokers, ", "), p.topic, budgets, p.connector.URL, p.connector.Name, p.connector.Slot)
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yml)
	}
	return cfg
}

func TestCDCCanariesAreMeasuredEndToEnd(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	p := newCDCPipeline(t, s, nil)
	// Budgets a loaded machine keeps: the test is about Debezium's stamps
	// and the segments they split, not the stack's speed.
	cfg := p.config(t, "@every 1s", "{commit_to_publish: 60s, end_to_end: 60s}")
	r := startService(t, cfg, t.TempDir(), false)
	wm := startWatcher(t, cfg)
	tr := r.tracker(t)
	m := r.svc.Metrics()
	const n = 3
	waitFor(t, fmt.Sprintf("%d canaries through Debezium", n), func() bool { return len(tr.Recent(n)) >= n })

	var c2p, p2c, e2e []time.Duration
	for _, rep := range tr.Recent(n) {
		if rep.State != StateArrived {
			t.Errorf("canary %s: state %s, want arrived", rep.ID, rep.State)
		}
		a, b, e := segmentOf(rep, "commit_to_publish"), segmentOf(rep, "publish_to_consume"), segmentOf(rep, "end_to_end")
		if !a.Measured || !b.Measured || !e.Measured {
			t.Fatalf("canary %s: segments not all measured: %+v", rep.ID, rep.Segments)
		}
		if d := (a.Duration + b.Duration - e.Duration).Abs(); d > time.Microsecond {
			t.Errorf("canary %s: commit_to_publish %s + publish_to_consume %s != end_to_end %s", rep.ID, a.Duration, b.Duration, e.Duration)
		}
		for _, sr := range []SegmentResult{a, e} {
			if sr.Outcome != slo.OutcomeGood {
				t.Errorf("canary %s: %s outcome %q after %s, want good", rep.ID, sr.Segment, sr.Outcome, sr.Duration)
			}
		}
		c2p, p2c, e2e = append(c2p, a.Duration), append(p2c, b.Duration), append(e2e, e.Duration)
	}
	t.Logf("CDC path, %d canaries: commit_to_publish %v (median %s), publish_to_consume %v (median %s), end_to_end %v (median %s)",
		n, c2p, median(c2p), p2c, median(p2c), e2e, median(e2e))
	if bad := r.sli("end_to_end", slo.OutcomeBad); bad != 0 {
		t.Errorf("bad end_to_end events = %v, want 0 on a healthy pipeline", bad)
	}
	if dup := r.counter(m.CanariesDuplicate); dup != 0 {
		t.Errorf("duplicates = %v, want 0: the DELETE of each canary must not be published", dup)
	}
	if skipped := r.counter(m.MessagesSkipped, ReasonMalformed); skipped != 0 {
		t.Errorf("malformed messages = %v, want 0: Debezium's JSON-string payload must decode", skipped)
	}

	// Insert and delete in one transaction: Debezium publishes the insert
	// and ignores the delete, so the table stays empty.
	var rows int
	if err := p.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("outbox rows = %d, want 0 with canary.delete_after_insert", rows)
	}
	waitFor(t, "the watchers to see the slot active and the connector running", func() bool {
		return testutil.ToFloat64(wm.SlotActive.WithLabelValues("e2e", p.connector.Slot)) == 1 &&
			testutil.ToFloat64(wm.ConnectorRunning.WithLabelValues("e2e", p.connector.Name)) == 1
	})
	// With watch.slot the watcher reports this pipeline's slot alone, even
	// though the server holds the slots of the tests running alongside.
	if n := testutil.CollectAndCount(wm.SlotActive); n != 1 {
		t.Errorf("%d replication slot series, want 1 (watch.slot %s)", n, p.connector.Slot)
	}
	// The restart count reads worker_id: the real worker reports one for
	// the connector and each task, and a connector that keeps running
	// counts no restart however often it is sampled.
	st, err := p.connector.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Connector.WorkerID == "" || len(st.Tasks) == 0 || st.Tasks[0].WorkerID == "" {
		t.Errorf("status %+v: want the worker_id of the connector and of its task", st)
	}
	if n := testutil.ToFloat64(wm.ConnectorRestarts.WithLabelValues("e2e", p.connector.Name)); n != 0 {
		t.Errorf("connector restarts = %v on a connector that never stopped, want 0", n)
	}

	// What Debezium's router wrote, read with a client of our own: the
	// aggregateid as key, the row id (the prober's uuid, which is the
	// canary id) in the "id" header, the payload as a JSON string.
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: s.KafkaBrokers, Topic: p.topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	msg, err := rd.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read the canary topic: %v", err)
	}
	var id string
	for _, h := range msg.Headers {
		if h.Key == "id" {
			id = string(h.Value)
		}
	}
	signer, _ := NewSigner([]byte(e2eKey))
	pl, err := signer.Decode(msg.Value)
	switch {
	case err != nil:
		t.Errorf("value %s: %v", msg.Value, err)
	case id != pl.CanaryID:
		t.Errorf("header id = %q, want the row id %q (headers %v)", id, pl.CanaryID, msg.Headers)
	}
	if string(msg.Key) != `"outbox-canary"` && string(msg.Key) != "outbox-canary" {
		t.Errorf("key = %s, want the aggregateid outbox-canary", msg.Key)
	}
	if len(msg.Value) == 0 || msg.Value[0] != '"' {
		t.Errorf("value %s: want the jsonb payload as a JSON string", msg.Value)
	}
	t.Logf("Debezium record: key %s, headers %v, timestamp %s, value %.80s", msg.Key, msg.Headers, msg.Time.Format(time.RFC3339Nano), msg.Value)
}

// connectScript runs deploy/local/connect.sh with a command (stop, start)
// on the test's stack and fails the test with its output if it fails.
func connectScript(t *testing.T, s stacktest.Stack, command string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(filepath.Dir(s.ScriptPath), "connect.sh"), command)
	cmd.Env = append(os.Environ(), "STACK_DIR="+s.Dir)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("connect.sh %s: %v\n%s", command, err, out)
	}
	t.Logf("connect.sh %s:\n%s", command, bytes.TrimSpace(out))
}

// TestDisruptiveConnectStopped stops the shared Kafka Connect worker, so it
// is not parallel and `make test` runs it after the other tests.
func TestDisruptiveConnectStopped(t *testing.T) {
	s := stacktest.Load(t)
	p := newCDCPipeline(t, s, nil)
	cfg := p.config(t, "@every 500ms", "{commit_to_publish: 2s, end_to_end: 3s}")
	r := startService(t, cfg, t.TempDir(), false)
	wm := startWatcher(t, cfg)
	tr := r.tracker(t)
	m := r.svc.Metrics()
	ctx := context.Background()

	goodSince := func(since time.Time) func() bool {
		return func() bool {
			for _, rep := range tr.Recent(5) {
				if rep.Committed.After(since) && rep.State == StateArrived {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, "a first good canary", goodSince(time.Time{}))
	badBefore := r.sli("commit_to_publish", slo.OutcomeBad) + r.sli("end_to_end", slo.OutcomeBad)

	// Whatever happens below, leave the worker running for the tests and
	// packages that come after this one (registered after the connector's
	// cleanup, so it runs before it: deleting needs a live worker).
	t.Cleanup(func() { connectScript(t, s, "start") })
	connectScript(t, s, "stop")
	stopped := time.Now()

	waitFor(t, "the slot watcher to see the slot inactive", func() bool {
		return testutil.ToFloat64(wm.SlotActive.WithLabelValues("e2e", p.connector.Slot)) == 0 && !p.slotActive(t)
	})
	slotNow := func() postgres.Slot {
		t.Helper()
		slots, err := postgres.QuerySlots(ctx, p.pool, p.connector.Slot)
		if err != nil {
			t.Fatal(err)
		}
		if len(slots) != 1 || slots[0].Name != p.connector.Slot {
			t.Fatalf("postgres.QuerySlots(%s) = %+v, want that slot alone", p.connector.Slot, slots)
		}
		return slots[0]
	}
	before := slotNow()
	// About 4 MB of WAL that nobody confirms while the connector is away.
	const wal = 4 << 20
	if _, err := p.pool.Exec(ctx, `CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 16000) AS g`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watcher to report the retained WAL growing", func() bool {
		return testutil.ToFloat64(wm.SlotRetainedWAL.WithLabelValues("e2e", p.connector.Slot)) >= float64(before.RetainedWAL+wal*3/4)
	})
	after := slotNow()
	t.Logf("Connect stopped: slot %s retained WAL %d -> %d bytes (+%d), unconfirmed %d -> %d",
		p.connector.Slot, before.RetainedWAL, after.RetainedWAL, after.RetainedWAL-before.RetainedWAL, before.UnconfirmedWAL, after.UnconfirmedWAL)

	// Canaries of our own, so that each one of the outage is followed to
	// its end (the schedule keeps sending too: the watchers run with it).
	var during []Canary
	for range 3 {
		during = append(during, r.send(t))
	}
	waitFor(t, "canaries to turn bad at their deadline", func() bool {
		return r.sli("commit_to_publish", slo.OutcomeBad)+r.sli("end_to_end", slo.OutcomeBad) > badBefore
	})
	t.Logf("first bad SLI events %s after the stop (budgets commit_to_publish 2s, end_to_end 3s)", time.Since(stopped).Round(10*time.Millisecond))
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v: a stall must be counted at the deadline, not at lost_after", lost)
	}
	d := diagnose.Pipeline(ctx, &cfg.Pipelines[0], diagnose.Options{})
	if d.FirstUnhealthy != diagnose.StageRelay {
		t.Errorf("diagnose names %q first, want %q (the connector); stages %+v", d.FirstUnhealthy, diagnose.StageRelay, d.Stages)
	}
	for _, st := range d.Stages {
		if st.Name == diagnose.StageRelay {
			t.Logf("diagnose: %s %s: %v; next: %s", st.Name, st.Status, st.Evidence, st.NextStep)
			if !strings.Contains(strings.Join(st.Evidence, " "), "unreachable") {
				t.Errorf("relay evidence %v, want Kafka Connect unreachable", st.Evidence)
			}
		}
	}

	// A standalone worker keeps connectors created through REST in memory
	// only, so after a restart the connector is given again, as a
	// deployment would pass its config on the command line. Its offsets
	// (the LSN it had flushed) are in the worker's offsets file: it
	// resumes there, and the canaries committed meanwhile are published.
	resumed := time.Now() // nothing of the outage can be published before this
	connectScript(t, s, "start")
	p.connector.Put(t)
	p.connector.WaitRunning(t)
	restarted := time.Now()
	waitFor(t, "a good canary after the restart", goodSince(restarted))
	waitFor(t, "the watcher to see the slot active again", func() bool {
		return testutil.ToFloat64(wm.SlotActive.WithLabelValues("e2e", p.connector.Slot)) == 1
	})
	// Every canary of the outage arrives (late): none was lost with the
	// worker. Their commit_to_publish spans the outage because the record
	// timestamp is Debezium's processing time, not the commit time; the
	// broker and the consumer were healthy throughout.
	outage := resumed.Sub(stopped)
	var worstC2P, worstP2C time.Duration
	for _, c := range during {
		actx, cancel := context.WithTimeout(ctx, e2eWait)
		rep, err := tr.Await(actx, c.ID)
		cancel()
		if err != nil {
			t.Fatalf("canary %s committed during the outage: %v", c.ID, err)
		}
		if rep.State != StateLate {
			t.Errorf("canary %s committed during the outage: state %s, want late", c.ID, rep.State)
		}
		c2p := segmentOf(rep, "commit_to_publish").Duration
		if waited := resumed.Sub(c.Committed); c2p < waited {
			t.Errorf("canary %s: commit_to_publish %s, yet it waited %s for the worker: the publish stamp is not Debezium's processing time", c.ID, c2p, waited)
		}
		worstC2P = max(worstC2P, c2p)
		worstP2C = max(worstP2C, segmentOf(rep, "publish_to_consume").Duration)
	}
	t.Logf("outage %s: %d canaries sent during it arrived late; worst commit_to_publish %s, worst publish_to_consume %s; SLI bad commit_to_publish %v, end_to_end %v; duplicates %v",
		outage.Round(10*time.Millisecond), len(during), worstC2P, worstP2C, r.sli("commit_to_publish", slo.OutcomeBad), r.sli("end_to_end", slo.OutcomeBad), r.counter(m.CanariesDuplicate))
	// Blamed on the broker or the consumer, publish_to_consume would span
	// the outage; half of it leaves a restarted producer's first
	// metadata fetch and batching, slow on a loaded machine, its room.
	if bound := max(2*time.Second, outage/2); worstP2C > bound {
		t.Errorf("worst publish_to_consume %s, above %s of a %s outage: the outage was blamed on the broker or consumer", worstP2C, bound, outage)
	}
	if lost := r.counter(m.CanariesLost); lost != 0 {
		t.Errorf("lost = %v, want 0: the worker resumed from its offsets", lost)
	}
	if d := diagnose.Pipeline(ctx, &cfg.Pipelines[0], diagnose.Options{}); !d.Healthy {
		t.Errorf("diagnose after recovery: first unhealthy %q; stages %+v", d.FirstUnhealthy, d.Stages)
	}
}

// startWatcher runs the pipeline's watchers, as `outbox-canary run` does
// beside the prober, until the test ends, and returns their metrics.
func startWatcher(t *testing.T, cfg *config.Config) *watch.Metrics {
	t.Helper()
	wm, err := watch.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	conns, err := OpenConnections(ctx, cfg.Pipelines[:1])
	if err != nil {
		t.Fatal(err)
	}
	db, err := conns.Watched(cfg.Pipelines[0].Database)
	if err != nil {
		conns.Close()
		t.Fatal(err)
	}
	w, err := watch.Open(&cfg.Pipelines[0], db, conns.Clusters, wm, testLogger(t, "watcher"))
	if err != nil {
		conns.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); defer conns.Close(); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return wm
}
