package prober

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// goldenSigned is the golden canary as signed with e2eKey: what every
// recorded value in testdata/converters/ carries.
func goldenSigned(t testing.TB) (Payload, *Signer) {
	t.Helper()
	signer, err := NewSigner([]byte(e2eKey))
	if err != nil {
		t.Fatal(err)
	}
	b, err := signer.Encode(goldenCanary())
	if err != nil {
		t.Fatal(err)
	}
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p, signer
}

func readConverterValue(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(converterTestdata(name))
	if err != nil {
		t.Fatalf("%v (record it: go test ./prober/ -run TestCDCConverterMatrix -update)", err)
	}
	return b
}

// Every value Debezium's EventRouter wrote under a converter setup, as
// recorded from the real connector, decodes to the canary that was sent.
func TestDecodeMessageReadsEveryRecordedConverterSetup(t *testing.T) {
	golden, signer := goldenSigned(t)
	for _, setup := range converterSetups() {
		t.Run(setup.title, func(t *testing.T) {
			value := readConverterValue(t, setup.name)
			got, err := signer.DecodeMessage(value)
			if err != nil {
				t.Fatalf("DecodeMessage(%s): %v", value, err)
			}
			if got != golden {
				t.Errorf("DecodeMessage = %+v, want %+v", got, golden)
			}
		})
	}
}

// The same recorded values with the signature of another key, or with a
// field altered after signing, are refused as bad signatures: no wrapper
// turns a forgery into a canary.
func TestDecodeMessageRefusesForgeriesInEveryRecordedForm(t *testing.T) {
	golden, signer := goldenSigned(t)
	forger, _ := NewSigner([]byte("not-the-key"))
	forged, _ := forger.Encode(goldenCanary())
	var forgedPayload Payload
	if err := json.Unmarshal(forged, &forgedPayload); err != nil {
		t.Fatal(err)
	}
	seq := strconv.FormatUint(golden.Seq, 10)
	for _, setup := range converterSetups() {
		value := readConverterValue(t, setup.name)
		cases := []struct {
			name string
			from string
			to   string
		}{
			{"signed with another key", golden.Sig, forgedPayload.Sig},
			{"with its sequence altered", seq, strconv.FormatUint(golden.Seq+1, 10)},
			{"with its instance altered", golden.Instance, "converter-matrix-2"},
			{"with its canary id altered", golden.CanaryID, strings.Replace(golden.CanaryID, "0f8f", "1f8f", 1)},
		}
		for _, tc := range cases {
			t.Run(setup.name+": the recorded value "+tc.name+" is a bad signature.", func(t *testing.T) {
				if !bytes.Contains(value, []byte(tc.from)) {
					t.Fatalf("the recorded value does not hold %q: %s", tc.from, value)
				}
				altered := bytes.ReplaceAll(value, []byte(tc.from), []byte(tc.to))
				if p, err := signer.DecodeMessage(altered); !errors.Is(err, ErrBadSignature) {
					t.Errorf("DecodeMessage(%s) = %+v, %v; want ErrBadSignature", altered, p, err)
				}
			})
		}
	}
}

