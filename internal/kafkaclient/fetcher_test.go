package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// TestFetcherReadsEveryPartitionOfSeveralTopicsInOrder reads two topics'
// partitions through one cluster's Fetcher, as the canary consumers of two
// pipelines do, and a partition from beyond its end, as after a topic was
// recreated.
func TestFetcherReadsEveryPartitionOfSeveralTopicsInOrder(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	const n = 12
	topics := map[string]int{st.NewTopic(t, 2, nil): 2, st.NewTopic(t, 3, nil): 3}
	var names []string
	for topic := range topics {
		st.ProduceAged(t, topic, n, 0)
		names = append(names, topic)
	}
	k := config.Kafka{Brokers: st.KafkaBrokers, ClientID: "fetcher-test"}
	clusters, err := NewClusters([]config.Kafka{k, k}, names)
	if err != nil {
		t.Fatal(err)
	}
	defer clusters.Close()
	cluster, err := clusters.For(k)
	if err != nil {
		t.Fatal(err)
	}
	if clusters.Len() != 1 {
		t.Fatalf("%d clusters for one kafka section, want 1", clusters.Len())
	}

	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	last := map[string]int64{}
	var wg sync.WaitGroup
	for topic, parts := range topics {
		for p := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var marked atomic.Bool
				err := cluster.Fetcher().Read(ctx, ReadOptions{Topic: topic, Partition: p, Offset: 0,
					OnMark: func(m Mark) {
						if m.Err == nil && m.HighWatermark > 0 {
							marked.Store(true)
						}
					},
					Handle: func(m kafka.Message) {
						mu.Lock()
						defer mu.Unlock()
						key := fmt.Sprintf("%s/%d", m.Topic, m.Partition)
						if m.Topic != topic || m.Partition != p {
							t.Errorf("reader of %s/%d got a message of %s", topic, p, key)
						}
						if prev, ok := last[key]; ok && m.Offset != prev+1 {
							t.Errorf("%s: offset %d after %d", key, m.Offset, prev)
						}
						last[key] = m.Offset
						got[m.Topic]++
						if got[names[0]] == n && got[names[1]] == n {
							cancel()
						}
					}})
				if err != nil {
					t.Errorf("read %s/%d: %v", topic, p, err)
				}
				if !marked.Load() {
					t.Errorf("%s/%d: no fetch reported the partition's high watermark", topic, p)
				}
			}()
		}
	}
	wg.Wait()
	for _, topic := range names {
		if got[topic] != n {
			t.Errorf("%s: read %d messages, want %d", topic, got[topic], n)
		}
	}

	rctx, rcancel := context.WithTimeout(context.Background(), serverWait)
	defer rcancel()
	err = cluster.Fetcher().Read(rctx, ReadOptions{Topic: names[0], Partition: 0, Offset: 1000,
		Handle: func(m kafka.Message) { t.Errorf("read a message beyond the end: offset %d", m.Offset) }})
	if !errors.Is(err, kafka.OffsetOutOfRange) {
		t.Errorf("reading from beyond the end: %v, want OffsetOutOfRange (the caller picks a new offset)", err)
	}
}
