// Package watch samples the signals that back the canaries up, per
// pipeline: the polling relay's backlog, open transactions, replication
// slots, business consumer-group lag and the Debezium connector. Each
// watcher says when it is blind: watcher_up goes to 0 and its data series
// are removed, so no alert reads an old value as healthy.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Watcher names, the values of the watcher label (named in slo, which the
// alerts read too).
const (
	WatcherBacklog      = slo.WatcherBacklog
	WatcherTransactions = slo.WatcherTransactions
	WatcherSlots        = slo.WatcherReplicationSlots
	WatcherConsumers    = slo.WatcherConsumerLag
	WatcherConnector    = slo.WatcherConnector
)

// sampleTimeoutMax bounds one watcher's queries in one sample (less when
// watch.interval is shorter): a silently dropped connection must not block
// the watcher, and the others, for the TCP timeout.
const sampleTimeoutMax = 10 * time.Second

// Options configures a Watcher.
type Options struct {
	Pipeline *config.Pipeline
	DB       postgres.Querier // nil: no database watchers
	Kafka    *kafka.Client    // nil: no consumer lag
	HTTP     *http.Client     // Kafka Connect REST; nil: a client with the sample timeout
	Metrics  *Metrics
	Logger   *slog.Logger     // nil: discard
	Now      func() time.Time // nil: time.Now
}

// Watcher samples one pipeline's watchers every watch.interval. A failing
// watcher is logged when it starts failing and when it recovers, counted
// on every failure, and never stops the others: a watcher must keep
// reporting exactly when parts of the pipeline are down.
type Watcher struct {
	p       *config.Pipeline
	db      postgres.Querier
	kafka   *kafka.Client
	http    *http.Client
	m       *Metrics
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration

	failing     map[string]bool // watcher -> failed at its last sample
	indexWarned bool
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
		timeout: min(sampleTimeoutMax, time.Duration(o.Pipeline.Watch.Interval)),
		failing: map[string]bool{}, slotsSeen: map[string]bool{},
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.log = w.log.With("pipeline", o.Pipeline.Name)
	if w.now == nil {
		w.now = time.Now
	}
	if w.timeout <= 0 {
		w.timeout = sampleTimeoutMax
	}
	if w.http == nil {
		w.http = &http.Client{Timeout: w.timeout}
	}
	return w, nil
}

