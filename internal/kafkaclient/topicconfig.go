package kafkaclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// TopicTimestampConfig is the topic setting that decides whose clock its
// records' timestamps are on.
const TopicTimestampConfig = "message.timestamp.type"

// TopicTimestampType reads a topic's message.timestamp.type
// (DescribeConfigs): the topic's own setting, else the broker's default
// (log.message.timestamp.type), as the broker applies it.
func TopicTimestampType(ctx context.Context, client *kafka.Client, topic string) (TimestampType, error) {
	res, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{TopicTimestampConfig}}}})
	if err != nil {
		return 0, fmt.Errorf("topic %s: describe configs: %w", topic, err)
	}
	for _, r := range res.Resources {
		if r.ResourceName != topic {
			continue
		}
		if r.Error != nil {
			return 0, fmt.Errorf("topic %s: describe configs: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != TopicTimestampConfig {
				continue
			}
			switch e.ConfigValue {
			case "LogAppendTime":
				return LogAppendTime, nil
			case "CreateTime":
				return CreateTime, nil
			}
			return 0, fmt.Errorf("topic %s: %s %q: neither CreateTime nor LogAppendTime", topic, TopicTimestampConfig, e.ConfigValue)
		}
	}
	return 0, fmt.Errorf("topic %s: %w", topic, errors.New("the broker did not say its "+TopicTimestampConfig))
}
