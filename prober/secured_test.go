package prober

// The prober through secured servers: Kafka's SASL_SSL listener
// (SCRAM-SHA-512, the stack's CA) and PostgreSQL with sslmode=verify-full
// as a role that pg_hba.conf admits over TLS only, every secret read from a
// file. The reference relay publishes over the plaintext listener: the
// prober's own connections are the ones under test. Start the stack with
// `make stack-up`; without it these tests skip (and fail in CI).

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

// securedCreds is what the prober presents to the secured servers.
type securedCreds struct {
	kafkaCA, kafkaPasswordFile string
	pgCA, pgPassword           string
}

// securedConfig is a one-pipeline configuration ("e2e") for o's outbox
// through the secured side, with the DSN and the Kafka password in files.
func securedConfig(t *testing.T, sec stacktest.Secured, o *e2eOutbox, c securedCreds) *config.Config {
	t.Helper()
	dsnFile := stacktest.SecretFile(t, "dsn", sec.DSN(t, o.dsn, c.pgCA, c.pgPassword))
	yml := fmt.Sprintf(`instance_id: secured
signing_key: {value: %q}
pipelines:
  - name: e2e
    database: {dsn: {file: %q}}
    relay: {kind: polling}
    canary: {schedule: "@every 1s", lost_after: 2m}
    kafka: %s
    budgets: {end_to_end: 60s}
`, e2eKey, dsnFile, sec.KafkaYAML(o.topic, c.kafkaCA, c.kafkaPasswordFile))
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	if err := cfg.CheckSecrets(); err != nil {
		t.Fatalf("secrets: %v", err)
	}
	return cfg
}

// newSecuredOutbox is a seed schema A outbox with the reference relay
// (plaintext), its table granted to the TLS-only role.
func newSecuredOutbox(t *testing.T, s stacktest.Stack, sec stacktest.Secured) *e2eOutbox {
	t.Helper()
	columns := relay.SchemaAColumns()
	o := newOutbox(t, s, outboxsql.SchemaA, &columns)
	sec.GrantOutbox(t, o.pool)
	return o
}

