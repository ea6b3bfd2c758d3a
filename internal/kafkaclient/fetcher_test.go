package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
	var marked atomic.Bool
	var wg sync.WaitGroup
	for topic, parts := range topics {
		for p := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := cluster.Fetcher().Read(ctx, ReadOptions{Topic: topic, Partition: p, Offset: 0,
					Handle: func(m Message) {
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
							marked.Store(true)
							for topic, parts := range topics {
								marks := cluster.Fetcher().Marks(topic)
								for p := range parts {
									if m, ok := marks[p]; !ok || m.Err != nil || m.HighWatermark <= 0 {
										t.Errorf("%s/%d: mark %+v (present %t), want the high watermark of the fetches", topic, p, m, ok)
									}
								}
							}
							cancel()
						}
					}})
				if err != nil {
					t.Errorf("read %s/%d: %v", topic, p, err)
				}
			}()
		}
	}
	wg.Wait()
	if !marked.Load() {
		t.Error("the marks were not checked: not every message was read")
	}
	for _, topic := range names {
		if got[topic] != n {
			t.Errorf("%s: read %d messages, want %d", topic, got[topic], n)
		}
	}

	rctx, rcancel := context.WithTimeout(context.Background(), serverWait)
	defer rcancel()
	err = cluster.Fetcher().Read(rctx, ReadOptions{Topic: names[0], Partition: 0, Offset: 1000,
		Handle: func(m Message) { t.Errorf("read a message beyond the end: offset %d", m.Offset) }})
	if !errors.Is(err, kafka.OffsetOutOfRange) {
		t.Errorf("reading from beyond the end: %v, want OffsetOutOfRange (the caller picks a new offset)", err)
	}
}

// TestReaderReadsPartitionsOnOneGoroutine reads three partitions with one
// Reader, as a pipeline's consumer does, and a fourth from beyond its end:
// that one stops (its OnStop hears OffsetOutOfRange) while the other three
// go on, each in order, and every message is handed over on the goroutine
// that calls HandleReady.
func TestReaderReadsPartitionsOnOneGoroutine(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	const n = 12
	topic, beyond := st.NewTopic(t, 3, nil), st.NewTopic(t, 1, nil)
	st.ProduceAged(t, topic, n, 0)
	cluster := openCluster(t, st, "reader-test", topic, beyond)
	r := cluster.Fetcher().NewReader()
	defer r.Close()

	// Only this goroutine touches these: the race detector holds the
	// Reader to handing everything over on it.
	got, last := 0, map[int]int64{}
	var stopped []error
	for p := range 3 {
		r.Add(ReadOptions{Topic: topic, Partition: p, Offset: 0,
			Handle: func(m Message) {
				if m.Topic != topic || m.Partition != p {
					t.Errorf("partition %d got a message of %s/%d", p, m.Topic, m.Partition)
				}
				if prev, ok := last[p]; ok && m.Offset != prev+1 {
					t.Errorf("partition %d: offset %d after %d", p, m.Offset, prev)
				}
				last[p] = m.Offset
				got++
			},
			OnStop: func(err error) { t.Errorf("partition %d stopped: %v", p, err) }})
	}
	r.Add(ReadOptions{Topic: beyond, Partition: 0, Offset: 1000,
		Handle: func(m Message) { t.Errorf("read a message beyond the end: offset %d", m.Offset) },
		OnStop: func(err error) { stopped = append(stopped, err) }})

	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	for got < n || len(stopped) == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("after %v: %d of %d messages, stops %v", serverWait, got, n, stopped)
		case <-r.Ready():
			r.HandleReady(ctx)
		}
	}
	if len(stopped) != 1 || !errors.Is(stopped[0], kafka.OffsetOutOfRange) {
		t.Errorf("stops %v, want one OffsetOutOfRange", stopped)
	}
	if got != n || len(last) != 3 {
		t.Errorf("read %d messages of %d partitions, want %d of 3", got, len(last), n)
	}
}

