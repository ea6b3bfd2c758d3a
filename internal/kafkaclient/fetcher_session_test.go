package kafkaclient

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// fakeBroker is one broker, as a kafka.RoundTripper, that leads every
// partition of its topics and keeps fetch sessions as KIP-227 says: a full
// fetch (epoch 0) opens one and is answered with every partition; a later
// fetch names the partitions added or moved and those forgotten, and is
// answered with the partitions that have records or a new high watermark.
// Like a broker, it never moves a session's fetch offset by itself.
type fakeBroker struct {
	mu       sync.Mutex
	logs     map[topicPartition][][]byte // a record batch per offset; nil for offsets inside a batch
	ends     map[topicPartition]int64
	sessions map[int32]*fakeSession
	nextID   int32
	failNext int16 // the error code of the next fetch's answer
	// failPart: the next answer holds this partition with this error.
	failPart     topicPartition
	failPartCode int16
	changed      chan struct{}
	requests     []fakeRequest
	// leaderless: metadata names no leader for any partition, as a
	// cluster's last broker does while it shuts down.
	leaderless bool
}

type fakeSession struct {
	epoch int32
	parts map[topicPartition]*fakeSessionPart
}

type fakeSessionPart struct {
	offset  int64
	hwmSent int64
}

// fakeRequest is what a fetch request asked.
type fakeRequest struct {
	full      bool
	named     map[topicPartition]int64 // partition -> fetch offset
	forgotten []topicPartition
	answered  []topicPartition
	errorCode int16
	session   int32 // the session it was in, once opened
}

func newFakeBroker(topic string, partitions int) *fakeBroker {
	b := &fakeBroker{logs: map[topicPartition][][]byte{}, ends: map[topicPartition]int64{},
		sessions: map[int32]*fakeSession{}, nextID: 100, changed: make(chan struct{})}
	for p := range partitions {
		b.ends[topicPartition{topic, p}] = 0
	}
	return b
}

// produce appends a batch of n records (or a transaction marker) to a
// partition.
func (b *fakeBroker) produce(t testing.TB, tp topicPartition, n int, marker bool) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	base := b.ends[tp]
	var batch []byte
	if marker {
		batch, n = controlBatch(t, base), 1
	} else {
		batch = encodeBatch(t, 2, 0, base, testRecords(n)...)
	}
	b.logs[tp] = append(b.logs[tp], batch)
	for range n - 1 {
		b.logs[tp] = append(b.logs[tp], nil)
	}
	b.ends[tp] = base + int64(n)
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *fakeBroker) fail(code int16) {
	b.mu.Lock()
	b.failNext = code
	b.mu.Unlock()
}