func TestE2ECanariesGoThroughSASLSSLKafkaAndVerifyFullPostgres(t *testing.T) {
	t.Parallel()
	s := stacktest.Load(t)
	sec := s.Secured(t)
	o := newSecuredOutbox(t, s, sec)
	cfg := securedConfig(t, sec, o, securedCreds{kafkaCA: sec.CAFile, kafkaPasswordFile: sec.KafkaPasswordFile,
		pgCA: sec.CAFile, pgPassword: sec.PGPassword(t)})

	r := startService(t, cfg, t.TempDir(), false)
	tr := r.tracker(t)
	waitFor(t, "three canaries to arrive, measured", func() bool { m, _ := measuredOf(tr, 10); return len(m) >= 3 })
	reps, _ := measuredOf(tr, 10)
	for _, rep := range reps {
		if rep.State != StateArrived {
			t.Errorf("canary %s: state %s, want arrived", rep.ID, rep.State)
		}
		for _, seg := range []string{"commit_to_publish", "publish_to_consume", "end_to_end"} {
			if !rep.Segments[seg].Measured {
				t.Errorf("canary %s: %s unmeasured (missing stamp %q)", rep.ID, seg, rep.Segments[seg].MissingStamp)
			}
		}
	}
	// /metrics counts a verdict with the batch that writes it, up to
	// prober.DefaultCommitDelay (and a sweep) after the status shows it.
	waitFor(t, "three good end_to_end events on /metrics", func() bool { return r.sli("end_to_end", slo.OutcomeGood) >= 3 })
	if bad := r.sli("end_to_end", slo.OutcomeBad); bad != 0 {
		t.Errorf("bad end_to_end events = %v, want 0", bad)
	}

	// The prober's sessions are the TLS-only role's, over TLS: the server
	// says so, not the configuration.
	var sessions, encrypted int
	if err := o.pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.usename = $1 AND a.datname = current_database()`, sec.PGUsername).Scan(&sessions, &encrypted); err != nil {
		t.Fatal(err)
	}
	if sessions == 0 || encrypted != sessions {
		t.Errorf("%d sessions of %s on the test database, %d over TLS; want some, all over TLS", sessions, sec.PGUsername, encrypted)
	}
}

// TestE2ESecuredConnectionFailuresSayWhich: a wrong password and an
// untrusted certificate, on each server, mark that dependency down with a
// reason, and a log line, that name the cause and the settings to check,
// and never show a password.
func TestE2ESecuredConnectionFailuresSayWhich(t *testing.T) {
	t.Parallel()
	s := stacktest.Load(t)
	sec := s.Secured(t)
	const wrongPassword = "wrong-password-Q7Z9"
	wrongPasswordFile := stacktest.SecretFile(t, "wrong-password", wrongPassword)
	untrusted := stacktest.UntrustedCA(t)
	good := securedCreds{kafkaCA: sec.CAFile, kafkaPasswordFile: sec.KafkaPasswordFile, pgCA: sec.CAFile, pgPassword: sec.PGPassword(t)}
	cases := []struct {
		name  string
		creds func(securedCreds) securedCreds
		want  []string // in the dependency's reason and in the log
	}{
		{"A wrong Kafka password is a SASL authentication failure naming the user and the settings.",
			func(c securedCreds) securedCreds { c.kafkaPasswordFile = wrongPasswordFile; return c },
			[]string{`kafka: `, `SASL authentication failed for user "canary" (SCRAM-SHA-512): the broker rejected the user name or the password; check kafka.sasl.username and kafka.sasl.password`}},
		{"A Kafka certificate that kafka.tls.ca_file does not sign is a TLS failure naming the file.",
			func(c securedCreds) securedCreds { c.kafkaCA = untrusted; return c },
			[]string{`kafka: `, `TLS: the broker's certificate is not signed by a CA in kafka.tls.ca_file (` + untrusted + `): x509: certificate signed by unknown authority`}},
		{"A wrong PostgreSQL password is a password failure naming the user and database.dsn.",
			func(c securedCreds) securedCreds { c.pgPassword = wrongPassword; return c },
			[]string{`database: password authentication failed for user "canary_tls"`, `the server rejected the user name or the password; check both in database.dsn`}},
		{"A PostgreSQL certificate that sslrootcert does not sign is a TLS failure naming sslrootcert.",
			func(c securedCreds) securedCreds { c.pgCA = untrusted; return c },
			[]string{`database: TLS: the certificate of the server 127.0.0.1:`, `is not signed by a CA this client trusts (sslrootcert in database.dsn; without it, the system's CAs): x509: certificate signed by unknown authority`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newSecuredOutbox(t, s, sec)
			cfg := securedConfig(t, sec, o, tc.creds(good))
			var logs stacktest.SyncBuffer
			svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), Logger: logs.Logger(), StateDir: "-", NoSchedule: true})
			if err != nil {
				t.Fatalf("new service: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = svc.Run(ctx) }()
			defer func() { cancel(); <-done }()

			var reasons string
			stacktest.Eventually(t, e2eWait, "the reason to name the cause", func() (bool, string) {
				ok, rs := svc.Dependencies()
				reasons = strings.Join(rs, "\n")
				return !ok && containsAll(reasons, tc.want[1:]) && strings.Contains(reasons, tc.want[0]), reasons
			})
			t.Logf("dependencies down: %s", reasons)
			stacktest.Eventually(t, e2eWait, "the log to name the cause", func() (bool, string) {
				// slog's text handler escapes the quotes of a value.
				return containsAll(strings.ReplaceAll(logs.String(), `\"`, `"`), tc.want[1:]), logs.String()
			})
			for _, secret := range []string{wrongPassword, good.pgPassword, sec.KafkaPassword(t)} {
				if strings.Contains(reasons, secret) || strings.Contains(logs.String(), secret) {
					t.Errorf("a password shows in the dependency reason or the log:\n%s\n%s", reasons, logs.String())
				}
			}
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
