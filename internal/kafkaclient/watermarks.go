package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// WatermarkInterval is how often Watermarks samples.
const WatermarkInterval = 500 * time.Millisecond

// Watermarks samples the high watermarks of every subscribed topic of a
// cluster every WatermarkInterval, with one request for all of them (and
// their partitions from the transport's metadata cache): a hundred
// pipelines' position samples cost one request, not a hundred.
type Watermarks struct {
	ctx    context.Context
	client *kafka.Client
	wg     sync.WaitGroup

	mu      sync.Mutex
	subs    map[*markSub]struct{}
	started bool
}

type markSub struct {
	topic string
	now   func() time.Time
	fn    func(at time.Time, hwm map[int]int64, err error)
}

func newWatermarks(ctx context.Context, client *kafka.Client) *Watermarks {
	return &Watermarks{ctx: ctx, client: client, subs: map[*markSub]struct{}{}}
}

// Subscribe calls fn after every sample with the topic's high watermark
// per partition (the offset the next message will get: everything
// acknowledged so far lies below it), or why there is none, and at, the
// time now returned just before the sample was requested. fn must not
// block. cancel ends the subscription.
func (w *Watermarks) Subscribe(topic string, now func() time.Time, fn func(at time.Time, hwm map[int]int64, err error)) (cancel func()) {
	s := &markSub{topic: topic, now: now, fn: fn}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	if !w.started {
		w.started = true
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.run() }()
	}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.subs, s)
		w.mu.Unlock()
	}
}

func (w *Watermarks) wait() { w.wg.Wait() }

func (w *Watermarks) run() {
	t := time.NewTicker(WatermarkInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
			w.sample()
		}
	}
}

func (w *Watermarks) sample() {
	w.mu.Lock()
	subs := make([]*markSub, 0, len(w.subs))
	for s := range w.subs {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	at := make([]time.Time, len(subs))
	topicSet := map[string]bool{}
	for i, s := range subs {
		at[i] = s.now()
		topicSet[s.topic] = true
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	ctx, cancel := context.WithTimeout(w.ctx, WatermarkInterval)
	marks, errs := highWatermarks(ctx, w.client, topics)
	cancel()
	if w.ctx.Err() != nil {
		return
	}
	for i, s := range subs {
		s.fn(at[i], marks[s.topic], errs[s.topic])
	}
}

// highWatermarks reads the high watermarks of topics in one request; a
// topic that cannot be read has an error instead.
func highWatermarks(ctx context.Context, client *kafka.Client, topics []string) (map[string]map[int]int64, map[string]error) {
	marks := map[string]map[int]int64{}
	errs := map[string]error{}
	fail := func(err error) (map[string]map[int]int64, map[string]error) {
		for _, t := range topics {
			errs[t] = fmt.Errorf("topic %s: %w", t, err)
		}
		return marks, errs
	}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return fail(fmt.Errorf("metadata: %w", err))
	}
	reqs := map[string][]kafka.OffsetRequest{}
	for _, t := range meta.Topics {
		switch {
		case t.Error != nil:
			errs[t.Name] = fmt.Errorf("topic %s: %w", t.Name, t.Error)
		case len(t.Partitions) == 0:
			errs[t.Name] = fmt.Errorf("topic %s: not found", t.Name)
		default:
			for _, p := range t.Partitions {
				reqs[t.Name] = append(reqs[t.Name], kafka.LastOffsetOf(p.ID))
			}
		}
	}
	if len(reqs) == 0 {
		return marks, errs
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: reqs})
	if err != nil {
		for t := range reqs {
			errs[t] = fmt.Errorf("topic %s: high watermarks: %w", t, err)
		}
		return marks, errs
	}
	for t := range reqs {
		out := map[int]int64{}
		var perr error
		for _, po := range res.Topics[t] {
			if po.Error != nil {
				perr = errors.Join(perr, fmt.Errorf("partition %d: %w", po.Partition, po.Error))
				continue
			}
			out[po.Partition] = po.LastOffset
		}
		if perr != nil {
			errs[t] = fmt.Errorf("topic %s: high watermark: %w", t, perr)
			continue
		}
		marks[t] = out
	}
	return marks, errs
}
