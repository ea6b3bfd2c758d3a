package prober

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// unitConfig points at servers that do not exist: nothing here connects.
func unitConfig(t *testing.T, extra string) *config.Config {
	return stacktest.UnreachableConfig(t, extra)
}

func TestBuildInsertQuotesEveryIdentifierAndFollowsTheMapping(t *testing.T) {
	cases := []struct {
		name       string
		outbox     config.Outbox
		deleteRow  bool
		wantInsert string
		wantDelete string
	}{
		{"Seed schema A lets the database pick the id and reads it back.",
			config.Outbox{Table: "public.outbox", IDGeneration: config.IDFromDatabase,
				Columns: config.Columns{ID: "id", Route: "aggregate_type", Key: "aggregate_id", Payload: "payload"}}, false,
			`INSERT INTO "public"."outbox" ("aggregate_type", "aggregate_id", "payload") VALUES ($1, $2, $3) RETURNING "id"::text`,
			`DELETE FROM "public"."outbox" WHERE "id" = $1`},
		{"Seed schema B routes by event type, which is then not written twice.",
			config.Outbox{Table: "outbox", IDGeneration: config.IDFromDatabase,
				Columns: config.Columns{ID: "id", Route: "event_type", EventType: "event_type", Key: "aggregate_id", Payload: "payload"}}, false,
			`INSERT INTO "outbox" ("event_type", "aggregate_id", "payload") VALUES ($1, $2, $3) RETURNING "id"::text`,
			`DELETE FROM "outbox" WHERE "id" = $1`},
		{"Debezium's table gets a prober-made id and its type column.",
			config.Outbox{Table: "outbox", IDGeneration: config.IDUUID,
				Columns: config.Columns{ID: "id", Route: "aggregatetype", EventType: "type", Key: "aggregateid", Payload: "payload"}}, true,
			`INSERT INTO "outbox" ("id", "aggregatetype", "aggregateid", "type", "payload") VALUES ($1, $2, $3, $4, $5) RETURNING "id"::text`,
			`DELETE FROM "outbox" WHERE "id" = $1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &config.Pipeline{Outbox: tc.outbox}
			ins, del := postgres.InsertSQL(insertSpec(p))
			if ins != tc.wantInsert {
				t.Errorf("insert:\n got %s\nwant %s", ins, tc.wantInsert)
			}
			if del != tc.wantDelete {
				t.Errorf("delete:\n got %s\nwant %s", del, tc.wantDelete)
			}
		})
	}
}

func TestSequenceNumbersIncreaseEvenWhenTheClockStandsStill(t *testing.T) {
	fixed := time.Unix(1700000000, 0)
	s := &Sender{now: func() time.Time { return fixed }}
	a, b := s.nextSeq(), s.nextSeq()
	if a != uint64(fixed.UnixNano()) || b != a+1 {
		t.Errorf("seqs %d, %d; want %d then one more", a, b, fixed.UnixNano())
	}
	// A restarted sender starts from the clock, above what was sent before.
	restarted := &Sender{now: func() time.Time { return fixed.Add(time.Second) }}
	if c := restarted.nextSeq(); c <= b {
		t.Errorf("seq after restart %d, want > %d", c, b)
	}
}

func TestParseStampValueAcceptsRFC3339AndUnixMillis(t *testing.T) {
	want := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	cases := []struct {
		name  string
		value string
		want  time.Time
		ok    bool
	}{
		{"RFC 3339 with nanoseconds is read exactly.", "2024-05-06T07:08:09.123456789Z", want, true},
		{"Unix milliseconds are read to the millisecond.", "1714979289123", want.Truncate(time.Millisecond), true},
		{"Garbage is no stamp.", "yesterday", time.Time{}, false},
		{"An empty header is no stamp.", "", time.Time{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStampValue(tc.value)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("parseStampValue(%q) = %v, %t; want %v, %t", tc.value, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestConsumerClassifiesEveryMessageAndNeverStops(t *testing.T) {
	cfg := unitConfig(t, "")
	p := &cfg.Pipelines[0]
	m, err := NewMetrics(prometheus.NewRegistry(), cfg.Pipelines)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tr, err := NewTracker(TrackerOptions{Pipeline: p, Instance: "unit", Metrics: m, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := NewSigner([]byte("unit-key"))
	forger, _ := NewSigner([]byte("other-key"))
	var logs stacktest.SyncBuffer
	clusters, err := kafkaclient.NewClusters([]config.Kafka{p.Kafka}, []string{p.Kafka.Topic}) // connects to nothing: Handle needs no broker
	if err != nil {
		t.Fatal(err)
	}
	defer clusters.Close()
	cluster, err := clusters.For(p.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(ConsumerOptions{Pipeline: p, Instance: "unit", Signer: signer, Tracker: tr, Metrics: m, Cluster: cluster, Now: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	committed := now.Add(-300 * time.Millisecond)
	if err := tr.Sent(Canary{ID: "c1", Seq: 1, Pipeline: "orders", Key: "k", InsertStarted: committed.Add(-time.Millisecond), CommitSent: committed, Committed: committed}); err != nil {
		t.Fatal(err)
	}
	enc := func(s *Signer, pl Payload) []byte {
		b, err := s.Encode(pl)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	read := now.Add(-200 * time.Millisecond).Format(time.RFC3339Nano)
	published := now.Add(-100 * time.Millisecond)
	// The fetch read its answer before the handler ran: that is the
	// consume stamp, not the clock at handling.
	received := now.Add(-50 * time.Millisecond)
	cases := []struct {
		name   string
		value  []byte
		reason string // "" for our canary
	}{
		{"A non-JSON value is malformed.", []byte("\xff\x01garbage"), ReasonMalformed},
		{"A value framed by a schema registry (magic byte 0, schema id) is an unsupported encoding.", []byte("\x00\x00\x00\x00\x2a\x02c1"), ReasonUnsupportedEncoding},
		{"A business event is malformed, as far as canaries go.", []byte(`{"order":1}`), ReasonMalformed},
		{"A canary signed with another key is a forgery.", enc(forger, Payload{CanaryID: "c1", Instance: "unit", Pipeline: "orders", Seq: 1}), ReasonBadSignature},
		{"Another instance's canary is foreign.", enc(signer, Payload{CanaryID: "x", Instance: "unit-check-1", Pipeline: "orders", Seq: 1}), ReasonForeignInstance},
		{"Our canary for another pipeline is skipped as such.", enc(signer, Payload{CanaryID: "y", Instance: "unit", Pipeline: "payments", Seq: 1}), ReasonUnknownPipeline},
		{"Our canary unknown to the tracker is skipped as unknown.", enc(signer, Payload{CanaryID: "z", Instance: "unit", Pipeline: "orders", Seq: 2}), ReasonUnknownCanary},
		{"Our canary is handed to the tracker with its header stamps.", enc(signer, Payload{CanaryID: "c1", Instance: "unit", Pipeline: "orders", Seq: 1}), ""},
	}
	if _, seen := c.RecordTimestampType(); seen {
		t.Error("a record timestamp type is reported before any canary arrived")
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(m.CanariesReceived.WithLabelValues("orders"))
			var skippedBefore float64
			if tc.reason != "" {
				skippedBefore = testutil.ToFloat64(m.MessagesSkipped.WithLabelValues("orders", tc.reason))
			}
			c.Handle(context.Background(), kafkaclient.Message{TimestampType: kafkaclient.LogAppendTime, Received: received,
				Message: kafka.Message{Partition: 0, Offset: int64(i), Key: []byte("k"), Value: tc.value, Time: published,
					Headers: []kafka.Header{{Key: "outbox-relay-read-at", Value: []byte(read)}}}})
			if tc.reason != "" {
				if got := testutil.ToFloat64(m.MessagesSkipped.WithLabelValues("orders", tc.reason)); got != skippedBefore+1 {
					t.Errorf("skipped %s = %v, want %v", tc.reason, got, skippedBefore+1)
				}
				// Every reason, an unknown canary too, gets the skip warning with its fix.
				if want := "message on the canary topic skipped (" + tc.reason + ")"; !strings.Contains(logs.String(), want) {
					t.Errorf("no warning %q in the log:\n%s", want, logs.String())
				}
				return
			}
			if got := testutil.ToFloat64(m.CanariesReceived.WithLabelValues("orders")); got != before+1 {
				t.Fatalf("received = %v, want %v", got, before+1)
			}
			rep, ok := tr.Report("c1")
			if !ok {
				t.Fatal("the canary is not remembered")
			}
			if seg := rep.Segments["commit_to_read"]; !seg.Measured || seg.Duration != 100*time.Millisecond {
				t.Errorf("commit_to_read = %+v, want 100ms from the read header", seg)
			}
			if !rep.Consumed.Equal(received) {
				t.Errorf("consumed %s, want %s: when the fetch's answer was read, not when it was handled (%s)", rep.Consumed, received, now)
			}
			if typ, seen := c.RecordTimestampType(); !seen || typ != kafkaclient.LogAppendTime {
				t.Errorf("record timestamp type %s (seen %t), want the canary's LogAppendTime", typ, seen)
			}
		})
	}
	if got := tr.StartOffsets()[0]; got != int64(len(cases)) {
		t.Errorf("next offset = %d, want %d: skipped messages advance it too", got, len(cases))
	}
}

// A stamp header that is there but holds no time is the relay's mistake
// in writing it: an invalid stamp, not a missing one.
func TestAnUnparseableStampHeaderIsInvalidNotMissing(t *testing.T) {
	cfg := unitConfig(t, "")
	p := &cfg.Pipelines[0]
	m, err := NewMetrics(prometheus.NewRegistry(), cfg.Pipelines)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tr, err := NewTracker(TrackerOptions{Pipeline: p, Instance: "unit", Metrics: m, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := NewSigner([]byte("unit-key"))
	clusters, err := kafkaclient.NewClusters([]config.Kafka{p.Kafka}, []string{p.Kafka.Topic}) // connects to nothing: Handle needs no broker
	if err != nil {
		t.Fatal(err)
	}
	defer clusters.Close()
	cluster, err := clusters.For(p.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(ConsumerOptions{Pipeline: p, Instance: "unit", Signer: signer, Tracker: tr, Metrics: m, Cluster: cluster, Now: clock,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	committed := now.Add(-300 * time.Millisecond)
	if err := tr.Sent(Canary{ID: "c1", Seq: 1, Pipeline: "orders", Key: "k", InsertStarted: committed.Add(-time.Millisecond), CommitSent: committed, Committed: committed}); err != nil {
		t.Fatal(err)
	}
	value, err := signer.Encode(Payload{CanaryID: "c1", Instance: "unit", Pipeline: "orders", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.Handle(context.Background(), kafkaclient.Message{Message: kafka.Message{Partition: 0, Offset: 0, Key: []byte("k"), Value: value, Time: now,
		Headers: []kafka.Header{{Key: "outbox-relay-read-at", Value: []byte("yesterday-ish")}}}})
	if got := testutil.ToFloat64(m.StampsInvalid.WithLabelValues("orders", "read", "unparseable")); got != 1 {
		t.Errorf("stamps invalid{stamp=read,reason=unparseable} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.StampsMissing.WithLabelValues("orders", "read")); got != 0 {
		t.Errorf("stamps missing{stamp=read} = %v, want 0: the header was there", got)
	}
	rep, ok := tr.Report("c1")
	if !ok {
		t.Fatal("the canary is not remembered")
	}
	if seg := rep.Segments["commit_to_read"]; seg.Outcome != "unjudged" || seg.Reason != "invalid_stamp" {
		t.Errorf("commit_to_read = %+v, want unjudged for invalid_stamp", seg)
	}
}

// A canary of this instance's other pipeline on this pipeline's topic is
// a routing mistake between pipelines it runs: the hint must not say it
// does not run that pipeline.
func TestTheUnknownPipelineHintFitsAPipelineThisInstanceRuns(t *testing.T) {
	cfg := unitConfig(t, `  - name: payments
    database: {dsn: {value: "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1"}}
    kafka: {brokers: ["127.0.0.1:1"], topic: canaries}
    budgets: {end_to_end: 2s}
`)
	p := &cfg.Pipelines[0]
	m, err := NewMetrics(prometheus.NewRegistry(), cfg.Pipelines)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tr, err := NewTracker(TrackerOptions{Pipeline: p, Instance: "unit", Metrics: m, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := NewSigner([]byte("unit-key"))
	clusters, err := kafkaclient.NewClusters([]config.Kafka{p.Kafka}, []string{p.Kafka.Topic}) // connects to nothing: Handle needs no broker
	if err != nil {
		t.Fatal(err)
	}
	defer clusters.Close()
	cluster, err := clusters.For(p.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	var logs stacktest.SyncBuffer
	c, err := NewConsumer(ConsumerOptions{Pipeline: p, Instance: "unit", Signer: signer, Tracker: tr, Metrics: m, Cluster: cluster, Now: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	value, err := signer.Encode(Payload{CanaryID: "p1", Instance: "unit", Pipeline: "payments", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.Handle(context.Background(), kafkaclient.Message{Message: kafka.Message{Partition: 0, Offset: 0, Key: []byte("k"), Value: value, Time: now}})
	log := logs.String()
	if !strings.Contains(log, "skipped ("+ReasonUnknownPipeline+")") || !strings.Contains(log, "detail=\"pipeline payments\"") {
		t.Fatalf("no unknown_pipeline warning naming payments:\n%s", log)
	}
	if strings.Contains(log, "does not run") {
		t.Errorf("the hint says this instance does not run payments, which it does:\n%s", log)
	}
}

// TestAFetchOfForeignMessagesIsRecordedOnceAndNotRecountedAfterARestart:
// a partition's reader records a fetch's skips with the tracker after its
// last message, raising no fence for a message screened out; the offset
// survives a restart, and a reader that starts below it counts no replay.
func TestAFetchOfForeignMessagesIsRecordedOnceAndNotRecountedAfterARestart(t *testing.T) {
	cfg := unitConfig(t, "")
	p := &cfg.Pipelines[0]
	state := filepath.Join(t.TempDir(), "orders.json")
	signer, _ := NewSigner([]byte("unit-key"))
	clusters, err := kafkaclient.NewClusters([]config.Kafka{p.Kafka}, []string{p.Kafka.Topic}) // connects to nothing
	if err != nil {
		t.Fatal(err)
	}
	defer clusters.Close()
	cluster, err := clusters.For(p.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	type life struct {
		m    *Metrics
		tr   *Tracker
		c    *Consumer
		logs *stacktest.SyncBuffer
	}
	start := func() life {
		m, err := NewMetrics(prometheus.NewRegistry(), cfg.Pipelines)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTracker(TrackerOptions{Pipeline: p, Instance: "unit", Metrics: m, StatePath: state})
		if err != nil {
			t.Fatal(err)
		}
		logs := &stacktest.SyncBuffer{}
		c, err := NewConsumer(ConsumerOptions{Pipeline: p, Instance: "unit", Signer: signer, Tracker: tr, Metrics: m, Cluster: cluster,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return life{m, tr, c, logs}
	}
	skipped := func(l life, reason string) float64 {
		return testutil.ToFloat64(l.m.MessagesSkipped.WithLabelValues("orders", reason))
	}
	value := func(offset int64) []byte {
		if offset%3 == 2 {
			return []byte("\x00\x00\x00\x00\x2a\x02shipped") // schema registry
		}
		return []byte(`{"order_id":184467,"status":"shipped"}`)
	}
	fetch := func(l life, from, next int64) {
		r := l.c.newPartitionReader(0)
		for o := from; o < next; o++ {
			r.handle(context.Background(), kafkaclient.Message{Message: kafka.Message{Topic: p.Kafka.Topic, Partition: 0, Offset: o, Value: value(o)}})
			l.tr.fenceMu.Lock()
			fenced := len(l.tr.fence)
			l.tr.fenceMu.Unlock()
			if fenced != 0 {
				t.Fatalf("offset %d: %d consume stamps fenced, want none for a message screened out", o, fenced)
			}
		}
		r.handled(next)
	}

	first := start()
	fetch(first, 0, 30)
	if got := [2]float64{skipped(first, ReasonMalformed), skipped(first, ReasonUnsupportedEncoding)}; got != [2]float64{20, 10} {
		t.Errorf("skipped malformed, unsupported = %v, want [20 10]", got)
	}
	for _, reason := range []string{ReasonMalformed, ReasonUnsupportedEncoding} {
		if n := strings.Count(first.logs.String(), "message on the canary topic skipped ("+reason+")"); n != 1 {
			t.Errorf("%d warnings of %s, want 1:\n%s", n, reason, first.logs.String())
		}
	}
	if next, _ := first.tr.NextOffset(0); next != 30 {
		t.Errorf("next offset %d after the fetch, want 30", next)
	}
	if err := first.tr.Flush(); err != nil { // SIGTERM
		t.Fatal(err)
	}

	second := start()
	if next := second.tr.StartOffsets()[0]; next != 30 {
		t.Fatalf("next offset %d after the restart, want 30", next)
	}
	fetch(second, 27, 33) // a reader started below: 27 to 29 are replays
	if got := [2]float64{skipped(second, ReasonMalformed), skipped(second, ReasonUnsupportedEncoding)}; got != [2]float64{2, 1} {
		t.Errorf("skipped malformed, unsupported after the restart = %v, want [2 1]: the replays are not counted again", got)
	}
}

func TestServiceRunStopsPromptlyWhenServersAreDown(t *testing.T) {
	svc, err := New(Options{Config: unitConfig(t, ""), Registerer: prometheus.NewRegistry(), StateDir: t.TempDir(), HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	// Poll for the expected state: database errors are counted while it
	// keeps retrying instead of crashing.
	deadline := time.Now().Add(20 * time.Second)
	for testutil.ToFloat64(svc.Metrics().DependencyErrors.WithLabelValues("orders", DependencyDatabase)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no database errors counted against an unreachable database")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ok, _ := svc.Dependencies(); ok {
		t.Error("dependencies reported up while the servers are unreachable")
	}
	// Readiness is this process working, not its servers answering: a
	// pipeline's outage must not take the prober out of service.
	if ok, reasons := svc.Ready(); !ok {
		t.Errorf("not ready while running with unreachable servers: %v", reasons)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
