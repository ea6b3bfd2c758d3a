package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// These need no server: the errors are built as pgx and crypto/tls build
// them. The same failures on a real server, with pgx's ConnectError saying
// where and as whom, are tested in prober, internal/watch and
// cmd/outbox-canary (secured_test.go).
func TestExplainWordsLoginAndTLSFailures(t *testing.T) {
	hostCert := &x509.Certificate{DNSNames: []string{"db.internal"}}
	cases := []struct {
		name string
		err  error
		want string // "" : returned unchanged
	}{
		{"A rejected password names database.dsn.",
			fmt.Errorf("failed SASL auth: %w", &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "canary"`}),
			"password authentication failed on the server: the server rejected the user name or the password; check both in database.dsn"},
		{"A pg_hba.conf line that wants TLS says to set sslmode and sslrootcert.",
			&pgconn.PgError{Severity: "FATAL", Code: "28000", Message: `pg_hba.conf rejects connection for host "10.0.0.1", user "canary", database "app", no encryption`},
			`the server refuses this connection without TLS (pg_hba.conf rejects connection for host "10.0.0.1", user "canary", database "app", no encryption): set sslmode=verify-full, and sslrootcert to the CA that signed the server's certificate, in database.dsn`},
		{"A connection no pg_hba.conf line admits says what the file decides by.",
			&pgconn.PgError{Severity: "FATAL", Code: "28000", Message: `no pg_hba.conf entry for host "10.0.0.1", user "canary", database "app", SSL encryption`},
			`the server does not admit this connection (no pg_hba.conf entry for host "10.0.0.1", user "canary", database "app", SSL encryption): its pg_hba.conf decides by host, user, database and whether the connection uses TLS (sslmode in database.dsn)`},
		{"A certificate of an unknown CA names sslrootcert.",
			fmt.Errorf("failed to write startup message: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}),
			"TLS: the certificate of the server is not signed by a CA this client trusts (sslrootcert in database.dsn; without it, the system's CAs): x509: certificate signed by unknown authority"},
		{"A certificate for another host names the host the DSN connects to.",
			&tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: hostCert, Host: "db.example"}},
			`TLS: the certificate of the server is not valid for the host name "db.example" in database.dsn, which sslmode=verify-full checks: x509: certificate is valid for db.internal, not db.example; connect by a name it carries`},
		{"An expired certificate says so.",
			x509.CertificateInvalidError{Reason: x509.Expired, Detail: "current time 2030-01-01 is after 2029-01-01"},
			"TLS: the certificate of the server has expired or is not valid yet: x509: certificate has expired or is not yet valid: current time 2030-01-01 is after 2029-01-01"},
		{"Another verification failure keeps crypto/tls's words.",
			&tls.CertificateVerificationError{Err: errors.New("x509: unhandled critical extension")},
			"TLS: the certificate of the server could not be verified: x509: unhandled critical extension"},
		{"A query error is not a login failure.",
			&pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: `relation "outbox" does not exist`}, ""},
		{"A refused connection is left as it is.", errors.New("dial tcp 10.0.0.1:5432: connect: connection refused"), ""},
		{"A cancelled context is left as it is.", fmt.Errorf("ping: %w", context.Canceled), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(tc.err)
			if tc.want == "" {
				if got != tc.err {
					t.Fatalf("Explain changed an error it should leave: %v", got)
				}
				return
			}
			if got.Error() != tc.want {
				t.Errorf("Explain:\n  got  %s\n  want %s", got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Error("the explained error does not wrap the cause")
			}
			if again := Explain(fmt.Errorf("ping: %w", got)); again.Error() != "ping: "+tc.want {
				t.Errorf("explaining twice changed the words: %v", again)
			}
		})
	}
	if Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}
