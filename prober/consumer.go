package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/retry"
	"github.com/outbox-canary/outbox-canary/internal/tick"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

// How the "publish" stamp of a record_timestamp pipeline is to be read.
//
// The record timestamp is the producer's CreateTime (the reference relay
// sets it to its send time, Debezium to the time it processed the change,
// before its queue), or, on a topic with
// message.timestamp.type=LogAppendTime, the broker's append time: the
// broker writes it only into the batch's max timestamp and attribute bit,
// which kafka-go's decoders ignore (Message.Time is always the CreateTime
// there, checked on Kafka 4.4.0 with kafka-go v0.4.51) and the project's
// record parser reads (kafkaclient.Message). Either way the stamp is on a
// clock the prober cannot measure, the relay's or the broker's: taken with
// no correction, and a negative segment it causes is counted as suspected
// skew by the tracker rather than clamped. Which of the two it was is kept
// per pipeline (RecordTimestampType) for `check` to say.

// ConsumerOptions configures a Consumer.
type ConsumerOptions struct {
	Pipeline *config.Pipeline
	// Instance is this prober's id: canaries of other instances are skipped.
	Instance string
	Signer   *Signer
	Tracker  *Tracker
	Metrics  *Metrics
	// Cluster is the pipeline's Kafka cluster, whose connections the
	// consumer shares with every other pipeline on it: partitions and
	// offsets are asked on its transport, the partitions read through its
	// Fetcher, whose fetches carry the high watermarks of the position samples.
	Cluster *kafkaclient.Cluster
	Now     func() time.Time
	Logger  *slog.Logger
	// Since positions a partition that has no stored offset: at the first
	// record stamped at or after Since (the service's start, a little
	// earlier for clock skew), so that a canary sent while Kafka was still
	// unreachable at start is not skipped. Zero means the latest offset.
	Since time.Time
}

// Consumer reads one pipeline's canary topic and hands each of this
// instance's canaries to the tracker.
//
// It reads every partition from an offset of its own choosing (through the
// cluster's Fetcher, which reads the partitions of every pipeline on the
// cluster with one fetch per broker) rather than in a consumer group,
// because:
//   - several prober instances (and `outbox-canary check`) share a canary
//     topic, and each must see every message to pick out its own canaries;
//     a shared group would split them, one group per instance would leave
//     dead groups behind every short-lived check;
//   - there are no rebalances, so none of kafka-go's group rebalance bugs
//     (stale messages, offsets jumping ahead) and no pause while a group
//     settles, which would read as publish_to_consume latency;
//   - the next offset of each partition is stored with the tracker's
//     in-flight state, in the same atomic write, so a restart neither loses
//     a canary (offset committed before the canary was recorded) nor counts
//     one twice (canary recorded, offset not committed).
type Consumer struct {
	p        *config.Pipeline
	instance string
	signer   *Signer
	tracker  *Tracker
	metrics  *Metrics
	cluster  *kafkaclient.Cluster
	client   *kafka.Client // on the cluster's transport, errors explained with this pipeline's settings
	now      func() time.Time
	log      *slog.Logger
	since    time.Time

	skips skipLog // warns about the first skip of each reason
	// skipped holds the pipeline's skip counter of every reason, looked
	// up once rather than per skipped message.
	skipped map[string]prometheus.Counter

	mu      sync.Mutex
	healthy bool
	reason  string
	// markErr is why the latest fetch of some partition failed, nil when
	// every one worked: the brokers' metadata comes from the transport's
	// cache, so the fetches are the requests that find a broker gone.
	markErr error
	readers map[int]bool
	// starts is where each running reader began: what precedes it was
	// never ours to read.
	starts map[int]int64

	// lastPosition is the time of the position reported last.
	lastPosition time.Time
	// positionMarks is samplePosition's, reused: it runs for every
	// pipeline twice a second.
	positionMarks map[int]kafkaclient.Mark
	// partitionsAt is when every partition of the topic last had a
	// reader, zero until then; only the checks use it, one at a time.
	partitionsAt time.Time
	// partitionCount is how many partitions the topic had then: fewer
	// readers means one stopped (readPartition), and the next check
	// starts it again rather than wait for partitionsRecheck.
	partitionCount int

	// recordTimestampType is the timestamp type of the last canary's
	// record plus one; zero before the first.
	recordTimestampType atomic.Int32
}

