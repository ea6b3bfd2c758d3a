package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// TestLintChecksTheCanaryTopicsTimestampType asks the real broker for the
// canary topic's message.timestamp.type of a Debezium pipeline.
func TestLintChecksTheCanaryTopicsTimestampType(t *testing.T) {
	st := stacktest.Load(t)
	t.Parallel()
	dsn, _ := st.FreshOutbox(t, stacktest.SeedDebezium)
	created := st.NewTopic(t, 1, nil)
	appended := st.NewTopic(t, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	pipeline := func(name, topic string) string {
		return fmt.Sprintf(`  - name: %s
    database: {dsn: {value: %q}}
    outbox: {table: public.outbox, id_generation: uuid, columns: {route: aggregatetype, key: aggregateid, event_type: type}}
    relay: {kind: cdc}
    kafka: {brokers: [%s], topic: %s}
    budgets: {end_to_end: 10s}
    owners: {commit_to_publish: team-cdc, publish_to_consume: team-kafka}
`, name, dsn, strings.Join(st.KafkaBrokers, ", "), topic)
	}
	config := filepath.Join(t.TempDir(), "outbox-canary.yml")
	yml := "instance_id: test\nsigning_key: {value: test-key}\npipelines:\n" + pipeline("created", created) + pipeline("appended", appended)
	if err := os.WriteFile(config, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"lint", "--config.file", config}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("outbox-canary lint (exit %d):\n%s", exitCode(err), out)
	createdOut, appendedOut, _ := strings.Cut(out, "\npipeline \"appended\"")
	for _, w := range []struct{ section, text, want string }{
		{"created", createdOut, "WARN  topic timestamp   " + created + " has message.timestamp.type=CreateTime"},
		{"created", createdOut, "lands in publish_to_consume (team-kafka), not in commit_to_publish (team-cdc)"},
		{"created", createdOut, "fix: kafka-configs.sh --bootstrap-server " + strings.Join(st.KafkaBrokers, ",") +
			" --alter --entity-type topics --entity-name " + created + " --add-config message.timestamp.type=LogAppendTime"},
		{"appended", appendedOut, "OK    topic timestamp   " + appended + " has message.timestamp.type=LogAppendTime"},
	} {
		if !strings.Contains(w.text, w.want) {
			t.Errorf("pipeline %s: output lacks %q", w.section, w.want)
		}
	}
}
