package main

// `outbox-canary check` and `outbox-canary diagnose`, run as the built
// binary, through secured servers: Kafka's SASL_SSL listener
// (SCRAM-SHA-512, the stack's CA in kafka.tls.ca_file) and PostgreSQL with
// sslmode=verify-full as a role that pg_hba.conf admits over TLS only, the
// DSN and the Kafka password read from files. The reference relay and the
// business consumer use the plaintext listener. Start the stack with
// `make stack-up`; without it these tests skip (and fail in CI).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// securedCreds is what the commands present to the secured servers.
type securedCreds struct {
	kafkaCA, kafkaPasswordFile string
	pgCA, pgPassword           string
}

// securedPipeline sets up a pipeline whose relay runs (over the plaintext
// listener) and whose business consumer group "billing" has consumed
// everything, and returns its entry of the pipelines list, named name and
// connecting as c says.
func securedPipeline(t *testing.T, st stacktest.Stack, sec stacktest.Secured, name string, c securedCreds) string {
	t.Helper()
	d := newDiagPipeline(t, st, "")
	d.startRelay(t)
	sec.GrantOutbox(t, d.pool)
	business := st.NewTopic(t, 1, nil)
	diagProduce(t, st.KafkaBrokers, business, 2, 0)
	diagConsume(t, st.KafkaBrokers, "billing", business, 2)
	return fmt.Sprintf(`  - name: %s
    database: {dsn: {file: %q}}
    relay: {kind: polling}
    canary: {lost_after: 5m}
    kafka: %s
    budgets: {end_to_end: 60s}
    watch: {consumer_groups: [{group: billing, topic: %q}]}
`, name, stacktest.SecretFile(t, name+"-dsn", sec.DSN(t, d.dsn, c.pgCA, c.pgPassword)),
		sec.KafkaYAML(d.topic, c.kafkaCA, c.kafkaPasswordFile), business)
}

// writeSecuredConfig writes a configuration file with the pipelines.
func writeSecuredConfig(t *testing.T, pipelines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox-canary.yml")
	yml := "instance_id: secured\nsigning_key: {value: test-key}\npipelines:\n" + strings.Join(pipelines, "")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runBinary runs the built outbox-canary and returns its stdout, its
// stderr and its exit status (-1 when it could not run). It may be called
// from another goroutine than the test's.
func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Errorf("%s %s: %v", bin, strings.Join(args, " "), err)
		return out.String(), errOut.String(), -1
	}
	t.Logf("outbox-canary %s (exit %d)\nstdout:\n%s\nstderr:\n%s", args[0], code, out.String(), errOut.String())
	return out.String(), errOut.String(), code
}

func TestCheckAndDiagnoseThroughSecuredServers(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	sec := st.Secured(t)
	bin := stacktest.BuildCommand(t, "outbox-canary")
	path := writeSecuredConfig(t, securedPipeline(t, st, sec, "orders", securedCreds{kafkaCA: sec.CAFile,
		kafkaPasswordFile: sec.KafkaPasswordFile, pgCA: sec.CAFile, pgPassword: sec.PGPassword(t)}))

	stdout, _, code := runBinary(t, bin, "check", "--config.file", path, "--timeout", "60s")
	if code != 0 || !strings.Contains(stdout, "PASS: within every budget") {
		t.Errorf("check exited %d; want 0 and PASS", code)
	}
	stdout, _, code = runBinary(t, bin, "diagnose", "--config.file", path, "--timeout", "30s")
	if code != 0 || !strings.Contains(stdout, "verdict: healthy") {
		t.Errorf("diagnose exited %d; want 0 and a healthy verdict", code)
	}
	// The broker and consumer stages asked Kafka through SASL_SSL.
	for _, want := range []string{"4. broker            OK", "5. consumers         OK", "billing", "0 messages behind"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("diagnose's output lacks %q", want)
		}
	}
}