// RecordTimestampType says whose clock the record timestamp of the last
// canary received was on: the broker's (LogAppendTime) or the producer's
// (CreateTime); false before any canary arrived.
func (c *Consumer) RecordTimestampType() (kafkaclient.TimestampType, bool) {
	v := c.recordTimestampType.Load()
	return kafkaclient.TimestampType(v - 1), v > 0
}

// NewConsumer checks its options; Run starts consuming.
func NewConsumer(o ConsumerOptions) (*Consumer, error) {
	if o.Pipeline == nil || o.Signer == nil || o.Tracker == nil || o.Metrics == nil || o.Cluster == nil {
		return nil, errors.New("consumer: pipeline, signer, tracker, metrics and cluster are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	skipped := map[string]prometheus.Counter{}
	for _, reason := range SkipReasons() {
		skipped[reason] = o.Metrics.MessagesSkipped.WithLabelValues(o.Pipeline.Name, reason)
	}
	return &Consumer{
		p: o.Pipeline, instance: o.Instance, signer: o.Signer, tracker: o.Tracker, metrics: o.Metrics,
		cluster: o.Cluster, client: o.Cluster.Client(o.Pipeline.Kafka, kafkaRequestTimeout),
		now: o.Now, log: o.Logger, since: o.Since, skipped: skipped,
		reason: "not connected to Kafka yet", readers: map[int]bool{}, starts: map[int]int64{},
		positionMarks: map[int]kafkaclient.Mark{},
	}, nil
}

// consumerCheckInterval is how often the consumer checks the last
// high-watermark sample for readiness.
const consumerCheckInterval = 2 * time.Second

// partitionsRecheck is how often a consumer whose partitions all have
// readers looks the topic's partitions up again (from the transport's
// metadata cache) for partitions added since the start. Every check did
// that before: at 300 pipelines it was 150 lookups a second and a tenth of
// the prober's CPU, for an event (a topic grown) that Kafka's own consumers
// notice within metadata.max.age.ms, five minutes by default.
const partitionsRecheck = 30 * time.Second

// kafkaRequestTimeout bounds the consumer's requests other than fetches.
const kafkaRequestTimeout = 10 * time.Second

// Ready reports whether every partition has a reader and the brokers answer;
// otherwise the reason.
func (c *Consumer) Ready() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.healthy, c.reason
}

func (c *Consumer) setHealth(ok bool, reason string) {
	c.mu.Lock()
	was, wasReason := c.healthy, c.reason
	c.healthy, c.reason = ok, reason
	c.mu.Unlock()
	up := 0.0
	if ok {
		up = 1
	}
	c.metrics.DependencyUp.WithLabelValues(c.p.Name, DependencyKafka).Set(up)
	switch {
	case ok && !was:
		c.log.Info("kafka reachable, consuming the canary topic", "topic", c.p.Kafka.Topic)
	case !ok && (was || reason != wasReason):
		c.log.Warn("kafka unhealthy; readers retry by themselves", "topic", c.p.Kafka.Topic, "reason", reason)
	}
}

// positionInterval is how often the readers' position is reported: how
// soon after a deadline the judge can tell which side of publish a missing
// canary is on. It comes from the high watermarks the fetches carry
// (kafkaclient.Mark), so it costs no request; an idle fetch returns every
// kafkaclient.FetchMaxWait. The service reports every pipeline's on one
// timer.
const positionInterval = kafkaclient.FetchMaxWait

// samplePositionOnce reports the readers' position to the tracker unless
// it is no newer than the one reported last. Only the service's sweep
// loop calls it, from one goroutine.
func (c *Consumer) samplePositionOnce() {
	c.lastPosition = c.samplePosition(c.lastPosition)
}

// samplePosition compares the latest high watermark of every partition
// read with what the tracker has processed: caught up when every partition
// was processed up to its high watermark, so every message acknowledged
// before the position's time (the oldest of the fetches it comes from) has
// been handed to the tracker. A position no newer than last is not
// reported again; the time of the one reported is returned.
func (c *Consumer) samplePosition(last time.Time) time.Time {
	marks := c.positionMarks
	c.cluster.Fetcher().MarksInto(c.p.Kafka.Topic, marks)
	c.mu.Lock()
	starts := c.starts // replaced, never changed, once published
	var at time.Time
	var failed error
	complete := len(starts) > 0
	for p := range starts {
		m, ok := marks[p]
		if !ok {
			complete = false
			break
		}
		if at.IsZero() || m.At.Before(at) {
			at = m.At
		}
		if m.Err != nil {
			failed = m.Err
		}
	}
	c.markErr = kafkaclient.Explain(failed, c.p.Kafka)
	c.mu.Unlock()
	if !complete || !at.After(last) {
		return last
	}
	if failed != nil {
		c.log.Debug("the readers' position is unknown: a fetch failed", "err", failed)
		// No evidence of where the readers were, but evidence that the
		// relay's producer may not reach the brokers either.
		c.tracker.Position(judge.Position{At: at, Failed: true})
		return at
	}
	c.tracker.PositionFrom(at, starts, marks)
	return at
}

// Run consumes until ctx is done. Broker failures are logged, counted and
// retried with backoff; Run returns only when ctx is done.
//
// Every partition's messages are handled on Run's goroutine, one per
// pipeline. A check that looks the topic up runs on a goroutine of its
// own while it lasts: it waits on the network, and a canary must not wait
// for it to be consumed.
func (c *Consumer) Run(ctx context.Context) error {
	reader := c.cluster.Fetcher().NewReader()
	defer reader.Close()
	c.tracker.FenceFetched(reader.Unhandled)
	defer c.tracker.FenceFetched(nil)
	checked := make(chan error, 1)
	check := func() { checked <- c.check(ctx, reader) }
	go check()
	// due is the next check's timer, nil while a check runs.
	var due *time.Timer
	defer func() {
		if due != nil {
			due.Stop()
		}
	}()
	retryWait := retry.Backoff(500*time.Millisecond, 10*time.Second)
	for {
		var dueC <-chan time.Time
		if due != nil {
			dueC = due.C
		}
		select {
		case <-ctx.Done():
			if due == nil {
				<-checked // the running check; its requests end with ctx
			}
			return nil
		case <-reader.Ready():
			reader.HandleReady(ctx)
		case err := <-checked:
			if err == nil {
				retryWait.Reset()
				// Every pipeline's check in the same instant, on the wake grid.
				due = tick.NewTimer(consumerCheckInterval)
				continue
			}
			if ctx.Err() == nil {
				c.metrics.DependencyErrors.WithLabelValues(c.p.Name, DependencyKafka).Inc()
				c.setHealth(false, err.Error())
			}
			due = time.NewTimer(retryWait.NextBackOff())
		case <-dueC:
			due = nil
			if c.lookupDue() {
				go check()
				continue
			}
			// Without a lookup a check asks no server: done here, it
			// spares every pipeline a goroutine every consumerCheckInterval.
			// The next round of the loop takes its answer.
			checked <- c.checkFetches()
		}
	}
}

// The prober's own dependencies, the values of the dependency label of
// outbox_canary_dependency_up and outbox_canary_dependency_errors_total.
// A failed clock estimate is counted as db_clock (the database answered,
// its clock could not be sampled), apart from database errors.
const (
	DependencyDatabase = slo.DependencyDatabase
	DependencyKafka    = slo.DependencyKafka
	DependencyDBClock  = "db_clock"
)

// check starts a reader for every partition that has none yet, looking
// the topic up at most every partitionsRecheck once all have one, and says
// whether the readers' latest fetches worked.
func (c *Consumer) check(ctx context.Context, reader *kafkaclient.Reader) error {
	if c.lookupDue() {
		if err := c.startReaders(ctx, reader); err != nil {
			// Looked up again on the next check.
			c.partitionsAt = time.Time{}
			return err
		}
		c.partitionsAt = time.Now()
	}
	return c.checkFetches()
}

// checkFetches is a check without a lookup: it asks no server, and says
// whether the readers' latest fetches worked.
func (c *Consumer) checkFetches() error {
	c.mu.Lock()
	markErr := c.markErr
	c.mu.Unlock()
	if markErr != nil {
		return markErr
	}
	c.setHealth(true, "")
	return nil
}

// lookupDue reports whether the next check looks the topic's partitions
// up (and so waits on the network): a reader stopped, the last lookup
// failed, or partitionsRecheck passed since it.
func (c *Consumer) lookupDue() bool {
	c.mu.Lock()
	readerStopped := len(c.readers) < c.partitionCount
	c.mu.Unlock()
	return readerStopped || c.partitionsAt.IsZero() || time.Since(c.partitionsAt) >= partitionsRecheck
}

// startReaders looks the topic's partitions up and starts a reader for
// every partition that has none yet.
func (c *Consumer) startReaders(ctx context.Context, reader *kafkaclient.Reader) error {
	partitions, err := c.lookupPartitions(ctx)
	if err != nil {
		return err
	}
	if len(partitions) == 0 {
		return fmt.Errorf("topic %s: no partitions (does it exist?)", c.p.Kafka.Topic)
	}
	c.mu.Lock()
	c.partitionCount = len(partitions)
	c.mu.Unlock()
	// One partition that cannot be started must not keep the others from
	// being read: each is tried, the failures are reported together and
	// retried on the next check.
	var errs []error
	var stored map[int]int64 // read once a partition needs a reader
	for _, part := range partitions {
		c.mu.Lock()
		running := c.readers[part.ID]
		c.mu.Unlock()
		if running {
			continue
		}
		if stored == nil {
			stored = c.tracker.StartOffsets()
		}
		start, ok := stored[part.ID]
		start, ok, err := c.startOffset(ctx, part, start, ok)
		if err != nil {
			errs = append(errs, fmt.Errorf("topic %s partition %d: start offset: %w", c.p.Kafka.Topic, part.ID, err))
			continue
		}
		c.mu.Lock()
		c.readers[part.ID] = true
		// A new map: samplePosition reads the one it took without the lock.
		starts := maps.Clone(c.starts)
		starts[part.ID] = start
		c.starts = starts
		c.mu.Unlock()
		c.readPartition(ctx, reader, part.ID, start, ok)
	}
	return errors.Join(errs...)
}

// lookupPartitions reads the topic's partitions from the transport's
// metadata cache: no connection is opened for it.
func (c *Consumer) lookupPartitions(ctx context.Context) ([]kafka.Partition, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	meta, err := c.client.Metadata(lctx, &kafka.MetadataRequest{Topics: []string{c.p.Kafka.Topic}})
	if err != nil {
		return nil, fmt.Errorf("topic %s: look up partitions: %w", c.p.Kafka.Topic, err)
	}
	if len(meta.Topics) != 1 {
		return nil, fmt.Errorf("topic %s: look up partitions: not in the metadata", c.p.Kafka.Topic)
	}
	if err := meta.Topics[0].Error; err != nil {
		return nil, fmt.Errorf("topic %s: look up partitions: %w", c.p.Kafka.Topic, err)
	}
	return meta.Topics[0].Partitions, nil
}

// startOffset is where a partition's reader starts: the stored offset, or,
// for a partition without one, the initial offset. A stored offset beyond
// the partition's last offset cannot be reached by reading (the topic was
// deleted and recreated, its offsets started again from 0): a reader would
// wait there forever and every canary would be lost without a word. It is
// logged, counted and replaced by the initial offset. fromState reports
// whether the returned offset is the stored one.
func (c *Consumer) startOffset(ctx context.Context, part kafka.Partition, stored int64, ok bool) (start int64, fromState bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaRequestTimeout)
	defer cancel()
	if ok {
		last, err := c.listOffset(ctx, kafka.LastOffsetOf(part.ID))
		if err != nil {
			return 0, false, err
		}
		if stored <= last {
			return stored, true, nil
		}
	}
	start, err = c.initialOffset(ctx, part.ID)
	if err != nil {
		return 0, false, err
	}
	if ok {
		c.log.Warn("stored offset is beyond the end of the canary partition (topic recreated?); reading from the start position instead",
			"pipeline", c.p.Name, "topic", c.p.Kafka.Topic, "partition", part.ID, "stored_offset", stored, "offset", start)
		c.metrics.OffsetResets.WithLabelValues(c.p.Name).Inc()
		c.tracker.ResetOffset(part.ID, start)
	}
	return start, false, nil
}

