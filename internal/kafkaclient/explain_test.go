package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// These need no server: the errors are built as kafka-go and crypto/tls
// build them (the wrapping text is kafka-go's). The same failures on the
// real SASL_SSL listener are tested in prober, internal/watch and
// cmd/outbox-canary (secured_test.go).
func TestExplainWordsSASLAndTLSFailures(t *testing.T) {
	const password = "sQcret-Q7Z9"
	saslSSL := config.Kafka{
		TLS:  config.TLS{Enabled: true, CAFile: "/etc/kafka/ca.pem"},
		SASL: config.SASL{Mechanism: "scram-sha-512", Username: "canary", Password: config.InlineSecret(password)},
	}
	systemRoots := saslSSL
	systemRoots.TLS.CAFile = ""
	tlsOnly := config.Kafka{TLS: config.TLS{Enabled: true}}
	renamed := saslSSL
	renamed.TLS.ServerName = "kafka.example"
	brokerCert := &x509.Certificate{DNSNames: []string{"broker-1.internal"}}

	cases := []struct {
		name string
		k    config.Kafka
		err  error
		want string // "": returned unchanged
	}{
		{"A rejected SCRAM password names the user and the settings.", saslSSL,
			fmt.Errorf("could not successfully authenticate to 10.0.0.1:9096 with SASL: %w", kafka.SASLAuthenticationFailed),
			`SASL authentication failed for user "canary" (SCRAM-SHA-512): the broker rejected the user name or the password; check kafka.sasl.username and kafka.sasl.password`},
		{"A mechanism the listener does not offer names kafka.sasl.mechanism.", saslSSL,
			fmt.Errorf("SASL handshake failed: %w", kafka.UnsupportedSASLMechanism),
			"SASL: the broker's listener does not offer mechanism SCRAM-SHA-512 (kafka.sasl.mechanism); use one in its sasl.enabled.mechanisms"},
		{"SASL to a listener without SASL says so.", config.Kafka{SASL: saslSSL.SASL},
			fmt.Errorf("SASL handshake failed: %w", kafka.IllegalSASLState),
			"SASL: the broker's listener does not take SASL; the configuration connects with SASL_PLAINTEXT: use the port of a SASL listener, or remove kafka.sasl"},
		{"A certificate of an unknown CA names kafka.tls.ca_file and its path.", saslSSL,
			fmt.Errorf("failed to dial: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}),
			"TLS: the broker's certificate is not signed by a CA in kafka.tls.ca_file (/etc/kafka/ca.pem): x509: certificate signed by unknown authority"},
		{"Without kafka.tls.ca_file an unknown CA says to set it.", systemRoots,
			&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
			"TLS: the broker's certificate is not signed by a CA the system trusts (set kafka.tls.ca_file to the CA that signed it): x509: certificate signed by unknown authority"},
		{"A certificate for another name points at kafka.tls.server_name.", renamed,
			&tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: brokerCert, Host: "kafka.example"}},
			`TLS: the broker's certificate is not valid for the name "kafka.example" that the client checks: x509: certificate is valid for broker-1.internal, not kafka.example; connect by a name it carries, or set kafka.tls.server_name to one`},
		{"An expired certificate says so.", saslSSL,
			x509.CertificateInvalidError{Reason: x509.Expired, Detail: "current time 2030-01-01 is after 2029-01-01"},
			"TLS: the broker's certificate has expired or is not valid yet: x509: certificate has expired or is not yet valid: current time 2030-01-01 is after 2029-01-01"},
		{"A plaintext answer to TLS names the listener types.", tlsOnly,
			fmt.Errorf("failed to dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}),
			"TLS: the broker did not answer in TLS; the configuration connects with SSL: use the port of a TLS listener (SSL or SASL_SSL), or set kafka.tls.enabled to false"},
		{"A TLS alert from the broker points at client certificates.", tlsOnly,
			&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")},
			"TLS: the broker refused the handshake (tls: certificate required): if its listener requires client certificates (ssl.client.auth), set kafka.tls.cert_file and kafka.tls.key_file to one it trusts"},
		{"A connection closed without a word names the protocol the configuration speaks.", config.Kafka{},
			fmt.Errorf("kafka.(*Client).Metadata: %w", io.ErrUnexpectedEOF),
			"the broker closed the connection without answering; the configuration connects with PLAINTEXT (kafka.tls.enabled, kafka.sasl): check that the listener on this port uses it, or whether the broker is restarting (kafka.(*Client).Metadata: unexpected EOF)"},
		{"A refused connection is left as it is.", saslSSL, errors.New("dial tcp 10.0.0.1:9096: connect: connection refused"), ""},
		{"A cancelled context is left as it is.", saslSSL, fmt.Errorf("metadata: %w", context.Canceled), ""},
		{"A topic error is left as it is.", saslSSL, kafka.UnknownTopicOrPartition, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(tc.err, tc.k)
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
			if again := Explain(fmt.Errorf("lookup: %w", got), tc.k); again.Error() != "lookup: "+tc.want {
				t.Errorf("explaining twice changed the words: %v", again)
			}
			if strings.Contains(got.Error(), password) {
				t.Errorf("the explanation shows the password: %v", got)
			}
		})
	}
	if Explain(nil, saslSSL) != nil {
		t.Error("Explain(nil) is not nil")
	}
}