func TestDecodeMessageClassifiesWhatIsNoCanary(t *testing.T) {
	golden, signer := goldenSigned(t)
	canary, _ := json.Marshal(golden)
	quoted := strconv.Quote(string(canary))
	cases := []struct {
		name    string
		value   []byte
		wantErr error
		// wantDetail is part of the error message: what the warning says.
		wantDetail string
	}{
		{"Confluent's Avro framing is an unsupported encoding, with its schema id.", avroCanary(42, golden), ErrUnsupportedEncoding, "schema id 42"},
		{"Confluent's Protobuf framing is an unsupported encoding.", protobufCanary(7, golden), ErrUnsupportedEncoding, "schema id 7"},
		{"JSON Schema framing (magic byte, id, then JSON) is an unsupported encoding.", append([]byte{0, 0, 0, 1, 0}, canary...), ErrUnsupportedEncoding, "schema id 256"},
		{"A lone zero byte is not a canary.", []byte{0, 1}, ErrNotCanary, "starting with 0x00"},
		{"An empty value (a tombstone) is not a canary.", nil, ErrNotCanary, "tombstone"},
		{"A Debezium change event that the router did not transform says so.",
			[]byte(`{"before":null,"after":{"id":"x","payload":"{}"},"source":{"db":"d"},"op":"c","ts_ms":1}`), ErrNotCanary, "EventRouter did not transform"},
		{"A business event names its keys.", []byte(`{"type":"OrderPaid","orderId":"ord-1042"}`), ErrNotCanary, "keys orderId, type"},
		{"Connect's envelope around a null payload is not a canary.", []byte(`{"schema":{"type":"string","optional":true},"payload":null}`), ErrNotCanary, "not JSON"},
		{"Wrappers nested deeper than any converter writes are refused.",
			[]byte(`{"payload":{"payload":{"payload":{"payload":{"payload":` + string(canary) + `}}}}}`), ErrNotCanary, "nested wrappers"},
		{"Struct text without a canary id is not a canary.", []byte(`Struct{seq=1,sig=ab}`), ErrNotCanary, "without outbox_canary_id"},
		{"Struct text with a seq that is no number is not a canary.",
			[]byte(`Struct{seq=x1,sig=ab,instance=i,pipeline=p,outbox_canary_id=c}`), ErrNotCanary, "Struct text"},
		{"Struct text that names a field twice is not a canary.",
			[]byte(`Struct{seq=1,seq=2,outbox_canary_id=c}`), ErrNotCanary, "twice"},
		{"Struct text cut short is not a canary.", []byte(`Struct{seq=1,outbox_canary_id=c`), ErrNotCanary, "closing brace"},
		{"Binary garbage is not a canary.", []byte{0xff, 0xfe, 0x13}, ErrNotCanary, "not JSON"},
		{"A JSON string three times quoted still decodes.", []byte(strconv.Quote(quoted)), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := signer.DecodeMessage(tc.value)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("DecodeMessage(%q) = %+v, %v; want %v", tc.value, got, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantDetail) {
				t.Errorf("error %q does not say %q", err, tc.wantDetail)
			}
			if err == nil && got != golden {
				t.Errorf("DecodeMessage = %+v, want %+v", got, golden)
			}
		})
	}
}

// FuzzDecodeMessage: whatever the bytes, the decoder returns (never
// panics), and it accepts nothing but the one canary that was signed:
// every seed holds that canary or a forgery of it, so an accepted payload
// that differs from it would be a canary forged through the unwrapping.
func FuzzDecodeMessage(f *testing.F) {
	golden, signer := goldenSigned(f)
	for _, setup := range converterSetups() {
		f.Add(readConverterValue(f, setup.name))
	}
	canary, _ := json.Marshal(golden)
	f.Add(canary)
	f.Add(avroCanary(1, golden))
	f.Add(protobufCanary(1, golden))
	f.Add([]byte(`Struct{payload=Struct{seq=1,outbox_canary_id=x},eventType=y}`))
	f.Add([]byte(`{"schema":{},"payload":{"payload":"{\"outbox_canary_id\":\"a\"}"}}`))
	forger, _ := NewSigner([]byte("fuzz-forger"))
	forged, _ := forger.Encode(Payload{CanaryID: "forged", Instance: "converter-matrix", Pipeline: "e2e", Seq: 2})
	f.Add(forged)
	f.Fuzz(func(t *testing.T, value []byte) {
		p, err := signer.DecodeMessage(value)
		if err == nil && p != golden {
			t.Fatalf("accepted %+v from %q: only %+v is signed", p, value, golden)
		}
	})
}

