package prober

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Errors of Decode. Both mean "skip and count", never "crash".
var (
	// ErrNotCanary: the message is not a canary payload (foreign or malformed).
	ErrNotCanary = errors.New("not a canary payload")
	// ErrBadSignature: it looks like a canary but its signature does not
	// match, so it may be forged and must not count as health.
	ErrBadSignature = errors.New("canary signature does not match")
)

// Payload is the body of a canary row, written to the outbox payload column
// and read back from the canary topic.
type Payload struct {
	CanaryID string `json:"outbox_canary_id"`
	Instance string `json:"instance"`
	Pipeline string `json:"pipeline"`
	Seq      uint64 `json:"seq"`
	Sig      string `json:"sig"`
}

// Signer signs canary payloads with HMAC-SHA256 under one key and
// verifies them under it or any previous key, so that the signing key can
// be rotated without turning canaries in flight into forgeries.
type Signer struct {
	key      []byte
	previous [][]byte
}

// NewSigner returns a Signer that signs with key and also accepts previous
// keys; an empty key is refused because anyone could then forge a healthy
// canary.
func NewSigner(key []byte, previous ...[]byte) (*Signer, error) {
	if len(key) == 0 {
		return nil, errors.New("signing key is empty")
	}
	s := &Signer{key: append([]byte(nil), key...)}
	for i, k := range previous {
		if len(k) == 0 {
			return nil, fmt.Errorf("previous signing key %d is empty", i)
		}
		s.previous = append(s.previous, append([]byte(nil), k...))
	}
	return s, nil
}

func (s *Signer) mac(p Payload) []byte { return macWith(s.key, p) }

// verifies reports whether sig is p's signature under any accepted key.
func (s *Signer) verifies(p Payload, sig []byte) bool {
	if hmac.Equal(sig, s.mac(p)) {
		return true
	}
	for _, k := range s.previous {
		if hmac.Equal(sig, macWith(k, p)) {
			return true
		}
	}
	return false
}

func macWith(key []byte, p Payload) []byte {
	m := hmac.New(sha256.New, key)
	// Length-prefixed fields, so no two payloads share a signed string:
	// "<len>:<field>;" each, built without fmt (every canary and every
	// message that looks like one is verified).
	var seq [20]byte
	b := make([]byte, 0, len(p.CanaryID)+len(p.Instance)+len(p.Pipeline)+64)
	for _, f := range [][]byte{[]byte(p.CanaryID), []byte(p.Instance), []byte(p.Pipeline), strconv.AppendUint(seq[:0], p.Seq, 10)} {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, ';')
	}
	m.Write(b)
	return m.Sum(nil)
}

// Encode signs p and marshals it to JSON.
func (s *Signer) Encode(p Payload) ([]byte, error) {
	p.Sig = hex.EncodeToString(s.mac(p))
	if b, ok := appendPayload(make([]byte, 0, 64+len(p.CanaryID)+len(p.Instance)+len(p.Pipeline)+len(p.Sig)), p); ok {
		return b, nil
	}
	return json.Marshal(p)
}

// appendPayload appends json.Marshal's bytes for p when its strings need
// no escaping (printable ASCII other than the quote, the backslash and
// the <, > and & that json.Marshal escapes), without reflection: every
// canary is encoded so. Otherwise it is not ok.
func appendPayload(b []byte, p Payload) ([]byte, bool) {
	for _, f := range [...]string{p.CanaryID, p.Instance, p.Pipeline, p.Sig} {
		for i := 0; i < len(f); i++ {
			if c := f[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return nil, false
			}
		}
	}
	b = append(b, `{"outbox_canary_id":"`...)
	b = append(b, p.CanaryID...)
	b = append(b, `","instance":"`...)
	b = append(b, p.Instance...)
	b = append(b, `","pipeline":"`...)
	b = append(b, p.Pipeline...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, p.Seq, 10)
	b = append(b, `,"sig":"`...)
	b = append(b, p.Sig...)
	return append(b, `"}`...), true
}

// Decode parses and verifies a message value. A value that is a JSON
// string holding the payload is unwrapped first: Debezium's JSON converter
// writes a text or jsonb payload column that way.
func (s *Signer) Decode(value []byte) (Payload, error) {
	value = bytes.TrimSpace(value)
	if len(value) > 0 && value[0] == '"' {
		var inner string
		if err := json.Unmarshal(value, &inner); err != nil {
			return Payload{}, fmt.Errorf("%w: %v", ErrNotCanary, err)
		}
		value = []byte(inner)
	}
	var p Payload
	if err := json.Unmarshal(value, &p); err != nil {
		return Payload{}, fmt.Errorf("%w: %v", ErrNotCanary, err)
	}
	return s.verify(p)
}

// verify checks a decoded payload: its identity fields are there and its
// signature verifies.
func (s *Signer) verify(p Payload) (Payload, error) {
	if p.CanaryID == "" || p.Instance == "" || p.Pipeline == "" {
		return Payload{}, fmt.Errorf("%w: missing canary id, instance or pipeline", ErrNotCanary)
	}
	got, err := hex.DecodeString(p.Sig)
	if err != nil || !s.verifies(p, got) {
		return Payload{}, ErrBadSignature
	}
	return p, nil
}
