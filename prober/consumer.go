package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/retry"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

// How the "publish" stamp of a record_timestamp pipeline is to be read.
//
// Checked on the real broker (Kafka 4.4.0, kafka-go v0.4.51): a message
// produced with Time one hour in the past to the LogAppendTime topic
// outbox.event.outbox-canary.logappend read back through kafka-go with
// Message.Time equal to that past time to the millisecond, while kcat showed
// the broker's append time (one hour later) for the same record. The broker
// overwrites only the batch's MaxTimestamp and sets the timestamp-type bit;
// kafka-go computes Message.Time from the batch's first timestamp and the
// record's delta and never looks at the bit. So Message.Time is always the
// producer's CreateTime: the relay's clock (the reference relay sets it to
// its send time; Debezium to its processing time), never the broker's.
// record_timestamp is therefore taken as a relay-clock publish stamp, with
// no correction, and a negative segment it causes is counted as suspected
// skew by the tracker rather than clamped.

// ConsumerOptions configures a Consumer.
type ConsumerOptions struct {
	Pipeline *config.Pipeline
	// Instance is this prober's id: canaries of other instances are skipped.
	Instance string
	Signer   *Signer
	Tracker  *Tracker
	Metrics  *Metrics
	Dialer   *kafka.Dialer
	Now      func() time.Time
	Logger   *slog.Logger
	// Client, optional, reads the canary topic's high watermarks: the
	// readers' position samples that let the judge place a canary that has
	// not arrived.
	Client *kafka.Client
	// Since positions a partition that has no stored offset: at the first
	// record stamped at or after Since (the service's start, a little
	// earlier for clock skew), so that a canary sent while Kafka was still
	// unreachable at start is not skipped. Zero means the latest offset.
	Since time.Time
}

// Consumer reads one pipeline's canary topic and hands each of this
// instance's canaries to the tracker.
//
// It runs one partition reader per partition (kafka.NewReader with Partition
// set and no GroupID) rather than a consumer group, because:
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
	dialer   *kafka.Dialer
	now      func() time.Time
	log      *slog.Logger
	since    time.Time

	// client reads the partitions' high watermarks for the position
	// samples; nil: no samples (the judge then places no canary by the
	// topic before it arrives).
	client *kafka.Client

	skips skipLog // warns about the first skip of each reason
	// skipped holds the pipeline's skip counter of every reason, looked
	// up once rather than per skipped message.
	skipped map[string]prometheus.Counter

	mu      sync.Mutex
	healthy bool
	reason  string
	readers map[int]bool
	// starts is where each running reader began: what precedes it was
	// never ours to read.
	starts map[int]int64
}

// NewConsumer checks its options; Run starts consuming.
func NewConsumer(o ConsumerOptions) (*Consumer, error) {
	if o.Pipeline == nil || o.Signer == nil || o.Tracker == nil || o.Metrics == nil || o.Dialer == nil {
		return nil, errors.New("consumer: pipeline, signer, tracker, metrics and dialer are required")
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
		dialer: o.Dialer, now: o.Now, log: o.Logger, since: o.Since, client: o.Client, skipped: skipped,
		reason: "not connected to Kafka yet", readers: map[int]bool{}, starts: map[int]int64{},
	}, nil
}

// consumerCheckInterval is how often the consumer checks the topic's
// metadata: for readiness (kafka-go's readers retry broken connections
// silently, so a metadata request is the honest health check) and for
// partitions added since the start.
const consumerCheckInterval = 2 * time.Second

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

// positionInterval is how often the readers' position is sampled: how
// soon after a deadline the judge can tell which side of publish a missing
// canary is on.
const positionInterval = 500 * time.Millisecond

// samplePositions reports the readers' position to the tracker until ctx
// is done.
func (c *Consumer) samplePositions(ctx context.Context) {
	if c.client == nil {
		return
	}
	t := time.NewTicker(positionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.samplePosition(ctx)
		}
	}
}

// samplePosition reads the high watermarks and compares them with what
// the tracker has processed: caught up when every partition was processed
// up to its high watermark, so every message acknowledged before the
// sample began has been handed to the tracker.
func (c *Consumer) samplePosition(ctx context.Context) {
	at := c.now()
	sctx, cancel := context.WithTimeout(ctx, positionInterval)
	hwm, err := kafkaclient.HighWatermarks(sctx, c.client, c.p.Kafka.Topic)
	cancel()
	if err != nil {
		c.log.Debug("sampling the readers' position failed", "err", err)
		if ctx.Err() == nil {
			// No evidence of where the readers were, but evidence that the
			// relay's producer may not reach the brokers either.
			c.tracker.Position(judge.Position{At: at, Failed: true})
		}
		return
	}
	next := c.tracker.StartOffsets()
	c.mu.Lock()
	starts := maps.Clone(c.starts)
	c.mu.Unlock()
	caught, lag := true, int64(0)
	for p, h := range hwm {
		done, ok := next[p]
		if s, started := starts[p]; started && (!ok || s > done) {
			done, ok = s, true
		}
		switch {
		case !ok:
			caught, lag = false, lag+h
		case done < h:
			caught, lag = false, lag+h-done
		}
	}
	c.tracker.Position(judge.Position{At: at, CaughtUp: caught, Lag: lag})
}

