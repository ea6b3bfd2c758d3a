package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// Fetcher reads partitions, of any number of topics, of one cluster with
// one fetch request per broker at a time on the cluster's shared
// transport: every partition led by a broker is in the same request, so
// the canary readers of hundreds of pipelines hold one connection per
// broker, where a kafka-go Reader per partition holds one each (and
// buffers of its own).
//
// Like a partition Reader without a group, a Fetcher only reads: where a
// partition starts, and what was read, is its caller's (the tracker
// stores the offsets).
type Fetcher struct {
	ctx    context.Context
	rt     kafka.RoundTripper
	addr   net.Addr
	client *kafka.Client // leaders, from the transport's metadata cache
	wg     sync.WaitGroup

	mu      sync.Mutex
	subs    map[*subscription]struct{}
	leaders map[topicPartition]int
	loops   map[int]chan struct{} // broker id -> wakes its loop
	wakeSup chan struct{}
	started bool
}

// Fetch sizes. A fetch returns as soon as one partition has a record;
// FetchMaxWait only bounds how long an idle one is held open, and so how
// long a partition added meanwhile waits for its first fetch.
const (
	FetchMaxWait           = 500 * time.Millisecond
	fetchMaxBytes          = 4 << 20
	fetchPartitionMaxBytes = 1 << 20
	// subscriptionQueue batches of a partition may wait for its handler
	// while the next is fetched; a partition with a full queue is left
	// out of fetches until its handler catches up.
	subscriptionQueue = 2
	fetchBackoffMin   = 100 * time.Millisecond
	fetchBackoffMax   = 2 * time.Second
	leaderRecheck     = time.Second
)

type topicPartition struct {
	topic     string
	partition int
}

type subscription struct {
	tp      topicPartition
	now     func() time.Time
	onMark  func(Mark)
	sentAt  time.Time // when the fetch in flight for it was sent; guarded by Fetcher.mu
	next    int64     // the offset of the next fetch; guarded by Fetcher.mu
	queued  int       // batches sent to batches, not yet handled
	retryAt time.Time
	removed bool
	batches chan batch
	onRetry func(error)
}

// batch is what one fetch returned for a subscription's partition: its
// records are read on the subscription's goroutine, not the broker's.
type batch struct {
	records recordSet
	topic   string
	hwm     int64
	from    int64 // the first offset wanted: the fetch's offset
	err     error
}

func newFetcher(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, client *kafka.Client) *Fetcher {
	return &Fetcher{ctx: ctx, rt: rt, addr: addr, client: client,
		subs: map[*subscription]struct{}{}, leaders: map[topicPartition]int{}, loops: map[int]chan struct{}{},
		wakeSup: make(chan struct{}, 1)}
}

// ReadOptions says what Read reads and where its messages go.
type ReadOptions struct {
	Topic     string
	Partition int
	// Offset is the first offset read.
	Offset int64
	// Handle is called with every message of the partition from Offset
	// on, in order, one at a time.
	Handle func(kafka.Message)
	// Handled, optional, is called after the messages of each fetch were
	// handed to Handle, with the offset the next fetch starts at: past the
	// last message, and past the records that are no messages
	// (transaction markers), which Handle never sees.
	Handled func(next int64)
	// OnRetry, optional, hears of the errors after which the partition is
	// fetched again (a broker down, a leader moving).
	OnRetry func(error)
	// OnMark, optional, is called after every fetch of the partition with
	// its high watermark, or with why the fetch failed. It must not block.
	OnMark func(Mark)
	// Now is the clock of Mark.At (default time.Now).
	Now func() time.Time
}

// Mark is what one fetch says of a partition's end: every message the
// broker acknowledged before At lies below HighWatermark (At is when the
// fetch was sent; the broker answers with the high watermark of its
// answer's time, which is no lower). Err is set, and HighWatermark not,
// when the fetch failed. Every fetch carries it, so the readers' position
// costs no request of its own.
type Mark struct {
	At            time.Time
	HighWatermark int64
	Err           error
}

