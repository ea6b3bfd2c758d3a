package stacktest

// The stack's secured side, beside the plaintext servers every other test
// uses: Kafka's SASL_SSL listener (SCRAM-SHA-512) and PostgreSQL over TLS
// as a role that pg_hba.conf admits over TLS only, both presenting a
// certificate for 127.0.0.1 and localhost signed by the stack's CA.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Secured describes the secured side of the stack, as `stack.sh up` wrote
// it to the env file. The passwords are in files, as a deployment keeps
// them; the configuration reads them with {file: ...}.
type Secured struct {
	// CAFile is the PEM file of the CA that signed both servers'
	// certificates: kafka.tls.ca_file, and sslrootcert in a DSN.
	CAFile string
	// KafkaBrokers are the addresses of the SASL_SSL listener.
	KafkaBrokers []string
	// KafkaMechanism is the SASL mechanism as kafka.sasl.mechanism spells it.
	KafkaMechanism string
	// KafkaUsername and KafkaPasswordFile are the SCRAM user's credentials.
	KafkaUsername     string
	KafkaPasswordFile string
	// PGUsername and PGPasswordFile are the credentials of the role that
	// must connect over TLS (pg_hba.conf: hostssl ... scram-sha-256, and
	// reject otherwise). It is a member of pg_monitor and nothing else:
	// GrantOutbox gives it a test database's outbox.
	PGUsername     string
	PGPasswordFile string
}

// Secured returns the stack's secured side. A stack started by a stack.sh
// from before it has none: the test is Unavailable (CI's stack is always
// new).
func (s Stack) Secured(t testing.TB) Secured {
	t.Helper()
	keys := []string{"OUTBOX_CANARY_TLS_CA_FILE", "OUTBOX_CANARY_KAFKA_SASL_SSL_BROKERS", "OUTBOX_CANARY_KAFKA_SASL_MECHANISM",
		"OUTBOX_CANARY_KAFKA_SASL_USERNAME", "OUTBOX_CANARY_KAFKA_SASL_PASSWORD_FILE",
		"OUTBOX_CANARY_PG_TLS_USERNAME", "OUTBOX_CANARY_PG_TLS_PASSWORD_FILE"}
	for _, k := range keys {
		if s.Env[k] == "" {
			msg := fmt.Sprintf("stacktest: the stack's env file has no %s: the stack predates the secured listeners "+
				"(run `make stack-down stack-up` to add them)", k)
			Unavailable(t, "%s", msg)
		}
	}
	return Secured{
		CAFile:            s.Env["OUTBOX_CANARY_TLS_CA_FILE"],
		KafkaBrokers:      strings.Split(s.Env["OUTBOX_CANARY_KAFKA_SASL_SSL_BROKERS"], ","),
		KafkaMechanism:    strings.ToLower(s.Env["OUTBOX_CANARY_KAFKA_SASL_MECHANISM"]),
		KafkaUsername:     s.Env["OUTBOX_CANARY_KAFKA_SASL_USERNAME"],
		KafkaPasswordFile: s.Env["OUTBOX_CANARY_KAFKA_SASL_PASSWORD_FILE"],
		PGUsername:        s.Env["OUTBOX_CANARY_PG_TLS_USERNAME"],
		PGPasswordFile:    s.Env["OUTBOX_CANARY_PG_TLS_PASSWORD_FILE"],
	}
}

// Password reads a password file, failing the test if it cannot.
func Password(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("stacktest: password: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// KafkaYAML is the kafka mapping of a pipeline (flow YAML) that reads topic
// through the SASL_SSL listener: tls with caFile, and the SCRAM user with
// the password read from passwordFile. The stack's own CAFile and
// KafkaPasswordFile connect; tests of failures pass others.
func (sec Secured) KafkaYAML(topic, caFile, passwordFile string) string {
	return fmt.Sprintf("{brokers: [%s], topic: %q, tls: {enabled: true, ca_file: %q}, sasl: {mechanism: %s, username: %s, password: {file: %q}}}",
		strings.Join(sec.KafkaBrokers, ", "), topic, caFile, sec.KafkaMechanism, sec.KafkaUsername, passwordFile)
}

// DSN turns dsn, a superuser DSN of a test database (NewDatabase), into one
// for the TLS-only role on the same database: sslmode=verify-full (the
// server's certificate must chain to caFile and carry the host name) with
// sslrootcert=caFile, and password. The stack's CAFile and PGPassword
// connect; tests of failures pass others.
func (sec Secured) DSN(t testing.TB, dsn, caFile, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("stacktest: dsn: %v", err)
	}
	u.User = url.UserPassword(sec.PGUsername, password)
	u.RawQuery = url.Values{"sslmode": {"verify-full"}, "sslrootcert": {caFile}, "connect_timeout": {"10"}}.Encode()
	return u.String()
}

// PGPassword reads the TLS-only role's password.
func (sec Secured) PGPassword(t testing.TB) string { return Password(t, sec.PGPasswordFile) }

// KafkaPassword reads the SCRAM user's password.
func (sec Secured) KafkaPassword(t testing.TB) string { return Password(t, sec.KafkaPasswordFile) }

// GrantOutbox gives the TLS-only role what the prober, the watchers and
// diagnose need of the test database that pool is a superuser connection
// to: every table of its public schema (the outbox), and its sequences
// (a bigserial id). The grants go with the database.
func (sec Secured) GrantOutbox(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	role := pgx.Identifier{sec.PGUsername}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO %[1]s;
		GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO %[1]s`, role)); err != nil {
		t.Fatalf("stacktest: grant the outbox to %s: %v", sec.PGUsername, err)
	}
}

// SecretFile writes content to a file of the test's own (mode 0600) and
// returns its path: a password or a DSN for a {file: ...} secret.
func SecretFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	return path
}

// UntrustedCA writes the certificate of a new CA, which signed neither of
// the stack's servers, to a PEM file of the test's own and returns its
// path: a client that trusts only it must refuse both servers.
func UntrustedCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("stacktest: CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "a CA the stack does not use"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("stacktest: CA certificate: %v", err)
	}
	path := filepath.Join(t.TempDir(), "untrusted-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	return path
}
