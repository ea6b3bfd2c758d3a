package main

// lint on MariaDB pipelines of the local stack. The Disruptive test changes
// the shared server's global binlog_format for a moment (sessions opened
// meanwhile log statements), so `make test` runs it with the other
// disruptive tests, one package at a time.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// mysqlLintConfig writes a one-pipeline configuration on a fresh MariaDB
// outbox of schema and returns its path.
func mysqlLintConfig(t *testing.T, st stacktest.Stack, schema stacktest.Schema) string {
	t.Helper()
	dsn, _ := st.MySQL(t).FreshOutbox(t, schema)
	spec := stacktest.PipelineSpec{DSN: dsn, Schema: schema, Brokers: st.KafkaBrokers}
	path := filepath.Join(t.TempDir(), "outbox-canary.yml")
	if err := os.WriteFile(path, []byte(spec.YAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func lintRun(t *testing.T, path string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"lint", "--config.file", path}, &stdout, &stderr)
	t.Logf("outbox-canary lint (exit %d):\n%s%s", exitCode(err), stdout.String(), stderr.String())
	return exitCode(err), stdout.String()
}

func TestLintOnMariaDBReadsTheTableAndTheBinlog(t *testing.T) {
	st := stacktest.Load(t)
	for _, tc := range []struct {
		name   string
		schema stacktest.Schema
		want   string
	}{
		{"A polling pipeline on seed schema A gets its table read.", stacktest.MySQLSeedA, "OK    table             outbox readable: 0 unpublished rows"},
		{"A cdc pipeline on Debezium's table gets the stack's binlog passed.", stacktest.MySQLSeedDebezium, "OK    binlog            log_bin ON, binlog_format=ROW, binlog_row_image=FULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := lintRun(t, mysqlLintConfig(t, st, tc.schema))
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 0 and a line %q", code, tc.want)
			}
		})
	}
}

// mysqlUserDSN creates a MariaDB user of the test's own with only the
// grants given (each "PRIVILEGES ON what"), dropped after the test, and
// returns dsn with that user.
func mysqlUserDSN(t *testing.T, m stacktest.MySQL, dsn string, grants ...string) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	user, password := fmt.Sprintf("lint_%x", rnd), fmt.Sprintf("pw_%x", rnd)
	admin := stacktest.OpenMySQL(t, m.AdminDSN)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	qs := []string{fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password)}
	for _, g := range grants {
		qs = append(qs, fmt.Sprintf("GRANT %s TO '%s'@'%%'", g, user))
	}
	for _, q := range qs {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user)); err != nil {
			t.Errorf("drop user %s: %v", user, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

func TestLintOnMariaDBChecksTheIndexAndTheUsersPrivileges(t *testing.T) {
	st := stacktest.Load(t)
	m := st.MySQL(t)
	write := func(t *testing.T, spec stacktest.PipelineSpec, extra string) string {
		path := filepath.Join(t.TempDir(), "outbox-canary.yml")
		if err := os.WriteFile(path, []byte(spec.YAML()+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("The stack's user on seed schema A has the index and every privilege.", func(t *testing.T) {
		dsn, _ := m.FreshOutbox(t, stacktest.MySQLSeedA)
		code, out := lintRun(t, write(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedA, Brokers: st.KafkaBrokers}, ""))
		for _, want := range []string{
			"OK    unpublished index index outbox_unpublished_idx (published_at, created_at) leads with published_at",
			"OK    privileges        the user may INSERT, SELECT, PROCESS: everything the prober and its watchers do",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no line %q", want)
			}
		}
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
	})
	t.Run("A table whose index does not lead with published_at fails with the index to add.", func(t *testing.T) {
		dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedA)
		if _, err := admin.Exec("ALTER TABLE outbox DROP INDEX outbox_unpublished_idx, ADD INDEX by_created (created_at, published_at)"); err != nil {
			t.Fatal(err)
		}
		code, out := lintRun(t, write(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedA, Brokers: st.KafkaBrokers}, ""))
		for _, want := range []string{
			"FAIL  unpublished index no index leads with published_at",
			"fix: ALTER TABLE `outbox` ADD INDEX `ix_published_at` (`published_at`, `created_at`)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no line %q", want)
			}
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
	})
	t.Run("A cdc user with SELECT only is told each missing privilege and what it blinds.", func(t *testing.T) {
		dsn, _ := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
		db := stacktest.MySQLDatabaseName(dsn)
		limited := mysqlUserDSN(t, m, dsn, fmt.Sprintf("SELECT ON `%s`.outbox", db))
		path := write(t, stacktest.PipelineSpec{DSN: limited, Schema: stacktest.MySQLSeedDebezium, Brokers: st.KafkaBrokers, IDGen: "uuid"}, "")
		// canary.delete_after_insert, as Debezium's outbox has it.
		data, _ := os.ReadFile(path)
		if err := os.WriteFile(path, []byte(strings.Replace(string(data), "canary: {lost_after: 5m}", "canary: {lost_after: 5m, delete_after_insert: true}", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out := lintRun(t, path)
		for _, want := range []string{
			"FAIL  privileges        no INSERT on outbox: no canary can be inserted",
			"; no DELETE on outbox: canary.delete_after_insert cannot delete the canary row",
			"; no PROCESS on *.*: information_schema.innodb_trx is refused: the transactions watcher fails",
			"; no BINLOG MONITOR on *.*: SHOW BINARY LOGS is refused: the binlog and binlog_connector watchers fail",
			"fix: GRANT INSERT ON `outbox` TO <user>; GRANT DELETE ON `outbox` TO <user>; GRANT PROCESS ON *.* TO <user>; GRANT BINLOG MONITOR ON *.* TO <user>",
			"FAIL  binlog            the binlog's files and position cannot be read without BINLOG MONITOR",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no line %q", want)
			}
		}
		if strings.Contains(out, "pw_") {
			t.Errorf("the output shows the password")
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
	})
}

func TestDisruptiveLintFailsOnAStatementBasedMariaDBBinlog(t *testing.T) {
	st := stacktest.Load(t)
	m := st.MySQL(t)
	path := mysqlLintConfig(t, st, stacktest.MySQLSeedDebezium)
	admin := stacktest.OpenMySQL(t, m.AdminDSN)
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "SET GLOBAL binlog_format = 'STATEMENT'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "SET GLOBAL binlog_format = 'ROW'"); err != nil {
			t.Errorf("restore binlog_format: %v", err)
		}
	})
	code, out := lintRun(t, path)
	want := "FAIL  binlog            binlog_format=STATEMENT: the binlog holds statements, not rows; log capture needs binlog_format=ROW"
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("exit %d, want 1 and the line %q", code, want)
	}
	if !strings.Contains(out, "fix: SET GLOBAL binlog_format = 'ROW'") {
		t.Errorf("output lacks the fix")
	}
}