// Read reads one partition until ctx is done (it then returns nil) or the
// partition cannot be read on from where it is: an offset beyond the
// partition's end (kafka.OffsetOutOfRange: the topic was recreated), which
// the caller resolves by reading again from an offset it chooses, or
// records that cannot be read although their checksum holds (a producer's
// bug). Other failures (a broker down, a leader moving) are retried with
// backoff.
func (f *Fetcher) Read(ctx context.Context, o ReadOptions) error {
	if o.Handle == nil {
		return errors.New("fetcher: Handle is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &subscription{tp: topicPartition{o.Topic, o.Partition}, next: o.Offset, now: o.Now, onMark: o.OnMark,
		batches: make(chan batch, subscriptionQueue), onRetry: o.OnRetry}
	f.add(s)
	defer f.remove(s)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.ctx.Done():
			return errors.New("kafka fetcher closed")
		case b := <-s.batches:
			if b.err != nil {
				return b.err
			}
			if ctx.Err() != nil {
				return nil
			}
			if err := eachMessage(b.records, b.topic, o.Partition, b.hwm, b.from, o.Handle); err != nil {
				return fmt.Errorf("topic %s partition %d: %w", b.topic, o.Partition, err)
			}
			if o.Handled != nil {
				o.Handled(b.records.next)
			}
			f.mu.Lock()
			s.queued--
			f.mu.Unlock()
			f.wakeLoops()
		}
	}
}

func (f *Fetcher) add(s *subscription) {
	f.mu.Lock()
	f.subs[s] = struct{}{}
	if !f.started {
		f.started = true
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.supervise() }()
	}
	f.mu.Unlock()
	f.wake(f.wakeSup)
}

func (f *Fetcher) remove(s *subscription) {
	f.mu.Lock()
	s.removed = true
	delete(f.subs, s)
	f.mu.Unlock()
}

func (f *Fetcher) wait() { f.wg.Wait() }

func (f *Fetcher) wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (f *Fetcher) wakeLoops() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.loops {
		f.wake(w)
	}
}

// supervise finds each partition's leader in the transport's metadata
// cache (no request to a broker) and starts a loop for every broker that
// leads one, when a partition is added and every leaderRecheck.
func (f *Fetcher) supervise() {
	t := time.NewTicker(leaderRecheck)
	defer t.Stop()
	for {
		f.resolveLeaders()
		select {
		case <-f.ctx.Done():
			return
		case <-f.wakeSup:
		case <-t.C:
		}
	}
}

