package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober"
)

func TestHelpGoesToStdoutAndExplainsEachCommandWithAnExample(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"The top-level help lists every command with its summary.", []string{"--help"},
			[]string{"usage: outbox-canary [<flags>] <command>", "run --config.file=FILE", "check --config.file=FILE", "diagnose", "lint", "validate", "rules", "dashboards", "version", "--log.level", "--log.format"}},
		{"help run is run's help.", []string{"help", "run"},
			[]string{"usage: outbox-canary run --config.file=FILE", "--web.listen-address", "--web.config.file", "web.systemd-socket", "--state.dir", "/readyz", "SIGTERM", "Example:"}},
		{"run's help names its flags, its endpoints and an example.", []string{"run", "--help"},
			[]string{"usage: outbox-canary run --config.file=FILE", "--web.listen-address", "/readyz", "outbox_canary_dependency_up", "SIGTERM", "Example:"}},
		{"validate's help says secrets are hidden and gives an example.", []string{"validate", "--help"},
			[]string{"usage: outbox-canary validate --config.file=FILE", "<secret>", "Example:"}},
		{"check's help explains the instance id suffix, the exit status and an example.", []string{"check", "-h"},
			[]string{"usage: outbox-canary check --config.file=FILE", "-check-", "--timeout", "--pipeline", "Exit status", "Example:"}},
		{"diagnose's help lists the stages in order.", []string{"diagnose", "--help"},
			[]string{"1. commit:", "2. relay:", "3. replication slot:", "4. broker:", "5. consumers:", "Example:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := Run(context.Background(), tc.args, &stdout, &stderr); err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("help on stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("help wrote to stderr:\n%s", stderr.String())
			}
		})
	}
}

func TestVersionPrintsTheBuild(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout bytes.Buffer
		if err := Run(context.Background(), args, &stdout, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(stdout.String(), "outbox-canary ") || !strings.Contains(stdout.String(), "revision") {
			t.Errorf("%v printed %q", args, stdout.String())
		}
	}
}

