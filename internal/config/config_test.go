package config

import (
	"bytes"
	"errors"
	"fmt"
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
		{"invalid-bad-budget-duration.yml", `line 12: pipelines[0] "orders": budgets.end_to_end: "two seconds" is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d`},
		{"invalid-bad-column.yml", `line 11: pipelines[0] "orders": outbox.columns.route: "aggregate type" is not a column name (letters, digits and _)`},
		{"invalid-bad-database-kind.yml", `line 9: pipelines[0] "orders": database.kind: "oracle" must be "postgres" or "mysql" (or empty: from the dsn)`},
		{"invalid-mysql-dsn-bad-tls.yml", `line 7: pipelines[0] "orders": database.dsn: tls is not one of true, false, preferred, skip-verify`},
		{"invalid-bad-pipeline-name.yml", `line 5: pipelines[0] "orders east": name: "orders east" must match ^[a-zA-Z_][a-zA-Z0-9_-]*$ (it becomes a label value and a rule name)`},
		{"invalid-bad-relay-kind.yml", `line 10: pipelines[0] "orders": relay.kind: "kafka-connect" must be "polling" or "cdc"`},
		{"invalid-bad-slot-name.yml", `line 16: pipelines[0] "orders": watch.slot: "Demo-Shipments" is not a replication slot name (lower-case letters, digits and _, at most 63)`},
		{"invalid-bad-sasl.yml", `line 11: pipelines[0] "orders": kafka.sasl.mechanism: "gssapi" must be plain, scram-sha-256 or scram-sha-512`},
		{"invalid-bad-schedule.yml", `line 10: pipelines[0] "orders": canary.schedule: "every ten seconds" is not a cron spec (expected 5 to 6 fields, found 3: [every ten seconds]); write e.g. "@every 10s" or "*/15 * * * * *"`},
		{"invalid-bad-table.yml", `line 10: pipelines[0] "orders": outbox.table: "outbox; DROP TABLE x" is not a table name (schema.table or table, letters, digits and _)`},
		{"invalid-broker-without-port.yml", `line 10: pipelines[0] "orders": kafka.brokers[0]: "127.0.0.1" must be host:port`},
		{"invalid-delete-on-polling.yml", `line 10: pipelines[0] "orders": canary.delete_after_insert: only for cdc relays (a polling relay never sees a deleted row)`},
		{"invalid-dsn-unescaped-at.yml", `line 7: pipelines[0] "orders": database.dsn: the host name contains @: percent-encode an @ in the user name or password as %40`},
		{"invalid-duplicate-key.yml", `line 13: pipelines[0] "orders": "budgets" is written twice (first at line 11)`},
		{"invalid-duplicate-pipeline.yml", `line 13: pipelines[1] "orders": name: duplicate pipeline name (also pipelines[0])`},
		{"invalid-empty.yml", `the file is empty: at least one pipeline is required`},
		{"invalid-fractional-count.yml", `line 14: alerting.stall_intervals: expected a whole number, got a number`},
		{"invalid-header-without-name.yml", `line 9: pipelines[0] "orders": relay.published_header: required when relay.published_stamp is header`},
		{"invalid-lost-before-budget.yml", `line 10: pipelines[0] "orders": canary.lost_after: 1s must be longer than budgets.end_to_end (2s)`},
		{"invalid-mapping-expected.yml", `line 9: pipelines[0] "orders": canary: expected a mapping, got a string`},
		{"invalid-negative-budget.yml", `line 13: pipelines[0] "orders": budgets.publish_to_consume: "-1s" is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d`},
		{"invalid-no-brokers.yml", `line 9: pipelines[0] "orders": kafka.brokers: at least one host:port is required`},
		{"invalid-no-dsn.yml", `line 5: pipelines[0] "orders": database.dsn: required (value, env or file)`},
		{"invalid-no-end-to-end-budget.yml", `line 11: pipelines[0] "orders": budgets.end_to_end: required`},
		{"invalid-no-pipelines.yml", `line 4: pipelines: at least one pipeline is required`},
		{"invalid-negative-replicas.yml", `line 14: alerting.replicas: must be at least 1`},
		{"invalid-no-signing-key.yml", `signing_key: required (set env: NAME or file: PATH); canaries are signed so a forged message cannot fake health`},
		{"invalid-not-yaml.yml", `line 11: not valid YAML: found character that cannot start any token`},
		{"invalid-objective-over-100.yml", `line 14: pipelines[0] "orders": slo.objective: 100 must be a percentage strictly between 0 and 100, e.g. 99.9`},
		{"invalid-objective-zero.yml", `line 14: pipelines[0] "orders": slo.objective: 0 must be a percentage strictly between 0 and 100, e.g. 99.9`},
		{"invalid-published-at-on-cdc.yml", `line 11: pipelines[0] "orders": relay.published_stamp: published_at is written only by polling relays; use header or record_timestamp for cdc`},
		{"invalid-sasl-without-password.yml", `line 11: pipelines[0] "orders": kafka.sasl.password: required with a SASL mechanism (value, env or file)`},
		{"invalid-schedule-never-fires.yml", `line 10: pipelines[0] "orders": canary.schedule: "0 0 30 2 *" never fires: no date matches its day-of-month, month and day-of-week fields`},
		{"invalid-second-document.yml", `line 13: a second YAML document starts here; the configuration is one document`},
		{"invalid-secret-as-scalar.yml", `line 2: signing_key: expected a mapping with value, env or file, got a string`},
		{"invalid-slot-on-polling.yml", `line 14: pipelines[0] "orders": watch.slot: only for cdc relays (a polling relay reads the table, not a replication slot)`},
		{"invalid-stamp-name-taken.yml", `line 11: pipelines[0] "orders": relay.stamps[0].name: "publish" is already a stamp`},
		{"invalid-stamp-without-header.yml", `line 11: pipelines[0] "orders": relay.stamps[0].header: required`},
		{"invalid-two-secret-sources.yml", `line 2: signing_key: set only one of value, env and file`},
		{"invalid-unknown-field.yml", `line 11: pipelines[0] "orders": unknown field "budgts"; did you mean "budgets"?`},
		{"invalid-unknown-owner-segment.yml", `line 14: pipelines[0] "orders": owners.relay: unknown segment; known: default, insert_to_commit, commit_to_publish, publish_to_consume, end_to_end`},
		{"invalid-unknown-segment-budget.yml", `line 13: pipelines[0] "orders": budgets.relay_lag: unknown segment; known: insert_to_commit, commit_to_publish, publish_to_consume, end_to_end`},
		{"invalid-window-zero.yml", `line 14: pipelines[0] "orders": slo.window: must be positive, e.g. 30d`},
		{"invalid-unparsable-dsn.yml", `line 7: pipelines[0] "orders": database.dsn: not a valid connection string: invalid port`},
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

// A file with a dozen mistakes gets every one back, each with its line, in
// file order, and none of its secrets.
func TestEveryProblemOfAFileIsReportedAtOnceWithItsLine(t *testing.T) {
	_, err := LoadFile("testdata/several-mistakes.yml")
	var problems Problems
	if !errors.As(err, &problems) {
		t.Fatalf("LoadFile error %v is not Problems", err)
	}
	want := []struct {
		line       int
		path, text string
	}{
		{3, "signing_key", `expected a mapping with value, env or file, got a string`},
		{9, "pipelines[0].database", `unknown field "clock_offset_intervall"; did you mean "clock_offset_interval"?`},
		{11, "pipelines[0].relay.kind", `"kafka-connect" must be "polling" or "cdc"`},
		{13, "pipelines[0].canary.schedule", `"every ten seconds" is not a cron spec (expected 5 to 6 fields, found 3: [every ten seconds]); write e.g. "@every 10s" or "*/15 * * * * *"`},
		{14, "pipelines[0].canary.lost_after", `1s must be longer than budgets.end_to_end (2s)`},
		{16, "pipelines[0].kafka.brokers[0]", `"127.0.0.1" must be host:port`},
		{20, "pipelines[0].budgets.relay_lag", `unknown segment; known: insert_to_commit, commit_to_publish, publish_to_consume, end_to_end`},
		{21, "pipelines[0].budgets.publish_to_consume", `"soon" is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d`},
		{23, "pipelines[0].slo.objective", `100 must be a percentage strictly between 0 and 100, e.g. 99.9`},
		{24, "pipelines[1].name", `duplicate pipeline name (also pipelines[0])`},
		{26, "pipelines[1].database.dsn", `the host name contains @: percent-encode an @ in the user name or password as %40`},
		{33, "alerting.stall_intervals", `expected a whole number, got a string`},
		{35, "alerting.labels.owner", `reserved: the generator sets it (reserved: pipeline, segment, owner, severity, alertname, job, sloth_*, __*)`},
	}
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(problems), len(want), err)
	}
	for i, w := range want {
		if p := problems[i]; p.Line != w.line || p.Path != w.path || p.Message != w.text {
			t.Errorf("problem %d:\n  got  line %d %s: %s\n  want line %d %s: %s", i, p.Line, p.Path, p.Message, w.line, w.path, w.text)
		}
	}
	// One per line, under the file name and a count; a pipeline is named.
	lines := strings.Split(err.Error(), "\n")
	if lines[0] != "config testdata/several-mistakes.yml: 13 problems:" || len(lines) != 14 {
		t.Errorf("the error is not one problem per line under a count:\n%v", err)
	}
	if got, want := lines[2], `  line 9: pipelines[0] "orders": database: unknown field "clock_offset_intervall"; did you mean "clock_offset_interval"?`; got != want {
		t.Errorf("line 2 of the error:\n  got  %s\n  want %s", got, want)
	}
	for _, secret := range []string{"s3cr3tKey", "p@ss", "ss@db"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error repeats the secret %q:\n%v", secret, err)
		}
	}
	var one Problem
	if !errors.As(err, &one) || one.Path != "signing_key" {
		t.Errorf("errors.As does not reach the first Problem: %+v", one)
	}
}

