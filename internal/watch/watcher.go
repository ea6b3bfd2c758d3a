// Package watch samples the signals that back the canaries up, per
// pipeline: the polling relay's backlog, open transactions, the capture
// log (PostgreSQL's replication slots, MySQL's binlog and the connector's
// position in it), business consumer-group lag and the Debezium connector.
// It asks every database family the same questions through the family
// seam (outboxdb.Watched). Each watcher says when it is blind: watcher_up
// goes to 0 and its data series are removed, so no alert reads an old
// value as healthy. The database watchers of pipelines that share a
// database ask it each question once as often as the pipelines that want
// the answer ask for (Set), however many they are.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Watcher names, the values of the watcher label (named in slo, which the
// alerts read too).
const (
	WatcherBacklog         = slo.WatcherBacklog
	WatcherTransactions    = slo.WatcherTransactions
	WatcherSlots           = slo.WatcherReplicationSlots
	WatcherConsumers       = slo.WatcherConsumerLag
	WatcherConnector       = slo.WatcherConnector
	WatcherBinlog          = slo.WatcherBinlog
	WatcherBinlogConnector = slo.WatcherBinlogConnector
)

// sampleTimeoutMax bounds one watcher's queries in one sample (less when
// watch.interval is shorter): a silently dropped connection must not block
// the watcher, and the others, for the TCP timeout.
const sampleTimeoutMax = 10 * time.Second

// sampleTimeout is the bound of one sample of watchers run every interval.
func sampleTimeout(interval time.Duration) time.Duration {
	if interval <= 0 {
		return sampleTimeoutMax
	}
	return min(sampleTimeoutMax, interval)
}

// Options configures a Watcher.
type Options struct {
	Pipeline *config.Pipeline
	DB       outboxdb.Watched // nil: no database watchers
	Kafka    *kafka.Client    // nil: no consumer lag
	HTTP     *http.Client     // Kafka Connect REST; nil: a client with the sample timeout
	Metrics  *Metrics
	Logger   *slog.Logger     // nil: discard
	Now      func() time.Time // nil: time.Now
}

// Watcher samples one pipeline's watchers every watch.interval. A failing
// watcher is logged when it starts failing and when it recovers, counted
// on every failure, and never stops the others: a watcher must keep
// reporting exactly when parts of the pipeline are down. Sample and Run
// sample the pipeline on its own; a Set samples the database watchers of
// every pipeline on a database together.
type Watcher struct {
	p       *config.Pipeline
	db      outboxdb.Watched
	kafka   *kafka.Client
	http    *http.Client
	m       *Metrics
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration

	// solo asks the database this pipeline's questions alone (Sample,
	// Run); built on first use, so a Set's watchers never build one.
	solo *group

	// failing: watcher -> failed at its last sample. Locked because a Set
	// samples a pipeline's database and Kafka watchers in two loops.
	failingMu sync.Mutex
	failing   map[string]bool

	slotWarned  bool            // watch.slot unset: warned once
	slotMissing bool            // watch.slot set but absent: warned on the way in
	slotsSeen   map[string]bool // slots reported by the last sample, to remove the ones that go
	restarts    restartTracker
}