// listOffset asks the partition's leader for one offset: the last one
// (kafka.LastOffsetOf) or the first at or after a time (kafka.TimeOffsetOf,
// -1 when there is none).
func (c *Consumer) listOffset(ctx context.Context, req kafka.OffsetRequest) (int64, error) {
	res, err := c.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{c.p.Kafka.Topic: {req}}})
	if err != nil {
		return 0, err
	}
	for _, po := range res.Topics[c.p.Kafka.Topic] {
		if po.Partition != req.Partition {
			continue
		}
		if po.Error != nil {
			return 0, po.Error
		}
		if req.Timestamp == kafka.LastOffset {
			return po.LastOffset, nil
		}
		for off := range po.Offsets {
			return off, nil
		}
		return -1, nil
	}
	return 0, fmt.Errorf("no offset returned for partition %d", req.Partition)
}

// initialOffset is where a partition without a usable stored offset
// starts: the first record at or after Since, or the end of the partition.
func (c *Consumer) initialOffset(ctx context.Context, partition int) (int64, error) {
	return offsetSince(partition, c.since, func(req kafka.OffsetRequest) (int64, error) { return c.listOffset(ctx, req) })
}

// offsetSince is the first offset of a partition stamped at or after
// since (zero: its end), asking lookup (listOffset) while records may be
// appended. The end is asked first: when no record is stamped at or after
// since, the end as it was before that answer is where the records since
// begin. Asked after it, the end could already lie past a canary appended
// between the two answers, and the reader would start beyond it, losing
// the canary.
func offsetSince(partition int, since time.Time, lookup func(kafka.OffsetRequest) (int64, error)) (int64, error) {
	end, err := lookup(kafka.LastOffsetOf(partition))
	if err != nil || since.IsZero() {
		return end, err
	}
	off, err := lookup(kafka.TimeOffsetOf(partition, since))
	if err != nil {
		return 0, err
	}
	// -1: no record at or after since, up to an end at or past the first.
	if off >= 0 {
		return off, nil
	}
	return end, nil
}

