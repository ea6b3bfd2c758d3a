package lint

import (
	"context"
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/explain"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
)

// CheckTopicTimestamp is the check of the canary topic's
// message.timestamp.type, for a pipeline whose publish stamp is the record
// timestamp.
const CheckTopicTimestamp = "topic timestamp"

// TopicTimestamp reads the canary topic's message.timestamp.type through
// client and checks it (TopicTimestampCheck); nothing for a pipeline whose
// publish stamp is not the record timestamp. Kafka that cannot be asked
// leaves the setting unchecked, a WARN.
func TopicTimestamp(ctx context.Context, p *config.Pipeline, client *kafka.Client) []Finding {
	if p.Relay.PublishedStamp != config.PublishedFromRecordTimestamp {
		return nil
	}
	typ, err := kafkaclient.TopicTimestampType(ctx, client, p.Kafka.Topic)
	return []Finding{TopicTimestampCheck(p, typ, err)}
}

// TopicTimestampCheck says whose clock the publish stamp of a
// record_timestamp pipeline is on, given the canary topic's timestamp type
// (or why it could not be read), and what lands in which segment.
//
// Debezium stamps an event (its CreateTime) when it processes the change,
// then holds it in its queue until Kafka Connect's next poll
// (poll.interval.ms, 500 ms by default, longer under back-pressure). On a
// CreateTime topic that wait comes after the publish stamp, so it is
// charged to publish_to_consume, the broker's owner; LogAppendTime stamps
// at the broker's append, after the wait, which is then charged to
// commit_to_publish, the connector's owner (docs/cdc.md has the figures).
func TopicTimestampCheck(p *config.Pipeline, typ kafkaclient.TimestampType, err error) Finding {
	f := Finding{Check: CheckTopicTimestamp}
	topic := p.Kafka.Topic
	fix := fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s=LogAppendTime",
		strings.Join(p.Kafka.Brokers, ","), topic, kafkaclient.TopicTimestampConfig)
	if err != nil {
		f.Level = Warn
		f.Message = fmt.Sprintf("%s of %s not read: %s; the publish stamp (the record timestamp) is the broker's clock with LogAppendTime, the relay's with CreateTime",
			kafkaclient.TopicTimestampConfig, topic, explain.OneLine(err.Error()))
		f.Fix = "check by hand that the topic has " + kafkaclient.TopicTimestampConfig + "=LogAppendTime (the prober's Kafka role needs DescribeConfigs on it), or: " + fix
		return f
	}
	if typ == kafkaclient.LogAppendTime {
		f.Level = OK
		f.Message = fmt.Sprintf("%s has %s=LogAppendTime: the publish stamp is the broker's append time (broker clock), after the relay's own waits",
			topic, kafkaclient.TopicTimestampConfig)
		return f
	}
	owner := func(segment string) string {
		if o := p.Owner(segment); o != "" {
			return fmt.Sprintf("%s (%s)", segment, o)
		}
		return segment
	}
	if p.Relay.Kind != config.RelayCDC {
		f.Level = OK
		f.Message = fmt.Sprintf("%s has %s=CreateTime: the publish stamp is the relay's send time, on the relay's clock; with LogAppendTime it would be the broker's append time",
			topic, kafkaclient.TopicTimestampConfig)
		return f
	}
	order := p.StampOrder()
	toPublish := config.SegmentName(order[len(order)-3], config.StampPublish) // commit_to_publish, or from the last extra stamp
	f.Level = Warn
	f.Message = fmt.Sprintf("%s has %s=CreateTime: the publish stamp is Debezium's processing time, taken before the event waits in Debezium's queue for Kafka Connect's next poll "+
		"(poll.interval.ms, 500 ms by default, longer under back-pressure); that wait lands in %s, not in %s, and a paused or slow connector pages the broker's owner",
		topic, kafkaclient.TopicTimestampConfig, owner(config.SegmentName(config.StampPublish, config.StampConsume)), owner(toPublish))
	f.Fix = fix + " (the publish stamp becomes the broker's append time: the queue's wait moves to " + toPublish + "; no change to the prober's configuration)"
	return f
}