// A value of the wrong kind is reported once, in the user's words: the
// checks of the field it left empty stay quiet.
func TestAMistypedValueIsReportedOnceAndWithoutGoTypes(t *testing.T) {
	cases := []struct{ name, field, yaml, want string }{
		{"a scalar where a mapping goes", "canary", "fast", `line 9: pipelines[0] "orders": canary: expected a mapping, got a string`},
		{"a mapping where a list goes", "watch", "{consumer_groups: {group: g}}", `line 9: pipelines[0] "orders": watch.consumer_groups: expected a list, got a mapping`},
		{"a list where a string goes", "outbox", "{table: [a, b]}", `line 9: pipelines[0] "orders": outbox.table: expected a string, got a list`},
		{"a string where a boolean goes", "canary", "{delete_after_insert: sometimes}", `line 9: pipelines[0] "orders": canary.delete_after_insert: expected true or false, got a string`},
		{"a string where a number goes", "slo", "{objective: high}", `line 9: pipelines[0] "orders": slo.objective: expected a number, got a string`},
		{"a mapping where a duration goes", "canary", "{lost_after: {minutes: 5}}", `line 9: pipelines[0] "orders": canary.lost_after: expected a duration such as 2s, got a mapping`},
		{"a list where a secret goes", "kafka", `{brokers: ["k:9092"], sasl: {mechanism: plain, username: u, password: [x]}}`, `line 9: pipelines[0] "orders": kafka.sasl.password: expected a mapping with value, env or file, got a list`},
		{"a list where the budgets go", "budgets", "[]", `line 9: pipelines[0] "orders": budgets: expected a mapping, got a list`},
		{"a list where the DSN goes", "database", "{dsn: [a]}", `line 9: pipelines[0] "orders": database.dsn: expected a mapping with value, env or file, got a list`},
	}
	base := []struct{ field, yaml string }{
		{"database", "{dsn: {env: D}}"},
		{"kafka", `{brokers: ["k:9092"]}`},
		{"budgets", "{end_to_end: 2s}"},
		{"owners", "{default: a}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := "instance_id: t\nsigning_key: {env: K}\npipelines:\n  - name: orders\n"
			for _, b := range base {
				if b.field != tc.field {
					data += "    " + b.field + ": " + b.yaml + "\n"
				}
			}
			for strings.Count(data, "\n") < 8 {
				data += "    # padding, so the field is on line 9\n"
			}
			data += "    " + tc.field + ": " + tc.yaml + "\n"
			_, err := Load([]byte(data))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Load:\n%s\nerror:\n  got  %v\n  want %s", data, err, tc.want)
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

// An empty value is unset, as everywhere in the file: only a written zero
// is refused (invalid-objective-zero.yml, invalid-window-zero.yml).
func TestAnEmptySLOValueGetsTheDefault(t *testing.T) {
	data, err := os.ReadFile("testdata/invalid-objective-over-100.yml")
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("objective: 100"), []byte("objective:\n      window:"), 1)
	cfg, err := Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Pipelines[0].SLO, DefaultSLO(); got != want {
		t.Fatalf("slo = %+v, want the default %+v", got, want)
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
		{"an inline value is returned as is", InlineSecret("inline"), "inline", false},
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
// never panics, what it accepts is valid, and its error never repeats a
// secret. The fuzzer's document gets a secret (fenced by Q7 and Z9, which
// no message contains) written into signing_key and every database.dsn,
// in the shape form picks: right or wrong, inline or inside a DSN.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			for form := range uint8(6) {
				f.Add(b, "s3cr3t", form)
			}
		}
	}
	f.Add([]byte("a: &a {<<: *a}\n"), "x", uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, secret string, form uint8) {
		fenced := "Q7" + secret + "Z9"
		withSecrets, injected := injectSecrets(data, fenced, form)
		if bytes.Contains(data, []byte("Q7")) || bytes.Contains(data, []byte("Z9")) {
			injected = false
		}
		if !injected {
			withSecrets = data // nothing to check but the loader itself
		}
		cfg, err := Load(withSecrets)
		if err != nil {
			if injected {
				for _, part := range []string{"Q7", "Z9"} {
					if strings.Contains(err.Error(), part) {
						t.Fatalf("the error repeats part of the secret %q:\n%v\nof:\n%s", fenced, err, withSecrets)
					}
				}
			}
			return
		}
		if verr := cfg.Validate(); verr != nil {
			t.Fatalf("Load accepted a config that does not validate: %v", verr)
		}
		if out := fmt.Sprintf("%+v %#v", cfg, cfg); injected && (strings.Contains(out, "Q7") || strings.Contains(out, "Z9")) {
			t.Fatalf("printing the config shows the secret: %s", out)
		}
	})
}