func (b *fakeBroker) failPartition(tp topicPartition, code int16) {
	b.mu.Lock()
	b.failPart, b.failPartCode = tp, code
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

func (b *fakeBroker) fetches() []fakeRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

func (b *fakeBroker) RoundTrip(ctx context.Context, _ net.Addr, req kafka.Request) (kafka.Response, error) {
	switch r := req.(type) {
	case *metadata.Request:
		return b.metadata(r), nil
	case *fetch.Request:
		return b.fetch(ctx, r)
	}
	return nil, fmt.Errorf("fake broker: %T not supported", req)
}

func (b *fakeBroker) metadata(r *metadata.Request) *metadata.Response {
	b.mu.Lock()
	defer b.mu.Unlock()
	res := &metadata.Response{Brokers: []metadata.ResponseBroker{{NodeID: 1, Host: "fake", Port: 9092}}, ControllerID: 1}
	for _, name := range r.TopicNames {
		t := metadata.ResponseTopic{Name: name}
		for tp := range b.ends {
			if tp.topic == name {
				rp := metadata.ResponsePartition{PartitionIndex: int32(tp.partition), LeaderID: 1,
					ReplicaNodes: []int32{1}, IsrNodes: []int32{1}}
				if b.leaderless {
					rp.LeaderID, rp.ErrorCode = -1, int16(kafka.LeaderNotAvailable)
				}
				t.Partitions = append(t.Partitions, rp)
			}
		}
		res.Topics = append(res.Topics, t)
	}
	return res
}

func (b *fakeBroker) fetch(ctx context.Context, r *fetch.Request) (kafka.Response, error) {
	b.mu.Lock()
	rec := fakeRequest{full: r.SessionEpoch == 0, named: map[topicPartition]int64{}}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			rec.named[topicPartition{t.Topic, int(p.Partition)}] = p.FetchOffset
		}
	}
	for _, t := range r.ForgottenTopics {
		for _, p := range t.Partitions {
			rec.forgotten = append(rec.forgotten, topicPartition{t.Topic, int(p)})
		}
	}
	answer := func(res *fetchResponse) (kafka.Response, error) {
		rec.errorCode = res.ErrorCode
		for _, t := range res.Topics {
			for _, p := range t.Partitions {
				rec.answered = append(rec.answered, topicPartition{t.Topic, int(p.Partition)})
			}
		}
		b.requests = append(b.requests, rec)
		b.mu.Unlock()
		return res, nil
	}
	if code := b.failNext; code != 0 {
		b.failNext = 0
		return answer(&fetchResponse{ErrorCode: code})
	}
	var sess *fakeSession
	var id int32
	if rec.full {
		delete(b.sessions, r.SessionID)
		id, b.nextID = b.nextID, b.nextID+1
		sess = &fakeSession{epoch: 1, parts: map[topicPartition]*fakeSessionPart{}}
		b.sessions[id] = sess
	} else {
		id = r.SessionID
		if sess = b.sessions[id]; sess == nil {
			return answer(&fetchResponse{ErrorCode: errorFetchSessionIDNotFound})
		}
		if r.SessionEpoch != sess.epoch {
			return answer(&fetchResponse{ErrorCode: errorInvalidFetchSessionEpoch})
		}
		sess.epoch++
	}
	rec.session = id
	for tp, offset := range rec.named {
		if p, ok := sess.parts[tp]; ok {
			p.offset = offset
		} else {
			sess.parts[tp] = &fakeSessionPart{offset: offset, hwmSent: -1}
		}
	}
	for _, tp := range rec.forgotten {
		delete(sess.parts, tp)
	}
	deadline := time.After(time.Duration(r.MaxWaitTime) * time.Millisecond)
	expired := false
	for {
		res := &fetchResponse{SessionID: id}
		if code := b.failPartCode; code != 0 {
			if _, ok := sess.parts[b.failPart]; ok {
				b.failPartCode = 0
				res.Topics = append(res.Topics, fetchResponseTopic{Topic: b.failPart.topic, Partitions: []fetchResponsePartition{
					{Partition: int32(b.failPart.partition), ErrorCode: code, HighWatermark: -1}}})
				return answer(res)
			}
		}
		for tp, p := range sess.parts {
			end := b.ends[tp]
			if !rec.full && p.offset >= end && p.hwmSent == end {
				continue
			}
			rp := fetchResponsePartition{Partition: int32(tp.partition), HighWatermark: end}
			for o := p.offset; o < end; o++ {
				if batch := b.logs[tp][o]; batch != nil || o == p.offset {
					// A fetch from inside a batch returns the whole batch.
					for o2 := o; batch == nil; o2-- {
						batch = b.logs[tp][o2-1]
					}
					rp.Records = append(rp.Records, batch...)
				}
			}
			p.hwmSent = end
			res.Topics = append(res.Topics, fetchResponseTopic{Topic: tp.topic, Partitions: []fetchResponsePartition{rp}})
		}
		if len(res.Topics) > 0 || rec.full || expired {
			return answer(res)
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			expired = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		b.mu.Lock()
	}
}

// fakeReaders reads the partitions of topic through a Fetcher on b, from
// offset 0, handing every message and every Handled to the test.
type fakeReaders struct {
	f       *Fetcher
	wg      sync.WaitGroup
	retries atomic.Int32
	mu      sync.Mutex
	got     map[int][]int64 // partition -> offsets handled
	handled map[int]int64   // partition -> the latest Handled
}

// fetcherOf is a Fetcher whose fetches go through rt and whose other
// requests (metadata, offsets) go to b, and the stop that ends its loops.
func fetcherOf(rt kafka.RoundTripper, b *fakeBroker) (*Fetcher, context.CancelFunc) {
	ctx, stop := context.WithCancel(context.Background())
	addr := kafka.TCP("fake:9092")
	return newFetcher(ctx, rt, addr, &kafka.Client{Addr: addr, Transport: b}), stop
}