// readPartition adds a partition to the pipeline's reader. The cluster's
// Fetcher retries broken connections by itself, from the offset it had
// reached, so nothing here needs to restart it; a partition leaves the
// reader only at an offset beyond its end (the topic was recreated while
// we read it), and check then adds it again through startOffset, which
// resets the offset.
func (c *Consumer) readPartition(ctx context.Context, reader *kafkaclient.Reader, partition int, start int64, stored bool) {
	c.log.Info("reading canary partition", "topic", c.p.Kafka.Topic, "partition", partition,
		"offset", start, "from_state", stored)
	r := c.newPartitionReader(partition)
	reader.Add(kafkaclient.ReadOptions{
		Topic: c.p.Kafka.Topic, Partition: partition, Offset: start,
		Handle:  func(msg kafkaclient.Message) { r.handle(ctx, msg) },
		Handled: r.handled,
		OnRetry: func(err error) {
			c.log.Debug("kafka fetch failed; retrying", "partition", partition, "err", kafkaclient.Explain(err, c.p.Kafka))
		},
		OnStop: func(err error) {
			c.log.Warn("kafka reader stopped", "partition", partition, "err", err)
			c.mu.Lock()
			delete(c.readers, partition)
			c.mu.Unlock()
		},
		Now: c.now,
	})
}

