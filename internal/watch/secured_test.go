package watch

// The watchers through secured servers, as `run` opens them (Open): the
// database watchers with sslmode=verify-full as a role that pg_hba.conf
// admits over TLS only, the consumer lag watcher through Kafka's SASL_SSL
// listener (SCRAM-SHA-512), the DSN and the Kafka password read from files.
// Needs the stack (`make stack-up`); skips without it, fails in CI.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// securedCreds is what the watchers present to the secured servers.
type securedCreds struct {
	kafkaCA, kafkaPasswordFile  string
	kafkaTLS                    string // more kafka.tls settings, flow YAML
	pgCA, pgPassword, pgSSLMode string // pgSSLMode "": verify-full
}

// securedWatcher opens the watchers of a seed schema A pipeline whose
// business group "billing" has 3 messages to read, connecting as c says.
func securedWatcher(t *testing.T, st stacktest.Stack, sec stacktest.Secured, c securedCreds) (*Watcher, *Metrics, *stacktest.SyncBuffer, string) {
	t.Helper()
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	sec.GrantOutbox(t, pool)
	stacktest.InsertRow(t, pool, stacktest.SeedA, false, 30*time.Second)
	business := st.NewTopic(t, 1, nil)
	st.ProduceAged(t, business, 3, time.Minute)
	dsn = sec.DSN(t, dsn, c.pgCA, c.pgPassword)
	if c.pgSSLMode != "" {
		dsn = strings.Replace(dsn, "sslmode=verify-full", "sslmode="+c.pgSSLMode, 1)
	}
	kafkaYAML := sec.KafkaYAML("outbox.event.outbox-canary", c.kafkaCA, c.kafkaPasswordFile)
	if c.kafkaTLS != "" {
		kafkaYAML = strings.Replace(kafkaYAML, "tls: {enabled: true,", "tls: {enabled: true, "+c.kafkaTLS+",", 1)
	}
	yml := fmt.Sprintf(`instance_id: test
signing_key: {value: test-key}
pipelines:
  - name: orders
    database: {dsn: {file: %q}}
    relay: {kind: polling}
    kafka: %s
    budgets: {end_to_end: 10s}
    watch: {consumer_groups: [{group: billing, topic: %q}]}
`, stacktest.SecretFile(t, "dsn", dsn), kafkaYAML, business)
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	logs := &stacktest.SyncBuffer{}
	p := &cfg.Pipelines[0]
	pools, err := postgres.NewPools(context.Background(), []config.Database{p.Database}, postgres.PoolsOptions{})
	if err != nil {
		t.Fatalf("pools: %v", err)
	}
	t.Cleanup(pools.Close)
	clusters, err := kafkaclient.NewClusters([]config.Kafka{p.Kafka}, []string{business})
	if err != nil {
		t.Fatalf("clusters: %v", err)
	}
	t.Cleanup(clusters.Close)
	db, err := pools.Watched(p.Database)
	if err != nil {
		t.Fatalf("pools: %v", err)
	}
	w, err := Open(p, db, clusters, m, logs.Logger())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return w, m, logs, business
}

func TestWatchersSampleThroughSecuredServers(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	sec := st.Secured(t)
	w, m, logs, business := securedWatcher(t, st, sec, securedCreds{kafkaCA: sec.CAFile, kafkaPasswordFile: sec.KafkaPasswordFile,
		pgCA: sec.CAFile, pgPassword: sec.PGPassword(t)})
	w.Sample(context.Background())

	if got := testutil.CollectAndCount(m.Errors); got != 0 {
		t.Fatalf("%d watch error series, want none:\n%s", got, logs.String())
	}
	for _, watcher := range []string{WatcherBacklog, WatcherTransactions, WatcherConsumers} {
		if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", watcher)); got != 1 {
			t.Errorf("watcher_up of %s = %v, want 1", watcher, got)
		}
	}
	if got := testutil.ToFloat64(m.BacklogRows.WithLabelValues("orders")); got != 1 {
		t.Errorf("backlog rows = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.OldestUnpublishedAge.WithLabelValues("orders")); got < 30 {
		t.Errorf("oldest unpublished age = %vs, want at least the row's 30s", got)
	}
	if got := testutil.ToFloat64(m.ConsumerLagMessages.WithLabelValues("orders", "billing", business)); got != 3 {
		t.Errorf("consumer lag = %v messages through SASL_SSL, want 3", got)
	}
	if got := testutil.ToFloat64(m.ConsumerLagSeconds.WithLabelValues("orders", "billing", business)); got < 55 {
		t.Errorf("consumer lag = %vs, want at least 55 (the messages were stamped a minute ago)", got)
	}
}

