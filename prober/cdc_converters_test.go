package prober

// The converter setups users run Debezium's outbox EventRouter with, each
// on the real stack (see cdc_e2e_test.go for how to start it): canaries
// must be good under every one. Each setup's connector is the recommended
// one (deploy/local/connect/outbox-connector.json) with the setup's
// converter settings, and each records the value its EventRouter writes for
// one fixed canary into testdata/converters/, which the decoder's unit
// tests read: `go test ./prober/ -run TestCDCConverterMatrix -update`
// rewrites them, and without -update a change (a Debezium or Kafka upgrade
// that writes another form) fails here.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	jsonConverter   = "org.apache.kafka.connect.json.JsonConverter"
	stringConverter = "org.apache.kafka.connect.storage.StringConverter"
)

// converterSetup is one way a user configures the connector's value
// converter and the router's payload handling.
type converterSetup struct {
	name  string // the testdata file, testdata/converters/<name>.value
	title string
	// set are the settings changed from the recommended configuration;
	// an empty value removes the setting.
	set map[string]string
}

func converterSetups() []converterSetup {
	const (
		schemas  = "value.converter.schemas.enable"
		expand   = "transforms.outbox.table.expand.json.payload"
		envelope = "transforms.outbox.table.fields.additional.placement"
	)
	return []converterSetup{
		{"json", "JsonConverter without schemas (the recommended setup) writes the payload as a JSON string.", nil},
		{"json-schemas", "JsonConverter with schemas (Kafka's default) wraps the JSON string in Connect's envelope.",
			map[string]string{schemas: "true"}},
		{"json-expanded", "JsonConverter without schemas and table.expand.json.payload writes a JSON object.",
			map[string]string{expand: "true"}},
		{"json-schemas-expanded", "JsonConverter with schemas and table.expand.json.payload wraps the object in Connect's envelope.",
			map[string]string{schemas: "true", expand: "true"}},
		{"string", "StringConverter writes the payload column's text as it is.",
			map[string]string{"value.converter": stringConverter, schemas: ""}},
		{"string-expanded", "StringConverter with table.expand.json.payload writes Kafka Connect's Struct text.",
			map[string]string{"value.converter": stringConverter, schemas: "", expand: "true"}},
		{"json-schemas-envelope", "JsonConverter with schemas and a field placed in the router's envelope nests two envelopes.",
			map[string]string{schemas: "true", envelope: "type:envelope:eventType"}},
		{"string-envelope", "StringConverter with a field placed in the router's envelope writes the JSON text inside Struct text.",
			map[string]string{"value.converter": stringConverter, schemas: "", envelope: "type:envelope:eventType"}},
		{"string-expanded-envelope", "StringConverter with table.expand.json.payload and the router's envelope nests Struct texts.",
			map[string]string{"value.converter": stringConverter, schemas: "", expand: "true", envelope: "type:envelope:eventType"}},
	}
}

// goldenCanary is the canary every setup publishes once for the testdata:
// fixed, so the recorded values differ only by the converter.
func goldenCanary() Payload {
	return Payload{CanaryID: "0f8fad5b-d9cb-469f-a165-70867728950e", Instance: "converter-matrix", Pipeline: "e2e", Seq: 1732900000000000000}
}

func TestCDCConverterMatrix(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	signer, err := NewSigner([]byte(e2eKey))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := signer.Encode(goldenCanary())
	if err != nil {
		t.Fatal(err)
	}
	for _, setup := range converterSetups() {
		t.Run(setup.title, func(t *testing.T) {
			t.Parallel()
			p := newCDCPipeline(t, s, func(cfg map[string]string, _ stacktest.ConnectorNames) {
				for k, v := range setup.set {
					if v == "" {
						delete(cfg, k)
						continue
					}
					cfg[k] = v
				}
			})
			value := p.publishGolden(t, golden)
			checkConverterTestdata(t, setup.name, normalizeNames(value, p))

			r := p.startProber(t)
			p.sendGoodCanaries(t, r, 3)
			for _, reason := range []string{ReasonMalformed, ReasonUnsupportedEncoding, ReasonBadSignature} {
				if got := r.counter(r.svc.Metrics().MessagesSkipped, reason); got != 0 {
					t.Errorf("%v messages skipped as %s, want 0", got, reason)
				}
			}
			t.Logf("converter setup %q %v: 3 canaries good on commit_to_publish and end_to_end; value %.100s",
				setup.name, setup.set, value)
		})
	}
}

// startProber runs the prober on the pipeline without a schedule: the
// test sends its canaries itself, so it waits for them alone.
func (p *cdcPipeline) startProber(t *testing.T) *running {
	t.Helper()
	// Budgets a loaded machine keeps: the converters' stamps are the
	// subject, not the stack's speed.
	return startService(t, p.config(t, "@every 1s", "{commit_to_publish: 60s, end_to_end: 60s}"), t.TempDir(), true)
}

