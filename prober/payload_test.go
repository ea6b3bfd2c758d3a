package prober

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
)

func TestSignerRoundTripAndRejections(t *testing.T) {
	signer, err := NewSigner([]byte("k1"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSigner([]byte("k2"))
	good := Payload{CanaryID: "c-1", Instance: "i-1", Pipeline: "orders", Seq: 7}
	encoded, err := signer.Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := other.Encode(good)
	tampered, _ := signer.Encode(good)
	tampered = []byte(string(tampered[:len(tampered)-3]) + `0"}`)
	seqChanged := []byte(`{"outbox_canary_id":"c-1","instance":"i-1","pipeline":"orders","seq":8,"sig":"` + mustSig(t, signer, good) + `"}`)

	cases := []struct {
		name    string
		value   []byte
		wantErr error
	}{
		{"a payload signed with our key decodes to what was sent", encoded, nil},
		{"a payload wrapped in a JSON string, as Debezium writes it, decodes", []byte(strconv.Quote(string(encoded))), nil},
		{"a payload signed with another key is a bad signature", forged, ErrBadSignature},
		{"a payload whose signature was altered is a bad signature", tampered, ErrBadSignature},
		{"a payload whose sequence was altered is a bad signature", seqChanged, ErrBadSignature},
		{"a business event is not a canary", []byte(`{"type":"OrderPaid","orderId":"ord-1042"}`), ErrNotCanary},
		{"garbage bytes are not a canary", []byte{0xff, 0x00, 0x13}, ErrNotCanary},
		{"an empty value is not a canary", nil, ErrNotCanary},
		{"a JSON array is not a canary", []byte(`[1,2]`), ErrNotCanary},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := signer.Decode(tc.value)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Decode error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil {
				got.Sig = ""
				if got != good {
					t.Fatalf("Decode = %+v, want %+v", got, good)
				}
			}
		})
	}
}

func TestNewSignerRefusesAnEmptyKey(t *testing.T) {
	if _, err := NewSigner(nil); err == nil {
		t.Fatal("NewSigner(nil) succeeded; an empty key would let anyone forge canaries")
	}
}

func mustSig(t *testing.T, s *Signer, p Payload) string {
	t.Helper()
	b, err := s.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := s.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return decoded.Sig
}

func FuzzSignerDecode(f *testing.F) {
	signer, _ := NewSigner([]byte("fuzz"))
	seed, _ := signer.Encode(Payload{CanaryID: "a", Instance: "b", Pipeline: "c", Seq: 1})
	f.Add(seed)
	f.Add([]byte(`"{\"x\":1}"`))
	f.Fuzz(func(t *testing.T, value []byte) {
		p, err := signer.Decode(value)
		if err == nil && p.CanaryID == "" {
			t.Fatalf("accepted a payload without a canary id: %q", value)
		}
	})
}

// BenchmarkSignerDecode is the per-message cost of recognising and verifying
// a canary on the topic (every message of the topic pays it, ours or not).
func BenchmarkSignerDecode(b *testing.B) {
	signer, _ := NewSigner([]byte("bench-key"))
	value, _ := signer.Encode(Payload{CanaryID: "0f8fad5b-d9cb-469f-a165-70867728950e", Instance: "prod-1", Pipeline: "orders", Seq: 1732900000000000000})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := signer.Decode(value); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAPreviousKeyStillVerifiesAfterARotation(t *testing.T) {
	old, _ := NewSigner([]byte("old-key"))
	rotated, err := NewSigner([]byte("new-key"), []byte("old-key"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSigner([]byte("another-key"))
	p := Payload{CanaryID: "c", Instance: "i", Pipeline: "orders", Seq: 7}
	for _, tc := range []struct {
		name    string
		by      *Signer
		wantErr error
	}{
		{"A canary signed before the rotation verifies under the previous key.", old, nil},
		{"A canary signed after the rotation verifies under the new key.", rotated, nil},
		{"A key that is neither is still a forgery.", other, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tc.by.Encode(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rotated.Decode(v); !errors.Is(err, tc.wantErr) && !(err == nil && tc.wantErr == nil) {
				t.Errorf("Decode = %v, want %v", err, tc.wantErr)
			}
		})
	}
	if v, _ := rotated.Encode(p); func() bool { _, err := old.Decode(v); return err == nil }() {
		t.Error("the rotated signer signs with the previous key: it must sign with the new one")
	}
	if _, err := NewSigner([]byte("k"), nil); err == nil {
		t.Error("an empty previous key was accepted")
	}
}

// The payload's own encoding is json.Marshal's, byte for byte, or it
// leaves the payload to json.Marshal.
func FuzzAppendPayloadIsJSONMarshal(f *testing.F) {
	f.Add("0f8fad5b-d9cb-469f-a165-70867728950e", "prod-1", "orders", uint64(1732900000000000000), "7eee")
	f.Add("a", "<i&>", "é", uint64(0), `"\`)
	f.Add("", "", "", uint64(18446744073709551615), "\x00\x7f")
	f.Fuzz(func(t *testing.T, id, instance, pipeline string, seq uint64, sig string) {
		p := Payload{CanaryID: id, Instance: instance, Pipeline: pipeline, Seq: seq, Sig: sig}
		got, ok := appendPayload(nil, p)
		if !ok {
			return
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("appendPayload %s, json.Marshal %s", got, want)
		}
	})
}
