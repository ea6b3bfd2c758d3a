package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Each invalid-*.yml breaks one rule; its exact message is pinned so an
// operator's error text only changes on purpose.
func TestInvalidConfigsAreRejectedWithTheirMessage(t *testing.T) {
	cases := []struct{ file, want string }{
		{"invalid-bad-budget-duration.yml", `parse: line 12: "two seconds" is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d`},
		{"invalid-bad-column.yml", `pipelines[0] "orders": outbox.columns.route: "aggregate type" is not a column name (letters, digits and _)`},
		{"invalid-bad-pipeline-name.yml", `pipelines[0] "orders east": name: "orders east" must match ^[a-zA-Z_][a-zA-Z0-9_-]*$ (it becomes a label value and a rule name)`},
		{"invalid-bad-relay-kind.yml", `pipelines[0] "orders": relay.kind: "kafka-connect" must be "polling" or "cdc"`},
		{"invalid-bad-slot-name.yml", `pipelines[0] "orders": watch.slot: "Demo-Shipments" is not a replication slot name (lower-case letters, digits and _, at most 63)`},
		{"invalid-bad-sasl.yml", `pipelines[0] "orders": kafka.sasl.mechanism: "gssapi" must be plain, scram-sha-256 or scram-sha-512`},
		{"invalid-bad-schedule.yml", `pipelines[0] "orders": canary.schedule: "every ten seconds" is not a cron spec (expected 5 to 6 fields, found 3: [every ten seconds]); write e.g. "@every 10s" or "*/15 * * * * *"`},
		{"invalid-bad-table.yml", `pipelines[0] "orders": outbox.table: "outbox; DROP TABLE x" is not a table name (schema.table or table, letters, digits and _)`},
		{"invalid-broker-without-port.yml", `pipelines[0] "orders": kafka.brokers[0]: "127.0.0.1" must be host:port`},
		{"invalid-delete-on-polling.yml", `pipelines[0] "orders": canary.delete_after_insert: only for cdc relays (a polling relay never sees a deleted row)`},
		{"invalid-duplicate-pipeline.yml", `pipelines[1] "orders": name: duplicate pipeline name`},
		{"invalid-header-without-name.yml", `pipelines[0] "orders": relay.published_header: required when relay.published_stamp is header`},
		{"invalid-lost-before-budget.yml", `pipelines[0] "orders": canary.lost_after: 1s must be longer than budgets.end_to_end (2s)`},
		{"invalid-negative-budget.yml", `parse: line 13: "-1s" is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d`},
		{"invalid-no-brokers.yml", `pipelines[0] "orders": kafka.brokers: at least one host:port is required`},
		{"invalid-no-dsn.yml", `pipelines[0] "orders": database.dsn: required (value, env or file)`},
		{"invalid-no-end-to-end-budget.yml", `pipelines[0] "orders": budgets.end_to_end: required`},
		{"invalid-no-pipelines.yml", `pipelines: at least one pipeline is required`},
		{"invalid-no-signing-key.yml", `signing_key: required (set env: NAME or file: PATH); canaries are signed so a forged message cannot fake health`},
		{"invalid-objective-over-100.yml", `pipelines[0] "orders": slo.objective: 100 must be a percentage strictly between 0 and 100, e.g. 99.9`},
		{"invalid-published-at-on-cdc.yml", `pipelines[0] "orders": relay.published_stamp: published_at is written only by polling relays; use header or record_timestamp for cdc`},
		{"invalid-slot-on-polling.yml", `pipelines[0] "orders": watch.slot: only for cdc relays (a polling relay reads the table, not a replication slot)`},
		{"invalid-stamp-name-taken.yml", `pipelines[0] "orders": relay.stamps[0].name: "publish" is already a stamp`},
		{"invalid-stamp-without-header.yml", `pipelines[0] "orders": relay.stamps[0].header: required`},
		{"invalid-two-secret-sources.yml", `signing_key: set only one of value, env and file`},
		{"invalid-unknown-field.yml", "parse: yaml: unmarshal errors:\n  line 11: field budgts not found in type config.Pipeline"},
		{"invalid-unknown-owner-segment.yml", `pipelines[0] "orders": owners.relay: unknown segment; known: default, insert_to_commit, commit_to_publish, publish_to_consume, end_to_end`},
		{"invalid-unknown-segment-budget.yml", `pipelines[0] "orders": budgets.relay_lag: unknown segment; known: insert_to_commit, commit_to_publish, publish_to_consume, end_to_end`},
	}
	files, err := filepath.Glob("testdata/invalid-*.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(cases) {
		t.Fatalf("%d invalid-*.yml files but %d cases: every file needs its pinned message", len(files), len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			_, err := LoadFile(path)
			if err == nil {
				t.Fatalf("LoadFile(%s) succeeded, want %q", path, tc.want)
			}
			if want := "config " + path + ": " + tc.want; err.Error() != want {
				t.Fatalf("error:\n  got  %s\n  want %s", err, want)
			}
		})
	}
}