func readFake(t *testing.T, b *fakeBroker, topic string, partitions int, handle func(Message)) *fakeReaders {
	t.Helper()
	f, stop := fetcherOf(b, b)
	ctx, cancel := context.WithCancel(context.Background())
	r := &fakeReaders{f: f, got: map[int][]int64{}, handled: map[int]int64{}}
	for p := range partitions {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			err := r.f.Read(ctx, ReadOptions{Topic: topic, Partition: p,
				Handle: func(m Message) {
					if handle != nil {
						handle(m)
					}
					r.mu.Lock()
					r.got[p] = append(r.got[p], m.Offset)
					r.mu.Unlock()
				},
				Handled: func(next int64) {
					r.mu.Lock()
					r.handled[p] = next
					r.mu.Unlock()
				},
				OnRetry: func(error) { r.retries.Add(1) }})
			if err != nil {
				t.Errorf("read %s/%d: %v", topic, p, err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
		stop()
		r.f.wait()
	})
	return r
}

func (r *fakeReaders) offsets(p int) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[p])
}

func (r *fakeReaders) next(p int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handled[p]
}

// waitMarks waits until every partition has an error-free mark from a fetch
// sent after since.
func (r *fakeReaders) waitMarks(t *testing.T, topic string, partitions int, since time.Time) map[int]Mark {
	t.Helper()
	var marks map[int]Mark
	// serverWait, not less: a fresh topic of many partitions on a broker
	// shared with every package's tests may take a while to have leaders.
	stacktest.Eventually(t, serverWait, "every partition marked without error", func() (bool, string) {
		marks = r.f.Marks(topic)
		for p := range partitions {
			// An error mark is a partition waiting for its retry, to be
			// named again by a later fetch: not yet settled.
			if m, ok := marks[p]; !ok || m.At.Before(since) || m.Err != nil {
				return false, fmt.Sprintf("partition %d: %+v", p, m)
			}
		}
		return true, ""
	})
	return marks
}

func TestFetcherSessionNamesOnlyWhatMovedAndMarksEveryPartition(t *testing.T) {
	t.Parallel()
	const topic, partitions = "canaries", 30
	b := newFakeBroker(topic, partitions)
	r := readFake(t, b, topic, partitions, nil)
	r.waitMarks(t, topic, partitions, time.Time{})
	settled := len(b.fetches())

	produced := time.Now()
	b.produce(t, topicPartition{topic, 7}, 1, false)
	stacktest.Eventually(t, serverWait, "the message handled", func() (bool, string) {
		return len(r.offsets(7)) == 1, fmt.Sprint(r.offsets(7))
	})
	marks := r.waitMarks(t, topic, partitions, produced)
	for p, m := range marks {
		if want := int64(map[bool]int{true: 1}[p == 7]); m.Err != nil || m.HighWatermark != want {
			t.Errorf("partition %d: mark %+v, want high watermark %d and no error", p, m, want)
		}
	}
	for i, req := range b.fetches()[settled:] {
		if req.full || len(req.named) > 1 || len(req.answered) > 1 || len(req.forgotten) > 0 {
			t.Errorf("fetch %d after the session settled: full %t, named %v, forgot %v, answered %v; want one partition named at most, and answered",
				settled+i, req.full, req.named, req.forgotten, req.answered)
		}
	}
	if n := r.retries.Load(); n > 0 {
		t.Errorf("%d retries, want none", n)
	}
}

