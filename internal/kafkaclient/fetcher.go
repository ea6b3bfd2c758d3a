package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/fetch"
	metadataapi "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/outbox-canary/outbox-canary/internal/tick"
)

// Fetcher reads partitions, of any number of topics, of one cluster with
// one fetch request per fetch session at a time on the cluster's shared
// transport: the partitions led by a broker are in its fetch sessions of
// up to sessionPartitions each, so the canary readers of hundreds of
// pipelines hold a connection per session (36 at 300 pipelines of 3
// partitions), where a kafka-go Reader per partition holds one each (and
// buffers of its own).
//
// A fetch session (KIP-227) keeps the partitions and their offsets on the
// broker: after the first fetch, a request names only the partitions
// whose offset moved, and the answer only those with records or a new
// high watermark. A canary's arrival then costs a request and an answer
// of one partition, not of every partition of the session.
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

	mu sync.Mutex
	// parts holds every partition ever read, never removed (at most the
	// configuration's): a fetch session knows a partition by its
	// *partition. list holds them too, for the fetches to go through
	// without hashing a topic name per partition.
	parts   map[topicPartition]*partition
	list    []*partition
	byTopic map[string][]*partition // for Marks
	leaders map[topicPartition]int
	loops   map[loopKey]chan struct{} // wakes the loop of a broker's session
	// sessionPartitions: the partitions of one fetch session at most
	// (partition.session).
	sessionPartitions int
	wakeSup           chan struct{}
	started           bool
	// changes counts the events that may change which partitions a
	// broker loop fetches (a reader added or removed, a leader moved, a
	// handler full or no longer full, a retry set): a loop looks over
	// every partition again only after one. Bumped under mu.
	changes atomic.Uint64
	// onAnswer, when set, hears of every answer with records (TraceAnswers).
	onAnswer atomic.Pointer[func(FetchAnswer)]
}

// FetchAnswer is what one fetch's answer with records went through, for
// a trace of where a consume stamp's time went: a record the broker
// appended after Sent waited in the broker until it answered; one
// appended before Sent waited for this fetch to be sent.
type FetchAnswer struct {
	Broker, Session int
	Fetch           uint64 // counts the broker loop's fetches
	// Began: the fetch was begun (before the lock its request is built
	// under); Sent: the request was built; Returned: the transport
	// handed its decoded answer back; Received: the consume stamp of its
	// records (Message.Received); Delivered: every partition of it was
	// queued to its reader, and the next fetch may be sent.
	Began, Sent, Returned, Received, Delivered time.Time
	// Partitions in the answer, and how many of them had records.
	Partitions, WithRecords int
}

// TraceAnswers has f call trace, on its broker loops' goroutines, with
// every answer that carried records. The first call sets it; later ones
// are ignored (the pipelines of a cluster share its Fetcher).
func (f *Fetcher) TraceAnswers(trace func(FetchAnswer)) {
	f.onAnswer.CompareAndSwap(nil, &trace)
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
	// leaderRecheck is the supervisor's safety net: a failed fetch wakes
	// it at once (a leader may have moved), so the periodic look over
	// every topic's leaders can be slow; at 300 topics once a second it
	// was 4.6% of the prober's CPU.
	leaderRecheck = 5 * time.Second
)

// errNoLeader is a partition's mark while the cluster names no leader for
// it.
var errNoLeader = fmt.Errorf("metadata: no leader: %w", kafka.LeaderNotAvailable)

// loopKey names a broker loop: a broker, and which of its fetch sessions.
type loopKey struct{ broker, session int }

// sessionPartitions is how many partitions one fetch session holds at
// most; a broker's partitions beyond are fetched in more sessions, each
// with a request of its own in flight. A session's fetch is answered as
// soon as one of its partitions has a record, and the broker reads every
// partition of the session for each of its fetches: with 900 partitions
// (300 pipelines) in one session it was answered so often that a record
// rarely found it waiting at the broker and waited for the answer's way
// back and the next request's, round trips of up to a second on the
// loaded benchmark machine. In sessions of 100 the broker still answered
// a few canaries 7-30 ms after their append where kcat had them in 2-4
// ms, three of them to a fetch sent after the record was there. A session
// of 25 costs the broker a quarter of the reads per fetch and is answered
// a quarter as often (docs/benchmarks.md, the consume scenario); the price
// is a connection per session, and an idle session's fetch coming back
// every FetchMaxWait (72 empty answers a second at 300 pipelines, not 18).
const sessionPartitions = 25