// Run consumes until ctx is done. Broker failures are logged, counted and
// retried with backoff; Run returns only when ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); c.samplePositions(ctx) }()
	retryWait := retry.Backoff(500*time.Millisecond, 10*time.Second)
	for {
		err := c.check(ctx, &wg)
		if ctx.Err() != nil {
			return nil
		}
		wait := consumerCheckInterval
		if err != nil {
			c.metrics.DependencyErrors.WithLabelValues(c.p.Name, DependencyKafka).Inc()
			c.setHealth(false, err.Error())
			wait = retryWait.NextBackOff()
		} else {
			retryWait.Reset()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
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

// check looks the topic up and starts a reader for every partition that has
// none yet.
func (c *Consumer) check(ctx context.Context, wg *sync.WaitGroup) error {
	partitions, err := c.lookupPartitions(ctx)
	if err != nil {
		return err
	}
	if len(partitions) == 0 {
		return fmt.Errorf("topic %s: no partitions (does it exist?)", c.p.Kafka.Topic)
	}
	stored := c.tracker.StartOffsets()
	// One partition that cannot be started must not keep the others from
	// being read: each is tried, the failures are reported together and
	// retried on the next check.
	var errs []error
	for _, part := range partitions {
		c.mu.Lock()
		running := c.readers[part.ID]
		c.mu.Unlock()
		if running {
			continue
		}
		start, ok := stored[part.ID]
		start, ok, err := c.startOffset(ctx, part, start, ok)
		if err != nil {
			errs = append(errs, fmt.Errorf("topic %s partition %d: start offset: %w", c.p.Kafka.Topic, part.ID, err))
			continue
		}
		c.mu.Lock()
		c.readers[part.ID] = true
		c.starts[part.ID] = start
		c.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.readPartition(ctx, part.ID, start, ok)
		}()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.setHealth(true, "")
	return nil
}

func (c *Consumer) lookupPartitions(ctx context.Context) ([]kafka.Partition, error) {
	var errs []error
	for _, b := range c.p.Kafka.Brokers {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		parts, err := c.dialer.LookupPartitions(lctx, "tcp", b, c.p.Kafka.Topic)
		cancel()
		if err == nil {
			return parts, nil
		}
		errs = append(errs, fmt.Errorf("broker %s: %w", b, kafkaclient.Explain(err, c.p.Kafka)))
	}
	return nil, fmt.Errorf("topic %s: look up partitions: %w", c.p.Kafka.Topic, errors.Join(errs...))
}

// startOffset is where a partition's reader starts: the stored offset, or,
// for a partition without one, the initial offset. A stored offset beyond
// the partition's last offset cannot be reached by reading (the topic was
// deleted and recreated, its offsets started again from 0): kafka-go would
// wait there forever and every canary would be lost without a word. It is
// logged, counted and replaced by the initial offset. fromState reports
// whether the returned offset is the stored one.
func (c *Consumer) startOffset(ctx context.Context, part kafka.Partition, stored int64, ok bool) (start int64, fromState bool, err error) {
	conn, err := c.dialLeader(ctx, part)
	if err != nil {
		return 0, false, err
	}
	defer conn.Close()
	if ok {
		last, err := conn.ReadLastOffset()
		if err != nil {
			return 0, false, err
		}
		if stored <= last {
			return stored, true, nil
		}
	}
	start, err = c.initialOffset(conn)
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

// dialLeader connects to the partition's leader, with a deadline for the
// offset requests made on the connection.
func (c *Consumer) dialLeader(ctx context.Context, part kafka.Partition) (*kafka.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var conn *kafka.Conn
	var err error
	for _, b := range c.p.Kafka.Brokers {
		if conn, err = c.dialer.DialLeader(dctx, "tcp", b, c.p.Kafka.Topic, part.ID); err == nil {
			break
		}
	}
	if err != nil {
		return nil, kafkaclient.Explain(err, c.p.Kafka)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, nil
}

// initialOffset is where a partition without a usable stored offset
// starts: the first record at or after Since, or the end of the partition.
func (c *Consumer) initialOffset(conn *kafka.Conn) (int64, error) {
	if !c.since.IsZero() {
		off, err := conn.ReadOffset(c.since)
		if err != nil {
			return 0, err
		}
		// -1: no record at or after Since; then the end is the same place.
		if off >= 0 {
			return off, nil
		}
	}
	return conn.ReadLastOffset()
}

// readPartition reads one partition until ctx is done. kafka-go's reader
// reconnects by itself after a broker restart, from the offset it had
// reached, so nothing here needs to restart it.
func (c *Consumer) readPartition(ctx context.Context, partition int, start int64, stored bool) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   c.p.Kafka.Brokers,
		Topic:     c.p.Kafka.Topic,
		Partition: partition,
		Dialer:    c.dialer,
		MinBytes:  1,
		MaxBytes:  10 << 20,
		// A fetch returns as soon as a record is there; MaxWait only bounds
		// how long an idle fetch is held open.
		MaxWait:        500 * time.Millisecond,
		ReadBackoffMin: 100 * time.Millisecond,
		ReadBackoffMax: 2 * time.Second,
		// Return an error instead of waiting forever when the offset is
		// beyond the partition's end (the topic was recreated while we
		// read it): the reader stops and check restarts it through
		// startOffset, which resets the offset.
		OffsetOutOfRangeError: true,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.log.Debug("kafka reader: "+fmt.Sprintf(msg, args...), "partition", partition)
		}),
	})
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		c.log.Error("kafka reader: set offset", "partition", partition, "offset", start, "err", err)
		c.mu.Lock()
		delete(c.readers, partition)
		c.mu.Unlock()
		return
	}
	c.log.Info("reading canary partition", "topic", c.p.Kafka.Topic, "partition", partition,
		"offset", start, "from_state", stored)
	for {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("kafka reader stopped", "partition", partition, "err", err)
				c.mu.Lock()
				delete(c.readers, partition)
				c.mu.Unlock()
			}
			return
		}
		c.Handle(ctx, msg)
	}
}