// BenchmarkDecodeMessage is the per-message cost of the converter forms
// beyond the bare JSON of BenchmarkSignerDecode.
func BenchmarkDecodeMessage(b *testing.B) {
	_, signer := goldenSigned(b)
	for _, name := range []string{"json", "json-expanded", "string", "json-schemas", "json-schemas-expanded", "string-expanded"} {
		value := readConverterValue(b, name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := signer.DecodeMessage(value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSkipLogWarnsAtTheFirstSkipOfEachReasonThenAtMostEveryInterval(t *testing.T) {
	var l skipLog
	t0 := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		name           string
		reason         string
		at             time.Duration
		n              int // skips in a row, the way a fetch's are logged
		wantWarn       bool
		wantSuppressed int
	}{
		{"The first malformed message warns.", ReasonMalformed, 0, 1, true, 0},
		{"The second, a second later, does not.", ReasonMalformed, time.Second, 1, false, 0},
		{"The first framed value warns although malformed ones were just warned about.", ReasonUnsupportedEncoding, time.Second, 1, true, 0},
		{"A third malformed message within the interval does not warn.", ReasonMalformed, skipWarnEvery - time.Second, 1, false, 0},
		{"Once the interval has passed, one warns again and counts the two it kept quiet.", ReasonMalformed, skipWarnEvery, 1, true, 2},
		{"Right after that reminder, quiet again.", ReasonMalformed, skipWarnEvery + time.Second, 1, false, 0},
		{"A fetch of 1000 framed values within the interval warns of none.", ReasonUnsupportedEncoding, 2 * time.Second, 1000, false, 0},
		{"The next reminder counts each of them.", ReasonUnsupportedEncoding, skipWarnEvery + time.Second, 10, true, 1000},
		{"The reminder after that counts the nine that followed its first in its fetch.", ReasonUnsupportedEncoding, 2*skipWarnEvery + time.Second, 1, true, 9},
	}
	for _, s := range steps {
		warn, suppressed := l.warn(s.reason, t0.Add(s.at), s.n)
		if warn != s.wantWarn || suppressed != s.wantSuppressed {
			t.Errorf("%s warn(%s, +%s, %d) = %t, %d; want %t, %d", s.name, s.reason, s.at, s.n, warn, suppressed, s.wantWarn, s.wantSuppressed)
		}
	}
}

func TestScreenSkipsForTheReasonDecodeMessageGives(t *testing.T) {
	_, signer := goldenSigned(t)
	canary, err := signer.Encode(goldenCanary())
	if err != nil {
		t.Fatal(err)
	}
	values := foreignValues(t)
	values["empty"] = nil
	values["spaces"] = []byte("  \n")
	values["short frame"] = []byte{0, 1}
	values["canary"] = canary
	// What the screen must take out without decoding, and what it must
	// leave to DecodeMessage: every value that holds the canary field.
	screenedOut := map[string]bool{
		"business-event": true, "not-json": true, "schema-registry": true,
		"empty": true, "spaces": true, "short frame": true,
		"other-instance": false, "canary": false,
	}
	if len(screenedOut) != len(values) {
		t.Fatalf("the test names %d values and screens %d: keep them in step", len(values), len(screenedOut))
	}
	for name, value := range values {
		want, ok := screenedOut[name]
		if !ok {
			t.Fatalf("%s: the test does not say whether the screen takes it out", name)
		}
		reason, err := screen(value)
		if (err != nil) != want {
			t.Errorf("%s: screened out %t (%v), want %t", name, err != nil, err, want)
			continue
		}
		if err == nil {
			continue // left to DecodeMessage, as it must be
		}
		_, decodeErr := signer.DecodeMessage(value)
		if decodeErr == nil {
			t.Errorf("%s: screened out (%v), but DecodeMessage reads a canary", name, err)
			continue
		}
		if want := skipReason(decodeErr); reason != want || skipReason(err) != want {
			t.Errorf("%s: screen says %s (%v), DecodeMessage %s (%v)", name, reason, err, want, decodeErr)
		}
	}
}

func TestEverySkipReasonHasAFix(t *testing.T) {
	fallback := SkipFix("no such reason")
	for _, r := range SkipReasons() {
		if fix := SkipFix(r); fix == fallback || fix == "" {
			t.Errorf("skip reason %s has no fix of its own", r)
		}
	}
}

// foreignValues are messages a shared canary topic carries that are not
// this instance's canaries: what the consumer skips, by the thousand in a
// flood.
func foreignValues(t testing.TB) map[string][]byte {
	t.Helper()
	signer, err := NewSigner([]byte(e2eKey))
	if err != nil {
		t.Fatal(err)
	}
	other, err := signer.Encode(Payload{CanaryID: "0190d6a4-6f1c-7b7e-9a55-5d2c0b8f4e11", Instance: "prober-eu-west-2",
		Pipeline: "orders", Seq: 1733011200123456789})
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"business-event":  []byte(`{"order_id":184467,"status":"shipped","amount":"19.99","currency":"EUR","customer":"c-7781"}`),
		"other-instance":  other,
		"not-json":        []byte("order 184467 shipped to c-7781"),
		"schema-registry": []byte("\x00\x00\x00\x00\x2a\x02\x0eshipped\x12c-7781"),
	}
}

// BenchmarkDecodeForeign is DecodeMessage on messages that are no canary
// of this instance (it returns their error).
func BenchmarkDecodeForeign(b *testing.B) {
	_, signer := goldenSigned(b)
	for name, value := range foreignValues(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = signer.DecodeMessage(value)
			}
		})
	}
}