// TestCheckAndDiagnoseSayWhichSecuredConnectionFailed: a wrong password and
// an untrusted certificate, on each server, each make check and diagnose
// fail with a message that names the cause and the settings to check, and
// never shows a password. Each case is a pipeline of one configuration, so
// that check waits its --timeout once for all of them. (The TLS-only role
// without TLS is a case of the watchers' test.)
func TestCheckAndDiagnoseSayWhichSecuredConnectionFailed(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	sec := st.Secured(t)
	bin := stacktest.BuildCommand(t, "outbox-canary")
	const wrongPassword = "wrong-password-Q7Z9"
	wrongPasswordFile := stacktest.SecretFile(t, "wrong-password", wrongPassword)
	untrusted := stacktest.UntrustedCA(t)
	good := securedCreds{kafkaCA: sec.CAFile, kafkaPasswordFile: sec.KafkaPasswordFile, pgCA: sec.CAFile, pgPassword: sec.PGPassword(t)}
	cases := []struct {
		name, pipeline string
		creds          func(securedCreds) securedCreds
		// check: in check's stderr, the first after `pipeline "<pipeline>": `;
		// diagnose: in diagnose's report of the pipeline.
		check, diagnose []string
	}{
		{"A wrong Kafka password.", "kafka-password",
			func(c securedCreds) securedCreds { c.kafkaPasswordFile = wrongPasswordFile; return c },
			[]string{`kafka: topic `,
				`: SASL authentication failed for user "canary" (SCRAM-SHA-512): the broker rejected the user name or the password; check kafka.sasl.username and kafka.sasl.password`},
			[]string{`4. broker            UNHEALTHY`,
				`SASL authentication failed for user "canary" (SCRAM-SHA-512): the broker rejected the user name or the password; check kafka.sasl.username and kafka.sasl.password`}},
		{"A Kafka certificate that kafka.tls.ca_file does not sign.", "kafka-ca",
			func(c securedCreds) securedCreds { c.kafkaCA = untrusted; return c },
			[]string{`kafka: topic `,
				`: TLS: the broker's certificate is not signed by a CA in kafka.tls.ca_file (` + untrusted + `): x509: certificate signed by unknown authority`},
			[]string{`4. broker            UNHEALTHY`,
				`TLS: the broker's certificate is not signed by a CA in kafka.tls.ca_file (` + untrusted + `): x509: certificate signed by unknown authority`}},
		{"A wrong PostgreSQL password.", "pg-password",
			func(c securedCreds) securedCreds { c.pgPassword = wrongPassword; return c },
			[]string{`database: password authentication failed for user "canary_tls", database "test_`,
				`the server rejected the user name or the password; check both in database.dsn`},
			[]string{`1. commit            UNHEALTHY`, `database: password authentication failed for user "canary_tls", database "test_`,
				`the server rejected the user name or the password; check both in database.dsn`}},
		{"A PostgreSQL certificate that sslrootcert does not sign.", "pg-ca",
			func(c securedCreds) securedCreds { c.pgCA = untrusted; return c },
			[]string{`database: TLS: the certificate of the server 127.0.0.1:`,
				`is not signed by a CA this client trusts (sslrootcert in database.dsn; without it, the system's CAs): x509: certificate signed by unknown authority`},
			[]string{`1. commit            UNHEALTHY`, `database: TLS: the certificate of the server 127.0.0.1:`,
				`is not signed by a CA this client trusts (sslrootcert in database.dsn; without it, the system's CAs)`}},
	}
	var pipelines []string
	for _, tc := range cases {
		pipelines = append(pipelines, securedPipeline(t, st, sec, tc.pipeline, tc.creds(good)))
	}
	path := writeSecuredConfig(t, pipelines...)

	// check waits its --timeout for readiness: diagnose runs meanwhile.
	type result struct {
		stdout, stderr string
		code           int
	}
	diagnosed := make(chan result, 1)
	go func() {
		var r result
		r.stdout, r.stderr, r.code = runBinary(t, bin, "diagnose", "--config.file", path, "--timeout", "15s")
		diagnosed <- r
	}()
	checkOut, checkErr, checkCode := runBinary(t, bin, "check", "--config.file", path, "--timeout", "15s")
	diag := <-diagnosed
	if checkCode != 1 {
		t.Errorf("check exited %d, want 1", checkCode)
	}
	if diag.code != 1 {
		t.Errorf("diagnose exited %d, want 1", diag.code)
	}
	// diagnose prints one report per pipeline, separated by a blank line.
	reports := map[string]string{}
	for _, r := range strings.Split(diag.stdout, "\n\n") {
		var name string
		if _, err := fmt.Sscanf(r, "pipeline %q", &name); err == nil {
			reports[name] = r
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if want := `pipeline "` + tc.pipeline + `": ` + tc.check[0]; !strings.Contains(checkErr, want) {
				t.Errorf("check's stderr lacks %q", want)
			}
			for _, want := range tc.check[1:] {
				if !strings.Contains(checkErr, want) {
					t.Errorf("check's stderr lacks %q", want)
				}
			}
			for _, want := range tc.diagnose {
				if !strings.Contains(reports[tc.pipeline], want) {
					t.Errorf("diagnose's report of pipeline %q lacks %q:\n%s", tc.pipeline, want, reports[tc.pipeline])
				}
			}
		})
	}
	for _, secret := range []string{wrongPassword, good.pgPassword, sec.KafkaPassword(t)} {
		for _, out := range []string{checkOut, checkErr, diag.stdout, diag.stderr} {
			if strings.Contains(out, secret) {
				t.Errorf("a password shows in the output:\n%s", out)
			}
		}
	}
}
