package lint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestTopicTimestampCheckSaysWhereDebeziumsQueueIsCharged(t *testing.T) {
	cdc := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://x/shop", Schema: stacktest.SeedDebezium,
		Brokers: []string{"kafka-1:9092"}, Budgets: "{end_to_end: 3s, commit_to_publish: 2s, publish_to_consume: 1s}"})
	cdc.Owners = map[string]string{"commit_to_publish": "team-cdc", "publish_to_consume": "team-kafka"}
	if cdc.Relay.Kind != config.RelayCDC || cdc.Relay.PublishedStamp != config.PublishedFromRecordTimestamp {
		t.Fatalf("the Debezium seed pipeline is %s with publish stamp %s, want cdc with record_timestamp", cdc.Relay.Kind, cdc.Relay.PublishedStamp)
	}
	polling := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://x/shop", Schema: stacktest.SeedA})
	polling.Relay.PublishedStamp = config.PublishedFromRecordTimestamp
	tests := []struct {
		name    string
		p       *config.Pipeline
		typ     kafkaclient.TimestampType
		err     error
		level   string
		message []string
		fix     string
	}{
		{"A CreateTime canary topic behind Debezium charges its queue to the broker's owner, and the fix is the exact setting.",
			cdc, kafkaclient.CreateTime, nil, Warn,
			[]string{"CreateTime", "Debezium's processing time", "poll.interval.ms", "publish_to_consume (team-kafka), not in commit_to_publish (team-cdc)"},
			"kafka-configs.sh --bootstrap-server kafka-1:9092 --alter --entity-type topics --entity-name " + cdc.Kafka.Topic + " --add-config message.timestamp.type=LogAppendTime"},
		{"A LogAppendTime canary topic stamps at the broker.", cdc, kafkaclient.LogAppendTime, nil, OK,
			[]string{"LogAppendTime", "broker's append time (broker clock)"}, ""},
		{"A polling relay's record timestamp is its send time on CreateTime.", polling, kafkaclient.CreateTime, nil, OK,
			[]string{"relay's send time"}, ""},
		{"A setting that cannot be read is a warning, not a pass.", cdc, 0, errors.New("TOPIC_AUTHORIZATION_FAILED"), Warn,
			[]string{"not read", "TOPIC_AUTHORIZATION_FAILED"}, "message.timestamp.type=LogAppendTime"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := TopicTimestampCheck(tc.p, tc.typ, tc.err)
			if f.Check != CheckTopicTimestamp || f.Level != tc.level {
				t.Errorf("%s %s, want %s %s: %s", f.Level, f.Check, tc.level, CheckTopicTimestamp, f.Message)
			}
			for _, want := range tc.message {
				if !strings.Contains(f.Message, want) {
					t.Errorf("message %q does not say %q", f.Message, want)
				}
			}
			if !strings.Contains(f.Fix, tc.fix) || (tc.fix == "") != (f.Fix == "") {
				t.Errorf("fix %q, want one with %q", f.Fix, tc.fix)
			}
		})
	}
}

func TestTopicTimestampChecksRecordTimestampPipelinesOnly(t *testing.T) {
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://x/shop", Schema: stacktest.SeedA})
	if got := TopicTimestamp(t.Context(), p, nil); got != nil {
		t.Errorf("a published_at pipeline got %v, want no topic timestamp check", got)
	}
}

func TestDocsExplainTheTopicTimestampCheck(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cdc.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`"+CheckTopicTimestamp+"`") {
		t.Errorf("docs/cdc.md does not explain check `%s`", CheckTopicTimestamp)
	}
}