// BenchmarkConsumerSkipsForeign is the consumer's whole path for a
// message that is not this instance's canary, handed over as a partition's
// reader gets them, in fetches (of 1000 here): decode or pre-check, the
// tracker's offset, the skip counter and the skip log (at info level, as a
// service runs).
func BenchmarkConsumerSkipsForeign(b *testing.B) {
	cfg := stacktest.UnreachableConfig(b, "")
	p := &cfg.Pipelines[0]
	m, err := NewMetrics(prometheus.NewRegistry(), cfg.Pipelines)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTracker(TrackerOptions{Pipeline: p, Instance: "unit", Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	_, signer := goldenSigned(b)
	clusters, err := kafkaclient.NewClusters([]config.Kafka{p.Kafka}, []string{p.Kafka.Topic}) // connects to nothing: Handle needs no broker
	if err != nil {
		b.Fatal(err)
	}
	defer clusters.Close()
	cluster, err := clusters.For(p.Kafka)
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewConsumer(ConsumerOptions{Pipeline: p, Instance: "unit", Signer: signer, Tracker: tr, Metrics: m,
		Cluster: cluster, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	offset := int64(0)
	const fetched = 1000
	r := c.newPartitionReader(0)
	for name, value := range foreignValues(b) {
		b.Run(name, func(b *testing.B) {
			msg := kafkaclient.Message{Message: kafka.Message{Topic: p.Kafka.Topic, Partition: 0, Key: []byte("order-184467"), Value: value}}
			b.ReportAllocs()
			for b.Loop() {
				msg.Offset = offset
				offset++
				r.handle(ctx, msg)
				if offset%fetched == 0 {
					r.handled(offset)
				}
			}
			r.handled(offset)
		})
	}
}

// decodeGeneral is DecodeMessage's path without decodeFlat: what the
// fast path must agree with.
func decodeGeneral(value []byte) (Payload, bool) {
	inner, err := unwrapCanary(value)
	if err != nil {
		return Payload{}, false
	}
	inner = bytes.TrimSpace(inner)
	if len(inner) == 0 || inner[0] != '{' {
		return Payload{}, false
	}
	var p Payload
	if json.Unmarshal(inner, &p) != nil {
		return Payload{}, false
	}
	return p, true
}

// Whatever the flat path reads, the general path reads the same; what it
// does not read is left to the general path.
func FuzzDecodeFlatReadsWhatTheGeneralPathReads(f *testing.F) {
	for _, v := range []string{
		`{"outbox_canary_id":"0f8fad5b-d9cb-469f-a165-70867728950e","instance":"i","pipeline":"orders","seq":1732900000000000000,"sig":"7eee"}`,
		`{"seq": 1732900000000000000, "sig": "7eee", "instance": "converter-matrix", "pipeline": "e2e", "outbox_canary_id": "0f8f"}`,
		" {\n\"outbox_canary_id\" : \"a\" ,\t\"seq\":0}\r\n",
		`{"outbox_canary_id":"a","seq":01}`,
		`{"outbox_canary_id":"a","seq":-1}`,
		`{"outbox_canary_id":"a","seq":18446744073709551616}`,
		`{"outbox_canary_id":"a","seq":1e3}`,
		`{"outbox_canary_id":"a","outbox_canary_id":"b"}`,
		`{"Outbox_Canary_Id":"a","instance":"outbox_canary_id"}`,
		`{"outbox_canary_id":"a\u0041","instance":"é"}`,
		`{"outbox_canary_id":"a","other":1}`,
		`{"payload":{"outbox_canary_id":"a"}}`,
		`{"outbox_canary_id":"a"} trailing`,
		`{"outbox_canary_id":"a",}`,
		`{}`,
		`"{\"outbox_canary_id\":\"a\"}"`,
	} {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		flat, ok := decodeFlat(bytes.TrimSpace(v))
		if !ok {
			return
		}
		general, gok := decodeGeneral(v)
		if !gok || flat != general {
			t.Fatalf("%q: flat path read %+v, the general path %+v (ok %t)", v, flat, general, gok)
		}
	})
}

// The forms canaries arrive in most take the flat path.
func TestDecodeFlatReadsTheBarePayloadForms(t *testing.T) {
	want, signer := goldenSigned(t)
	own, err := signer.Encode(goldenCanary())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{
		"the prober's own encoding":  own,
		"json-expanded (jsonb text)": readConverterValue(t, "json-expanded"),
		"string (jsonb text)":        readConverterValue(t, "string"),
	} {
		got, ok := decodeFlat(bytes.TrimSpace(v))
		if !ok || got != want {
			t.Errorf("%s: flat path read %+v (ok %t), want %+v", name, got, ok, want)
		}
	}
}