func TestFetcherOpensANewSessionWhenTheBrokerLostItWithoutAFailure(t *testing.T) {
	t.Parallel()
	for _, code := range []int16{errorFetchSessionIDNotFound, errorInvalidFetchSessionEpoch} {
		t.Run(fmt.Sprint(kafka.Error(code)), func(t *testing.T) {
			t.Parallel()
			const topic, partitions = "canaries", 3
			b := newFakeBroker(topic, partitions)
			r := readFake(t, b, topic, partitions, nil)
			r.waitMarks(t, topic, partitions, time.Time{})
			b.fail(code)
			b.produce(t, topicPartition{topic, 1}, 2, false)
			stacktest.Eventually(t, serverWait, "the messages handled", func() (bool, string) {
				return len(r.offsets(1)) == 2, fmt.Sprint(r.offsets(1))
			})
			reqs := b.fetches()
			lost := slices.IndexFunc(reqs, func(r fakeRequest) bool { return r.errorCode == code })
			if lost < 0 || lost+1 >= len(reqs) || !reqs[lost+1].full || len(reqs[lost+1].named) != partitions {
				t.Errorf("fetches %+v: want a full fetch of every partition right after the answer %d", reqs, code)
			}
			if n := r.retries.Load(); n > 0 {
				t.Errorf("%d retries, want none: a lost session is no failure", n)
			}
			for p, m := range r.f.Marks(topic) {
				if m.Err != nil {
					t.Errorf("partition %d: mark %+v, want no error", p, m)
				}
			}
		})
	}
}

func TestFetcherForgetsAPartitionWhoseHandlerIsFullAndResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	const topic, partitions = "canaries", 2
	b := newFakeBroker(topic, partitions)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var blocked atomic.Bool
	r := readFake(t, b, topic, partitions, func(m Message) {
		if m.Partition == 0 && m.Offset == 0 {
			blocked.Store(true)
			<-release
		}
	})
	t.Cleanup(free) // before readFake's, which waits for the handlers
	r.waitMarks(t, topic, partitions, time.Time{})
	p0 := topicPartition{topic, 0}
	// One batch being handled, two queued: partition 0 has no room.
	for range 3 + subscriptionQueue {
		b.produce(t, p0, 1, false)
		time.Sleep(50 * time.Millisecond)
	}
	stacktest.Eventually(t, serverWait, "partition 0 forgotten", func() (bool, string) {
		return slices.ContainsFunc(b.fetches(), func(r fakeRequest) bool { return slices.Contains(r.forgotten, p0) }), ""
	})
	if !blocked.Load() {
		t.Fatal("the handler never blocked")
	}
	free()
	stacktest.Eventually(t, serverWait, "every message handled", func() (bool, string) {
		return len(r.offsets(0)) == 3+subscriptionQueue, fmt.Sprint(r.offsets(0))
	})
	if got := r.offsets(0); !slices.Equal(got, []int64{0, 1, 2, 3, 4}) {
		t.Errorf("offsets %v, want 0 to 4 in order", got)
	}
	reqs := b.fetches()
	forgot := slices.IndexFunc(reqs, func(r fakeRequest) bool { return slices.Contains(r.forgotten, p0) })
	back := slices.IndexFunc(reqs[forgot:], func(r fakeRequest) bool { _, ok := r.named[p0]; return ok })
	if back < 0 || reqs[forgot+back].named[p0] == 0 {
		t.Errorf("fetches %+v: want partition 0 named again, past what was queued, once its handler had room", reqs[forgot:])
	}
}

func TestFetcherMovesPastATransactionMarkerAndFetchesItOnce(t *testing.T) {
	t.Parallel()
	const topic = "canaries"
	b := newFakeBroker(topic, 1)
	r := readFake(t, b, topic, 1, nil)
	r.waitMarks(t, topic, 1, time.Time{})
	tp := topicPartition{topic, 0}
	b.produce(t, tp, 3, false)
	b.produce(t, tp, 1, true) // commit marker at offset 3
	stacktest.Eventually(t, serverWait, "the marker passed", func() (bool, string) {
		return r.next(0) == 4, fmt.Sprintf("Handled %d", r.next(0))
	})
	// A fetcher that moved past the marker waits at the end of the log: the
	// broker holds its next fetch for FetchMaxWait and answers without the
	// partition. One that fetches the marker again is answered with it at
	// once, again and again, and never gets such an answer.
	passed := len(b.fetches())
	stacktest.Eventually(t, serverWait, "a fetch past the marker answered without the partition", func() (bool, string) {
		reqs := b.fetches()
		return slices.ContainsFunc(reqs[passed:], func(r fakeRequest) bool { return !slices.Contains(r.answered, tp) }),
			fmt.Sprintf("%d fetches since the marker passed, each answered with the partition", len(reqs)-passed)
	})
	if got := r.offsets(0); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Errorf("offsets %v, want 0 to 2: a marker is no message", got)
	}
	n := 0
	for _, req := range b.fetches() {
		if slices.Contains(req.answered, tp) {
			n++
		}
	}
	if n > 4 {
		t.Errorf("the partition was in %d answers, want a few: a marker at the end is fetched again and again", n)
	}
}

