package main

// lint on MariaDB pipelines of the local stack. The Disruptive test changes
// the shared server's global binlog_format for a moment (sessions opened
// meanwhile log statements), so `make test` runs it with the other
// disruptive tests, one package at a time.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
