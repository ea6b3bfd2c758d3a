package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHelpExplainsEachCommandWithAnExample(t *testing.T) {
	cases := []struct {
		name    string
		command string
		want    []string
	}{
		{"run's help names its flags, its endpoints and an example.", "run",
			[]string{"Usage: outbox-canary run --config FILE", "-web.listen-address", "/readyz", "SIGTERM", "Example:"}},
		{"validate's help says secrets are hidden and gives an example.", "validate",
			[]string{"Usage: outbox-canary validate --config FILE", "<secret>", "Example:"}},
		{"check's help explains the instance id suffix, the exit status and an example.", "check",
			[]string{"Usage: outbox-canary check --config FILE", "-check-", "-timeout", "-pipeline", "Exit status", "Example:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := Run(context.Background(), []string{tc.command, "--help"}, &stdout, &stderr); err != nil {
				t.Fatalf("--help: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("help lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

func TestCommandsWithoutConfigAreUsageErrors(t *testing.T) {
	for _, cmd := range []string{"run", "validate", "check", "diagnose", "lint", "rules", "dashboards"} {
		t.Run(fmt.Sprintf("%s without --config is a usage error that says so.", cmd), func(t *testing.T) {
			var stderr bytes.Buffer
			err := Run(context.Background(), []string{cmd}, io.Discard, &stderr)
			if !errors.Is(err, errUsage) {
				t.Fatalf("err = %v, want a usage error", err)
			}
			if want := cmd + ": --config is required"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}
		})
	}
}

// check's help promises exit status 2 on a usage error; these need no
// server, as they are refused before any connection.
func TestCheckFlagErrorsAreUsageErrors(t *testing.T) {
	const example = "../../examples/outbox-canary.yml"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"A pipeline not in the file is a usage error.", []string{"--config", example, "--pipeline", "nosuch"}, `--pipeline "nosuch": not in`},
		{"A timeout that is not positive is a usage error.", []string{"--config", example, "--timeout", "0s"}, "check: --timeout 0s: must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := Run(context.Background(), append([]string{"check"}, tc.args...), io.Discard, &stderr)
			if !errors.Is(err, errUsage) {
				t.Fatalf("err = %v, want a usage error", err)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
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
	cases := []struct {
		name    string
		file    string
		env     map[string]string
		wantOut []string
		wantErr string
	}{
		{"The example file is valid and printed with secrets hidden.", "../../examples/outbox-canary.yml",
			map[string]string{"OUTBOX_CANARY_SIGNING_KEY": "sekrit-key", "OUTBOX_CANARY_PG_DSN": "postgres://u:hunter2@h/db", "OUTBOX_CANARY_PG_DSN_PAYMENTS": "postgres://u:hunter2@h/pay", "OUTBOX_CANARY_PG_DSN_SHIPMENTS": "postgres://u:hunter2@h/ship"},
			[]string{`pipeline "orders"`, `pipeline "payments"`, "<secret> (from env OUTBOX_CANARY_PG_DSN)",
				"commit_to_read", "1s", "team-relay", "read_to_publish", "publish_to_consume", "team-kafka", "team-payments", "99.5%"}, ""},
		{"An unset secret variable is an error that names the field.", "../../examples/outbox-canary.yml",
			map[string]string{"OUTBOX_CANARY_SIGNING_KEY": "sekrit-key", "OUTBOX_CANARY_PG_DSN": "postgres://u:hunter2@h/db", "OUTBOX_CANARY_PG_DSN_PAYMENTS": ""},
			nil, `pipelines[1] "payments": database.dsn: environment variable OUTBOX_CANARY_PG_DSN_PAYMENTS is not set`},
		{"Canaries too rare for the objective are valid but warned about, with a rate that would work.", "../../internal/config/testdata/valid-minimal.yml",
			map[string]string{"ORDERS_DSN": "postgres://u:hunter2@h/db"},
			[]string{"warnings (the file works, but the alerts cannot judge it well):", `pipeline "orders"`, "@every"}, ""},
		{"A budget for an unknown segment is an error that names the field.", bad, nil,
			nil, "budgets.commit_to_nowhere: unknown segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), []string{"validate", "--config", tc.file}, &stdout, &stderr)
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
