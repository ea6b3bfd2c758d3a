package main

// `outbox-canary lint` against misconfigured connectors on the stack's real
// Kafka Connect worker (deploy/local/connect.sh up, which `make test`
// runs); it skips without the worker, and fails in CI.

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

// misconfigured makes a connector the way a user writes one from
// Debezium's reference alone: the connection and the outbox router with
// their defaults, plus a few choices that look harmless.
func misconfigured(dsnCfg map[string]string, names stacktest.ConnectorNames, slot string) map[string]string {
	cfg := map[string]string{}
	for _, k := range []string{"connector.class", "database.hostname", "database.port", "database.user", "database.password", "database.dbname"} {
		cfg[k] = dsnCfg[k]
	}
	cfg["topic.prefix"] = names.TopicPrefix
	// Shared with the other connector, and unique to this test: the
	// collision lint must see, without ever creating Debezium's default
	// slot "debezium" on the shared server.
	cfg["slot.name"] = slot
	cfg["publication.name"] = slot
	cfg["tasks.max"] = "3"
	cfg["transforms"] = "outbox"
	cfg["transforms.outbox.type"] = "io.debezium.transforms.outbox.EventRouter"
	return cfg
}

func TestLintNamesEachMisconfigurationOfRealConnectors(t *testing.T) {
	st := stacktest.Load(t)
	t.Parallel()
	url := st.ConnectURL(t)
	dsn, _ := st.FreshOutbox(t, stacktest.SeedDebezium)
	running, twin := stacktest.NewConnectorNames(t), stacktest.NewConnectorNames(t)
	agg := running.Name + "-canary" // its topic outbox.event.<agg> is never created
	base := stacktest.RecommendedConnector(t, dsn, running)

	// The first runs (pgoutput); the second copies it without plugin.name
	// (Debezium's default decoderbufs, which PostgreSQL 15 lacks) and fails
	// at its start: the slot it was given is the first one's.
	first := misconfigured(base, running, running.Slot)
	first["plugin.name"] = "pgoutput"
	c1 := st.NewConnector(t, running.Name, first)
	c1.WaitRunning(t)
	c2 := st.NewConnector(t, twin.Name, misconfigured(base, twin, running.Slot))
	c2.Slot = "" // the first connector's, dropped with it
	failed := c2.WaitTaskFailed(t)
	st1, err := c1.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st1.Tasks) != 1 {
		t.Errorf("tasks.max=3 ran %d tasks, want 1: lint's tasks.max finding says the connector runs one", len(st1.Tasks))
	}

	config := filepath.Join(t.TempDir(), "outbox-canary.yml")
	yml := fmt.Sprintf(`instance_id: test
signing_key: {value: test-key}
pipelines:
  - name: running
    database: {dsn: {value: %[1]q}}
    outbox: {table: public.outbox, id_generation: uuid, columns: {route: aggregatetype, key: aggregateid, event_type: type}}
    relay: {kind: cdc}
    canary: {aggregate_type: %[3]q}
    kafka: {brokers: [%[2]s]}
    budgets: {end_to_end: 10s}
    watch: {connect_url: %[4]q, connector: %[5]q}
  - name: twin
    database: {dsn: {value: %[1]q}}
    outbox: {table: public.outbox, id_generation: uuid, columns: {route: aggregatetype, key: aggregateid, event_type: type}}
    relay: {kind: cdc}
    canary: {aggregate_type: %[3]q}
    kafka: {brokers: [%[2]s]}
    budgets: {end_to_end: 10s}
    watch: {connect_url: %[4]q, connector: %[6]q}
`, dsn, strings.Join(st.KafkaBrokers, ", "), agg, url, running.Name, twin.Name)
	if err := os.WriteFile(config, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = Run(context.Background(), []string{"lint", "--config.file", config}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("outbox-canary lint (exit %d):\n%s", exitCode(err), out)
	if code := exitCode(err); code != 1 {
		t.Errorf("exit %d (%v), want 1: checks fail", code, err)
	}
	running1, twin1, _ := strings.Cut(out, "\npipeline \"twin\"")
	if twin1 == "" {
		t.Fatalf("no section for pipeline twin")
	}
	for _, w := range []struct{ section, text, want string }{
		{"running", running1, "WARN  converter         value.converter is not set on the connector"},
		{"running", running1, "fix: value.converter=org.apache.kafka.connect.json.JsonConverter"},
		{"running", running1, "FAIL  slot.name         slot " + running.Slot + " is also the slot of connector " + twin.Name},
		{"running", running1, "FAIL  publication       publication " + running.Slot + " is also the publication of connector " + twin.Name},
		{"running", running1, "WARN  publication mode  all_tables (Debezium's default)"},
		{"running", running1, "fix: publication.autocreate.mode=filtered"},
		{"running", running1, "WARN  snapshot.mode     initial:"},
		{"running", running1, "fix: snapshot.mode=no_data"},
		{"running", running1, "FAIL  router scope      the router has no predicate"},
		{"running", running1, "FAIL  canary topic      canaries go to outbox.event." + agg + ", which does not exist"},
		{"running", running1, "WARN  heartbeat         no heartbeat"},
		{"running", running1, "fix: heartbeat.interval.ms=10000, heartbeat.action.query=SELECT pg_logical_emit_message"},
		{"running", running1, "WARN  tasks.max         tasks.max=3"},
		{"running", running1, "OK    plugin.name       pgoutput"},
		{"twin", twin1, "FAIL  connector         connector " + twin.Name + " RUNNING (task 0 FAILED)"},
		{"twin", twin1, "task 0 trace: "},
		{"twin", twin1, "FAIL  plugin.name       decoderbufs (Debezium's default): stock PostgreSQL does not ship it"},
		{"twin", twin1, "fix: plugin.name=pgoutput"},
		{"twin", twin1, "FAIL  slot.name         slot " + running.Slot + " is also the slot of connector " + running.Name},
	} {
		if !strings.Contains(w.text, w.want) {
			t.Errorf("pipeline %s: output lacks %q", w.section, w.want)
		}
	}
	if strings.Contains(out, "password") || strings.Contains(out, ":canary@") {
		t.Errorf("lint printed a secret of the connector's configuration")
	}
	t.Logf("the twin's task failed with: %s", failed.Tasks[0].Trace[:min(len(failed.Tasks[0].Trace), 300)])
}
