// Package kafkaclient is the prober's one way into Kafka besides its canary
// readers: dialers and clients built from a pipeline's kafka settings (TLS,
// SASL, secrets resolved once and never logged), and the consumer-group lag
// probe the watchers and diagnose share.
package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/retry"
)

// NewClient returns a client for the watchers and diagnose, with the
// pipeline's TLS and SASL settings (secrets resolved once, never logged).
// Every request is bounded by timeout, and its errors are explained
// (Explain). Call the returned close function when done: the transport
// keeps connections and a goroutine per broker.
func NewClient(k config.Kafka, timeout time.Duration) (*kafka.Client, func(), error) {
	d, err := NewDialer(k)
	if err != nil {
		return nil, nil, err
	}
	tr := &kafka.Transport{
		DialTimeout: timeout,
		ClientID:    k.ClientID,
		TLS:         d.TLS,
		SASL:        d.SASLMechanism,
	}
	c := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: explainingTransport{rt: tr, k: k}, Timeout: timeout}
	return c, tr.CloseIdleConnections, nil
}

// NewDialer returns a dialer with the pipeline's TLS and SASL settings.
// Secrets are resolved here, once, and never logged.
func NewDialer(k config.Kafka) (*kafka.Dialer, error) {
	d := &kafka.Dialer{ClientID: k.ClientID, Timeout: 10 * time.Second, DualStack: true}
	if k.TLS.Enabled {
		tc := &tls.Config{ServerName: k.TLS.ServerName, InsecureSkipVerify: k.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12} // #nosec G402 -- opt-in by config
		if k.TLS.CAFile != "" {
			pem, err := os.ReadFile(k.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka.tls.ca_file %s: no PEM certificate found", k.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if k.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(k.TLS.CertFile, k.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.cert_file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		d.TLS = tc
	}
	if k.SASL.Mechanism != "" {
		password, err := k.SASL.Password.Resolve()
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl.password: %w", err)
		}
		var mech sasl.Mechanism
		switch k.SASL.Mechanism {
		case "plain":
			mech = plain.Mechanism{Username: k.SASL.Username, Password: password}
		case "scram-sha-256":
			mech, err = scram.Mechanism(scram.SHA256, k.SASL.Username, password)
		case "scram-sha-512":
			mech, err = scram.Mechanism(scram.SHA512, k.SASL.Username, password)
		default:
			err = fmt.Errorf("unknown mechanism %q", k.SASL.Mechanism)
		}
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl: %w", err)
		}
		d.SASLMechanism = mech
	}
	return d, nil
}

// ConsumerLag is how far a business consumer group trails a topic: segment
// 4 of the lag, which the canaries (read by our own consumer) cannot see.
type ConsumerLag struct {
	Messages int64
	// OldestAge is now minus the record timestamp of the oldest message the
	// group has not consumed: an estimate, on the relay's or the broker's
	// clock, of how late the group is. 0 when it is caught up.
	OldestAge time.Duration
}

// QueryConsumerLag sums, over the topic's partitions, the high watermark
// minus the group's committed offset. A partition the group never committed
// counts from the log start, because that is what a new group would read.
func QueryConsumerLag(ctx context.Context, client *kafka.Client, g config.ConsumerGroup, now func() time.Time) (ConsumerLag, error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{g.Topic}})
	if err != nil {
		return ConsumerLag{}, fmt.Errorf("consumer lag %s/%s: metadata: %w", g.Group, g.Topic, err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		var terr error
		if len(meta.Topics) == 1 {
			terr = meta.Topics[0].Error
		}
		return ConsumerLag{}, fmt.Errorf("consumer lag %s/%s: topic: %w", g.Group, g.Topic, errors.Join(terr, errors.New("not found")))
	}
	var partitions []int
	var offsetReqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		partitions = append(partitions, p.ID)
		offsetReqs = append(offsetReqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	committed, err := fetchCommitted(ctx, client, &kafka.OffsetFetchRequest{GroupID: g.Group, Topics: map[string][]int{g.Topic: partitions}})
	if err != nil {
		return ConsumerLag{}, fmt.Errorf("consumer lag %s/%s: committed offsets: %w", g.Group, g.Topic, err)
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{g.Topic: offsetReqs}})
	if err != nil {
		return ConsumerLag{}, fmt.Errorf("consumer lag %s/%s: log end offsets: %w", g.Group, g.Topic, err)
	}
	bounds := map[int]kafka.PartitionOffsets{}
	for _, po := range ends.Topics[g.Topic] {
		if po.Error != nil {
			return ConsumerLag{}, fmt.Errorf("consumer lag %s/%s partition %d: %w", g.Group, g.Topic, po.Partition, po.Error)
		}
		bounds[po.Partition] = po
	}
	var lag ConsumerLag
	for _, c := range committed.Topics[g.Topic] {
		b := bounds[c.Partition]
		next := c.CommittedOffset
		if next < 0 || next < b.FirstOffset {
			next = b.FirstOffset
		}
		behind := b.LastOffset - next
		if behind <= 0 {
			continue
		}
		lag.Messages += behind
		t, err := recordTime(ctx, client, g.Topic, c.Partition, next)
		if err != nil {
			return ConsumerLag{}, fmt.Errorf("consumer lag %s/%s partition %d: oldest unconsumed message: %w", g.Group, g.Topic, c.Partition, err)
		}
		if age := now().Sub(t); age > lag.OldestAge {
			lag.OldestAge = age
		}
	}
	return lag, nil
}