// Handle classifies one message of the canary topic, as a partition's
// reader does (partitionReader), and records it with the tracker at once.
func (c *Consumer) Handle(ctx context.Context, msg kafkaclient.Message) {
	r := c.newPartitionReader(msg.Partition)
	r.handle(ctx, msg)
	r.handled(msg.Offset + 1)
}

// partitionReader handles the messages of one partition, a fetch at a
// time, on the goroutine of the pipeline's reader.
//
// Everything else than this pipeline's canaries is counted by reason and
// skipped: a message on the topic never stops the consumer. A flood of
// foreign messages goes through here too, so a message that cannot hold
// a canary is screened out by a byte search before any decoding, and
// costs no lock, clock or allocation of its own: the skips of a fetch are
// recorded with the tracker once, after its last message (handled), and
// counted and logged once per run of one reason. What a skipped message
// was is worked out only when its skip is logged.
type partitionReader struct {
	c         *Consumer
	partition int
	// reading: a fetch's messages are being handled, replayBelow and
	// debug are set for it.
	reading bool
	// replayBelow: the messages below it were processed before a restart.
	replayBelow int64
	// debug: every skip is logged, at debug level.
	debug   bool
	skipped int     // skips of this fetch
	run     skipRun // the latest skips, all of one reason
}

// skipRun is skips of one reason in a row, counted and logged together.
type skipRun struct {
	reason string
	n      int
	first  kafka.Message
	detail skipDetail
}