// Open builds a pipeline's watcher on the process's shared connections:
// its database's pool, through a limit that keeps PoolReservedConns of it
// for the canary inserts (so a slow watcher query never holds a connection
// they need), and, when consumer groups are watched, a client on its
// cluster's transport.
func Open(p *config.Pipeline, pools *postgres.Pools, clusters *kafkaclient.Clusters, m *Metrics, log *slog.Logger) (*Watcher, error) {
	db, err := pools.Limited(p.Database)
	if err != nil {
		return nil, err
	}
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
	ticker := time.NewTicker(time.Duration(w.p.Watch.Interval))
	defer ticker.Stop()
	for {
		w.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Sample runs every configured watcher once, each bounded by its timeout.
func (w *Watcher) Sample(ctx context.Context) {
	p := w.p
	if w.db != nil {
		if p.Relay.Kind == config.RelayPolling {
			w.run(ctx, WatcherBacklog, explainDB(w.sampleBacklog), w.dropBacklog)
		}
		w.run(ctx, WatcherTransactions, explainDB(w.sampleTransactions), w.dropTransactions)
		if p.Relay.Kind == config.RelayCDC {
			w.run(ctx, WatcherSlots, explainDB(w.sampleSlots), w.dropSlots)
		}
	}
	if w.kafka != nil && len(p.Watch.ConsumerGroups) > 0 {
		w.run(ctx, WatcherConsumers, w.sampleConsumers, w.dropConsumers)
	}
	if p.Watch.ConnectURL != "" && p.Watch.Connector != "" {
		// Created at zero so that increase() has a starting point.
		w.m.ConnectorRestarts.WithLabelValues(p.Name, p.Watch.Connector)
		w.run(ctx, WatcherConnector, w.sampleConnector, w.dropConnector)
	}
}

// explainDB words a database watcher's login and TLS failures for the
// operator (postgres.Explain). The consumer lag watcher's Kafka client
// explains its own.
func explainDB(sample func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error { return postgres.Explain(sample(ctx)) }
}

// run samples one watcher and records whether it could see: on success its
// gauges are set by sample and it is up; on failure drop removes its data
// series and it is down. An error while ctx has been cancelled is the
// service shutting down, not the pipeline failing: nothing is recorded.
func (w *Watcher) run(ctx context.Context, watcher string, sample func(context.Context) error, drop func()) {
	sctx, cancel := context.WithTimeout(ctx, w.timeout)
	err := sample(sctx)
	cancel()
	name := w.p.Name
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		w.log.Debug("watcher stopped by shutdown", "watcher", watcher, "err", err)
		return
	}
	if err != nil {
		drop()
		w.m.Errors.WithLabelValues(name, watcher).Inc()
		w.m.Up.WithLabelValues(name, watcher).Set(0)
		if !w.failing[watcher] {
			w.log.Warn("watcher failing; its series are withdrawn until it recovers", "watcher", watcher, "err", err)
		} else {
			w.log.Debug("watcher still failing", "watcher", watcher, "err", err)
		}
		w.failing[watcher] = true
		return
	}
	if w.failing[watcher] {
		w.log.Info("watcher recovered", "watcher", watcher)
	}
	w.failing[watcher] = false
	w.m.Up.WithLabelValues(name, watcher).Set(1)
	w.m.LastSuccess.WithLabelValues(name, watcher).Set(float64(w.now().UnixNano()) / 1e9)
}

func (w *Watcher) sampleBacklog(ctx context.Context) error {
	p := w.p
	if !w.indexWarned {
		ok, err := postgres.HasUnpublishedIndex(ctx, w.db, p)
		if err == nil {
			w.indexWarned = true
			if !ok {
				w.log.Warn("the outbox has no partial index on the unpublished rows; every relay poll and backlog query scans the whole table",
					"table", p.Outbox.Table,
					"fix", "CREATE INDEX ON "+p.Outbox.Table+" ("+p.Outbox.Columns.ID+") WHERE "+p.Outbox.Columns.PublishedAt+" IS NULL")
			}
		}
	}
	b, err := postgres.QueryBacklog(ctx, w.db, p)
	if err != nil {
		return err
	}
	w.m.BacklogRows.WithLabelValues(p.Name).Set(float64(b.Rows))
	w.m.OldestUnpublishedAge.WithLabelValues(p.Name).Set(b.OldestAge.Seconds())
	return nil
}

func (w *Watcher) dropBacklog() {
	w.m.BacklogRows.DeleteLabelValues(w.p.Name)
	w.m.OldestUnpublishedAge.DeleteLabelValues(w.p.Name)
}

func (w *Watcher) sampleTransactions(ctx context.Context) error {
	tx, err := postgres.QueryTransactions(ctx, w.db, time.Duration(w.p.Watch.LongTransactionThreshold))
	if err != nil {
		return err
	}
	w.m.OldestTransactionAge.WithLabelValues(w.p.Name).Set(tx.OldestAge.Seconds())
	w.m.LongTransactions.WithLabelValues(w.p.Name).Set(float64(tx.OverLimit))
	return nil
}

func (w *Watcher) dropTransactions() {
	w.m.OldestTransactionAge.DeleteLabelValues(w.p.Name)
	w.m.LongTransactions.DeleteLabelValues(w.p.Name)
}

func (w *Watcher) sampleSlots(ctx context.Context) error {
	name, want := w.p.Name, w.p.Watch.Slot
	slots, err := postgres.QuerySlots(ctx, w.db, want)
	if want == "" && !w.slotWarned && err == nil {
		w.slotWarned = true
		seen := make([]string, 0, len(slots))
		for _, s := range slots {
			seen = append(seen, s.Name)
		}
		w.log.Warn("watch.slot is not set: watching every replication slot of the database, so another pipeline's or a leftover slot can fire this pipeline's slot alerts; set watch.slot to the connector's slot.name",
			"slots", strings.Join(seen, ", "))
	}
	if err != nil {
		return err
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
		return nil
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
		for _, status := range postgres.WALStatuses() {
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
	return nil
}

// forgetSlot removes a slot's figures (not its active flag).
func (w *Watcher) forgetSlot(slot string) {
	name := w.p.Name
	w.m.SlotRetainedWAL.DeleteLabelValues(name, slot)
	w.m.SlotUnconfirmedWAL.DeleteLabelValues(name, slot)
	w.m.SlotSafeWALSize.DeleteLabelValues(name, slot)
	for _, status := range postgres.WALStatuses() {
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