// recordTime reads the timestamp of the record at offset (the broker's
// append time on a LogAppendTime topic). It fetches
// through the client's transport rather than with kafka.Client.Fetch,
// which cannot read the fetch responses of this package (records.go).
func recordTime(ctx context.Context, client *kafka.Client, topic string, partition int, offset int64) (time.Time, error) {
	rt := client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	const maxBytes = 1 << 20
	m, err := rt.RoundTrip(ctx, client.Addr, &fetch.Request{ReplicaID: -1, MaxWaitTime: 500, MinBytes: 1, MaxBytes: maxBytes,
		SessionID: -1, SessionEpoch: -1, Topics: []fetch.RequestTopic{{Topic: topic, Partitions: []fetch.RequestPartition{{
			Partition: int32(partition), CurrentLeaderEpoch: -1, FetchOffset: offset, LogStartOffset: -1, PartitionMaxBytes: maxBytes}}}}})
	if err != nil {
		return time.Time{}, fmt.Errorf("fetch: %w", err)
	}
	res, ok := m.(*fetchResponse)
	if !ok {
		return time.Time{}, fmt.Errorf("fetch: unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return time.Time{}, fmt.Errorf("fetch: %w", kafka.Error(res.ErrorCode))
	}
	if len(res.Topics) != 1 || len(res.Topics[0].Partitions) != 1 {
		return time.Time{}, errors.New("fetch: the answer holds no partition")
	}
	p := &res.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return time.Time{}, kafka.Error(p.ErrorCode)
	}
	rs, err := scanRecords(p.Records)
	if err != nil {
		return time.Time{}, err
	}
	var at time.Time
	found := false
	err = eachMessage(rs, topic, partition, p.HighWatermark, offset, func(m Message) {
		if !found {
			at, found = m.Time, true
		}
	})
	if err != nil {
		return time.Time{}, err
	}
	if !found {
		return time.Time{}, fmt.Errorf("no record at offset %d", offset)
	}
	return at, nil
}

// HighWatermarks returns, per partition of topic, the offset the next
// message will get: everything acknowledged so far lies below it.
func HighWatermarks(ctx context.Context, client *kafka.Client, topic string) (map[int]int64, error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("topic %s: metadata: %w", topic, err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil || len(meta.Topics[0].Partitions) == 0 {
		var terr error = errors.New("not found")
		if len(meta.Topics) == 1 && meta.Topics[0].Error != nil {
			terr = meta.Topics[0].Error
		}
		return nil, fmt.Errorf("topic %s: %w", topic, terr)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("topic %s: high watermarks: %w", topic, err)
	}
	out := make(map[int]int64, len(reqs))
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("topic %s partition %d: high watermark: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out, nil
}

// committedAttempts bounds fetchCommitted's tries within one sample.
const committedAttempts = 4

// fetchCommitted asks the group's coordinator for its committed offsets,
// trying again on the errors Kafka calls retriable: while a coordinator
// moves (a broker restart) or loads __consumer_offsets (a fresh cluster),
// brokers answer NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a
// moment, and a sample that gave up on the first would withdraw the lag
// series for a whole watch interval.
func fetchCommitted(ctx context.Context, client *kafka.Client, req *kafka.OffsetFetchRequest) (*kafka.OffsetFetchResponse, error) {
	b := retry.Backoff(100*time.Millisecond, time.Second)
	for attempt := 1; ; attempt++ {
		res, err := client.OffsetFetch(ctx, req)
		if err == nil && res.Error != nil {
			err = res.Error
		}
		var kerr kafka.Error
		if err == nil || attempt == committedAttempts || !errors.As(err, &kerr) || !kerr.Temporary() {
			return res, err
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