type topicPartition struct {
	topic     string
	partition int
}

// partition is one partition read, by one or more subscriptions (two
// while a reader is replaced); guarded by Fetcher.mu.
type partition struct {
	tp     topicPartition
	leader int // the broker that leads it, -1 when unknown
	// session: which of its broker's fetch sessions fetches it, by the
	// order partitions were first read (sessionPartitions in each).
	session int
	subs    []*subscription
}

// subscription is one partition read by a Reader. The fields below
// reader are guarded by Fetcher.mu.
type subscription struct {
	part    *partition
	now     func() time.Time
	opts    ReadOptions
	onRetry func(error)
	reader  *Reader

	// pending holds the fetched batches its Reader has not taken yet.
	pending []batch
	// receiving counts the answers with records for it that were stamped
	// and not yet queued (two only while two broker loops fetch it);
	// receivedAt is the earliest of their stamps.
	receiving  int
	receivedAt time.Time

	next    int64     // the offset of the next fetch
	queued  int       // batches fetched for it and not yet handled
	retryAt time.Time // no fetch before
	removed bool
	// live is the partition's place in a broker loop's fetch session while
	// it is fetched for this subscription and its high watermark is known:
	// its Mark is then the session's latest answer. Otherwise the Mark is
	// markAt, hwm and markErr (markAt zero before the first fetch).
	live    *sessionPart
	markAt  time.Time
	hwm     int64
	markErr error
}

// mark is the subscription's Mark, if a fetch said anything yet.
func (s *subscription) mark() (Mark, bool) {
	if sp := s.live; sp != nil {
		return Mark{At: sp.sess.answeredAt, HighWatermark: sp.hwm}, true
	}
	if s.markAt.IsZero() {
		return Mark{}, false
	}
	m := Mark{At: s.markAt, Err: s.markErr}
	if m.Err == nil {
		m.HighWatermark = s.hwm
	}
	return m, true
}

// freeze keeps the subscription's Mark as the session last said it, as
// the partition leaves the session.
func (s *subscription) freeze() {
	if sp := s.live; sp != nil {
		s.markAt, s.hwm, s.markErr = sp.sess.answeredAt, sp.hwm, nil
		s.live = nil
	}
}

// batch is what one fetch returned for a subscription's partition: its
// records are read on the Reader's goroutine, not the broker's.
type batch struct {
	records  recordSet
	topic    string
	hwm      int64
	from     int64     // the first offset wanted: the fetch's offset
	received time.Time // when the fetch's answer was read: Message.Received
	err      error
}

func newFetcher(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, client *kafka.Client) *Fetcher {
	return &Fetcher{ctx: ctx, rt: rt, addr: addr, client: client,
		parts: map[topicPartition]*partition{}, byTopic: map[string][]*partition{}, leaders: map[topicPartition]int{},
		loops: map[loopKey]chan struct{}{}, wakeSup: make(chan struct{}, 1), sessionPartitions: sessionPartitions}
}

// ReadOptions says what Read reads and where its messages go.
type ReadOptions struct {
	Topic     string
	Partition int
	// Offset is the first offset read.
	Offset int64
	// Handle is called with every message of the partition from Offset
	// on, in order, one at a time.
	Handle func(Message)
	// Handled, optional, is called after the messages of each fetch were
	// handed to Handle, with the offset the next fetch starts at: past the
	// last message, and past the records that are no messages
	// (transaction markers), which Handle never sees.
	Handled func(next int64)
	// OnRetry, optional, hears of the errors after which the partition is
	// fetched again (a broker down, a leader moving).
	OnRetry func(error)
	// OnStop, for Reader.Add, hears why the partition is no longer read
	// (what Read returns). It is called on the Reader's goroutine.
	OnStop func(error)
	// Now is the clock of Mark.At (default time.Now). Every Read of one
	// Fetcher must use the same clock (the service's): a fetch reads it
	// once for all its partitions.
	Now func() time.Time
}