func TestRunSaysAtStartWhatItsMariaDBUserLacks(t *testing.T) {
	st := stacktest.Load(t)
	m := st.MySQL(t)
	dsn, _ := m.FreshOutbox(t, stacktest.MySQLSeedA)
	db := stacktest.MySQLDatabaseName(dsn)
	// What the canaries need, not PROCESS: the transactions watcher is blind.
	limited := mysqlUserDSN(t, m, dsn, fmt.Sprintf("SELECT, INSERT ON `%s`.outbox", db))
	path := filepath.Join(t.TempDir(), "outbox-canary.yml")
	spec := stacktest.PipelineSpec{DSN: limited, Schema: stacktest.MySQLSeedA, Brokers: st.KafkaBrokers}
	if err := os.WriteFile(path, []byte(spec.YAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, cancel, done := startRun(t, path)
	defer func() { cancel(); <-done }()
	const want = "no PROCESS on *.*: information_schema.innodb_trx is refused"
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log within 60s:\n%s", want, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, want) {
			t.Logf("the log says: %s", l)
			for _, w := range []string{"level=WARN", "pipeline=orders", `fix="GRANT PROCESS ON *.* TO <user>`} {
				if !strings.Contains(l, w) {
					t.Errorf("the log line lacks %q", w)
				}
			}
		}
	}
	if strings.Contains(stderr.String(), "pw_") {
		t.Errorf("the log shows the password")
	}
}

func TestLintOnMariaDBPassesTheRecommendedConnectorAndFailsASecondWithItsServerID(t *testing.T) {
	st := stacktest.Load(t)
	m := st.MySQL(t)
	connectURL := st.ConnectURL(t)
	names := stacktest.NewConnectorNames(t)
	dsn, _ := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	agg := "outbox-canary"
	topic := "outbox.event." + agg + "." + names.TopicPrefix
	st.NewTopicNamed(t, topic, 1, nil)
	st.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	st.NewTopicNamed(t, names.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
	cfg := m.MariaDBConnector(t, st, dsn, names)
	cfg["transforms.outbox.route.topic.replacement"] = "outbox.event.${routedByValue}." + names.TopicPrefix
	st.NewConnector(t, names.Name, cfg).WaitRunning(t)

	spec := stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedDebezium, Brokers: st.KafkaBrokers, IDGen: "uuid", Topic: topic,
		Watch: fmt.Sprintf("{connect_url: %q, connector: %q}", connectURL, names.Name)}
	path := filepath.Join(t.TempDir(), "outbox-canary.yml")
	if err := os.WriteFile(path, []byte(spec.YAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := lintRun(t, path)
	db := stacktest.MySQLDatabaseName(dsn)
	for _, want := range []string{
		"OK    connector         ",
		"OK    server id         database.server.id " + cfg["database.server.id"] + ", of its own on this server",
		"OK    schema history    schema history in " + names.SchemaHistoryTopic() + ", of its own",
		"OK    snapshot.mode     no_data: the connector streams from the binlog",
		"OK    captured tables   table.include.list \"" + db + ".outbox\" captures " + db + ".outbox",
		"OK    router scope      predicate isOutboxTable limits the router to " + names.TopicPrefix + "." + db + ".outbox",
		"OK    canary topic      canaries (aggregatetype \"outbox-canary\") go to " + topic + ", which exists",
		"OK    heartbeat         heartbeats every 10000 ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q", want)
		}
	}
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}

	// A second connector on the same server with the same server id: the
	// server drops one binlog connection for the other.
	second := stacktest.NewConnectorNames(t)
	cfg2 := m.MariaDBConnector(t, st, dsn, second)
	cfg2["database.server.id"] = cfg["database.server.id"]
	st.NewTopicNamed(t, second.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
	st.NewConnector(t, second.Name, cfg2)
	code, out = lintRun(t, path)
	if want := "FAIL  server id         database.server.id " + cfg["database.server.id"] + " is also that of " + second.Name; !strings.Contains(out, want) {
		t.Errorf("no line %q", want)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}
