package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/prober"
)

// stampClock says which clock a pipeline's stamp is taken on and how the
// judge treats it: the prober's own (exact), the database's (corrected by
// the measured offset), or a clock the prober cannot measure, the relay's
// or the broker's (a negative segment beyond relay.skew_tolerance is
// suspected skew, a stamp beyond relay.max_clock_skew invalid). recordType
// is the timestamp type of the records seen, nil when not known: a record
// timestamp is the broker's on a LogAppendTime topic, the producer's on a
// CreateTime one.
func stampClock(p *config.Pipeline, stamp string, recordType *kafkaclient.TimestampType) string {
	switch stamp {
	case config.StampCommit, config.StampConsume:
		return "prober clock"
	case config.StampPublish:
	default:
		for _, s := range p.Relay.Stamps {
			if s.Name == stamp {
				return fmt.Sprintf("relay clock (header %s)", s.Header)
			}
		}
		return "unknown"
	}
	switch p.Relay.PublishedStamp {
	case config.PublishedFromColumn:
		return fmt.Sprintf("database clock (column %s, written after the broker's ack; corrected by the measured clock offset)", p.Outbox.Columns.PublishedAt)
	case config.PublishedFromHeader:
		return fmt.Sprintf("relay clock (header %s)", p.Relay.PublishedHeader)
	}
	relay := "the relay's send time"
	if p.Relay.Kind == config.RelayCDC {
		relay = "Debezium's processing time, before its queue"
	}
	switch {
	case recordType == nil:
		return fmt.Sprintf("record timestamp: broker clock on a LogAppendTime topic, relay clock (%s) on CreateTime; `lint` reads the topic's setting", relay)
	case *recordType == kafkaclient.LogAppendTime:
		return "broker clock (record timestamp of a LogAppendTime topic: the broker's append time)"
	}
	return fmt.Sprintf("relay clock (record timestamp of a CreateTime topic: %s)", relay)
}

// databaseClock names the database whose clock wrote a published_at stamp
// and the offset it was converted to the prober's clock with: the
// "corrected by the measured clock offset" of the stamps line, shown, so
// that a check on a MariaDB pipeline says it was MariaDB's clock it read.
func databaseClock(p *config.Pipeline, off *prober.ClockOffset) string {
	family := "the database"
	switch kind, _ := p.Database.Family(); kind {
	case config.KindMySQL:
		family = "MySQL or MariaDB"
	case config.KindPostgres:
		family = "PostgreSQL"
	}
	if off == nil {
		return family + ", offset not measured yet"
	}
	sign := "+"
	if off.Offset < 0 {
		sign = "-"
	}
	return fmt.Sprintf("%s, offset %s%s ± %s from the prober's clock (%s converted with it)", family, sign,
		off.Offset.Abs().Round(time.Microsecond), off.Error.Round(time.Microsecond), p.Outbox.Columns.PublishedAt)
}

// unmeasured reports whether some stamp of the pipeline is on a clock the
// prober cannot measure (a relay's or a broker's).
func unmeasured(p *config.Pipeline) bool {
	return len(p.Relay.Stamps) > 0 || p.Relay.PublishedStamp != config.PublishedFromColumn
}

// stampClocks lists every stamp of the pipeline with its clock, in pipeline
// order, one "stamp: clock" per element.
func stampClocks(p *config.Pipeline, recordType *kafkaclient.TimestampType) []string {
	var out []string
	for _, stamp := range p.StampOrder() {
		out = append(out, stamp+": "+stampClock(p, stamp, recordType))
	}
	return out
}

// clockNote is what check adds when the publish stamp's clock misplaces a
// wait: a CreateTime record timestamp behind Debezium.
func clockNote(p *config.Pipeline, recordType kafkaclient.TimestampType) string {
	if p.Relay.PublishedStamp != config.PublishedFromRecordTimestamp || p.Relay.Kind != config.RelayCDC || recordType != kafkaclient.CreateTime {
		return ""
	}
	return strings.Join([]string{
		"NOTE: the canary's record has a CreateTime: Debezium's processing time, taken before the event waited in its queue",
		"      for Kafka Connect's next poll (poll.interval.ms), so that wait is counted in publish_to_consume, not commit_to_publish.",
		fmt.Sprintf("      Stamp at the broker instead: kafka-configs.sh --bootstrap-server %s --alter --entity-type topics \\",
			strings.Join(p.Kafka.Brokers, ",")),
		fmt.Sprintf("        --entity-name %s --add-config %s=LogAppendTime", p.Kafka.Topic, kafkaclient.TopicTimestampConfig),
	}, "\n")
}
