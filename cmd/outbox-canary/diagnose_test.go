package main

// Tests of `outbox-canary diagnose` and `outbox-canary lint` on the
// project's real PostgreSQL and Kafka, with the reference relay running
// in-process: start the stack with `deploy/local/stack.sh up` (or `make
// test`), then `go test ./cmd/outbox-canary/ -run 'Diagnose|Lint'`. Without
// the stack they skip (and fail in CI). TestDiagnoseNamesTheBrokerWhenKafkaIsDown
// stops the shared Kafka, so it is not parallel, and it disturbs tests of
// other packages that run at the same time.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/diagnose"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// diagWait bounds every wait for an expected state.
const diagWait = 45 * time.Second

// diagPipeline is one fresh database with seed schema A, a fresh canary
// topic and a configuration file pointing at both.
type diagPipeline struct {
	st     stacktest.Stack
	dsn    string
	pool   *pgxpool.Pool
	topic  string
	config string // path
}

// newDiagPipeline creates the database, the topic and the config file;
// watch is the YAML of the pipeline's watch section.
func newDiagPipeline(t *testing.T, st stacktest.Stack, watch string) *diagPipeline {
	t.Helper()
	d := &diagPipeline{st: st, dsn: st.NewDatabase(t), topic: st.NewTopic(t, 1, nil)}
	pool, err := pgxpool.New(context.Background(), d.dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	d.pool = pool
	if _, err := pool.Exec(context.Background(), outboxsql.SchemaA+`;
		CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
		INSERT INTO orders VALUES ('ord-1042', 'new');`); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if watch == "" {
		watch = "{}"
	}
	yml := fmt.Sprintf(`instance_id: test
signing_key: {value: test-key}
pipelines:
  - name: orders
    database: {dsn: {value: %q}}
    relay: {kind: polling}
    kafka: {brokers: [%s], topic: %q}
    budgets: {commit_to_publish: 500ms, end_to_end: 5s}
    watch: %s
`, d.dsn, strings.Join(st.KafkaBrokers, ", "), d.topic, watch)
	d.config = filepath.Join(t.TempDir(), "outbox-canary.yml")
	if err := os.WriteFile(d.config, []byte(yml), 0o600); err != nil {
		t.Fatalf("write config: %v", err)
	}
	return d
}

// startRelay runs the reference relay on the outbox, publishing to the
// canary topic, until the test ends.
func (d *diagPipeline) startRelay(t *testing.T) *relay.Relay {
	t.Helper()
	w := relay.NewKafkaWriter(d.st.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.New(relay.Config{Columns: relay.SchemaAColumns(), TopicTemplate: d.topic, PollInterval: 20 * time.Millisecond},
		d.pool, w, slog.New(slog.DiscardHandler), nil, nil)
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// insertOrderEvent writes a business change and its outbox row in one
// transaction, the way a service does.
func insertOrderEvent(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = 'ord-1042';
		INSERT INTO outbox (aggregate_type, aggregate_id, payload) VALUES ('order', 'ord-1042', '{"type":"OrderPaid"}')`)
	return err
}

// diagnose runs the command in text and in JSON form and returns the text,
// the diagnosis and the exit code (the same for both forms).
func (d *diagPipeline) diagnose(t *testing.T) (string, diagnose.Diagnosis, int) {
	t.Helper()
	var text, stderr bytes.Buffer
	err := Run(context.Background(), []string{"diagnose", "--config.file", d.config, "--timeout", "30s"}, &text, &stderr)
	code := exitCode(err)
	t.Logf("outbox-canary diagnose (exit %d):\n%s", code, text.String())
	var js bytes.Buffer
	jerr := Run(context.Background(), []string{"diagnose", "--config.file", d.config, "--pipeline", "orders", "--json", "--timeout", "30s"}, &js, &stderr)
	var ds []diagnose.Diagnosis
	if err := json.Unmarshal(js.Bytes(), &ds); err != nil || len(ds) != 1 {
		t.Fatalf("--json output %q: %v", js.String(), err)
	}
	if jcode := exitCode(jerr); jcode != code {
		t.Errorf("exit %d with --json, %d without", jcode, code)
	}
	return text.String(), ds[0], code
}

// wantUnhealthyAt checks the command named stage, and only it, with exit 1.
func wantUnhealthyAt(t *testing.T, text string, diag diagnose.Diagnosis, code int, stage string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if diag.Healthy || diag.FirstUnhealthy != stage {
		t.Errorf("first unhealthy stage %q (healthy %t), want %q", diag.FirstUnhealthy, diag.Healthy, stage)
	}
	if want := fmt.Sprintf("verdict: UNHEALTHY at stage %q", stage); !strings.Contains(text, want) {
		t.Errorf("the text lacks %q", want)
	}
	if n := strings.Count(text, "UNHEALTHY\n"); n != 1 {
		t.Errorf("%d stages printed UNHEALTHY, want 1", n)
	}
	if !strings.Contains(text, "next: ") {
		t.Error("the text gives no next step")
	}
}

// stageEvidence returns the evidence of the named stage, one string.
func stageEvidence(diag diagnose.Diagnosis, stage string) string {
	for _, s := range diag.Stages {
		if s.Name == stage {
			return strings.Join(s.Evidence, "\n")
		}
	}
	return ""
}

// diagProduce writes n business messages stamped age ago.
func diagProduce(t *testing.T, brokers []string, topic string, n int, age time.Duration) {
	t.Helper()
	// A transport of its own: kafka-go's shared default transport caches
	// metadata from before the topic existed and answers "unknown topic".
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Transport: &kafka.Transport{}}
	defer w.Close()
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte("ord-1042"), Value: []byte(`{"type":"OrderPaid"}`), Time: time.Now().Add(-age)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), diagWait)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// diagConsume makes group consume and commit k messages, then leave.
func diagConsume(t *testing.T, brokers []string, group, topic string, k int) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: group, Topic: topic,
		StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), diagWait)
	defer cancel()
	for i := 0; i < k; i++ {
		msg, err := r.FetchMessage(ctx)
		if err == nil {
			err = r.CommitMessages(ctx, msg)
		}
		if err != nil {
			t.Fatalf("group %s, message %d: %v", group, i+1, err)
		}
	}
}

func (d *diagPipeline) pipeline(t *testing.T) *config.Pipeline {
	t.Helper()
	cfg, err := config.LoadFile(d.config)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return &cfg.Pipelines[0]
}

func TestDiagnoseHealthyPipeline(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	business := st.NewTopic(t, 1, nil)
	d := newDiagPipeline(t, st, fmt.Sprintf("{consumer_groups: [{group: billing, topic: %q}]}", business))
	d.startRelay(t)
	diagProduce(t, st.KafkaBrokers, business, 3, 0)
	diagConsume(t, st.KafkaBrokers, "billing", business, 3)

	text, diag, code := d.diagnose(t)
	if code != 0 || !diag.Healthy {
		t.Fatalf("exit %d, healthy %t; want 0 and healthy", code, diag.Healthy)
	}
	if !strings.Contains(text, "verdict: healthy") {
		t.Error("the text lacks the healthy verdict")
	}
	for _, s := range diag.Stages {
		if s.Status == diagnose.StatusUnhealthy || s.Status == diagnose.StatusNotChecked {
			t.Errorf("stage %s: %s", s.Name, s.Status)
		}
	}
	if ev := stageEvidence(diag, diagnose.StageConsumers); !strings.Contains(ev, "0 messages behind") {
		t.Errorf("consumer evidence %q, want the caught-up group", ev)
	}
}

func TestDiagnoseNamesTheCommitStageForALongTransaction(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	d := newDiagPipeline(t, st, "{long_transaction_threshold: 1s}")
	d.startRelay(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("BEGIN: %v", err)
	}
	if err := insertOrderEvent(ctx, tx); err != nil {
		t.Fatalf("business change: %v", err)
	}
	waitUntil(t, "the transaction is older than 1s", func() (bool, error) {
		tr, err := postgres.QueryTransactions(ctx, d.pool, time.Second)
		return tr.OverLimit > 0, err
	})

	text, diag, code := d.diagnose(t)
	wantUnhealthyAt(t, text, diag, code, diagnose.StageCommit)
	if !strings.Contains(text, "pg_terminate_backend") {
		t.Error("the next step does not say how to end the session")
	}

	// Committed, the row reaches the relay and the pipeline is healthy.
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	waitUntil(t, "the relay publishes the row", func() (bool, error) {
		b, err := postgres.QueryBacklog(ctx, d.pool, d.pipeline(t))
		return b.Rows == 0, err
	})
	if _, diag, code := d.diagnose(t); code != 0 {
		t.Errorf("after the commit: exit %d, first unhealthy %q; want healthy", code, diag.FirstUnhealthy)
	}
}

func TestDiagnoseNamesTheRelayWhenItIsPaused(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	d := newDiagPipeline(t, st, "")
	r := d.startRelay(t)
	r.Faults().Pause()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return insertOrderEvent(ctx, tx) }); err != nil {
		t.Fatalf("business change: %v", err)
	}
	p := d.pipeline(t)
	waitUntil(t, "the unpublished row is older than the 500ms budget", func() (bool, error) {
		b, err := postgres.QueryBacklog(ctx, d.pool, p)
		return b.OldestAge > 500*time.Millisecond, err
	})

	text, diag, code := d.diagnose(t)
	wantUnhealthyAt(t, text, diag, code, diagnose.StageRelay)
	if ev := stageEvidence(diag, diagnose.StageRelay); !strings.Contains(ev, "backlog 1 rows") || !strings.Contains(ev, "budget commit_to_publish 500ms") {
		t.Errorf("relay evidence %q, want the backlog and the budget", ev)
	}

	r.Faults().Resume()
	waitUntil(t, "the resumed relay publishes the row", func() (bool, error) {
		b, err := postgres.QueryBacklog(ctx, d.pool, p)
		return b.Rows == 0, err
	})
	if _, diag, code := d.diagnose(t); code != 0 {
		t.Errorf("after Resume: exit %d, first unhealthy %q; want healthy", code, diag.FirstUnhealthy)
	}
}

func TestDiagnoseNamesTheConsumersWhenAGroupStoppedWithLag(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	business := st.NewTopic(t, 1, nil)
	d := newDiagPipeline(t, st, fmt.Sprintf("{consumer_groups: [{group: billing, topic: %q}]}", business))
	d.startRelay(t)
	diagProduce(t, st.KafkaBrokers, business, 10, 30*time.Second)
	diagConsume(t, st.KafkaBrokers, "billing", business, 4)

	text, diag, code := d.diagnose(t)
	wantUnhealthyAt(t, text, diag, code, diagnose.StageConsumers)
	if ev := stageEvidence(diag, diagnose.StageConsumers); !strings.Contains(ev, "group billing on "+business+": 6 messages behind") {
		t.Errorf("consumer evidence %q, want 6 messages behind", ev)
	}
}

// Not parallel: it stops the shared Kafka. Go runs it before the parallel
// tests of this package resume. A relay runs, and the row written while
// the broker is down waits past the relay's budget: the relay looks
// unhealthy, and diagnose must check the brokers before it names it.
func TestDisruptiveDiagnoseNamesTheBrokerWhenKafkaIsDown(t *testing.T) {
	st := stacktest.Load(t)
	d := newDiagPipeline(t, st, "")
	d.startRelay(t)
	st.Script(t, "stop-kafka")
	t.Cleanup(func() {
		st.Script(t, "start-kafka")
		// Back means the canary topic has a leader again, not only that the
		// port answers: the other tests produce to their topics at once.
		client := st.KafkaClient()
		waitUntil(t, "Kafka is back", func() (bool, error) {
			md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{d.topic}})
			if err != nil {
				return false, err
			}
			return len(md.Topics) == 1 && md.Topics[0].Error == nil && len(md.Topics[0].Partitions) == 1 &&
				md.Topics[0].Partitions[0].Leader.Host != "", nil
		})
	})

	ctx := context.Background()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertOrderEvent(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Past the 500ms commit_to_publish budget the relay stage is judged by.
	waitUntil(t, "the unpublished row to be older than the relay's budget", func() (bool, error) {
		var older bool
		err := d.pool.QueryRow(ctx, `SELECT coalesce(min(created_at) < clock_timestamp() - interval '1 second', false) FROM outbox WHERE published_at IS NULL`).Scan(&older)
		return older, err
	})

	text, diag, code := d.diagnose(t)
	wantUnhealthyAt(t, text, diag, code, diagnose.StageBroker)
	if ev := stageEvidence(diag, diagnose.StageBroker); !strings.Contains(ev, "connection refused") {
		t.Errorf("broker evidence %q, want the dial error", ev)
	}
	for _, s := range diag.Stages {
		if s.Name == diagnose.StageRelay && s.Status != diagnose.StatusExplained {
			t.Errorf("relay stage %+v, want %s: its lag is the broker's", s, diagnose.StatusExplained)
		}
	}
	if ev := stageEvidence(diag, diagnose.StageRelay); !strings.Contains(ev, "backlog 1 rows") || !strings.Contains(ev, "the brokers are unhealthy") {
		t.Errorf("relay evidence %q, want its backlog and that the brokers explain it", ev)
	}
}

func TestDiagnoseAndLintUsageErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yml")
	if err := os.WriteFile(path, []byte(`signing_key: {value: k}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://127.0.0.1:1/x"}}
    kafka: {brokers: ["127.0.0.1:1"]}
    budgets: {end_to_end: 5s}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
	}{
		{"diagnose without --config is a usage error.", []string{"diagnose"}},
		{"diagnose of a pipeline not in the file is a usage error.", []string{"diagnose", "--config.file", path, "--pipeline", "payments"}},
		{"diagnose with an unknown flag is a usage error.", []string{"diagnose", "--config.file", path, "--bogus"}},
		{"diagnose with a --prometheus-url that is no http URL is a usage error.", []string{"diagnose", "--config.file", path, "--prometheus-url", "localhost:9090"}},
		{"lint without --config is a usage error.", []string{"lint"}},
		{"lint of a pipeline not in the file is a usage error.", []string{"lint", "--config.file", path, "--pipeline", "payments"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := Run(context.Background(), tc.args, &bytes.Buffer{}, &stderr)
			if code := exitCode(err); code != 2 {
				t.Errorf("exit %d (%v), want 2", code, err)
			}
			if stderr.Len() == 0 {
				t.Error("nothing on stderr explains the usage error")
			}
		})
	}
}

func TestLintCommand(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	cases := []struct {
		name     string
		setup    string
		wantCode int
		want     []string
	}{
		// Test topics are not named after the canary aggregate type, so the
		// routing check warns (and only warns) here.
		{"Seed schema A passes every table check and exits 0.", "", 0,
			[]string{"OK    unpublished index", "OK    monotonic id", "OK    created_at clock", "OK    table hygiene", "WARN  canary routing"}},
		{"A table without the partial index fails with the CREATE INDEX fix and exits 1.", "DROP INDEX outbox_unpublished_idx", 1,
			[]string{"FAIL  unpublished index", `fix: CREATE INDEX CONCURRENTLY ON "outbox" ("id") WHERE "published_at" IS NULL`}},
		{"A created_at without a default only warns and exits 0.", "ALTER TABLE outbox ALTER COLUMN created_at DROP DEFAULT", 0,
			[]string{"WARN  created_at clock", "fix: ALTER TABLE"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDiagPipeline(t, st, "")
			if tc.setup != "" {
				if _, err := d.pool.Exec(context.Background(), tc.setup); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), []string{"lint", "--config.file", d.config}, &stdout, &stderr)
			t.Logf("outbox-canary lint (exit %d):\n%s", exitCode(err), stdout.String())
			if code := exitCode(err); code != tc.wantCode {
				t.Errorf("exit %d (%v), want %d", code, err, tc.wantCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}

// waitUntil polls cond until it holds, or fails after diagWait with its
// last error.
func waitUntil(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	stacktest.Eventually(t, diagWait, what, func() (bool, string) {
		ok, err := cond()
		return ok, fmt.Sprintf("last error: %v", err)
	})
}