// recordingTransport records the fetches it carries.
type recordingTransport struct {
	rt kafka.RoundTripper
	mu sync.Mutex
	// Per fetch: partitions named, forgotten, answered; full.
	named, answered []int
	full            []bool
}

func (r *recordingTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	res, err := r.rt.RoundTrip(ctx, addr, req)
	f, ok := req.(*fetch.Request)
	if !ok || err != nil {
		return res, err
	}
	count := func(n int, each func(i int) int) int {
		total := 0
		for i := range n {
			total += each(i)
		}
		return total
	}
	named := count(len(f.Topics), func(i int) int { return len(f.Topics[i].Partitions) })
	answered := -1
	if fr, ok := res.(*fetchResponse); ok {
		answered = count(len(fr.Topics), func(i int) int { return len(fr.Topics[i].Partitions) })
	}
	r.mu.Lock()
	r.named, r.answered, r.full = append(r.named, named), append(r.answered, answered), append(r.full, f.SessionEpoch == 0)
	r.mu.Unlock()
	return res, err
}

func (r *recordingTransport) since(i int) (named, answered []int, full []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.named[i:]), slices.Clone(r.answered[i:]), slices.Clone(r.full[i:])
}

func (r *recordingTransport) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.named)
}

// TestFetcherSessionOnTheBroker checks on the stack's broker what the
// fake one assumes: once the session is open, a canary's fetch names and
// is answered with its partition alone, and every partition's mark moves
// on with the fetches that leave it out.
func TestFetcherSessionOnTheBroker(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	const partitions = 30
	topic := st.NewTopic(t, partitions, nil)
	k := config.Kafka{Brokers: st.KafkaBrokers, ClientID: "fetcher-session-test"}
	tr := &kafka.Transport{MetadataTopics: []string{topic}}
	defer tr.CloseIdleConnections()
	rec := &recordingTransport{rt: tr}
	ctx, cancel := context.WithCancel(context.Background())
	addr := kafka.TCP(k.Brokers...)
	f := newFetcher(ctx, rec, addr, &kafka.Client{Addr: addr, Transport: tr})
	arrived := make(chan int64, 1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		f.wait()
	}()
	for p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.Read(ctx, ReadOptions{Topic: topic, Partition: p, Handle: func(m Message) { arrived <- m.Offset }})
		}()
	}
	r := &fakeReaders{f: f}
	r.waitMarks(t, topic, partitions, time.Time{})
	// Past the first fetches: partitions whose leader the metadata cache
	// did not know yet join a fetch or two later.
	r.waitMarks(t, topic, partitions, time.Now().Add(FetchMaxWait))
	settled := rec.count()

	produced := time.Now()
	client := &kafka.Client{Addr: addr, Transport: tr, Timeout: serverWait}
	res, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: 7, RequiredAcks: kafka.RequireOne,
		Records: protocol.NewRecordReader(protocol.Record{Value: protocol.NewBytes([]byte("canary"))})})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(serverWait):
		t.Fatal("the message never arrived")
	}
	marks := r.waitMarks(t, topic, partitions, produced)
	if m := marks[7]; m.HighWatermark != 1 {
		t.Errorf("partition 7: mark %+v, want high watermark 1", m)
	}
	named, answered, full := rec.since(settled)
	for i := range named {
		if full[i] || named[i] > 1 || answered[i] > 1 {
			t.Errorf("fetch %d after the session settled: full %t, %d partitions named, %d answered; want one at most", i, full[i], named[i], answered[i])
		}
	}
}

