package kafkaclient

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	meta "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// ClusterRequests is how many requests, other than the canary readers'
// fetches, one cluster's transport has in flight at a time. kafka-go's
// Transport sends one request at a time on a connection and opens another
// for a concurrent one, so this bounds the connections each broker holds:
// one control connection (metadata, to a bootstrap broker), up to
// ClusterRequests for requests (start offsets, consumer lag), and one for
// the canary fetches (Fetcher sends one fetch per broker at a time). One
// exception: kafka-go splits a ListOffsets request into one request per
// partition, sent at once, so a consumer-lag query of a topic with many
// partitions opens more for a moment (they close after clusterIdleTimeout).
const ClusterRequests = 1

// clusterIdleTimeout closes a connection unused for this long; the
// watermark sampler keeps the request connections busier than that.
const clusterIdleTimeout = 30 * time.Second

// Clusters holds one Cluster per distinct Kafka cluster of the
// configuration. Pipelines share a Cluster when their kafka settings
// (brokers in any order, client id, TLS, SASL user and password) are
// the same, so one transport carries every pipeline's metadata, watermark
// samples, consumer-lag queries and canary fetches.
type Clusters struct {
	byKey map[string]*Cluster
}

// NewClusters builds a Cluster for each distinct kafka section of ks,
// caching the metadata of topics only (every pipeline's canary topic and
// watched consumer-group topics): a production cluster's other thousands
// of topics are never fetched. It connects to nothing yet.
func NewClusters(ks []config.Kafka, topics []string) (*Clusters, error) {
	cs := &Clusters{byKey: map[string]*Cluster{}}
	for _, k := range ks {
		key, err := clusterKey(k)
		if err != nil {
			cs.Close()
			return nil, err
		}
		if _, ok := cs.byKey[key]; ok {
			continue
		}
		c, err := newCluster(k, topics)
		if err != nil {
			cs.Close()
			return nil, err
		}
		cs.byKey[key] = c
	}
	return cs, nil
}

// For returns the Cluster of k, which must be one NewClusters was given.
func (cs *Clusters) For(k config.Kafka) (*Cluster, error) {
	key, err := clusterKey(k)
	if err != nil {
		return nil, err
	}
	c, ok := cs.byKey[key]
	if !ok {
		return nil, fmt.Errorf("kafka clusters: brokers %s were not among those the clusters were built for", strings.Join(k.Brokers, ","))
	}
	return c, nil
}

// Len is the number of distinct clusters.
func (cs *Clusters) Len() int { return len(cs.byKey) }

// Close closes every cluster's connections.
func (cs *Clusters) Close() {
	for _, c := range cs.byKey {
		c.Close()
	}
}

// clusterKey identifies a cluster connection by everything that changes
// it; the password is in it, but the key is never logged.
func clusterKey(k config.Kafka) (string, error) {
	brokers := slices.Clone(k.Brokers)
	slices.Sort(brokers)
	password := ""
	if k.SASL.Mechanism != "" {
		p, err := k.SASL.Password.Resolve()
		if err != nil {
			return "", fmt.Errorf("kafka.sasl.password: %w", err)
		}
		password = p
	}
	return fmt.Sprintf("%q %q %+v %q %q %q", brokers, k.ClientID, k.TLS, k.SASL.Mechanism, k.SASL.Username, password), nil
}

// Cluster is one Kafka cluster's shared connections: a kafka-go Transport
// (which pools connections per broker and answers metadata requests from
// a cache it refreshes on one connection, so no request dials anew) and
// the canary Fetcher on it.
type Cluster struct {
	k       config.Kafka // the first pipeline's settings, for Explain
	tr      *kafka.Transport
	addr    net.Addr
	limited kafka.RoundTripper
	fetcher *Fetcher
	cancel  context.CancelFunc
}

func newCluster(k config.Kafka, topics []string) (*Cluster, error) {
	d, err := NewDialer(k)
	if err != nil {
		return nil, err
	}
	topics = slices.Compact(slices.Sorted(slices.Values(topics)))
	tr := &kafka.Transport{
		DialTimeout:    10 * time.Second,
		IdleTimeout:    clusterIdleTimeout,
		ClientID:       k.ClientID,
		TLS:            d.TLS,
		SASL:           d.SASLMechanism,
		MetadataTopics: topics,
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{k: k, tr: tr, addr: kafka.TCP(k.Brokers...), cancel: cancel,
		limited: &limitedTransport{rt: tr, slots: make(chan struct{}, ClusterRequests)}}
	c.fetcher = newFetcher(ctx, explainingTransport{rt: tr, k: k}, c.addr, c.Client(k, 10*time.Second))
	return c, nil
}

// Client returns a client on the cluster's transport whose errors are
// explained with k (a pipeline's settings) and whose requests are bounded
// by timeout. Clients share the cluster's connections: closing one is not
// needed, Close closes them all.
func (c *Cluster) Client(k config.Kafka, timeout time.Duration) *kafka.Client {
	return &kafka.Client{Addr: c.addr, Transport: explainingTransport{rt: c.limited, k: k}, Timeout: timeout}
}

// Fetcher reads canary partitions on the cluster's connections.
func (c *Cluster) Fetcher() *Fetcher { return c.fetcher }

// Close stops the fetcher and the sampler and closes the connections.
func (c *Cluster) Close() {
	c.cancel()
	c.fetcher.wait()
	c.tr.CloseIdleConnections()
}

// limitedTransport keeps at most cap(slots) requests in flight, apart from
// metadata requests (answered from the transport's cache, on no
// connection). The Fetcher does not go through it.
type limitedTransport struct {
	rt    kafka.RoundTripper
	slots chan struct{}
}

func (t *limitedTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if _, ok := req.(*meta.Request); ok {
		return t.rt.RoundTrip(ctx, addr, req)
	}
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-t.slots }()
	return t.rt.RoundTrip(ctx, addr, req)
}

var _ kafka.RoundTripper = (*limitedTransport)(nil)