// TestWatchersSayWhichSecuredConnectionFailed: a wrong password and an
// untrusted certificate, and the TLS-only role without TLS, make the
// watchers of that server fail, with a log line that names the cause and
// never shows a password, while the watchers of the other server go on.
// kafka.tls.server_name and insecure_skip_verify do what they say.
func TestWatchersSayWhichSecuredConnectionFailed(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	sec := st.Secured(t)
	const wrongPassword = "wrong-password-Q7Z9"
	wrongPasswordFile := stacktest.SecretFile(t, "wrong-password", wrongPassword)
	untrusted := stacktest.UntrustedCA(t)
	good := securedCreds{kafkaCA: sec.CAFile, kafkaPasswordFile: sec.KafkaPasswordFile, pgCA: sec.CAFile, pgPassword: sec.PGPassword(t)}
	cases := []struct {
		name             string
		creds            func(securedCreds) securedCreds
		failing, working []string
		want             string
	}{
		{"A wrong Kafka password fails the consumer lag watcher only.",
			func(c securedCreds) securedCreds { c.kafkaPasswordFile = wrongPasswordFile; return c },
			[]string{WatcherConsumers}, []string{WatcherBacklog, WatcherTransactions},
			`SASL authentication failed for user "canary" (SCRAM-SHA-512): the broker rejected the user name or the password; check kafka.sasl.username and kafka.sasl.password`},
		{"An untrusted Kafka certificate fails the consumer lag watcher only.",
			func(c securedCreds) securedCreds { c.kafkaCA = untrusted; return c },
			[]string{WatcherConsumers}, []string{WatcherBacklog, WatcherTransactions},
			`TLS: the broker's certificate is not signed by a CA in kafka.tls.ca_file (` + untrusted + `)`},
		{"A wrong PostgreSQL password fails the database watchers only.",
			func(c securedCreds) securedCreds { c.pgPassword = wrongPassword; return c },
			[]string{WatcherBacklog, WatcherTransactions}, []string{WatcherConsumers},
			`password authentication failed for user "canary_tls", database "test_`},
		{"An untrusted PostgreSQL certificate fails the database watchers only.",
			func(c securedCreds) securedCreds { c.pgCA = untrusted; return c },
			[]string{WatcherBacklog, WatcherTransactions}, []string{WatcherConsumers},
			`TLS: the certificate of the server 127.0.0.1:`},
		{"A kafka.tls.server_name that the broker's certificate does not carry is a TLS failure naming it.",
			func(c securedCreds) securedCreds { c.kafkaTLS = "server_name: kafka.example"; return c },
			[]string{WatcherConsumers}, []string{WatcherBacklog, WatcherTransactions},
			`TLS: the broker's certificate is not valid for the name "kafka.example" that the client checks: x509: certificate is valid for localhost, not kafka.example; connect by a name it carries, or set kafka.tls.server_name to one`},
		{"A kafka.tls.server_name that the certificate carries is checked instead of the address.",
			func(c securedCreds) securedCreds { c.kafkaTLS = "server_name: localhost"; return c },
			nil, []string{WatcherBacklog, WatcherTransactions, WatcherConsumers}, ""},
		{"insecure_skip_verify accepts a certificate that kafka.tls.ca_file does not sign.",
			func(c securedCreds) securedCreds {
				c.kafkaCA = untrusted
				c.kafkaTLS = "insecure_skip_verify: true"
				return c
			},
			nil, []string{WatcherBacklog, WatcherTransactions, WatcherConsumers}, ""},
		{"The TLS-only role without TLS is told to set sslmode and sslrootcert.",
			func(c securedCreds) securedCreds { c.pgSSLMode = "disable"; return c },
			[]string{WatcherBacklog, WatcherTransactions}, []string{WatcherConsumers},
			`refuses user "canary_tls" without TLS (pg_hba.conf rejects connection for host "127.0.0.1", user "canary_tls", database "test_`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, m, logs, _ := securedWatcher(t, st, sec, tc.creds(good))
			w.Sample(context.Background())
			for _, watcher := range tc.failing {
				if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", watcher)); got != 0 {
					t.Errorf("watcher_up of %s = %v, want 0", watcher, got)
				}
			}
			for _, watcher := range tc.working {
				if got := testutil.ToFloat64(m.Up.WithLabelValues("orders", watcher)); got != 1 {
					t.Errorf("watcher_up of %s = %v, want 1", watcher, got)
				}
			}
			// slog's text handler escapes the quotes of a value.
			text := strings.ReplaceAll(logs.String(), `\"`, `"`)
			if n := strings.Count(text, tc.want); tc.want != "" && n != len(tc.failing) {
				t.Errorf("%d log lines name the cause %q, want one per failing watcher (%d):\n%s", n, tc.want, len(tc.failing), text)
			}
			for _, secret := range []string{wrongPassword, good.pgPassword, sec.KafkaPassword(t)} {
				if strings.Contains(text, secret) {
					t.Errorf("a password shows in the log:\n%s", text)
				}
			}
		})
	}
}