func TestFetcherRetriesAPartitionThatFailedOutsideTheSessionAndTakesItBack(t *testing.T) {
	t.Parallel()
	const topic, partitions = "canaries", 3
	b := newFakeBroker(topic, partitions)
	r := readFake(t, b, topic, partitions, nil)
	r.waitMarks(t, topic, partitions, time.Time{})
	tp := topicPartition{topic, 1}
	b.failPartition(tp, int16(kafka.NotLeaderForPartition))
	stacktest.Eventually(t, serverWait, "the failure heard", func() (bool, string) {
		return r.retries.Load() == 1, fmt.Sprint(r.retries.Load())
	})
	if m := r.f.Marks(topic)[1]; m.Err == nil {
		t.Errorf("partition 1: mark %+v right after its failure, want the error", m)
	}
	b.produce(t, tp, 2, false)
	stacktest.Eventually(t, serverWait, "the messages handled", func() (bool, string) {
		return len(r.offsets(1)) == 2, fmt.Sprint(r.offsets(1))
	})
	marks := r.waitMarks(t, topic, partitions, time.Now())
	if m := marks[1]; m.Err != nil || m.HighWatermark != 2 {
		t.Errorf("partition 1: mark %+v once read again, want high watermark 2 and no error", m)
	}
	reqs := b.fetches()
	failed := slices.IndexFunc(reqs, func(r fakeRequest) bool {
		return slices.Contains(r.answered, tp) && r.errorCode == 0
	})
	forgot := slices.IndexFunc(reqs, func(r fakeRequest) bool { return slices.Contains(r.forgotten, tp) })
	back := -1
	if forgot >= 0 {
		// Partition 1 was named before its failure too; only a naming after
		// the forgetting shows it taken back.
		back = slices.IndexFunc(reqs[forgot+1:], func(r fakeRequest) bool { _, ok := r.named[tp]; return ok && !r.full })
	}
	if failed < 0 || forgot < 0 || back < 0 {
		t.Errorf("fetches %+v: want partition 1 forgotten while its retry waits, then named again", reqs)
	}
}

func TestFetcherMarksAReplacedReaderFromTheSession(t *testing.T) {
	t.Parallel()
	const topic = "canaries"
	b := newFakeBroker(topic, 2)
	tp := topicPartition{topic, 0}
	b.produce(t, tp, 3, false)
	f, stop := fetcherOf(b, b)
	defer func() {
		stop()
		f.wait()
	}()
	read := func(ctx context.Context, p int, offset int64, got chan<- int64) {
		if err := f.Read(ctx, ReadOptions{Topic: topic, Partition: p, Offset: offset, Handle: func(m Message) { got <- m.Offset }}); err != nil {
			t.Errorf("read %d: %v", p, err)
		}
	}
	other := make(chan int64, 10)
	octx, ocancel := context.WithCancel(context.Background())
	odone := make(chan struct{})
	go func() { defer close(odone); read(octx, 1, 0, other) }() // keeps the session busy
	defer func() { ocancel(); <-odone }()

	first := make(chan int64, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); read(ctx, 0, 0, first) }()
	for range 3 {
		<-first
	}
	cancel()
	<-done

	second := make(chan int64, 10)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	// Started again where the first stopped, as after the consumer
	// restarted a reader: nothing moves, so no answer names the
	// partition; its mark is the session's.
	go func() { defer close(done2); read(ctx2, 0, 3, second) }()
	defer func() { cancel2(); <-done2 }()
	stacktest.Eventually(t, serverWait, "the replaced reader marked", func() (bool, string) {
		m, ok := f.Marks(topic)[0]
		return ok && m.HighWatermark == 3 && m.Err == nil, fmt.Sprintf("%+v", m)
	})
}

func TestFetcherFeedsTwoReadersOfOnePartition(t *testing.T) {
	t.Parallel()
	const topic = "canaries"
	b := newFakeBroker(topic, 1)
	f, stop := fetcherOf(b, b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		stop()
		f.wait()
	}()
	// Two pipelines on one canary topic: each reader sees every message.
	got := [2]chan int64{make(chan int64, 10), make(chan int64, 10)}
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.Read(ctx, ReadOptions{Topic: topic, Partition: 0, Handle: func(m Message) { got[i] <- m.Offset }})
		}()
	}
	for n := range int64(5) {
		b.produce(t, topicPartition{topic, 0}, 1, false)
		for i := range got {
			select {
			case o := <-got[i]:
				if o != n {
					t.Fatalf("reader %d: offset %d, want %d", i, o, n)
				}
			case <-time.After(serverWait):
				t.Fatalf("reader %d never got offset %d", i, n)
			}
		}
	}
}