// sendGoodCanaries sends n canaries and requires each to arrive good on
// commit_to_publish and end_to_end. The wait for each grows with how slowly
// the connector started: the machine's load now.
func (p *cdcPipeline) sendGoodCanaries(t *testing.T, r *running, n int) []Report {
	t.Helper()
	tr := r.tracker(t)
	var sent []Canary
	for range n {
		sent = append(sent, r.send(t))
	}
	var reps []Report
	for _, c := range sent {
		ctx, cancel := context.WithTimeout(context.Background(), e2eWait+10*p.startup)
		rep, err := tr.Await(ctx, c.ID)
		cancel()
		if err != nil {
			t.Fatalf("canary %s: %v", c.ID, err)
		}
		if rep.State != StateArrived {
			t.Errorf("canary %s: state %s, want arrived", rep.ID, rep.State)
		}
		for _, seg := range []string{"commit_to_publish", "end_to_end"} {
			if sr := segmentOf(rep, seg); sr.Outcome != slo.OutcomeGood {
				t.Errorf("canary %s: %s %q after %s, want good", rep.ID, seg, sr.Outcome, sr.Duration)
			}
		}
		reps = append(reps, rep)
	}
	return reps
}

// publishGolden inserts the golden canary as a row of the outbox, waits for
// the connector to publish it and returns the value as written.
func (p *cdcPipeline) publishGolden(t *testing.T, payload []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait+10*p.startup)
	defer cancel()
	if _, err := p.pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'outbox-canary', 'outbox_canary', $3::jsonb)`,
		goldenCanary().CanaryID, p.aggregateType, string(payload)); err != nil {
		t.Fatalf("insert the golden canary: %v", err)
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: p.s.KafkaBrokers, Topic: p.topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	msg, err := rd.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read the golden canary from %s: %v", p.topic, err)
	}
	return msg.Value
}

// normalizeNames replaces the test's unique names, which the router's
// envelope schema is named after, with fixed ones.
func normalizeNames(value []byte, p *cdcPipeline) []byte {
	value = bytes.ReplaceAll(value, []byte(p.aggregateType), []byte("AGGREGATE_TYPE"))
	return bytes.ReplaceAll(value, []byte(p.connector.Config["topic.prefix"]), []byte("TOPIC_PREFIX"))
}

func converterTestdata(name string) string {
	return filepath.Join("testdata", "converters", name+".value")
}

// checkConverterTestdata compares a recorded value with its testdata file,
// or rewrites the file with -update.
func checkConverterTestdata(t *testing.T, name string, value []byte) {
	t.Helper()
	path := converterTestdata(name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, value, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./prober/ -run TestCDCConverterMatrix -update records it)", err)
	}
	if !bytes.Equal(value, want) {
		t.Errorf("Debezium wrote another value than %s records (an upgrade?); check the decoder reads it, then -update:\n got %s\nwant %s",
			path, value, want)
	}
}

// The recorded values must not keep a test's random name (normalizeNames
// replaces them), or they would differ at every recording.
func TestConverterTestdataHoldsNoRandomName(t *testing.T) {
	for _, setup := range converterSetups() {
		b, err := os.ReadFile(converterTestdata(setup.name))
		if err != nil {
			t.Fatalf("%s: %v (record it: go test ./prober/ -run TestCDCConverterMatrix -update)", setup.name, err)
		}
		if strings.Contains(string(b), "oc-test") {
			t.Errorf("%s holds a test's random name: %s", setup.name, b)
		}
	}
}

// debeziumDefaults turns the recommended configuration into the one a user
// writes from Debezium's documentation: the connection, topic.prefix and
// the router with its defaults, plus plugin.name=pgoutput (PostgreSQL 15
// has no decoderbufs) and schemas-enabled JSON (Kafka's default, which the
// stack's worker turns off). slot.name and publication.name stay the
// test's own: Debezium's defaults would collide with every other test on
// the shared server (the hazard lint reports). Everything else is left
// to Debezium: snapshot.mode initial, publication.autocreate.mode
// all_tables, no heartbeat, no table.include.list, the router on every
// record without a predicate.
func debeziumDefaults(cfg map[string]string, _ stacktest.ConnectorNames) {
	keep := []string{"connector.class", "database.hostname", "database.port", "database.user", "database.password",
		"database.dbname", "topic.prefix", "plugin.name", "slot.name", "publication.name"}
	for k := range cfg {
		if !slices.Contains(keep, k) {
			delete(cfg, k)
		}
	}
	cfg["value.converter"] = jsonConverter
	cfg["value.converter.schemas.enable"] = "true"
	cfg["transforms"] = "outbox"
	cfg["transforms.outbox.type"] = "io.debezium.transforms.outbox.EventRouter"
}

func TestCDCConnectorWithDebeziumDefaultsAndSchemasEnabledJSONDeliversGoodCanaries(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	p := newCDCPipeline(t, s, debeziumDefaults)
	r := p.startProber(t)
	reps := p.sendGoodCanaries(t, r, 3)
	m := r.svc.Metrics()
	for _, reason := range []string{ReasonMalformed, ReasonUnsupportedEncoding, ReasonBadSignature} {
		if got := r.counter(m.MessagesSkipped, reason); got != 0 {
			t.Errorf("%v messages skipped as %s, want 0", got, reason)
		}
	}
	// The prober deletes each canary row in its insert transaction: the
	// router drops the DELETE's event and its tombstone, so nothing but the
	// insert reaches the topic.
	if dup := r.counter(m.CanariesDuplicate); dup != 0 {
		t.Errorf("%v duplicates, want 0", dup)
	}
	t.Logf("Debezium defaults (%d settings) with schemas-enabled JSON: %d canaries good, end_to_end %s",
		len(p.connector.Config), len(reps), segmentOf(reps[0], "end_to_end").Duration)
}

// avroCanary is a canary record as Confluent's Avro serializer frames it:
// magic byte 0, the schema id (big-endian), then the record in Avro's
// binary encoding (strings and the long as zigzag varints).
func avroCanary(schemaID uint32, p Payload) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0}, schemaID)
	for _, s := range []string{p.CanaryID, p.Instance, p.Pipeline} {
		b = binary.AppendVarint(b, int64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, int64(p.Seq))
	b = binary.AppendVarint(b, int64(len(p.Sig)))
	return append(b, p.Sig...)
}

// protobufCanary is the same canary as Confluent's Protobuf serializer
// frames it: magic byte, schema id, the message index list [0] (a single
// 0), then the message (fields 1-3 and 5 strings, 4 a varint).
func protobufCanary(schemaID uint32, p Payload) []byte {
	b := append(binary.BigEndian.AppendUint32([]byte{0}, schemaID), 0)
	for i, s := range []string{p.CanaryID, p.Instance, p.Pipeline} {
		b = append(b, byte((i+1)<<3|2))
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, 4<<3)
	b = binary.AppendUvarint(b, p.Seq)
	b = append(b, 5<<3|2)
	b = binary.AppendUvarint(b, uint64(len(p.Sig)))
	return append(b, p.Sig...)
}

func TestE2ESchemaRegistryFramedValuesAreSkippedAsUnsupportedEncodingWithOneWarning(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	o := newOutbox(t, s, outboxsql.SchemaA, nil)
	cfg := o.config(t, pipelineYAML{Budgets: map[string]string{"end_to_end": "10s"}})
	var logs stacktest.SyncBuffer
	svc, err := New(Options{Config: cfg, Registerer: prometheus.NewRegistry(), StateDir: t.TempDir(), NoSchedule: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; t.Logf("prober log:\n%s", logs.String()) })
	waitFor(t, "the service's database and Kafka to answer", func() bool { ok, _ := svc.Dependencies(); return ok })

	// A real canary of this instance, signed with its key: the framing
	// alone makes it unreadable, so no canary is counted either way.
	signer, _ := NewSigner([]byte(e2eKey))
	signed, err := signer.Encode(Payload{CanaryID: "c-framed", Instance: "e2e", Pipeline: "e2e", Seq: 7})
	if err != nil {
		t.Fatal(err)
	}
	var pl Payload
	if err := json.Unmarshal(signed, &pl); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(s.KafkaBrokers...), Topic: o.topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: &kafka.Transport{}}
	defer w.Close()
	if err := w.WriteMessages(context.Background(),
		kafka.Message{Key: []byte("outbox-canary"), Value: avroCanary(42, pl)},
		kafka.Message{Key: []byte("outbox-canary"), Value: protobufCanary(43, pl)}); err != nil {
		t.Fatalf("produce the framed values: %v", err)
	}
	skipped := func(reason string) float64 {
		return testutil.ToFloat64(svc.Metrics().MessagesSkipped.WithLabelValues("e2e", reason))
	}
	unsupportedWarnings := func() []string {
		var warnings []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "reason="+ReasonUnsupportedEncoding) {
				warnings = append(warnings, line)
			}
		}
		return warnings
	}
	// A skip is counted before it is logged: wait for both.
	waitFor(t, "both framed values to be skipped and the first logged", func() bool {
		return skipped(ReasonUnsupportedEncoding) == 2 && len(unsupportedWarnings()) > 0
	})
	for _, reason := range []string{ReasonMalformed, ReasonBadSignature, ReasonForeignInstance} {
		if n := skipped(reason); n != 0 {
			t.Errorf("%v skipped as %s, want 0: a framed value has its own reason", n, reason)
		}
	}
	warnings := unsupportedWarnings()
	if len(warnings) != 1 {
		t.Fatalf("%d warnings about %s, want exactly 1 (the first skip; the second is rate-limited):\n%s",
			len(warnings), ReasonUnsupportedEncoding, strings.Join(warnings, "\n"))
	}
	for _, want := range []string{"schema id 42", "value.converter=org.apache.kafka.connect.json.JsonConverter", "topic=" + o.topic} {
		if !strings.Contains(warnings[0], want) {
			t.Errorf("the warning does not say %q:\n%s", want, warnings[0])
		}
	}
}