// Mark is what the fetches say of a partition's end: every message the
// broker acknowledged before At lies below HighWatermark (At is when the
// latest fetch was sent; the broker answers with the high watermark of
// its answer's time, which is no lower, and leaves a partition out of its
// answer only while its high watermark stays as it last said). Err is
// set, and HighWatermark not, when that fetch failed. The fetches carry
// it, so the readers' position costs no request of its own.
type Mark struct {
	At            time.Time
	HighWatermark int64
	Err           error
}

// Marks returns the Mark of each partition of topic being read; a
// partition not fetched yet is absent. It reads what the fetches left, so
// it costs no request.
func (f *Fetcher) Marks(topic string) map[int]Mark {
	out := map[int]Mark{}
	f.MarksInto(topic, out)
	return out
}

// MarksInto is Marks into out, emptied first: the service asks for every
// pipeline's twice a second, and at 300 pipelines a new map each time was
// garbage the collector then had to chase.
func (f *Fetcher) MarksInto(topic string, out map[int]Mark) {
	clear(out)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.byTopic[topic] {
		for _, s := range p.subs {
			m, ok := s.mark()
			if !ok {
				continue
			}
			// Two readers of one partition: the older word.
			if prev, ok := out[p.tp.partition]; ok && !m.At.Before(prev.At) {
				continue
			}
			out[p.tp.partition] = m
		}
	}
}

// Read reads one partition until ctx is done (it then returns nil) or the
// partition cannot be read on from where it is: an offset beyond the
// partition's end (kafka.OffsetOutOfRange: the topic was recreated), which
// the caller resolves by reading again from an offset it chooses, or
// records that cannot be read although their checksum holds (a producer's
// bug). Other failures (a broker down, a leader moving) are retried with
// backoff. It is a Reader of one partition, on the caller's goroutine.
func (f *Fetcher) Read(ctx context.Context, o ReadOptions) error {
	if o.Handle == nil {
		return errors.New("fetcher: Handle is required")
	}
	r := f.NewReader()
	defer r.Close()
	var stopped error
	onStop := o.OnStop
	o.OnStop = func(err error) {
		stopped = err
		if onStop != nil {
			onStop(err)
		}
	}
	r.Add(o)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.ctx.Done():
			return errors.New("kafka fetcher closed")
		case <-r.Ready():
			r.HandleReady(ctx)
			if stopped != nil {
				return stopped
			}
		}
	}
}

// Reader reads any number of partitions on one goroutine, its caller's:
// it waits on Ready and calls HandleReady. The prober reads all of a
// pipeline's partitions with one, where a goroutine per partition cost
// 900 stacks at 300 pipelines.
type Reader struct {
	f     *Fetcher
	ready chan struct{} // a batch waits; buffered, a send never blocks
	subs  []*subscription
	// taken is HandleReady's round of batches, reused; handing the
	// earliest Received of its messages until the round is handed over
	// (zero between rounds). Guarded by Fetcher.mu.
	taken   []takenBatch
	handing time.Time
}

type takenBatch struct {
	s *subscription
	b batch
}

// NewReader returns a Reader reading nothing yet.
func (f *Fetcher) NewReader() *Reader {
	return &Reader{f: f, ready: make(chan struct{}, 1)}
}

// Add starts reading a partition from o.Offset. Its messages go to
// o.Handle when the Reader's goroutine calls HandleReady; when it cannot
// be read on (as Read returns), it is no longer read and o.OnStop hears
// why.
func (r *Reader) Add(o ReadOptions) {
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &subscription{next: o.Offset, now: o.Now, opts: o, onRetry: o.OnRetry, reader: r}
	r.f.mu.Lock()
	r.subs = append(r.subs, s)
	r.f.mu.Unlock()
	r.f.add(s, topicPartition{o.Topic, o.Partition})
}

// Ready receives when batches wait for HandleReady.
func (r *Reader) Ready() <-chan struct{} { return r.ready }