// New builds a pipeline's watcher; Run or Sample use it.
func New(o Options) (*Watcher, error) {
	if o.Pipeline == nil || o.Metrics == nil {
		return nil, errors.New("watcher: pipeline and metrics are required")
	}
	w := &Watcher{
		p: o.Pipeline, db: o.DB, kafka: o.Kafka, http: o.HTTP, m: o.Metrics, log: o.Logger, now: o.Now,
		timeout: sampleTimeout(time.Duration(o.Pipeline.Watch.Interval)),
		failing: map[string]bool{}, slotsSeen: map[string]bool{},
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.log = w.log.With("pipeline", o.Pipeline.Name)
	if w.now == nil {
		w.now = time.Now
	}
	if w.http == nil {
		w.http = &http.Client{Timeout: w.timeout}
	}
	return w, nil
}

// Open builds a pipeline's watcher on the process's shared connections:
// its database's watchers' questions, db (the family's Pools.Watched,
// which keeps connections back for the canary inserts so a slow watcher
// question never holds one they need), and, when consumer groups are
// watched, a client on its cluster's transport. Sampled alone (Sample),
// it asks for itself; in a Set (OpenSet), the pipelines on one database
// ask each question once.
func Open(p *config.Pipeline, db outboxdb.Watched, clusters *kafkaclient.Clusters, m *Metrics, log *slog.Logger) (*Watcher, error) {
	o := Options{Pipeline: p, DB: db, Metrics: m, Logger: log}
	if len(p.Watch.ConsumerGroups) > 0 {
		cluster, err := clusters.For(p.Kafka)
		if err != nil {
			return nil, fmt.Errorf("consumer lag watcher: %w", err)
		}
		o.Kafka = cluster.Client(p.Kafka, sampleTimeoutMax)
	}
	return New(o)
}

// Run samples until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	every(ctx, time.Duration(w.p.Watch.Interval), w.Sample)
}

// every calls sample at once, then every interval until ctx is done. A
// sample that overruns the interval delays the next rather than stacking
// up behind it.
func every(ctx context.Context, interval time.Duration, sample func(context.Context)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Sample runs every configured watcher of the pipeline once, each bounded
// by its timeout.
func (w *Watcher) Sample(ctx context.Context) {
	if w.db != nil {
		if w.solo == nil {
			w.solo = newGroup(w.db, []*Watcher{w}, w.log)
		}
		w.solo.Sample(ctx)
	}
	w.sampleKafka(ctx)
}

// watchesKafka says whether the pipeline has watchers on Kafka or Kafka
// Connect, which sampleKafka runs.
func (w *Watcher) watchesKafka() bool {
	p := w.p
	return (w.kafka != nil && len(p.Watch.ConsumerGroups) > 0) || (p.Watch.ConnectURL != "" && p.Watch.Connector != "")
}

// sampleKafka runs the pipeline's watchers of Kafka and Kafka Connect:
// their answers are the pipeline's own, so they are asked per pipeline.
func (w *Watcher) sampleKafka(ctx context.Context) {
	p := w.p
	if w.kafka != nil && len(p.Watch.ConsumerGroups) > 0 {
		w.run(ctx, WatcherConsumers, w.sampleConsumers, w.dropConsumers)
	}
	if p.Watch.ConnectURL != "" && p.Watch.Connector != "" {
		// Created at zero so that increase() has a starting point.
		w.m.ConnectorRestarts.WithLabelValues(p.Name, p.Watch.Connector)
		w.run(ctx, WatcherConnector, w.sampleConnector, w.dropConnector)
	}
}

// run samples one of the pipeline's own watchers and records whether it
// could see (record). An error while ctx has been cancelled is the service
// shutting down, not the pipeline failing: nothing is recorded.
func (w *Watcher) run(ctx context.Context, watcher string, sample func(context.Context) error, drop func()) {
	sctx, cancel := context.WithTimeout(ctx, w.timeout)
	err := sample(sctx)
	cancel()
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		w.log.Debug("watcher stopped by shutdown", "watcher", watcher, "err", err)
		return
	}
	switch w.record(watcher, err, drop) {
	case startedFailing:
		w.log.Warn(msgFailing, "watcher", watcher, "err", err)
	case stillFailing:
		w.log.Debug(msgStillFailing, "watcher", watcher, "err", err)
	case recovered:
		w.log.Info(msgRecovered, "watcher", watcher)
	}
}

// The log lines of a watcher's changes, the same whether one pipeline's
// sample or a shared one failed.
const (
	msgFailing      = "watcher failing; its series are withdrawn until it recovers"
	msgStillFailing = "watcher still failing"
	msgRecovered    = "watcher recovered"
)

// change is what one sample did to a watcher's state, for the log.
type change int

