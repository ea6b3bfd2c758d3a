package config

import (
	"strings"
	"testing"
)

func TestWarningsNameWhatIsAcceptedButSurelyWrong(t *testing.T) {
	cfg, err := LoadFile("testdata/warnings.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`line 10: pipelines[0] "orders": relay.published_header: ignored: relay.published_stamp is published_at, not header`,
		`line 13: pipelines[0] "orders": canary.schedule: "@every 1500ms" fires every 1s: the cron library rounds down to whole seconds (at least 1s)`,
		`line 14: pipelines[0] "orders": canary.event_type: ignored: the event type column is the route column, which gets canary.aggregate_type`,
		`line 18: pipelines[0] "orders": kafka.tls.ca_file: ignored: kafka.tls.enabled is not true, so the prober connects without TLS`,
		`line 20: pipelines[0] "orders": kafka.sasl.username: ignored: kafka.sasl.mechanism is not set, so the prober connects without SASL`,
		`line 24: pipelines[0] "orders": budgets.commit_to_read: 3s is longer than budgets.end_to_end (2s), which contains this segment: every canary over it is already over the end-to-end budget, so its SLO can never be the one that fires first`,
		`line 27: pipelines[0] "orders": watch.connector: ignored: watch.connect_url is not set, so the connector is not watched`,
		`line 36: pipelines[1] "payments": canary.event_type: ignored: outbox.columns.event_type is not set, so no event type is written`,
		`line 42: pipelines[2] "refunds": kafka.sasl.mechanism: plain sends the password as it is, and kafka.tls.enabled is not true: anyone on the network path can read it; use TLS (a SASL_SSL listener) or scram-sha-512`,
		`line 53: pipelines[3] "invoices": kafka.tls.insecure_skip_verify: the prober accepts any broker certificate (kafka.tls.ca_file and server_name are not used): anyone on the network path can read and forge canaries; for tests only`,
	}
	got := cfg.Warnings()
	var lines []string
	for _, w := range got {
		lines = append(lines, w.String())
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n got:\n  %s\n want:\n  %s", strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestTheExampleAndTheValidTestdataHaveNoWarnings(t *testing.T) {
	for _, path := range []string{"../../examples/outbox-canary.yml", "testdata/valid-minimal.yml", "testdata/valid-debezium.yml"} {
		cfg, err := LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range cfg.Warnings() {
			t.Errorf("%s: %s", path, w)
		}
	}
}

func TestAMySQLCDCPipelineWhoseDSNComesFromTheEnvironmentIsToldToSayDatabaseKind(t *testing.T) {
	const doc = `instance_id: test-1
signing_key:
  value: test-key
pipelines:
  - name: invoices
    database:
      dsn:
        env: INVOICES_DSN
    outbox:
      id_generation: uuid
    relay:
      kind: cdc
    canary:
      delete_after_insert: true
    kafka:
      brokers: ["127.0.0.1:9092"]
    budgets:
      end_to_end: 2s
`
	for _, tc := range []struct {
		name, dsn, kind string
		want            bool
	}{
		{"a mysql:// DSN without database.kind is warned about", "mysql://canary:pw-s3cr3t@127.0.0.1:3306/invoices", "", true},
		{"a mysql:// DSN with database.kind: mysql is not", "mysql://canary:pw-s3cr3t@127.0.0.1:3306/invoices", "mysql", false},
		{"a PostgreSQL DSN is not", "postgres://canary@127.0.0.1/invoices", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("INVOICES_DSN", tc.dsn)
			cfg, err := Load([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Pipelines[0].Database.Kind = tc.kind
			var got []string
			for _, w := range cfg.Warnings() {
				got = append(got, w.String())
			}
			found := strings.Contains(strings.Join(got, "\n"), "set database.kind: mysql")
			if found != tc.want {
				t.Errorf("warned %v, want %v: %q", found, tc.want, got)
			}
			if strings.Contains(strings.Join(got, "\n"), "pw-s3cr3t") {
				t.Errorf("a warning shows the DSN: %q", got)
			}
		})
	}
}
