package diagnose

// diagnose on a MySQL pipeline, on the stack's MariaDB (OUTBOX_CANARY_MYSQL_*
// in the stack's env): the runbook's stages read MySQL's evidence through
// the outboxdb seam. It skips without the stack, and fails in CI.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// stageWait bounds the wait for a stage to turn: a budget of 2 s plus the
// relay's poll and a loaded machine's scheduling.
const stageWait = 60 * time.Second

func mysqlPipeline(t *testing.T, dsn, kind string, brokers []string, topic, extra string) *config.Pipeline {
	t.Helper()
	yml := fmt.Sprintf(`instance_id: diagnose
signing_key: {value: k}
pipelines:
  - name: mariadb
    database: {dsn: {value: %q}}
    outbox: {table: outbox}
    relay: {kind: %s}
    kafka: {brokers: [%s], topic: %s}
    budgets: {commit_to_publish: 2s, end_to_end: 3s}
%s`, dsn, kind, strings.Join(brokers, ", "), topic, extra)
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	return &cfg.Pipelines[0]
}

func stage(d Diagnosis, name string) StageResult {
	for _, s := range d.Stages {
		if s.Name == name {
			return s
		}
	}
	return StageResult{}
}

func TestDiagnoseOnMariaDBNamesAPausedRelayWithTheBacklogAndAnOpenTransactionWithItsSession(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
	topic := s.NewTopic(t, 1, nil)
	db, err := mysql.Open(config.Database{DSN: config.InlineSecret(dsn)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	w := relay.NewKafkaWriter(s.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.NewOn(relay.Config{Columns: relay.SchemaAColumns(), TopicTemplate: topic, PollInterval: 20 * time.Millisecond, MaxBackoff: time.Second},
		relay.MySQLStore(db.SQL()), w, slog.New(slog.DiscardHandler), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	p := mysqlPipeline(t, dsn, "polling", s.KafkaBrokers, topic, "    watch: {long_transaction_threshold: 1s}\n")
	diag := func() Diagnosis { return Pipeline(context.Background(), p, Options{}) }

	// Running: the relay publishes a row, and the walk is healthy, with
	// MySQL's evidence and no replication slot.
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, 0)
	var d Diagnosis
	stacktest.EventuallyEvery(t, stageWait, stacktest.InnoDBTrxIdle, "a healthy walk while the relay runs", func() (bool, string) {
		d = diag()
		rel := stage(d, StageRelay).Evidence
		return d.Healthy && len(rel) > 0 && strings.Contains(rel[0], "backlog 0 rows"), fmt.Sprintf("%+v", d)
	})
	if got := stage(d, StageRelay).Evidence; len(got) == 0 || !strings.Contains(got[0], "backlog 0 rows") {
		t.Errorf("relay evidence %q, want the backlog of 0 rows", got)
	}
	if got := stage(d, StageBinlog); got.Status != StatusNotApplicable {
		t.Errorf("binlog stage of a polling pipeline: %+v, want not_applicable", got)
	}
	t.Logf("running: %+v", d.Stages)

	// Paused: a row waits past the budget, and the relay is named.
	r.Faults().Pause()
	stacktest.InsertMySQLRow(t, admin, stacktest.MySQLSeedA, false, 0)
	stacktest.EventuallyEvery(t, stageWait, stacktest.InnoDBTrxIdle, "diagnose to name the paused relay", func() (bool, string) {
		d = diag()
		return d.FirstUnhealthy == StageRelay, fmt.Sprintf("%+v", d)
	})
	rel := stage(d, StageRelay)
	if rel.Status != StatusUnhealthy || len(rel.Evidence) == 0 || !strings.Contains(rel.Evidence[0], "backlog 1 rows") ||
		!strings.Contains(rel.Evidence[0], "budget commit_to_publish 2s") || rel.NextStep != nextRelayPolling {
		t.Errorf("relay stage %+v, want unhealthy on a backlog of 1 row past commit_to_publish's 2s, with the polling relay's next step", rel)
	}
	if c := stage(d, StageCommit); c.Status != StatusOK {
		t.Errorf("commit stage %+v, want ok: no transaction is open", c)
	}
	t.Logf("paused: %+v", d.Stages)
	r.Faults().Resume()

	// An open transaction that wrote to the outbox hides its row: the
	// commit stage names its session, before the relay.
	conn, err := admin.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var session int64
	if err := conn.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.Exec(`INSERT INTO outbox (aggregate_type, aggregate_id, payload) VALUES ('order', 'held', '{}')`); err != nil {
		t.Fatal(err)
	}
	stacktest.EventuallyEvery(t, stageWait, stacktest.InnoDBTrxIdle, "diagnose to name the open transaction", func() (bool, string) {
		d = diag()
		return d.FirstUnhealthy == StageCommit, fmt.Sprintf("%+v", d)
	})
	c := stage(d, StageCommit)
	want := fmt.Sprintf("session %d", session)
	if !strings.Contains(strings.Join(c.Evidence, "\n"), want) || !strings.Contains(c.NextStep, fmt.Sprintf("KILL %d", session)) ||
		!strings.Contains(c.NextStep, "information_schema.innodb_trx") {
		t.Errorf("commit stage %+v, want %q in its evidence and MySQL's next step for it", c, want)
	}
	t.Logf("open transaction: %+v", d.Stages)
}

func TestDiagnoseOnMariaDBGivesTheConnectorsDistanceBehindTheBinlogAsEvidence(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	url := s.ConnectURL(t)
	names := stacktest.NewConnectorNames(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	agg := names.Name + "-canary"
	topic := "outbox.event." + agg
	s.NewTopicNamed(t, topic, 1, nil)
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	s.NewTopicNamed(t, names.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
	cfg := m.MariaDBConnector(t, s, dsn, names)
	user, password := m.NewCDCUser(t)
	cfg["database.user"], cfg["database.password"] = user, password
	c := s.NewConnector(t, names.Name, cfg)
	c.WaitRunning(t)
	m.StreamingBinlog(t, c, user)

	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedDebezium, IDGen: "uuid", Brokers: s.KafkaBrokers, Topic: topic,
		Watch: fmt.Sprintf("{connect_url: %q, connector: %q}", url, names.Name)})
	insert := func() {
		t.Helper()
		if _, err := admin.Exec("INSERT INTO outbox VALUES (UUID(), ?, 'k', 'created', '{}')", agg); err != nil {
			t.Fatal(err)
		}
	}
	evidence := func(d Diagnosis) string { return strings.Join(stage(d, StageBinlog).Evidence, " | ") }
	committed := func(files string) func() (bool, string) {
		return func() (bool, string) {
			d := Pipeline(context.Background(), p, Options{})
			ev := evidence(d)
			return strings.Contains(ev, "connector "+names.Name+" committed") && strings.Contains(ev, files), ev
		}
	}

	// Running: it commits the position of the row it read, on the current
	// file.
	insert()
	stacktest.EventuallyEvery(t, stageWait, stacktest.InnoDBTrxIdle, "the connector's position on the current file", committed("bytes and 0 files behind the server"))
	if d := Pipeline(context.Background(), p, Options{}); !stage(d, StageBinlog).Healthy {
		t.Errorf("binlog stage unhealthy while the connector keeps up: %s", evidence(d))
	}

	// Paused, after a rotation: a file behind, with expiry's headroom. The
	// walk stops at the relay (the connector is PAUSED); the binlog stage,
	// examined by itself, gives the distance.
	c.Pause(t)
	insert()
	if _, err := admin.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	insert()
	db, err := mysql.Open(p.Database, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var r StageResult
	stacktest.EventuallyEvery(t, stageWait, stacktest.InnoDBTrxIdle, "the paused connector a file behind", func() (bool, string) {
		r = checkCapture(context.Background(), p, Probes{Outbox: db, HTTP: http.DefaultClient}, Options{})
		ev := strings.Join(r.Evidence, " | ")
		return strings.Contains(ev, "1 files behind the server; binlog expiry may purge its file in"), ev
	})
	t.Logf("binlog stage of the paused connector: %s", strings.Join(r.Evidence, " | "))
	if !r.Healthy {
		t.Errorf("a day of headroom is evidence, not an unhealthy stage: %v", r.Evidence)
	}
	if d := Pipeline(context.Background(), p, Options{}); d.FirstUnhealthy != StageRelay {
		t.Errorf("first unhealthy stage %q, want the relay's (the paused connector)", d.FirstUnhealthy)
	}
}