func TestAMinimalConfigGetsWorkingDefaults(t *testing.T) {
	cfg, err := LoadFile("testdata/valid-minimal.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pipelines[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"the table is outbox", p.Outbox.Table, "outbox"},
		{"the columns are seed schema A's", p.Outbox.Columns, Columns{ID: "id", Route: "aggregate_type", Key: "aggregate_id", Payload: "payload", CreatedAt: "created_at", PublishedAt: "published_at"}},
		{"the relay polls", p.Relay.Kind, RelayPolling},
		{"the publish stamp is published_at", p.Relay.PublishedStamp, PublishedFromColumn},
		{"the canary topic follows Debezium's routing", p.Kafka.Topic, "outbox.event.outbox-canary"},
		{"a canary goes every 10s", p.Canary.Schedule, "@every 10s"},
		{"a canary is lost after 5m", time.Duration(p.Canary.LostAfter), 5 * time.Minute},
		{"the objective is 99.9%", p.SLO.Objective, 99.9},
		{"the window is 30d", time.Duration(p.SLO.Window), 30 * 24 * time.Hour},
		{"segments follow the stamps", strings.Join(p.Segments(), ","), "commit_to_publish,publish_to_consume,end_to_end"},
		{"only end_to_end is budgeted", strings.Join(p.BudgetedSegments(), ","), "end_to_end"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestDebeziumsDefaultTableValidatesForTheCDCPath(t *testing.T) {
	cfg, err := LoadFile("testdata/valid-debezium.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pipelines[0]
	if p.Relay.PublishedStamp != PublishedFromRecordTimestamp {
		t.Errorf("cdc publish stamp = %q, want %q", p.Relay.PublishedStamp, PublishedFromRecordTimestamp)
	}
	if p.Outbox.Columns.PublishedAt != "" {
		t.Errorf("cdc got a published_at column %q; Debezium's table has none", p.Outbox.Columns.PublishedAt)
	}
	if p.Watch.Slot != "debezium_orders" {
		t.Errorf("watch.slot = %q, want the configured debezium_orders", p.Watch.Slot)
	}
}

func TestExtraStampsSplitCommitToPublish(t *testing.T) {
	p := Pipeline{Relay: Relay{Stamps: []Stamp{{Name: "read", Header: "outbox-relay-read-at"}}}}
	if got := strings.Join(p.Segments(), ","); got != "commit_to_read,read_to_publish,publish_to_consume,end_to_end" {
		t.Fatalf("segments = %s", got)
	}
}

func TestTheExampleConfigLoads(t *testing.T) {
	if _, err := LoadFile("../../examples/outbox-canary.yml"); err != nil {
		t.Fatal(err)
	}
}

func TestSecretsNeverPrintTheirValue(t *testing.T) {
	cfg, err := LoadFile("testdata/valid-debezium.yml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "postgres://canary@db/orders") {
		t.Fatalf("the DSN leaked into the marshalled config:\n%s", out)
	}
	if !strings.Contains(string(out), "<secret>") {
		t.Fatalf("want <secret> in place of secrets:\n%s", out)
	}
}

func TestSecretResolvesFromEnvAndFile(t *testing.T) {
	t.Setenv("OC_TEST_SECRET", "from-env")
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		secret  Secret
		want    string
		wantErr bool
	}{
		{"an inline value is returned as is", Secret{Value: "inline"}, "inline", false},
		{"an env secret reads the variable", Secret{Env: "OC_TEST_SECRET"}, "from-env", false},
		{"a file secret drops the trailing newline", Secret{File: file}, "from-file", false},
		{"an unset variable is an error", Secret{Env: "OC_TEST_UNSET_VARIABLE"}, "", true},
		{"a missing file is an error", Secret{File: file + ".missing"}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.secret.Resolve()
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("Resolve() = %q, %v", got, err)
			}
		})
	}
}

// FuzzLoad: whatever bytes come in, Load returns a config or an error; it
// never panics, and what it accepts is valid.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(data)
		if err != nil {
			return
		}
		if verr := cfg.Validate(); verr != nil {
			t.Fatalf("Load accepted a config that does not validate: %v", verr)
		}
	})
}