// injectSecrets writes secret into the signing key and every pipeline's
// DSN of a YAML document, as new nodes (so that aliases elsewhere do not
// see it). It reports false when the document has no place for them.
func injectSecrets(data []byte, secret string, form uint8) ([]byte, bool) {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, false
	}
	scalar := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	mapping := func(k string, v *yaml.Node) *yaml.Node {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{scalar(k), v}}
	}
	var key, dsn *yaml.Node
	switch form % 6 {
	case 0: // right: inline values
		key, dsn = mapping("value", scalar(secret)), mapping("value", scalar("postgres://canary:"+secret+"@dbhost/db"))
	case 1: // wrong: plain scalars
		key, dsn = scalar(secret), scalar("postgres://canary:"+secret+"@dbhost/db")
	case 2: // wrong: the secret as a key
		key, dsn = mapping(secret, scalar("x")), mapping(secret, scalar("x"))
	case 3: // a DSN pgx cannot parse, keyword/value
		key, dsn = mapping("value", scalar(secret)), mapping("value", scalar("host=dbhost port=x password="+secret))
	case 4: // a bare password for a DSN
		key, dsn = mapping("value", scalar(secret)), mapping("value", scalar(secret))
	default: // a list
		key, dsn = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{scalar(secret)}}, mapping("value", scalar("postgres://canary:"+secret+"@@dbhost/db"))
	}
	top := root.Content[0]
	setKey(top, "signing_key", key)
	if pipelines := lookup(top, "pipelines"); pipelines != nil && pipelines.Kind == yaml.SequenceNode {
		for _, p := range pipelines.Content {
			if p = resolve(p); p.Kind == yaml.MappingNode {
				db := lookup(p, "database")
				if db == nil || db.Kind != yaml.MappingNode {
					db = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
					setKey(p, "database", db)
				}
				setKey(db, "dsn", dsn)
			}
		}
	}
	out, err := yaml.Marshal(&root)
	if err != nil {
		return nil, false
	}
	return out, true
}