// Handle classifies one message of the canary topic and hands our canaries
// to the tracker. Everything else is counted by reason and skipped: a
// message on the topic never stops the consumer. The consume stamp is taken
// first, behind the tracker's fence, and the arrival is registered before
// any I/O: a canary consumed before its deadline is never judged late.
//
// A flood of foreign messages goes through here too, so a message that
// cannot hold a canary is screened out by a byte search before any
// decoding, its skip counted on a counter looked up once, and what it was
// is worked out only when the skip is logged.
func (c *Consumer) Handle(ctx context.Context, msg kafka.Message) {
	token, consumed := c.tracker.BeginArrival()
	if err := screen(msg.Value); err != nil {
		c.skip(token, consumed, msg, skipReason(err), skipDetail{err: err, value: msg.Value, signer: c.signer})
		return
	}
	payload, err := c.signer.DecodeMessage(msg.Value)
	if err != nil {
		c.skip(token, consumed, msg, skipReason(err), skipDetail{err: err})
		return
	}
	switch {
	case payload.Instance != c.instance:
		c.skip(token, consumed, msg, ReasonForeignInstance, skipDetail{field: "instance", name: payload.Instance})
		return
	case payload.Pipeline != c.p.Name:
		c.skip(token, consumed, msg, ReasonUnknownPipeline, skipDetail{field: "pipeline", name: payload.Pipeline})
		return
	}
	a := Arrival{
		CanaryID:  payload.CanaryID,
		Seq:       payload.Seq,
		Key:       string(msg.Key),
		Partition: msg.Partition,
		Offset:    msg.Offset,
		Consumed:  consumed,
		Stamps:    c.stamps(msg),
	}
	out := c.tracker.Arrived(token, a)
	if out.Kind == KindUnknown {
		// Counted by the tracker; logged like every other skip, so a
		// topic full of canaries a lost state forgot is one warning.
		c.skips.logSkip(c.log, consumed, msg, ReasonUnknownCanary, skipDetail{field: "canary", name: a.CanaryID})
		return
	}
	c.log.Debug("canary arrived", "canary", a.CanaryID, "partition", a.Partition, "offset", a.Offset, "kind", out.Kind)
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

// skip counts and logs a message that is not one of this pipeline's
// canaries. The tracker stores its offset, so a restart neither reads nor
// counts it again.
func (c *Consumer) skip(token uint64, consumed time.Time, msg kafka.Message, reason string, detail skipDetail) {
	if replay := c.tracker.Skipped(token, msg.Partition, msg.Offset); replay {
		return
	}
	if n, ok := c.skipped[reason]; ok {
		n.Inc()
	} else {
		c.metrics.MessagesSkipped.WithLabelValues(c.p.Name, reason).Inc()
	}
	c.skips.logSkip(c.log, consumed, msg, reason, detail)
}

// stamps reads the header and record-timestamp stamps of a message. A
// published_at stamp is read back from the row by the tracker's lookups.
func (c *Consumer) stamps(msg kafka.Message) map[string]time.Time {
	stamps := map[string]time.Time{}
	switch c.p.Relay.PublishedStamp {
	case config.PublishedFromHeader:
		if t, ok := headerTime(msg, c.p.Relay.PublishedHeader); ok {
			stamps[config.StampPublish] = t
		}
	case config.PublishedFromRecordTimestamp:
		if !msg.Time.IsZero() {
			stamps[config.StampPublish] = msg.Time
		}
	}
	for _, s := range c.p.Relay.Stamps {
		if t, ok := headerTime(msg, s.Header); ok {
			stamps[s.Name] = t
		}
	}
	return stamps
}

// headerTime parses a header as RFC 3339 (with or without fractional
// seconds) or as an integer Unix time in s, ms, µs or ns (by magnitude).
func headerTime(msg kafka.Message, name string) (time.Time, bool) {
	for _, h := range msg.Headers {
		if !strings.EqualFold(h.Key, name) {
			continue
		}
		return parseStampValue(string(h.Value))
	}
	return time.Time{}, false
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
