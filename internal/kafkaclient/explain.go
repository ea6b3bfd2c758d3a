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

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/explain"
)

// Explain turns an error of a connection to Kafka whose cause an operator
// fixes in the configuration (the broker rejected the SASL password, the
// client does not trust the broker's certificate, the listener speaks
// another security protocol) into a sentence that says which, and names
// the settings to check. Other errors, and nil, come back unchanged, as do
// errors already explained. The result wraps err, so errors.Is and
// errors.As still see the cause. No secret is ever part of it: neither
// kafka-go nor the broker repeats a password.
func Explain(err error, k config.Kafka) error {
	if err == nil || explain.Done(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if msg := explainKafka(err, k); msg != "" {
		return explain.Wrap(msg, err)
	}
	return err
}

func explainKafka(err error, k config.Kafka) string {
	mechanism := strings.ToUpper(k.SASL.Mechanism)
	switch {
	case errors.Is(err, kafka.SASLAuthenticationFailed):
		return fmt.Sprintf("SASL authentication failed for user %q (%s): the broker rejected the user name or the password; "+
			"check kafka.sasl.username and kafka.sasl.password", k.SASL.Username, mechanism)
	case errors.Is(err, kafka.UnsupportedSASLMechanism):
		return fmt.Sprintf("SASL: the broker's listener does not offer mechanism %s (kafka.sasl.mechanism); "+
			"use one in its sasl.enabled.mechanisms", mechanism)
	case errors.Is(err, kafka.IllegalSASLState) && k.SASL.Mechanism != "":
		return fmt.Sprintf("SASL: the broker's listener does not take SASL; the configuration connects with %s: "+
			"use the port of a SASL listener, or remove kafka.sasl", securityProtocol(k))
	}
	if msg := explainCertificate(err, "the broker's certificate", caSource(k), "set kafka.tls.server_name to one"); msg != "" {
		return msg
	}
	var header tls.RecordHeaderError
	if errors.As(err, &header) {
		return fmt.Sprintf("TLS: the broker did not answer in TLS; the configuration connects with %s: "+
			"use the port of a TLS listener (SSL or SASL_SSL), or set kafka.tls.enabled to false", securityProtocol(k))
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		// A TLS alert from the broker, such as "tls: certificate required".
		return fmt.Sprintf("TLS: the broker refused the handshake (%v): if its listener requires client certificates "+
			"(ssl.client.auth), set kafka.tls.cert_file and kafka.tls.key_file to one it trusts", op.Err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A listener closes the connection, without a word, on a client
		// that speaks another security protocol: plaintext to a TLS port,
		// TLS to a plaintext one, no SASL to a SASL one. A broker that is
		// shutting down does the same.
		return fmt.Sprintf("the broker closed the connection without answering; the configuration connects with %s "+
			"(kafka.tls.enabled, kafka.sasl): check that the listener on this port uses it, or whether the broker is restarting (%v)",
			securityProtocol(k), err)
	}
	return ""
}

// caSource names where the client's trusted CAs come from.
func caSource(k config.Kafka) string {
	if k.TLS.CAFile != "" {
		return "a CA in kafka.tls.ca_file (" + k.TLS.CAFile + ")"
	}
	return "a CA the system trusts (set kafka.tls.ca_file to the CA that signed it)"
}

// securityProtocol names the Kafka listener security protocol that the
// configuration connects with, in the broker's own words.
func securityProtocol(k config.Kafka) string {
	switch {
	case k.TLS.Enabled && k.SASL.Mechanism != "":
		return "SASL_SSL"
	case k.TLS.Enabled:
		return "SSL"
	case k.SASL.Mechanism != "":
		return "SASL_PLAINTEXT"
	}
	return "PLAINTEXT"
}

// explainCertificate words a failed verification of a server certificate
// (whose: "the broker's certificate"); trusted says which CAs the client
// trusts, rename how to make it check another name. "" when err is not one.
func explainCertificate(err error, whose, trusted, rename string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("TLS: %s is not signed by %s: %v", whose, trusted, unknown)
	case errors.As(err, &host):
		return fmt.Sprintf("TLS: %s is not valid for the name %q that the client checks: %v; "+
			"connect by a name it carries, or %s", whose, host.Host, host, rename)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Sprintf("TLS: %s has expired or is not valid yet: %v", whose, invalid)
	case errors.As(err, &invalid):
		return fmt.Sprintf("TLS: %s is not valid: %v", whose, invalid)
	}
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return fmt.Sprintf("TLS: %s could not be verified: %v", whose, verify.Err)
	}
	return ""
}

// Compile-time check that the explaining transport is a RoundTripper.
var _ kafka.RoundTripper = explainingTransport{}

// explainingTransport explains the errors of every request a Client makes.
type explainingTransport struct {
	rt kafka.RoundTripper
	k  config.Kafka
}

func (t explainingTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	res, err := t.rt.RoundTrip(ctx, addr, req)
	return res, Explain(err, t.k)
}