// TestFetcherStampsAMessageWhenItsAnswerIsReadAndFencesItUntilHandedOver:
// the consume stamp is the clock when the fetch's answer came back, not
// when the Reader's goroutine, busy with another partition, hands the
// message over; Unhandled holds the earliest such stamp until then.
func TestFetcherStampsAMessageWhenItsAnswerIsReadAndFencesItUntilHandedOver(t *testing.T) {
	t.Parallel()
	const topic = "canaries"
	b := newFakeBroker(topic, 2)
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	at := func(d time.Duration) time.Time { return base.Add(d) }
	now := func() time.Time { return at(time.Duration(clock.Load())) }

	f, stop := fetcherOf(b, b)
	r := f.NewReader()
	got := make(chan Message, 2)
	blocked, release := make(chan struct{}), make(chan struct{})
	for p := range 2 {
		r.Add(ReadOptions{Topic: topic, Partition: p, Now: now, Handle: func(m Message) {
			got <- m
			if m.Partition == 0 {
				close(blocked)
				<-release
			}
		}})
	}
	free := handleUntilCleanup(t, f, r, stop, release)
	stacktest.Eventually(t, serverWait, "both partitions fetched", func() (bool, string) {
		return len(f.Marks(topic)) == 2, fmt.Sprint(f.Marks(topic))
	})
	if at, ok := r.Unhandled(); ok {
		t.Fatalf("unhandled since %s before any record, want nothing", at)
	}

	clock.Store(int64(time.Second))
	b.produce(t, topicPartition{topic, 0}, 1, false)
	<-blocked // partition 0's message is being handed over, and waits
	if m := <-got; !m.Received.Equal(at(time.Second)) {
		t.Errorf("partition 0: received %s, want %s", m.Received, at(time.Second))
	}
	clock.Store(int64(2 * time.Second))
	b.produce(t, topicPartition{topic, 1}, 1, false)
	stacktest.Eventually(t, serverWait, "partition 1's record fetched and waiting", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(r.subs[1].pending) == 1, ""
	})
	if got, ok := r.Unhandled(); !ok || !got.Equal(at(time.Second)) {
		t.Errorf("unhandled since %s (%t), want %s: partition 0's message is not handed over yet", got, ok, at(time.Second))
	}

	clock.Store(int64(3 * time.Second))
	free()
	if m := <-got; m.Partition != 1 || !m.Received.Equal(at(2*time.Second)) {
		t.Errorf("partition %d: received %s, want partition 1 at %s, when its answer was read, not %s, when it was handed over",
			m.Partition, m.Received, at(2*time.Second), now())
	}
	stacktest.Eventually(t, serverWait, "nothing unhandled", func() (bool, string) {
		at, ok := r.Unhandled()
		return !ok, fmt.Sprint(at)
	})
}

// holdingTransport holds every fetch answer with records of partition
// hold in transit until release is closed, telling held of each.
type holdingTransport struct {
	*fakeBroker
	hold    topicPartition
	held    chan struct{}
	release chan struct{}
}

func (h holdingTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	res, err := h.fakeBroker.RoundTrip(ctx, addr, req)
	if r, ok := res.(*fetchResponse); ok && slices.ContainsFunc(r.Topics, func(t fetchResponseTopic) bool {
		return t.Topic == h.hold.topic && slices.ContainsFunc(t.Partitions, func(p fetchResponsePartition) bool {
			return int(p.Partition) == h.hold.partition && len(p.Records) > 0
		})
	}) {
		h.held <- struct{}{}
		<-h.release
	}
	return res, err
}