func (c *Consumer) newPartitionReader(partition int) *partitionReader {
	return &partitionReader{c: c, partition: partition}
}

// handle classifies one message. A message that may be a canary takes the
// consume stamp first, behind the tracker's fence, and its arrival is
// registered before any I/O: a canary consumed before its deadline is
// never judged late.
func (r *partitionReader) handle(ctx context.Context, rec kafkaclient.Message) {
	c, msg := r.c, rec.Message
	if !r.reading {
		r.reading = true
		r.replayBelow = math.MinInt64
		if next, ok := c.tracker.NextOffset(r.partition); ok {
			r.replayBelow = next
		}
		r.debug = c.log.Enabled(ctx, slog.LevelDebug)
	}
	if reason, err := screen(msg.Value); err != nil {
		r.skip(msg, reason, skipDetail{err: err, value: msg.Value, signer: c.signer})
		return
	}
	token, consumed := c.tracker.BeginArrival(rec.Received)
	payload, err := c.signer.DecodeMessage(msg.Value)
	if err != nil {
		c.tracker.EndArrival(token)
		r.skip(msg, skipReason(err), skipDetail{err: err})
		return
	}
	switch {
	case payload.Instance != c.instance:
		c.tracker.EndArrival(token)
		r.skip(msg, ReasonForeignInstance, skipDetail{field: "instance", name: payload.Instance})
		return
	case payload.Pipeline != c.p.Name:
		c.tracker.EndArrival(token)
		r.skip(msg, ReasonUnknownPipeline, skipDetail{field: "pipeline", name: payload.Pipeline})
		return
	}
	a := Arrival{
		CanaryID:  payload.CanaryID,
		Seq:       payload.Seq,
		Key:       string(msg.Key),
		Partition: msg.Partition,
		Offset:    msg.Offset,
		Consumed:  consumed,
	}
	a.Stamps, a.Unparseable = c.stamps(msg)
	c.recordTimestampType.Store(int32(rec.TimestampType) + 1)
	out := c.tracker.Arrived(token, a)
	if out.Kind == KindUnknown {
		// Counted by the tracker; logged like every other skip, so a
		// topic full of canaries a lost state forgot is one warning.
		c.skips.logSkip(c.log, consumed, msg, ReasonUnknownCanary, skipDetail{field: "canary", name: a.CanaryID})
		return
	}
	if r.debug { // the arguments alone would allocate, for every canary
		c.log.Debug("canary arrived", "canary", a.CanaryID, "partition", a.Partition, "offset", a.Offset, "kind", out.Kind)
	}
}

// skip counts and logs a message that is not one of this pipeline's
// canaries, unless it is a replay (counted before a restart).
func (r *partitionReader) skip(msg kafka.Message, reason string, detail skipDetail) {
	if msg.Offset < r.replayBelow {
		return
	}
	r.skipped++
	if r.debug {
		r.c.countSkips(reason, 1)
		r.c.skips.logSkip(r.c.log, r.c.now(), msg, reason, detail)
		return
	}
	if r.run.n > 0 && r.run.reason != reason {
		r.endRun()
	}
	if r.run.n == 0 {
		r.run = skipRun{reason: reason, first: msg, detail: detail}
	}
	r.run.n++
}