func (f *Fetcher) resolveLeaders() {
	f.mu.Lock()
	topicSet := map[string]bool{}
	for s := range f.subs {
		topicSet[s.tp.topic] = true
	}
	f.mu.Unlock()
	if len(topicSet) == 0 {
		return
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	meta, err := f.client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	cancel()
	if err != nil {
		return // the consumers' own checks say why
	}
	leaders := map[topicPartition]int{}
	for _, t := range meta.Topics {
		if t.Error != nil {
			continue
		}
		for _, p := range t.Partitions {
			if p.Error == nil && p.Leader.ID >= 0 {
				leaders[topicPartition{t.Name, p.ID}] = p.Leader.ID
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaders = leaders
	for _, id := range leaders {
		if _, ok := f.loops[id]; !ok {
			w := make(chan struct{}, 1)
			f.loops[id] = w
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.brokerLoop(id, w) }()
		}
	}
	for _, w := range f.loops {
		f.wake(w)
	}
}

// brokerLoop fetches, one request at a time, every partition the broker
// leads whose handler has room, until the Fetcher closes.
func (f *Fetcher) brokerLoop(id int, wake chan struct{}) {
	backoff := fetchBackoffMin
	for {
		parts, retryAt := f.pending(id)
		if len(parts) == 0 {
			var timer <-chan time.Time
			if !retryAt.IsZero() {
				t := time.NewTimer(time.Until(retryAt))
				defer t.Stop()
				timer = t.C
			}
			select {
			case <-f.ctx.Done():
				return
			case <-wake:
			case <-timer:
			}
			continue
		}
		if err := f.fetch(parts); err != nil {
			if f.ctx.Err() != nil {
				return
			}
			f.retryLater(parts, err, backoff)
			backoff = min(2*backoff, fetchBackoffMax)
			continue
		}
		backoff = fetchBackoffMin
	}
}

// pending lists the partitions led by broker id that are due for a fetch:
// one subscription per partition (the one furthest behind, when two
// readers read the same partition), none whose handler is full or whose
// retry is not due. Otherwise it returns when the next retry is due.
func (f *Fetcher) pending(id int) (map[topicPartition]*subscription, time.Time) {
	now := time.Now()
	var retryAt time.Time
	parts := map[topicPartition]*subscription{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if leader, ok := f.leaders[s.tp]; !ok || leader != id || s.queued >= subscriptionQueue {
			continue
		}
		if s.retryAt.After(now) {
			if retryAt.IsZero() || s.retryAt.Before(retryAt) {
				retryAt = s.retryAt
			}
			continue
		}
		if other, ok := parts[s.tp]; !ok || s.next < other.next {
			parts[s.tp] = s
		}
	}
	return parts, retryAt
}

func (f *Fetcher) retryLater(parts map[topicPartition]*subscription, err error, after time.Duration) {
	at := time.Now().Add(after)
	type heard struct {
		s      *subscription
		sentAt time.Time
	}
	f.mu.Lock()
	var hear []heard
	for _, s := range parts {
		s.retryAt = at
		hear = append(hear, heard{s, s.sentAt})
	}
	f.mu.Unlock()
	for _, h := range hear {
		if h.s.onRetry != nil {
			h.s.onRetry(err)
		}
		if h.s.onMark != nil {
			h.s.onMark(Mark{At: h.sentAt, Err: err})
		}
	}
}

// fetch sends one fetch request for parts and hands each partition's
// records to its subscription. An error of the whole request is returned;
// a partition's own error is its subscription's.
func (f *Fetcher) fetch(parts map[topicPartition]*subscription) error {
	byTopic := map[string][]fetch.RequestPartition{}
	f.mu.Lock()
	for tp, s := range parts {
		s.sentAt = s.now()
		byTopic[tp.topic] = append(byTopic[tp.topic], fetch.RequestPartition{
			Partition: int32(tp.partition), CurrentLeaderEpoch: -1, FetchOffset: s.next,
			LogStartOffset: -1, PartitionMaxBytes: fetchPartitionMaxBytes})
	}
	f.mu.Unlock()
	req := &fetch.Request{ReplicaID: -1, MaxWaitTime: int32(FetchMaxWait / time.Millisecond), MinBytes: 1,
		MaxBytes: fetchMaxBytes, SessionID: -1, SessionEpoch: -1}
	for topic, ps := range byTopic {
		req.Topics = append(req.Topics, fetch.RequestTopic{Topic: topic, Partitions: ps})
	}
	ctx, cancel := context.WithTimeout(f.ctx, FetchMaxWait+10*time.Second)
	defer cancel()
	m, err := f.rt.RoundTrip(ctx, f.addr, req)
	if err != nil {
		f.wake(f.wakeSup) // a leader may have moved
		return fmt.Errorf("fetch: %w", err)
	}
	res, ok := m.(*fetchResponse)
	if !ok {
		return fmt.Errorf("fetch: unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return fmt.Errorf("fetch: %w", kafka.Error(res.ErrorCode))
	}
	for i := range res.Topics {
		t := &res.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			s, ok := parts[topicPartition{t.Topic, int(p.Partition)}]
			if !ok {
				continue
			}
			f.deliver(s, t.Topic, p)
		}
	}
	return nil
}

func (f *Fetcher) deliver(s *subscription, topic string, p *fetchResponsePartition) {
	if p.ErrorCode == 0 && s.onMark != nil {
		f.mu.Lock()
		at := s.sentAt
		f.mu.Unlock()
		s.onMark(Mark{At: at, HighWatermark: p.HighWatermark})
	}
	if p.ErrorCode != 0 {
		err := kafka.Error(p.ErrorCode)
		if errors.Is(err, kafka.OffsetOutOfRange) {
			f.mu.Lock()
			if !s.removed {
				s.queued++
				s.batches <- batch{err: fmt.Errorf("topic %s partition %d offset %d: %w", topic, p.Partition, s.next, err)}
			}
			f.mu.Unlock()
			return
		}
		f.retryLater(map[topicPartition]*subscription{s.tp: s}, fmt.Errorf("topic %s partition %d: %w", topic, p.Partition, err), fetchBackoffMin)
		f.wake(f.wakeSup)
		return
	}
	if len(p.Records) == 0 {
		return
	}
	rs, err := scanRecords(p.Records)
	if err != nil {
		f.retryLater(map[topicPartition]*subscription{s.tp: s}, fmt.Errorf("topic %s partition %d: %w", topic, p.Partition, err), fetchBackoffMin)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.removed || rs.next <= s.next {
		return
	}
	s.queued++
	s.batches <- batch{records: rs, topic: topic, hwm: p.HighWatermark, from: s.next}
	s.next = rs.next
}