const (
	stillUp change = iota
	recovered
	startedFailing
	stillFailing
)

// record notes one sample of a watcher, whose gauges the caller has set
// when err is nil: on success it is up; on failure drop removes its data
// series, its error is counted and it is down.
func (w *Watcher) record(watcher string, err error, drop func()) change {
	name := w.p.Name
	w.failingMu.Lock()
	wasFailing := w.failing[watcher]
	w.failing[watcher] = err != nil
	w.failingMu.Unlock()
	if err != nil {
		drop()
		w.m.Errors.WithLabelValues(name, watcher).Inc()
		w.m.Up.WithLabelValues(name, watcher).Set(0)
		if wasFailing {
			return stillFailing
		}
		return startedFailing
	}
	w.m.Up.WithLabelValues(name, watcher).Set(1)
	w.m.LastSuccess.WithLabelValues(name, watcher).Set(float64(w.now().UnixNano()) / 1e9)
	if wasFailing {
		return recovered
	}
	return stillUp
}

// setBacklog exports a backlog sample of the pipeline's outbox table.
func (w *Watcher) setBacklog(b outboxdb.Backlog) {
	w.m.BacklogRows.WithLabelValues(w.p.Name).Set(float64(b.Rows))
	w.m.OldestUnpublishedAge.WithLabelValues(w.p.Name).Set(b.OldestAge.Seconds())
}

func (w *Watcher) dropBacklog() {
	w.m.BacklogRows.DeleteLabelValues(w.p.Name)
	w.m.OldestUnpublishedAge.DeleteLabelValues(w.p.Name)
}

// setTransactions exports an open-transactions sample of the pipeline's
// database: the oldest one's age, and how many are older than its
// watch.long_transaction_threshold.
func (w *Watcher) setTransactions(oldest time.Duration, overThreshold int64) {
	w.m.OldestTransactionAge.WithLabelValues(w.p.Name).Set(oldest.Seconds())
	w.m.LongTransactions.WithLabelValues(w.p.Name).Set(float64(overThreshold))
}

func (w *Watcher) dropTransactions() {
	w.m.OldestTransactionAge.DeleteLabelValues(w.p.Name)
	w.m.LongTransactions.DeleteLabelValues(w.p.Name)
}

// setSlots exports the slots of the pipeline's database that it watches
// (watch.slot, or all of them without it), out of all, every slot of the
// database.
func (w *Watcher) setSlots(all []outboxdb.Slot) {
	name, want := w.p.Name, w.p.Watch.Slot
	slots := all
	if want != "" {
		slots = nil
		for _, s := range all {
			if s.Name == want {
				slots = append(slots, s)
			}
		}
	}
	if want == "" && !w.slotWarned {
		w.slotWarned = true
		seen := make([]string, 0, len(slots))
		for _, s := range slots {
			seen = append(seen, s.Name)
		}
		w.log.Warn("watch.slot is not set: watching every replication slot of the database, so another pipeline's or a leftover slot can fire this pipeline's slot alerts; set watch.slot to the connector's slot.name",
			"slots", strings.Join(seen, ", "))
	}
	if want != "" && len(slots) == 0 {
		// The configured slot does not exist (not created yet, or
		// dropped): nothing reads the WAL for this pipeline. Say so as an
		// inactive slot, without the figures that described it.
		if !w.slotMissing {
			w.slotMissing = true
			w.log.Warn("the replication slot of watch.slot does not exist in the database: nothing captures the outbox's changes", "slot", want)
		}
		w.forgetSlot(want)
		w.m.SlotActive.WithLabelValues(name, want).Set(0)
		w.slotsSeen = map[string]bool{want: true}
		return
	}
	w.slotMissing = false
	seen := make(map[string]bool, len(slots))
	for _, s := range slots {
		seen[s.Name] = true
		w.m.SlotActive.WithLabelValues(name, s.Name).Set(boolToFloat(s.Active))
		w.m.SlotRetainedWAL.WithLabelValues(name, s.Name).Set(float64(s.RetainedWAL))
		w.m.SlotUnconfirmedWAL.WithLabelValues(name, s.Name).Set(float64(s.UnconfirmedWAL))
		if s.SafeWALSize != nil {
			w.m.SlotSafeWALSize.WithLabelValues(name, s.Name).Set(float64(*s.SafeWALSize))
		} else {
			w.m.SlotSafeWALSize.DeleteLabelValues(name, s.Name)
		}
		for _, status := range outboxdb.WALStatuses() {
			w.m.SlotWALStatus.WithLabelValues(name, s.Name, status).Set(boolToFloat(status == s.WALStatus))
		}
	}
	// A slot that was dropped (the runbook's own fix for an abandoned
	// one) takes its series with it, or its alert would never resolve.
	for slot := range w.slotsSeen {
		if !seen[slot] {
			w.log.Info("replication slot gone; its series are removed", "slot", slot)
			w.forgetSlot(slot)
			w.m.SlotActive.DeleteLabelValues(name, slot)
		}
	}
	w.slotsSeen = seen
}

