package kafkaclient

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

const serverWait = 30 * time.Second

// consumeAndCommit makes group consume and commit k messages of topic, then
// leave the group, the way an at-least-once consumer that stopped would.
func consumeAndCommit(t *testing.T, brokers []string, group, topic string, k int) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: group, Topic: topic,
		StartOffset: kafka.FirstOffset, CommitInterval: 0, MaxWait: 100 * time.Millisecond})
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("close the reader of group %s: %v", group, err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	for i := 0; i < k; i++ {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("group %s: fetch message %d of %d: %v", group, i+1, k, err)
		}
		if err := r.CommitMessages(ctx, msg); err != nil {
			t.Fatalf("group %s: commit message %d of %d: %v", group, i+1, k, err)
		}
	}
}

func TestQueryConsumerLag(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	const n = 10
	cases := []struct {
		name         string
		partitions   int
		consumed     int
		wantMessages int64
	}{
		{"A group that consumed some messages and stopped lags by the rest, as old as the oldest of them.", 2, 4, n - 4},
		{"A group that never committed lags by the whole topic.", 1, 0, n},
		{"A group that consumed everything has no lag.", 3, n, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := st.NewTopic(t, tc.partitions, nil)
			st.ProduceAged(t, topic, n, 30*time.Second)
			group := topic + ".group"
			if tc.consumed > 0 {
				consumeAndCommit(t, st.KafkaBrokers, group, topic, tc.consumed)
			}
			lag, err := QueryConsumerLag(context.Background(), st.KafkaClient(), config.ConsumerGroup{Group: group, Topic: topic}, time.Now)
			if err != nil {
				t.Fatalf("QueryConsumerLag: %v", err)
			}
			if lag.Messages != tc.wantMessages {
				t.Errorf("lag = %d messages, want %d", lag.Messages, tc.wantMessages)
			}
			switch {
			case tc.wantMessages == 0 && lag.OldestAge != 0:
				t.Errorf("a caught-up group lags by %s, want 0", lag.OldestAge)
			case tc.wantMessages > 0 && lag.OldestAge < 25*time.Second:
				t.Errorf("lag = %s, want at least 25s: its oldest unconsumed message was stamped 30s ago", lag.OldestAge)
			}
		})
	}
}

func TestQueryConsumerLagCatchesUp(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	topic := st.NewTopic(t, 1, nil)
	group := topic + ".group"
	st.ProduceAged(t, topic, 6, 30*time.Second)
	consumeAndCommit(t, st.KafkaBrokers, group, topic, 2)
	g := config.ConsumerGroup{Group: group, Topic: topic}
	lag, err := QueryConsumerLag(context.Background(), st.KafkaClient(), g, time.Now)
	if err != nil || lag.Messages != 4 {
		t.Fatalf("before catching up: lag %+v, err %v; want 4 messages", lag, err)
	}
	consumeAndCommit(t, st.KafkaBrokers, group, topic, 4)
	lag, err = QueryConsumerLag(context.Background(), st.KafkaClient(), g, time.Now)
	if err != nil {
		t.Fatalf("QueryConsumerLag: %v", err)
	}
	if lag.Messages != 0 || lag.OldestAge != 0 {
		t.Errorf("after catching up: lag %+v, want 0 messages and 0s", lag)
	}
}

func TestQueryConsumerLagOfAMissingTopicIsAnError(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	_, err := QueryConsumerLag(context.Background(), st.KafkaClient(),
		config.ConsumerGroup{Group: "g", Topic: "no-such-topic-" + fmt.Sprint(time.Now().UnixNano())}, time.Now)
	if err == nil {
		t.Fatal("QueryConsumerLag of a missing topic: no error")
	}
	t.Logf("error: %v", err)
}