// BenchmarkFetcherCanaryAmong900Partitions is what fetching costs the
// prober at the scale of issue 14, 300 pipelines of 3 partitions: one
// Fetcher reads 900 partitions (20 topics of 45 here, to create them
// sooner) of the stack's broker, and each op produces one message to one
// of them and waits until it is handed over. cpu-ms/op is the process's
// CPU time per message, producing included (produce-only measures that
// alone); idle-cpu-ms/s what the 900 idle partitions cost a second.
func BenchmarkFetcherCanaryAmong900Partitions(b *testing.B) {
	st := stacktest.Load(b)
	const topicsN, partitions = 20, 45
	topics := make([]string, topicsN)
	for i := range topics {
		topics[i] = st.NewTopic(b, partitions, nil)
	}
	cluster := openCluster(b, st, "fetcher-bench", topics...)
	producer := &kafka.Client{Addr: kafka.TCP(st.KafkaBrokers...), Transport: &kafka.Transport{}, Timeout: serverWait}
	produce := func(i int) {
		// A partition of a topic just created may have no leader yet
		// ("Not Leader For Partition"): Kafka's temporary errors are retried.
		stacktest.Eventually(b, serverWait, "a produce to a partition with a leader", func() (bool, string) {
			res, err := producer.Produce(context.Background(), &kafka.ProduceRequest{Topic: topics[i%topicsN], Partition: (i / topicsN) % partitions,
				RequiredAcks: kafka.RequireOne, Records: kafka.NewRecordReader(kafka.Record{Value: kafka.NewBytes([]byte("canary"))})})
			if err == nil {
				err = res.Error
			}
			var kerr kafka.Error
			if err != nil && errors.As(err, &kerr) && kerr.Temporary() {
				return false, err.Error()
			}
			if err != nil {
				b.Fatal(err)
			}
			return true, ""
		})
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.Run("produce-only", func(b *testing.B) {
		start := cpu()
		for i := 0; b.Loop(); i++ {
			produce(i)
		}
		b.ReportMetric(float64((cpu()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	})

	ctx, cancel := context.WithCancel(context.Background())
	arrived := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, topic := range topics {
		ends, err := HighWatermarks(ctx, producer, topic) // past produce-only's messages
		if err != nil {
			b.Fatal(err)
		}
		for p := range partitions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = cluster.Fetcher().Read(ctx, ReadOptions{Topic: topic, Partition: p, Offset: ends[p],
					Handle: func(Message) { arrived <- struct{}{} }})
			}()
		}
	}
	stacktest.Eventually(b, serverWait, "every partition fetched", func() (bool, string) {
		n := 0
		for _, topic := range topics {
			n += len(cluster.Fetcher().Marks(topic))
		}
		return n == topicsN*partitions, fmt.Sprintf("%d partitions fetched", n)
	})
	b.Run("fetch", func(b *testing.B) {
		start := cpu()
		for i := 0; b.Loop(); i++ {
			produce(i)
			<-arrived
		}
		b.ReportMetric(float64((cpu()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		idle := cpu()
		time.Sleep(5 * time.Second)
		b.ReportMetric(float64((cpu()-idle).Microseconds())/1000/5, "idle-cpu-ms/s")
	})
}

// openCluster opens the stack's cluster for topics, closed when tb ends.
func openCluster(tb testing.TB, st stacktest.Stack, clientID string, topics ...string) *Cluster {
	tb.Helper()
	k := config.Kafka{Brokers: st.KafkaBrokers, ClientID: clientID}
	clusters, err := NewClusters([]config.Kafka{k}, topics)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(clusters.Close)
	cluster, err := clusters.For(k)
	if err != nil {
		tb.Fatal(err)
	}
	return cluster
}

// TestFetcherReportsTheBrokersAppendTimeOnALogAppendTimeTopic: records
// produced with a CreateTime an hour old to a LogAppendTime topic are read
// with the broker's append time, as kcat reads them, and said to be so.
func TestFetcherReportsTheBrokersAppendTimeOnALogAppendTimeTopic(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	const n = 5
	topics := map[TimestampType]string{
		CreateTime:    st.NewTopic(t, 1, nil),
		LogAppendTime: st.NewTopic(t, 1, map[string]string{"message.timestamp.type": "LogAppendTime"}),
	}
	for typ, topic := range topics {
		before := time.Now().Add(-time.Second)
		st.ProduceAged(t, topic, n, time.Hour)
		after := time.Now().Add(time.Second)

		k := config.Kafka{Brokers: st.KafkaBrokers, ClientID: "fetcher-test"}
		clusters, err := NewClusters([]config.Kafka{k}, []string{topic})
		if err != nil {
			t.Fatal(err)
		}
		cluster, err := clusters.For(k)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		var got []Message
		err = cluster.Fetcher().Read(ctx, ReadOptions{Topic: topic, Partition: 0, Handle: func(m Message) {
			got = append(got, m)
			if len(got) == n {
				cancel()
			}
		}})
		cancel()
		clusters.Close()
		if err != nil || len(got) != n {
			t.Fatalf("%s topic: read %d of %d messages: %v", typ, len(got), n, err)
		}
		kcat := strings.Split(st.Kcat(t, topic, "%T\n"), "\n")
		for i, m := range got {
			if m.TimestampType != typ {
				t.Errorf("%s topic, offset %d: timestamp type %s", typ, m.Offset, m.TimestampType)
			}
			if want := kcat[i]; fmt.Sprint(m.Time.UnixMilli()) != want {
				t.Errorf("%s topic, offset %d: time %d, kcat %%T %s", typ, m.Offset, m.Time.UnixMilli(), want)
			}
			if fresh := !m.Time.Before(before) && !m.Time.After(after); fresh != (typ == LogAppendTime) {
				t.Errorf("%s topic, offset %d: time %s, produced an hour before %s", typ, m.Offset, m.Time.UTC(), before.UTC())
			}
		}
		t.Logf("%s topic: offset 0 read at %s (kcat %%T %s)", typ, got[0].Time.UTC().Format(time.RFC3339Nano), kcat[0])
	}
}

func TestTopicTimestampTypeReadsTheTopicsSetting(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	client, closeClient, err := NewClient(config.Kafka{Brokers: st.KafkaBrokers, ClientID: "fetcher-test"}, serverWait)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	for _, want := range []TimestampType{CreateTime, LogAppendTime} {
		var cfg map[string]string
		if want == LogAppendTime {
			cfg = map[string]string{TopicTimestampConfig: "LogAppendTime"}
		}
		topic := st.NewTopic(t, 1, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		got, err := TopicTimestampType(ctx, client, topic)
		cancel()
		if err != nil || got != want {
			t.Errorf("topic created with %v: %s, %v; want %s", cfg, got, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	if got, err := TopicTimestampType(ctx, client, "no-such-topic-"+t.Name()); err == nil {
		t.Errorf("a topic that does not exist: %s, want an error", got)
	}
}