// Every usage error exits 2 and says what is wrong on stderr, as
// Prometheus's tools do.
func TestUsageErrorsExitTwoAndSayWhy(t *testing.T) {
	const example = "../../examples/outbox-canary.yml"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"No command at all is a usage error.", nil, ""},
		{"An unknown command is a usage error.", []string{"bogus"}, `expected command but got "bogus"`},
		{"An unknown flag is a usage error.", []string{"run", "--config.file", example, "--bogus"}, "unknown long flag '--bogus'"},
		{"A log level that does not exist is a usage error.", []string{"--log.level", "loud", "version"}, "unrecognized log level loud"},
		{"A log format that does not exist is a usage error.", []string{"--log.format", "xml", "version"}, "unrecognized log format xml"},
		{"A rules format that does not exist is a usage error.", []string{"rules", "--config.file", example, "--format", "yaml"}, "enum value must be one of rules,prometheusrule,alertmanager"},
		{"A pipeline not in the file is a usage error.", []string{"check", "--config.file", example, "--pipeline", "nosuch"}, `--pipeline "nosuch": not in`},
		{"A timeout that is not positive is a usage error.", []string{"check", "--config.file", example, "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{"dashboards without --out is a usage error.", []string{"dashboards", "--config.file", example}, "required flag(s) '--out' not provided"},
	}
	for _, cmd := range []string{"run", "validate", "check", "diagnose", "lint", "rules", "dashboards"} {
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{cmd + " without --config.file is a usage error that says so.", []string{cmd}, "'--config.file'"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), tc.args, &stdout, &stderr)
			if code := exitCode(err); code != 2 {
				t.Fatalf("exit %d (%v), want 2", code, err)
			}
			if tc.want != "" && !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
			if stderr.Len() == 0 && stdout.Len() == 0 {
				t.Error("nothing explains the usage error")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte(`
signing_key: {value: k}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://u:hunter2@db/x"}}
    kafka: {brokers: ["k:9092"]}
    budgets: {end_to_end: 2s, commit_to_nowhere: 1s}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rare := rareCanariesConfig(t)
	cases := []struct {
		name    string
		file    string
		env     map[string]string
		wantOut []string
		wantErr string
	}{
		{"The example file is valid and printed with secrets hidden.", "../../examples/outbox-canary.yml",
			map[string]string{"OUTBOX_CANARY_SIGNING_KEY": "sekrit-key", "OUTBOX_CANARY_PG_DSN": "postgres://u:hunter2@h/db", "OUTBOX_CANARY_PG_DSN_PAYMENTS": "postgres://u:hunter2@h/pay", "OUTBOX_CANARY_PG_DSN_SHIPMENTS": "postgres://u:hunter2@h/ship", "OUTBOX_CANARY_MYSQL_DSN_INVOICES": "mysql://u:hunter2@h:3306/inv"},
			[]string{`pipeline "orders"`, `pipeline "payments"`, "<secret> (from env OUTBOX_CANARY_PG_DSN)",
				`pipeline "invoices"`, "<secret> (from env OUTBOX_CANARY_MYSQL_DSN_INVOICES)",
				"commit_to_read", "1s", "team-relay", "read_to_publish", "publish_to_consume", "team-kafka", "team-payments", "99.5%",
				"clocks:    commit: prober clock", "read: relay clock (header outbox-relay-read-at)", "publish: database clock (column published_at",
				"publish: record timestamp: broker clock on a LogAppendTime topic, relay clock (Debezium's processing time, before its queue) on CreateTime",
				"consume: prober clock", "relay.skew_tolerance (1ms) is suspected skew"}, ""},
		{"An unset secret variable is an error that names the field.", "../../examples/outbox-canary.yml",
			map[string]string{"OUTBOX_CANARY_SIGNING_KEY": "sekrit-key", "OUTBOX_CANARY_PG_DSN": "postgres://u:hunter2@h/db", "OUTBOX_CANARY_PG_DSN_PAYMENTS": ""},
			nil, `pipelines[1] "payments": database.dsn: environment variable OUTBOX_CANARY_PG_DSN_PAYMENTS is not set`},
		{"Canaries too rare for the objective (one a minute at 99.9%: one bad canary fires the 1h page) are valid but warned about, with a rate that would work.", rare,
			map[string]string{"ORDERS_DSN": "postgres://u:hunter2@h/db"},
			[]string{"warnings (the file works, but the alerts cannot judge it well):", `pipeline "orders"`, "a single slow canary fires the alert", `"@every 51s"`}, ""},
		{"A budget for an unknown segment is an error that names the field.", bad, nil,
			nil, "budgets.commit_to_nowhere: unknown segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), []string{"validate", "--config.file", tc.file}, &stdout, &stderr)
			out := stdout.String()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, secret := range []string{"hunter2", "sekrit-key"} {
				if strings.Contains(out, secret) {
					t.Errorf("output shows the secret %q:\n%s", secret, out)
				}
			}
		})
	}
}

func TestTheDemoLineMarksBoundsAndSkewSoItsSummarySkipsThem(t *testing.T) {
	cfg, err := config.Load([]byte(`signing_key: {value: k}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://u@127.0.0.1/db"}}
    kafka: {brokers: ["127.0.0.1:9092"]}
    budgets: {end_to_end: 2s, commit_to_publish: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	line := formatCanaryLine(cfg, prober.Report{Pipeline: "orders", ID: "c1", State: prober.StateArrived, Segments: map[string]prober.SegmentResult{
		"commit_to_publish":  {Measured: true, Bound: true, Duration: 40 * time.Millisecond, Budgeted: true, Budget: time.Second},
		"publish_to_consume": {Skew: true},
		"end_to_end":         {Measured: true, Duration: 52 * time.Millisecond, Budgeted: true, Budget: 2 * time.Second},
	}})
	for _, want := range []string{"commit_to_publish=<=40ms/1s", "publish_to_consume=skew?", "end_to_end=52ms/2s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line lacks %q: %s", want, line)
		}
	}
}

// A canary that waited out the prober's downtime measured far over its
// budgets but was counted nowhere: its line must not say OK, and its
// durations must not feed the demo's summary.
func TestTheDemoLineOfAnUnjudgedCanaryIsNotOK(t *testing.T) {
	cfg, err := config.Load([]byte(`signing_key: {value: k}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://u@127.0.0.1/db"}}
    kafka: {brokers: ["127.0.0.1:9092"]}
    budgets: {end_to_end: 2s, commit_to_publish: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	line := formatCanaryLine(cfg, prober.Report{Pipeline: "orders", ID: "c1", State: prober.StateArrived, Segments: map[string]prober.SegmentResult{
		"insert_to_commit":   {Measured: true, Duration: 2 * time.Millisecond, Outcome: "good", Budgeted: true, Budget: time.Second},
		"commit_to_publish":  {Measured: true, Duration: 40 * time.Millisecond, Budgeted: true, Budget: time.Second, Outcome: "good"},
		"publish_to_consume": {Measured: true, Duration: 30 * time.Second, Outcome: "unjudged", Reason: "prober_down"},
		"end_to_end":         {Measured: true, Duration: 30 * time.Second, Budgeted: true, Budget: 2 * time.Second, Outcome: "unjudged", Reason: "prober_down"},
	}})
	if fields := strings.Fields(line); len(fields) < 2 || fields[1] != "UNJUDGED" {
		t.Errorf("verdict column of %q, want UNJUDGED", line)
	}
	for _, want := range []string{"publish_to_consume=30s(prober_down)", "end_to_end=30s/2s(prober_down)"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line lacks %q: %s", want, line)
		}
	}
}

// Canaries sent within a minute share the first 8 characters of their
// UUID v7 (its timestamp): the id column must tell them apart.
func TestTheDemoLineIDColumnDiffersPerCanary(t *testing.T) {
	cfg, err := config.Load([]byte(`signing_key: {value: k}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://u@127.0.0.1/db"}}
    kafka: {brokers: ["127.0.0.1:9092"]}
    budgets: {end_to_end: 2s}
`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for range 20 {
		id := uuid.Must(uuid.NewV7()).String()
		fields := strings.Fields(formatCanaryLine(cfg, prober.Report{Pipeline: "orders", ID: id, State: prober.StateArrived}))
		if len(fields) < 4 {
			t.Fatalf("line %v has no id column", fields)
		}
		if other, dup := seen[fields[3]]; dup {
			t.Fatalf("canaries %s and %s both print id %q", other, id, fields[3])
		}
		seen[fields[3]] = id
	}
}

// rareCanariesConfig writes valid-minimal.yml with a canary a minute: at
// the default 99.9% over 30d one bad canary is 1.67% of the hour's 60,
// over the 1h page's 1.44%, so validate and rules warn. The default
// schedule (10s) does not: its 1h page needs 6 bad canaries.
func rareCanariesConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../internal/config/testdata/valid-minimal.yml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rare.yml")
	if err := os.WriteFile(path, append(data, "    canary: {schedule: \"@every 1m\"}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
