package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// TestCheckAndDiagnoseInPgBouncersQueryModes runs the built binary (the
// Makefile's build tags, so without pgx's table of Go types) with a DSN
// that asks for the exec or the simple-protocol query mode, as PgBouncer's
// transaction pooling needs: there pgx learns no parameter types from the
// server, and each argument check and diagnose send (the canary insert,
// the published lookup, the backlog) must be of a type that
// internal/postgres names on the connection.
func TestCheckAndDiagnoseInPgBouncersQueryModes(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	bin := stacktest.BuildCommand(t, "outbox-canary")
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run("default_query_exec_mode="+mode, func(t *testing.T) {
			t.Parallel()
			d := newDiagPipeline(t, st, "")
			d.startRelay(t)
			yml := fmt.Sprintf(`instance_id: test
signing_key: {value: test-key}
pipelines:
  - name: orders
    database: {dsn: {value: %q}}
    relay: {kind: polling}
    kafka: {brokers: [%s], topic: %q}
    budgets: {end_to_end: 60s}
`, d.dsn+"&default_query_exec_mode="+mode, strings.Join(st.KafkaBrokers, ", "), d.topic)
			path := filepath.Join(t.TempDir(), "outbox-canary.yml")
			if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := runBinary(t, bin, "check", "--config.file", path, "--timeout", "60s")
			if code != 0 || !strings.Contains(stdout, "PASS: within every budget") {
				t.Errorf("check exited %d; want 0 and PASS (stderr: %s)", code, stderr)
			}
			stdout, stderr, code = runBinary(t, bin, "diagnose", "--config.file", path, "--timeout", "30s")
			if code != 0 || !strings.Contains(stdout, "verdict: healthy") {
				t.Errorf("diagnose exited %d; want 0 and a healthy verdict (stderr: %s)", code, stderr)
			}
		})
	}
}