// forgetSlot removes a slot's figures (not its active flag).
func (w *Watcher) forgetSlot(slot string) {
	name := w.p.Name
	w.m.SlotRetainedWAL.DeleteLabelValues(name, slot)
	w.m.SlotUnconfirmedWAL.DeleteLabelValues(name, slot)
	w.m.SlotSafeWALSize.DeleteLabelValues(name, slot)
	for _, status := range outboxdb.WALStatuses() {
		w.m.SlotWALStatus.DeleteLabelValues(name, slot, status)
	}
}

func (w *Watcher) dropSlots() {
	for slot := range w.slotsSeen {
		w.forgetSlot(slot)
		w.m.SlotActive.DeleteLabelValues(w.p.Name, slot)
	}
	w.slotsSeen = map[string]bool{}
}

func (w *Watcher) sampleConsumers(ctx context.Context) error {
	var errs []error
	for _, g := range w.p.Watch.ConsumerGroups {
		lag, err := kafkaclient.QueryConsumerLag(ctx, w.kafka, g, w.now)
		if err != nil {
			errs = append(errs, err)
			w.m.ConsumerLagMessages.DeleteLabelValues(w.p.Name, g.Group, g.Topic)
			w.m.ConsumerLagSeconds.DeleteLabelValues(w.p.Name, g.Group, g.Topic)
			continue
		}
		w.m.ConsumerLagMessages.WithLabelValues(w.p.Name, g.Group, g.Topic).Set(float64(lag.Messages))
		w.m.ConsumerLagSeconds.WithLabelValues(w.p.Name, g.Group, g.Topic).Set(lag.OldestAge.Seconds())
	}
	return errors.Join(errs...)
}

func (w *Watcher) dropConsumers() {} // per group, in sampleConsumers: the groups that answered keep theirs

func (w *Watcher) sampleConnector(ctx context.Context) error {
	name, connector := w.p.Name, w.p.Watch.Connector
	st, err := connect.QueryStatus(ctx, w.http, w.p.Watch.ConnectURL, connector)
	if err != nil {
		return err
	}
	w.m.ConnectorRunning.WithLabelValues(name, connector).Set(boolToFloat(st.Running()))
	w.m.ConnectorTaskFailures.WithLabelValues(name, connector).Set(float64(st.FailedTasks()))
	if seen := w.restarts.observe(st); len(seen) > 0 {
		w.m.ConnectorRestarts.WithLabelValues(name, connector).Add(float64(len(seen)))
		w.log.Info("connector restart observed", "connector", connector,
			"restarted", strings.Join(seen, ", "), "status", st.Summary())
	}
	return nil
}

func (w *Watcher) dropConnector() {
	w.m.ConnectorRunning.DeleteLabelValues(w.p.Name, w.p.Watch.Connector)
	w.m.ConnectorTaskFailures.DeleteLabelValues(w.p.Name, w.p.Watch.Connector)
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
