package kafkaclient

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
)

// scramMechanism is SASL SCRAM (RFC 5802) as Kafka's own client speaks
// it: no channel binding, and the password's UTF-8 bytes as they are,
// without SASLprep, which Kafka's client and kafka-configs do not apply
// either. It replaces kafka-go's sasl/scram, whose SASLprep tables
// (xdg-go/stringprep) were 0.3 MB of the binary and the image.
type scramMechanism struct {
	name     string // SCRAM-SHA-256 or SCRAM-SHA-512
	hash     func() hash.Hash
	user     string
	password string
	// nonce makes the client nonce; tests replace it.
	nonce func() (string, error)
}

func newSCRAM(name string, user, password string) (scramMechanism, error) {
	m := scramMechanism{name: name, user: user, password: password, nonce: randomNonce}
	switch name {
	case "SCRAM-SHA-256":
		m.hash = sha256.New
	case "SCRAM-SHA-512":
		m.hash = sha512.New
	default:
		return scramMechanism{}, fmt.Errorf("unknown mechanism %q", name)
	}
	if user == "" {
		return scramMechanism{}, errors.New("username is empty")
	}
	return m, nil
}

func randomNonce() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawStdEncoding.EncodeToString(b), nil
}

func (m scramMechanism) Name() string { return m.name }

func (m scramMechanism) Start(context.Context) (sasl.StateMachine, []byte, error) {
	nonce, err := m.nonce()
	if err != nil {
		return nil, nil, fmt.Errorf("scram: nonce: %w", err)
	}
	// RFC 5802 5.1: "=" and "," in a user name are escaped.
	user := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(m.user)
	s := &scramSession{m: m, nonce: nonce, clientFirstBare: "n=" + user + ",r=" + nonce}
	return s, []byte("n,," + s.clientFirstBare), nil
}

type scramSession struct {
	m               scramMechanism
	nonce           string
	clientFirstBare string
	serverSignature []byte // what the server must prove in its final message
	step            int
}

func (s *scramSession) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	attrs, err := scramAttributes(string(challenge))
	if err != nil {
		return false, nil, err
	}
	if e, ok := attrs["e"]; ok {
		return false, nil, fmt.Errorf("scram: the server says %q", e)
	}
	switch s.step {
	case 0:
		s.step++
		resp, err := s.clientFinal(string(challenge), attrs)
		return false, resp, err
	case 1:
		s.step++
		v, err := base64.StdEncoding.DecodeString(attrs["v"])
		if err != nil || len(v) == 0 {
			return false, nil, errors.New("scram: the server's final message has no verifier")
		}
		if !hmac.Equal(v, s.serverSignature) {
			return false, nil, errors.New("scram: the server did not prove that it knows the password")
		}
		return true, nil, nil
	}
	return false, nil, errors.New("scram: a challenge after the exchange ended")
}

// clientFinal answers the server's first message with the proof.
func (s *scramSession) clientFinal(serverFirst string, attrs map[string]string) ([]byte, error) {
	r := attrs["r"]
	if !strings.HasPrefix(r, s.nonce) || len(r) == len(s.nonce) {
		return nil, errors.New("scram: the server's nonce does not extend the client's")
	}
	salt, err := base64.StdEncoding.DecodeString(attrs["s"])
	if err != nil || len(salt) == 0 {
		return nil, errors.New("scram: the server's salt is not base64")
	}
	iterations, err := strconv.Atoi(attrs["i"])
	if err != nil || iterations < 1 {
		return nil, fmt.Errorf("scram: iteration count %q", attrs["i"])
	}
	h := s.m.hash
	salted, err := pbkdf2.Key(h, s.m.password, salt, iterations, h().Size())
	if err != nil {
		return nil, fmt.Errorf("scram: %w", err)
	}
	withoutProof := "c=biws,r=" + r // biws: base64 of "n,,", no channel binding
	authMessage := []byte(s.clientFirstBare + "," + serverFirst + "," + withoutProof)
	clientKey := scramHMAC(h, salted, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	proof := scramHMAC(h, stored.Sum(nil), authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	s.serverSignature = scramHMAC(h, scramHMAC(h, salted, []byte("Server Key")), authMessage)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

func scramHMAC(h func() hash.Hash, key, msg []byte) []byte {
	mac := hmac.New(h, key)
	mac.Write(msg)
	return mac.Sum(nil)
}

// scramAttributes splits a server message, "r=...,s=...,i=...", into its
// attributes; a value may itself contain "=" (base64).
func scramAttributes(msg string) (map[string]string, error) {
	attrs := map[string]string{}
	for _, field := range strings.Split(msg, ",") {
		k, v, ok := strings.Cut(field, "=")
		if !ok || len(k) != 1 {
			return nil, fmt.Errorf("scram: malformed server message %q", msg)
		}
		attrs[k] = v
	}
	return attrs, nil
}