// lookup returns the value of key in a mapping node, aliases resolved.
func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return resolve(m.Content[i+1])
		}
	}
	return nil
}

// setKey replaces (or adds) the value of key in a mapping node.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

// Anchors and merge keys work as in yaml.v3: a pipeline can start from
// another, and a problem in the shared part is reported where it is written.
func TestAPipelineCanMergeAnother(t *testing.T) {
	data := `instance_id: t
signing_key: {env: K}
pipelines:
  - &orders
    name: orders
    database: {dsn: {env: D}}
    kafka: {brokers: ["k:9092"]}
    budgets: {end_to_end: 2s}
  - <<: *orders
    name: payments
    budgets: {end_to_end: 3s}
`
	cfg, err := Load([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pipelines[1]
	if p.Name != "payments" || p.Kafka.Brokers[0] != "k:9092" || p.Budgets[SegmentEndToEnd] != Duration(3*time.Second) {
		t.Fatalf("merged pipeline: %+v", p)
	}
	_, err = Load([]byte(strings.Replace(data, `brokers: ["k:9092"]`, `brokers: ["k"]`, 1)))
	want := "2 problems:\n" +
		`  line 7: pipelines[0] "orders": kafka.brokers[0]: "k" must be host:port` + "\n" +
		`  line 7: pipelines[1] "payments": kafka.brokers[0]: "k" must be host:port`
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n  got  %v\n  want %s", err, want)
	}
}