func (r *partitionReader) endRun() {
	if r.run.n == 0 {
		return
	}
	r.c.countSkips(r.run.reason, r.run.n)
	r.c.skips.logRun(r.c.log, r.c.now(), r.run.first, r.run.reason, r.run.detail, r.run.n)
	r.run = skipRun{}
}

// handled ends a fetch: every message below next was handled. The tracker
// stores the offset, so a restart neither reads nor counts the skips
// again.
func (r *partitionReader) handled(next int64) {
	r.endRun()
	r.c.tracker.Skipped(r.partition, next, r.skipped)
	r.skipped, r.reading = 0, false
}

func (c *Consumer) countSkips(reason string, n int) {
	if counter, ok := c.skipped[reason]; ok {
		counter.Add(float64(n))
		return
	}
	c.metrics.MessagesSkipped.WithLabelValues(c.p.Name, reason).Add(float64(n))
}

// skipReason is the skip reason of a DecodeMessage or screen error.
func skipReason(err error) string {
	switch {
	case errors.Is(err, ErrUnsupportedEncoding):
		return ReasonUnsupportedEncoding
	case errors.Is(err, ErrBadSignature):
		return ReasonBadSignature
	}
	return ReasonMalformed
}

// skipDetail says what a skipped message was. It is a value, not a
// closure, so that a message skipped without a log line costs no
// allocation; String builds the text only for a line that is logged.
type skipDetail struct {
	err error // the decoder's or screen's error
	// value and signer, when err is screen's: DecodeMessage then says
	// what the value is.
	value  []byte
	signer *Signer
	// field and name identify a canary that is not ours to judge.
	field, name string
}

func (d skipDetail) String() string {
	if d.signer != nil {
		if _, err := d.signer.DecodeMessage(d.value); err != nil {
			return err.Error()
		}
	}
	if d.err != nil {
		return d.err.Error()
	}
	return d.field + " " + d.name
}

// stamps reads the header and record-timestamp stamps of a message, and
// names the stamps whose header is there but holds no time. A
// published_at stamp is read back from the row by the tracker's lookups.
func (c *Consumer) stamps(msg kafka.Message) (stamps map[string]time.Time, unparseable []string) {
	stamps = map[string]time.Time{}
	fromHeader := func(stamp, header string) {
		switch t, present, ok := headerTime(msg, header); {
		case ok:
			stamps[stamp] = t
		case present:
			unparseable = append(unparseable, stamp)
		}
	}
	switch c.p.Relay.PublishedStamp {
	case config.PublishedFromHeader:
		fromHeader(config.StampPublish, c.p.Relay.PublishedHeader)
	case config.PublishedFromRecordTimestamp:
		if !msg.Time.IsZero() {
			stamps[config.StampPublish] = msg.Time
		}
	}
	for _, s := range c.p.Relay.Stamps {
		fromHeader(s.Name, s.Header)
	}
	return stamps, unparseable
}

// headerTime parses a header as RFC 3339 (with or without fractional
// seconds) or as an integer Unix time in s, ms, µs or ns (by magnitude).
// present is whether the message has the header at all.
func headerTime(msg kafka.Message, name string) (t time.Time, present, ok bool) {
	for _, h := range msg.Headers {
		if !strings.EqualFold(h.Key, name) {
			continue
		}
		t, ok = parseStampValue(string(h.Value))
		return t, true, ok
	}
	return time.Time{}, false, false
}

func parseStampValue(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return unixByMagnitude(n), true
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// unixByMagnitude reads an integer Unix time in the unit its size implies
// for the years 2001 to 2286: up to 11 digits seconds, up to 14
// milliseconds, up to 17 microseconds, else nanoseconds. Relays write all
// four; a stamp in a unit that lands it far from the canary is then
// invalid (relay.max_clock_skew), never silently wrong.
func unixByMagnitude(n int64) time.Time {
	abs := n
	if abs < 0 {
		abs = -abs
	}
	switch {
	case abs < 1e11:
		return time.Unix(n, 0)
	case abs < 1e14:
		return time.UnixMilli(n)
	case abs < 1e17:
		return time.UnixMicro(n)
	}
	return time.Unix(0, n)
}