// HandleReady hands every waiting batch's messages to its partition's
// Handle, a batch of each partition in turn, until none waits or ctx is
// done.
func (r *Reader) HandleReady(ctx context.Context) {
	f := r.f
	for {
		f.mu.Lock()
		r.taken, r.handing = r.taken[:0], time.Time{}
		for _, s := range r.subs {
			if len(s.pending) > 0 && ctx.Err() == nil {
				b := s.pending[0]
				r.taken = append(r.taken, takenBatch{s, b})
				s.pending = slices.Delete(s.pending, 0, 1)
				r.handing = earliest(r.handing, b.received)
			}
		}
		f.mu.Unlock()
		if len(r.taken) == 0 {
			return
		}
		for _, t := range r.taken {
			if ctx.Err() == nil {
				r.handle(t.s, t.b)
			}
		}
		// A batch holds its fetch's bytes (up to a megabyte in a flood
		// of foreign messages): not kept past its handling.
		clear(r.taken)
	}
}

// Unhandled returns the earliest Received of the messages fetched for the
// Reader and not yet handed to their Handle (whose batch is not handled
// yet), from the instant the stamp is taken. A clock read before calling
// it and not after the earliest is one a message stamped later cannot
// precede: the prober's judge holds its clock there, so that no deadline
// passes a canary already received.
func (r *Reader) Unhandled() (time.Time, bool) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	at := r.handing
	for _, s := range r.subs {
		at = earliest(at, s.receivedAt)
		for _, b := range s.pending {
			at = earliest(at, b.received)
		}
	}
	return at, !at.IsZero()
}

// earliest is the earlier of a and b, ignoring a zero one.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (r *Reader) handle(s *subscription, b batch) {
	f, o := r.f, &s.opts
	err := b.err
	if err == nil {
		received := b.received
		err = eachMessage(b.records, b.topic, o.Partition, b.hwm, b.from, func(m Message) {
			m.Received = received
			o.Handle(m)
		})
		if err != nil {
			err = fmt.Errorf("topic %s partition %d: %w", b.topic, o.Partition, err)
		}
	}
	if err != nil {
		r.stop(s, err)
		return
	}
	if o.Handled != nil {
		o.Handled(b.records.next)
	}
	f.mu.Lock()
	if s.queued == subscriptionQueue {
		f.changes.Add(1) // fetched again
	}
	s.queued--
	f.mu.Unlock()
	f.wakeLoops()
}

// stop ends the reading of one partition, and says why to its OnStop.
func (r *Reader) stop(s *subscription, err error) {
	r.f.remove(s)
	r.f.mu.Lock()
	r.subs = slices.DeleteFunc(r.subs, func(o *subscription) bool { return o == s })
	r.f.mu.Unlock()
	if s.opts.OnStop != nil {
		s.opts.OnStop(err)
	}
}

// Close stops reading every partition.
func (r *Reader) Close() {
	r.f.mu.Lock()
	subs := r.subs
	r.subs = nil
	r.f.mu.Unlock()
	for _, s := range subs {
		r.f.remove(s)
	}
}

func (f *Fetcher) add(s *subscription, tp topicPartition) {
	f.mu.Lock()
	p, ok := f.parts[tp]
	if !ok {
		p = &partition{tp: tp, leader: -1, session: len(f.list) / f.sessionPartitions}
		if leader, ok := f.leaders[tp]; ok {
			p.leader = leader
		}
		f.parts[tp] = p
		f.list = append(f.list, p)
		f.byTopic[tp.topic] = append(f.byTopic[tp.topic], p)
	}
	s.part = p
	p.subs = append(p.subs, s)
	f.changes.Add(1)
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
	s.pending = nil
	s.part.subs = slices.DeleteFunc(s.part.subs, func(o *subscription) bool { return o == s })
	f.changes.Add(1)
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
	for {
		f.resolveLeaders()
		// The recheck on the wake grid (internal/tick), in an instant the
		// prober wakes in anyway.
		t := tick.NewTimer(leaderRecheck)
		select {
		case <-f.ctx.Done():
			t.Stop()
			return
		case <-f.wakeSup:
		case <-t.C:
		}
		t.Stop()
	}
}

