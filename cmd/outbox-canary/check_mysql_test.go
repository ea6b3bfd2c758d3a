package main

// check on a MariaDB pipeline of the local stack (OUTBOX_CANARY_MYSQL_* in
// the stack's env): the canary goes through the reference relay on MySQL,
// and check prints what it measured on MariaDB's clock. Skips without the
// stack's MariaDB (fails in CI).

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// mariadbCheckPipeline is stackPipeline on MariaDB: a fresh seed schema A
// outbox behind the reference relay on MySQL, stamping its read in a
// header, and a config file whose pipeline "invoices" is on it (the DSN
// says mysql://) beside a pipeline "ledger" on a MariaDB nobody listens
// on, which check --pipeline invoices must leave alone.
func mariadbCheckPipeline(t *testing.T, budgets string) (configPath string, faults *relay.Faults) {
	t.Helper()
	s := stacktest.Load(t)
	dsn, _ := s.MySQL(t).FreshOutbox(t, stacktest.MySQLSeedA)
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

	dir := t.TempDir()
	configPath = filepath.Join(dir, "canary.yml")
	cfg := fmt.Sprintf(`instance_id: cmdtest
state_dir: %s
signing_key: {value: k}
pipelines:
  - name: invoices
    database: {dsn: {value: %q}}
    outbox: {table: outbox}
    relay: {kind: polling, stamps: [{name: read, header: outbox-relay-read-at}]}
    kafka: {brokers: [%s], topic: %s}
    budgets: %s
    owners: {default: billing, commit_to_read: relay-team}
  - name: ledger
    database: {dsn: {value: "mysql://canary:canary@127.0.0.1:1/ledger"}}
    outbox: {table: outbox}
    relay: {kind: polling}
    kafka: {brokers: [%[3]s], topic: %[4]s}
    budgets: {end_to_end: 60s}
`, filepath.Join(dir, "state"), dsn, strings.Join(s.KafkaBrokers, ","), topic, budgets)
	if err := os.WriteFile(configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return configPath, r.Faults()
}

func TestCheckOnAMariaDBPipeline(t *testing.T) {
	cases := []struct {
		name     string
		budgets  string
		pause    bool
		timeout  string
		wantCode int
		wantOut  []string
		// verdicts: the VERDICT column of a segment's row.
		verdicts map[string]string
	}{
		// Budgets a loaded machine keeps: what is tested is the report, not
		// the stack's speed.
		{"A canary through MariaDB, the relay and Kafka arrives, with every segment against its budget and the publish on MariaDB's clock.",
			"{commit_to_read: 60s, end_to_end: 60s}", false, "60s", 0,
			[]string{`pipeline "invoices" (table outbox -> polling relay -> topic `,
				"commit_to_read", "read_to_publish", "publish_to_consume", "end_to_end", "1m0s",
				"publish: database clock (column published_at", "database clock: MySQL or MariaDB, offset ", "from the prober's clock (published_at converted with it)", "read: relay clock (header outbox-relay-read-at)",
				"PASS: within every budget"},
			map[string]string{"commit_to_read": "ok", "end_to_end": "ok"}},
		// The paused relay never reads the row: the canary waits in
		// commit_to_read, past its deadline long before the timeout.
		{"With the relay paused the canary does not arrive, and check fails with exit code 1, naming the segment it waits in and its owner.",
			"{commit_to_read: 1s, end_to_end: 2s}", true, "30s", 1,
			[]string{`pipeline "invoices"`, ", in_flight", "did not arrive before --timeout",
				"it is waiting in commit_to_read, past that segment's deadline by ", "(owner relay-team)",
				"database clock: MySQL or MariaDB, offset "},
			map[string]string{"commit_to_read": "OVER BUDGET"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, faults := mariadbCheckPipeline(t, tc.budgets)
			if tc.pause {
				faults.Pause()
			}
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), []string{"check", "--config.file", path, "--pipeline", "invoices", "--timeout", tc.timeout}, &stdout, &stderr)
			t.Logf("outbox-canary check (exit %d, %v):\n%s\nstderr:\n%s", exitCode(err), err, stdout.String(), stderr.String())
			if code := exitCode(err); code != tc.wantCode {
				t.Errorf("exit code %d (%v), want %d", code, err, tc.wantCode)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for seg, verdict := range tc.verdicts {
				row := ""
				for _, l := range strings.Split(stdout.String(), "\n") {
					if f := strings.Fields(l); len(f) > 0 && f[0] == seg {
						row = l
					}
				}
				if !strings.HasSuffix(row, "  "+verdict) {
					t.Errorf("%s row %q, want the verdict %q", seg, row, verdict)
				}
			}
			if strings.Contains(stdout.String(), "ledger") {
				t.Errorf("check --pipeline invoices reported the pipeline ledger")
			}
		})
	}
}
