package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober"
)

func TestCheckSaysWhichClockEachStampIsOn(t *testing.T) {
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://x/shop", Schema: stacktest.SeedDebezium, Brokers: []string{"kafka-1:9092"}})
	rep := prober.Report{ID: "c1", State: prober.StateArrived, Committed: time.Unix(1_764_000_000, 0)}
	appended, created := kafkaclient.LogAppendTime, kafkaclient.CreateTime
	tests := []struct {
		name       string
		recordType *kafkaclient.TimestampType
		want       []string
		wantNot    []string
	}{
		{"A canary read from a LogAppendTime topic was published on the broker's clock.", &appended,
			[]string{"stamps: commit: prober clock; publish: broker clock (record timestamp of a LogAppendTime topic: the broker's append time); consume: prober clock"},
			[]string{"NOTE"}},
		{"A CreateTime record behind Debezium is the relay's clock, with a note on the queue and the exact setting.", &created,
			[]string{"publish: relay clock (record timestamp of a CreateTime topic: Debezium's processing time, before its queue)",
				"NOTE: the canary's record has a CreateTime", "counted in publish_to_consume, not commit_to_publish",
				"kafka-configs.sh --bootstrap-server kafka-1:9092 --alter --entity-type topics", "--entity-name " + p.Kafka.Topic + " --add-config message.timestamp.type=LogAppendTime"},
			nil},
		{"Without the record's type, check says both possibilities.", nil,
			[]string{"broker clock on a LogAppendTime topic, relay clock (Debezium's processing time, before its queue) on CreateTime"},
			[]string{"NOTE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			printCheck(&out, p, checkResult{report: rep, recordType: tc.recordType})
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
}
