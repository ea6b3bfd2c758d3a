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

func TestCheckNamesTheDatabaseWhoseClockStampedThePublish(t *testing.T) {
	rep := prober.Report{ID: "c1", State: prober.StateArrived, Committed: time.Unix(1_764_000_000, 0)}
	behind := &prober.ClockOffset{Offset: -1500 * time.Microsecond, Error: 200 * time.Microsecond}
	tests := []struct {
		name   string
		dsn    string
		schema stacktest.Schema
		clock  *prober.ClockOffset
		want   string
	}{
		{"A published_at on MariaDB names the MySQL family and the offset it was converted with.",
			"mysql://canary:x@db:3306/shop", stacktest.MySQLSeedA, behind,
			"database clock: MySQL or MariaDB, offset -1.5ms ± 200µs from the prober's clock (published_at converted with it)"},
		{"Before the offset is measured, check says so.", "postgres://x/shop", stacktest.SeedA, nil,
			"database clock: PostgreSQL, offset not measured yet"},
		{"A record timestamp is on no database clock: no line.", "mysql://canary:x@db:3306/shop", stacktest.MySQLSeedDebezium, behind, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: tc.dsn, Schema: tc.schema, Brokers: []string{"kafka-1:9092"}})
			var out strings.Builder
			printCheck(&out, p, checkResult{report: rep, clock: tc.clock})
			if tc.want == "" {
				if strings.Contains(out.String(), "database clock:") {
					t.Errorf("output names a database clock:\n%s", out.String())
				}
			} else if !strings.Contains(out.String(), "  "+tc.want+"\n") {
				t.Errorf("output lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}