// TestFetcherFetchesABrokersPartitionsInSessionsOfItsOwn: past
// sessionPartitions, a broker's partitions are fetched in more sessions,
// each with its own request in flight, so a record is fetched while
// another session's answer is still on its way back.
func TestFetcherFetchesABrokersPartitionsInSessionsOfItsOwn(t *testing.T) {
	t.Parallel()
	const topic = "canaries"
	b := newFakeBroker(topic, 5)
	h := holdingTransport{fakeBroker: b, hold: topicPartition{topic, 0}, held: make(chan struct{}, 1), release: make(chan struct{})}
	f, stop := fetcherOf(h, b)
	f.sessionPartitions = 2 // sessions {0, 1}, {2, 3}, {4}
	r := f.NewReader()
	got := make(chan Message, 5)
	for p := range 5 {
		r.Add(ReadOptions{Topic: topic, Partition: p, Handle: func(m Message) { got <- m }})
	}
	free := handleUntilCleanup(t, f, r, stop, h.release)
	stacktest.Eventually(t, serverWait, "every partition fetched", func() (bool, string) {
		return len(f.Marks(topic)) == 5, fmt.Sprint(f.Marks(topic))
	})
	named := map[int32][]int{} // session -> the partitions it named
	for _, req := range b.fetches() {
		for tp := range req.named {
			if !slices.Contains(named[req.session], tp.partition) {
				named[req.session] = append(named[req.session], tp.partition)
			}
		}
	}
	var sessions []string
	for _, parts := range named {
		slices.Sort(parts)
		sessions = append(sessions, fmt.Sprint(parts))
	}
	slices.Sort(sessions)
	if want := []string{"[0 1]", "[2 3]", "[4]"}; !slices.Equal(sessions, want) {
		t.Errorf("sessions named %v, want %v", sessions, want)
	}

	b.produce(t, topicPartition{topic, 0}, 1, false)
	<-h.held // partition 0's answer is on its way back, and stays there
	b.produce(t, topicPartition{topic, 4}, 1, false)
	select {
	case m := <-got:
		if m.Partition != 4 {
			t.Fatalf("got partition %d's message first, want partition 4's, fetched while partition 0's answer is held", m.Partition)
		}
	case <-time.After(serverWait):
		t.Fatal("partition 4's message waited for partition 0's answer, held on its way back")
	}
	free()
	if m := <-got; m.Partition != 0 {
		t.Errorf("then partition %d's message, want partition 0's", m.Partition)
	}
}

// handleUntilCleanup hands r's messages over on a goroutine of its own
// until the test ends, and then closes release (which a test holds a
// handler or an answer on), r and the Fetcher (stop is its context's
// cancel). The returned free closes release before that, once.
func handleUntilCleanup(t *testing.T, f *Fetcher, r *Reader, stop context.CancelFunc, release chan struct{}) (free func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.Ready():
				r.HandleReady(ctx)
			}
		}
	}()
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() {
		free()
		cancel()
		wg.Wait()
		r.Close()
		stop()
		f.wait()
	})
	return free
}

// TestAPartitionWithoutALeaderKeepsItsMarkFailing: while the cluster names
// no leader for a partition (its last broker shutting down), nothing
// fetches it, and its mark must go on saying so at every recheck: the
// judge excuses the relay for the brokers' outage only as long as failed
// marks keep coming.
func TestAPartitionWithoutALeaderKeepsItsMarkFailing(t *testing.T) {
	t.Parallel()
	const topic = "canaries"
	b := newFakeBroker(topic, 1)
	f, stop := fetcherOf(b, b)
	r := f.NewReader()
	r.Add(ReadOptions{Topic: topic, Partition: 0, Handle: func(Message) {}})
	handleUntilCleanup(t, f, r, stop, make(chan struct{}))
	stacktest.Eventually(t, serverWait, "the partition fetched", func() (bool, string) {
		m, ok := f.Marks(topic)[0]
		return ok && m.Err == nil, fmt.Sprint(f.Marks(topic))
	})

	b.mu.Lock()
	b.leaderless = true
	b.mu.Unlock()
	b.fail(int16(kafka.NotLeaderForPartition)) // the failed fetch sends the Fetcher to the metadata
	var first Mark
	stacktest.Eventually(t, serverWait, "a failed mark", func() (bool, string) {
		first = f.Marks(topic)[0]
		return first.Err != nil, fmt.Sprint(first)
	})
	stacktest.Eventually(t, serverWait+2*leaderRecheck, "a later failed mark, with no fetch to fail", func() (bool, string) {
		m := f.Marks(topic)[0]
		return m.Err != nil && m.At.After(first.At), fmt.Sprintf("%v, first %v", m, first)
	})
}