func (f *Fetcher) resolveLeaders() {
	f.mu.Lock()
	topics := make([]string, 0, len(f.byTopic))
	for t, ps := range f.byTopic {
		if slices.ContainsFunc(ps, func(p *partition) bool { return len(p.subs) > 0 }) {
			topics = append(topics, t)
		}
	}
	f.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	// The transport's own metadata response, read as it is: kafka-go's
	// Client.Metadata rebuilds it into brokers, replicas and ISRs for
	// every partition, which at 300 topics every leaderRecheck was a
	// third of all the prober allocated.
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	asked := time.Now()
	addr := f.client.Addr
	if addr == nil {
		cancel()
		return
	}
	rt := f.client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	msg, err := rt.RoundTrip(ctx, addr, &metadataapi.Request{TopicNames: topics})
	cancel()
	if err != nil {
		return // the consumers' own checks say why
	}
	meta, ok := msg.(*metadataapi.Response)
	if !ok {
		return
	}
	leaders := make(map[topicPartition]int, len(f.list))
	for _, t := range meta.Topics {
		if t.ErrorCode != 0 {
			continue
		}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.LeaderID >= 0 {
				leaders[topicPartition{t.Name, int(p.PartitionIndex)}] = int(p.LeaderID)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaders = leaders
	for _, p := range f.list {
		leader, ok := leaders[p.tp]
		if !ok {
			leader = -1
			// The cluster answered and names no leader: the partition can
			// be neither fetched nor produced to (the last broker of a
			// cluster, shutting down, hands its leadership to no one), so
			// its readers' position is unknown for a failure, as after a
			// failed fetch, and stays so at every recheck until a leader
			// is back: the judge reads that as the brokers out of reach.
			for _, s := range p.subs {
				s.live = nil
				s.markAt, s.markErr = asked, errNoLeader
			}
		}
		if p.leader != leader {
			p.leader = leader
			f.changes.Add(1)
		}
	}
	for _, p := range f.list {
		if p.leader < 0 {
			continue
		}
		if key := (loopKey{p.leader, p.session}); f.loops[key] == nil {
			w := make(chan struct{}, 1)
			f.loops[key] = w
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.brokerLoop(key, w) }()
		}
	}
	for _, w := range f.loops {
		f.wake(w)
	}
}

// brokerLoop fetches, one request at a time, every partition of one of a
// broker's sessions whose handler has room, until the Fetcher closes. It
// looks over every partition (pending) only after a change that may alter
// which (Fetcher.changes) or once a retry is due; otherwise each fetch is
// the last one's, with the offsets that moved.
func (f *Fetcher) brokerLoop(key loopKey, wake chan struct{}) {
	backoff := fetchBackoffMin
	sess := newFetchSession()
	sess.loop = key
	var want []wanted
	var retryAt time.Time
	scanned := uint64(math.MaxUint64)
	for {
		if c := f.changes.Load(); c != scanned || (!retryAt.IsZero() && !time.Now().Before(retryAt)) {
			scanned = c // before the scan: a change during it is seen next time
			want, retryAt = f.pending(key, want[:0])
			sess.rescanned = true
		}
		if len(want) == 0 {
			if !f.idle(wake, retryAt) {
				return
			}
			continue
		}
		err := f.fetch(sess, want)
		switch {
		case err == nil:
			backoff = fetchBackoffMin
		case f.ctx.Err() != nil:
			return
		case errors.Is(err, errSessionLost):
			// Answered: the next fetch, a full one, opens a new session.
		default:
			subs := make([]*subscription, len(want))
			for i, w := range want {
				subs[i] = w.s
			}
			f.retryLater(subs, err, sess.sentAt, backoff)
			backoff = min(2*backoff, fetchBackoffMax)
		}
	}
}

// idle waits for a wake-up or until retryAt (unless zero); false when the
// Fetcher closed.
func (f *Fetcher) idle(wake chan struct{}, retryAt time.Time) bool {
	var timer <-chan time.Time
	if !retryAt.IsZero() {
		t := time.NewTimer(time.Until(retryAt))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-f.ctx.Done():
		return false
	case <-wake:
	case <-timer:
	}
	return true
}

// wanted is a partition due for a fetch, and the subscription it is
// fetched for.
type wanted struct {
	p  *partition
	s  *subscription
	sp *sessionPart // set by fetch
}

// pending appends to want the partitions of loop key's session that are due
// for a fetch: one subscription per partition (the one furthest behind,
// when two readers read the same partition), none whose handler is full
// or whose retry is not due. Otherwise it returns when the next retry is
// due.
func (f *Fetcher) pending(key loopKey, want []wanted) ([]wanted, time.Time) {
	now := time.Now()
	var retryAt time.Time
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.list {
		if p.leader != key.broker || p.session != key.session {
			continue
		}
		var pick *subscription
		for _, s := range p.subs {
			if s.queued >= subscriptionQueue {
				continue
			}
			if s.retryAt.After(now) {
				if retryAt.IsZero() || s.retryAt.Before(retryAt) {
					retryAt = s.retryAt
				}
				continue
			}
			if pick == nil || s.next < pick.next {
				pick = s
			}
		}
		if pick != nil {
			want = append(want, wanted{p: p, s: pick})
		}
	}
	return want, retryAt
}

// retryLater keeps the subscriptions' partitions out of fetches for a
// while, after err, which the fetch sent at sentAt met.
func (f *Fetcher) retryLater(subs []*subscription, err error, sentAt time.Time, after time.Duration) {
	at := time.Now().Add(after)
	var hear []func(error)
	f.mu.Lock()
	for _, s := range subs {
		s.retryAt = at
		s.live = nil
		s.markAt, s.markErr = sentAt, err
		if s.onRetry != nil {
			hear = append(hear, s.onRetry)
		}
	}
	f.changes.Add(1)
	f.mu.Unlock()
	for _, h := range hear {
		h(err)
	}
}

// fetchSession is a broker loop's fetch session: what the broker holds of
// it, as of the last answer.
type fetchSession struct {
	loop loopKey
	id   int32
	// epoch of the next request; 0: a full fetch, which opens a new
	// session (and closes id's, if any).
	epoch int32
	parts map[*partition]*sessionPart
	fetch uint64 // counts the fetches, for sessionPart.fetch
	// rescanned: want was built anew (pending) since the last fetch, so
	// every partition is compared with the session; otherwise only those
	// in moved, whose offset the last answer moved.
	rescanned bool
	moved     []*partition
	sentAt    time.Time // when the latest fetch was sent
	// answeredAt is when the latest answered fetch was sent: every
	// partition of the session was as the broker said then. Guarded by
	// Fetcher.mu (Marks reads it).
	answeredAt time.Time
}

type sessionPart struct {
	sess   *fetchSession
	held   bool  // the broker holds it (else it is about to be added)
	offset int64 // the fetch offset the broker holds
	hwm    int64 // the high watermark last answered, -1 before any; guarded by Fetcher.mu
	// fetch is the fetch that last wanted it, when want was built anew;
	// sub the subscription it is fetched for.
	fetch uint64
	sub   *subscription
}

func newFetchSession() *fetchSession {
	return &fetchSession{parts: map[*partition]*sessionPart{}}
}

// restart makes the next fetch a full one, which closes the session and
// opens a new one: after a request whose effect on the session is
// unknown. Called with Fetcher.mu held.
func (s *fetchSession) restart() {
	for _, sp := range s.parts {
		if sp.sub.live == sp {
			sp.sub.freeze()
		}
	}
	s.epoch = 0
	clear(s.parts)
	s.moved = s.moved[:0]
}

// Fetch session errors (KIP-227): the broker evicted the session, or a
// request went missing. Either is answered by a full fetch.
const (
	errorFetchSessionIDNotFound    = 70
	errorInvalidFetchSessionEpoch  = 71
	fetchSessionEpochAfterMaxValue = 1
)

var errSessionLost = errors.New("fetch session lost")

// fetch sends one fetch request for want in the broker's session and
// hands each partition's records to its subscription. An error of the
// whole request is returned (errSessionLost when the broker lost the
// session: the next fetch opens another); a partition's own error is its
// subscription's.
func (f *Fetcher) fetch(sess *fetchSession, want []wanted) error {
	full := sess.epoch == 0
	sess.fetch++
	var sent, forgotten []*partition
	// The trace's own clock readings are taken only when it is on: this
	// is every canary's path.
	trace := f.onAnswer.Load()
	var began, returned time.Time
	if trace != nil {
		began = want[0].s.now()
	}
	f.mu.Lock()
	sess.sentAt = want[0].s.now()
	if full || sess.rescanned {
		sess.rescanned = false
		for i := range want {
			w := &want[i]
			sp, ok := sess.parts[w.p]
			if !ok {
				sp = &sessionPart{sess: sess, hwm: -1}
				sess.parts[w.p] = sp
			}
			if sp.sub != w.s {
				if sp.sub != nil && sp.sub.live == sp {
					sp.sub.freeze()
				}
				sp.sub = w.s
			}
			if sp.hwm >= 0 {
				w.s.live = sp // the session's word holds whichever reader it is fetched for
			}
			sp.fetch = sess.fetch
			if !sp.held || sp.offset != w.s.next {
				sp.offset = w.s.next
				sent = append(sent, w.p)
			}
		}
		for p, sp := range sess.parts {
			if sp.fetch != sess.fetch {
				if sp.sub.live == sp {
					sp.sub.freeze()
				}
				forgotten = append(forgotten, p)
			}
		}
	} else {
		for _, p := range sess.moved {
			if sp, ok := sess.parts[p]; ok && sp.offset != sp.sub.next {
				sp.offset = sp.sub.next
				sent = append(sent, p)
			}
		}
	}
	sess.moved = sess.moved[:0]
	if len(sent) == 0 {
		// The transport sends a fetch to the leader of its partitions: one
		// that names none would go to any broker, in no session.
		sent = append(sent, want[0].p)
	}
	req := &fetch.Request{ReplicaID: -1, MaxWaitTime: int32(FetchMaxWait / time.Millisecond), MinBytes: 1,
		MaxBytes: fetchMaxBytes, SessionID: sess.id, SessionEpoch: sess.epoch,
		Topics: requestTopics(sent, sess.parts), ForgottenTopics: forgottenTopics(forgotten)}
	f.mu.Unlock()

	ctx, cancel := context.WithTimeout(f.ctx, FetchMaxWait+10*time.Second)
	defer cancel()
	m, err := f.rt.RoundTrip(ctx, f.addr, req)
	if trace != nil {
		returned = want[0].s.now()
	}
	res, ok := m.(*fetchResponse)
	switch {
	case err != nil:
		err = fmt.Errorf("fetch: %w", err)
		f.wake(f.wakeSup) // a leader may have moved
	case !ok:
		err = fmt.Errorf("fetch: unexpected response %T", m)
	case res.ErrorCode == errorFetchSessionIDNotFound:
		sess.id = 0
		err = errSessionLost
	case res.ErrorCode == errorInvalidFetchSessionEpoch:
		err = errSessionLost
	case res.ErrorCode != 0:
		err = fmt.Errorf("fetch: %w", kafka.Error(res.ErrorCode))
	}
	if err != nil {
		f.mu.Lock()
		sess.restart()
		f.mu.Unlock()
		return err
	}
	sess.answered(full, res.SessionID, sent, forgotten)

	type answer struct {
		p  *fetchResponsePartition
		sp *sessionPart
	}
	var answers []answer
	withRecords := 0
	f.mu.Lock()
	// The consume stamp of the answer's records: as it is read, before
	// they are decoded and handed to their readers' goroutines, and under
	// the lock Reader.Unhandled reads, so that the stamp is seen there
	// from the instant it is taken.
	received := want[0].s.now()
	// Every partition of the session is as the broker last said, as of
	// this fetch: the marks of those with a known high watermark move on
	// with it.
	sess.answeredAt = sess.sentAt
	for i := range res.Topics {
		t := &res.Topics[i]
		for j := range t.Partitions {
			rp := &t.Partitions[j]
			sp, ok := sess.parts[f.parts[topicPartition{t.Topic, int(rp.Partition)}]]
			if !ok {
				continue
			}
			if rp.ErrorCode == 0 {
				sp.hwm = rp.HighWatermark
				sp.sub.live = sp
				if len(rp.Records) > 0 {
					withRecords++
					sp.sub.receiving++
					sp.sub.receivedAt = earliest(sp.sub.receivedAt, received)
				}
			}
			answers = append(answers, answer{rp, sp})
		}
	}
	f.mu.Unlock()
	for _, a := range answers {
		if f.deliver(a.sp.sub, a.p, sess.sentAt, received) {
			sess.moved = append(sess.moved, a.sp.sub.part)
		}
	}
	if trace != nil && withRecords > 0 {
		(*trace)(FetchAnswer{Broker: sess.loop.broker, Session: sess.loop.session, Fetch: sess.fetch, Began: began, Sent: sess.sentAt, Returned: returned, Received: received,
			Delivered: want[0].s.now(), Partitions: len(answers), WithRecords: withRecords})
	}
	return nil
}

// answered records what a successful answer made of the session.
func (s *fetchSession) answered(full bool, id int32, sent, forgotten []*partition) {
	if full {
		// No id: the broker keeps no session (its cache is full), and the
		// next fetch is a full one again.
		s.id, s.epoch = id, 0
		if id != 0 {
			s.epoch = 1
		}
	} else if s.epoch++; s.epoch == math.MaxInt32 {
		s.epoch = fetchSessionEpochAfterMaxValue
	}
	for _, p := range sent {
		s.parts[p].held = true
	}
	for _, p := range forgotten {
		delete(s.parts, p)
	}
}

func requestTopics(sent []*partition, parts map[*partition]*sessionPart) []fetch.RequestTopic {
	var topics []fetch.RequestTopic
	index := map[string]int{}
	for _, p := range sent {
		i, ok := index[p.tp.topic]
		if !ok {
			i = len(topics)
			index[p.tp.topic] = i
			topics = append(topics, fetch.RequestTopic{Topic: p.tp.topic})
		}
		topics[i].Partitions = append(topics[i].Partitions, fetch.RequestPartition{Partition: int32(p.tp.partition),
			CurrentLeaderEpoch: -1, FetchOffset: parts[p].offset, LogStartOffset: -1, PartitionMaxBytes: fetchPartitionMaxBytes})
	}
	return topics
}

func forgottenTopics(parts []*partition) []fetch.RequestForgottenTopic {
	var topics []fetch.RequestForgottenTopic
	index := map[string]int{}
	for _, p := range parts {
		i, ok := index[p.tp.topic]
		if !ok {
			i = len(topics)
			index[p.tp.topic] = i
			topics = append(topics, fetch.RequestForgottenTopic{Topic: p.tp.topic})
		}
		topics[i].Partitions = append(topics[i].Partitions, int32(p.tp.partition))
	}
	return topics
}

// deliver hands a partition's answer to a fetch sent at sentAt, read at
// received, to s, and reports whether it moved s's offset.
func (f *Fetcher) deliver(s *subscription, p *fetchResponsePartition, sentAt, received time.Time) bool {
	topic := s.part.tp.topic
	if p.ErrorCode != 0 {
		err := kafka.Error(p.ErrorCode)
		if errors.Is(err, kafka.OffsetOutOfRange) {
			f.mu.Lock()
			if !s.removed && s.queued < subscriptionQueue {
				f.queue(s, batch{err: fmt.Errorf("topic %s partition %d offset %d: %w", topic, p.Partition, s.next, err)})
			}
			f.mu.Unlock()
			return false
		}
		f.retryLater([]*subscription{s}, fmt.Errorf("topic %s partition %d: %w", topic, p.Partition, err), sentAt, fetchBackoffMin)
		f.wake(f.wakeSup)
		return false
	}
	if len(p.Records) == 0 {
		return false
	}
	rs, err := scanRecords(p.Records)
	f.mu.Lock()
	if s.receiving--; s.receiving == 0 {
		s.receivedAt = time.Time{}
	}
	if err != nil {
		f.mu.Unlock()
		f.retryLater([]*subscription{s}, fmt.Errorf("topic %s partition %d: %w", topic, p.Partition, err), sentAt, fetchBackoffMin)
		return false
	}
	defer f.mu.Unlock()
	// A full queue: only when two broker loops fetched it (its leader
	// moved); the records are fetched again.
	if s.removed || rs.next <= s.next || s.queued >= subscriptionQueue {
		return false
	}
	f.queue(s, batch{records: rs, topic: topic, hwm: p.HighWatermark, from: s.next, received: received})
	s.next = rs.next
	if len(s.part.subs) > 1 {
		f.changes.Add(1) // another reader of the partition may be furthest behind now
	}
	return true
}

// queue gives b to s, which has room, and wakes its Reader; called with
// f.mu held.
func (f *Fetcher) queue(s *subscription, b batch) {
	s.queued++
	if s.queued == subscriptionQueue {
		f.changes.Add(1) // out of fetches until its handler has room
	}
	s.pending = append(s.pending, b)
	f.wake(s.reader.ready)
}
