package prober

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// Watcher names, the values of the watcher label of the watch errors counter.
const (
	WatcherBacklog      = "backlog"
	WatcherTransactions = "transactions"
	WatcherSlots        = "replication_slots"
	WatcherConsumers    = "consumer_lag"
	WatcherConnector    = "connector"
)

// Watcher samples the signals that back the canaries up (backlog, open
// transactions, replication slots, business consumer lag, the Debezium
// connector) for one pipeline, every watch.interval, into the metrics. A
// failing probe is logged and counted and the others still run: a watcher
// must keep reporting exactly when parts of the pipeline are down.
type Watcher struct {
	Pipeline *config.Pipeline
	DB       Querier       // nil: no database watchers
	Kafka    *kafka.Client // nil: no consumer lag
	HTTP     *http.Client  // Kafka Connect REST
	Metrics  *Metrics
	Logger   *slog.Logger     // nil: discard
	Now      func() time.Time // nil: time.Now

	indexWarned bool
	slotWarned  bool // watch.slot unset: warned once
	slotMissing bool // watch.slot set but absent: warned on the way in
	restarts    restartTracker
}

// Run samples until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	ticker := time.NewTicker(time.Duration(w.Pipeline.Watch.Interval))
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

// Sample runs every configured probe once.
func (w *Watcher) Sample(ctx context.Context) {
	p := w.Pipeline
	name := p.Name
	if w.DB != nil {
		if p.Relay.Kind == config.RelayPolling {
			w.sampleBacklog(ctx)
		}
		if tx, err := QueryTransactions(ctx, w.DB, time.Duration(p.Watch.LongTransactionThreshold)); err != nil {
			w.failed(ctx, WatcherTransactions, err)
		} else {
			w.Metrics.OldestTransactionAge.WithLabelValues(name).Set(tx.OldestAge.Seconds())
			w.Metrics.LongTransactions.WithLabelValues(name).Set(float64(tx.OverLimit))
		}
		if p.Relay.Kind == config.RelayCDC {
			w.sampleSlots(ctx)
		}
	}
	if w.Kafka != nil && len(p.Watch.ConsumerGroups) > 0 {
		for _, g := range p.Watch.ConsumerGroups {
			lag, err := QueryConsumerLag(ctx, w.Kafka, g, w.now)
			if err != nil {
				w.failed(ctx, WatcherConsumers, err)
				continue
			}
			w.Metrics.ConsumerLagMessages.WithLabelValues(name, g.Group, g.Topic).Set(float64(lag.Messages))
			w.Metrics.ConsumerLagSeconds.WithLabelValues(name, g.Group, g.Topic).Set(lag.OldestAge.Seconds())
		}
	}
	if p.Watch.ConnectURL != "" && p.Watch.Connector != "" {
		w.sampleConnector(ctx)
	}
}

func (w *Watcher) sampleConnector(ctx context.Context) {
	name, connector := w.Pipeline.Name, w.Pipeline.Watch.Connector
	// Created at zero so that increase() has a starting point.
	restarts := w.Metrics.ConnectorRestarts.WithLabelValues(name, connector)
	st, err := QueryConnector(ctx, w.httpClient(), w.Pipeline.Watch.ConnectURL, connector)
	if err != nil {
		if w.failed(ctx, WatcherConnector, err) {
			w.Metrics.ConnectorRunning.WithLabelValues(name, connector).Set(0)
		}
		return
	}
	w.Metrics.ConnectorRunning.WithLabelValues(name, connector).Set(boolToFloat(st.Running()))
	w.Metrics.ConnectorTaskFailures.WithLabelValues(name, connector).Set(float64(st.FailedTasks()))
	if seen := w.restarts.observe(st); len(seen) > 0 {
		restarts.Add(float64(len(seen)))
		w.logger().Info("connector restart observed", "pipeline", name, "connector", connector,
			"restarted", strings.Join(seen, ", "), "status", st.Summary())
	}
}

func (w *Watcher) sampleBacklog(ctx context.Context) {
	p := w.Pipeline
	if !w.indexWarned {
		ok, err := HasUnpublishedIndex(ctx, w.DB, p)
		if err == nil {
			w.indexWarned = true
			if !ok {
				w.logger().Warn("the outbox has no partial index on the unpublished rows; every relay poll and backlog query scans the whole table",
					"pipeline", p.Name, "table", p.Outbox.Table,
					"fix", "CREATE INDEX ON "+p.Outbox.Table+" ("+p.Outbox.Columns.ID+") WHERE "+p.Outbox.Columns.PublishedAt+" IS NULL")
			}
		}
	}
	b, err := QueryBacklog(ctx, w.DB, p)
	if err != nil {
		w.failed(ctx, WatcherBacklog, err)
		return
	}
	w.Metrics.BacklogRows.WithLabelValues(p.Name).Set(float64(b.Rows))
	w.Metrics.OldestUnpublishedAge.WithLabelValues(p.Name).Set(b.OldestAge.Seconds())
}

func (w *Watcher) sampleSlots(ctx context.Context) {
	name, want := w.Pipeline.Name, w.Pipeline.Watch.Slot
	slots, err := QuerySlots(ctx, w.DB, want)
	if want == "" && !w.slotWarned {
		w.slotWarned = true
		seen := make([]string, 0, len(slots))
		for _, s := range slots {
			seen = append(seen, s.Name)
		}
		w.logger().Warn("watch.slot is not set: watching every replication slot of the database, so another pipeline's or a leftover slot can fire this pipeline's slot alerts; set watch.slot to the connector's slot.name",
			"pipeline", name, "slots", strings.Join(seen, ", "))
	}
	if err != nil {
		w.failed(ctx, WatcherSlots, err)
		return
	}
	if want != "" && len(slots) == 0 {
		// The configured slot does not exist (not created yet, or
		// dropped): nothing reads the WAL for this pipeline. Say so as an
		// inactive slot, and drop the figures that described it.
		if !w.slotMissing {
			w.slotMissing = true
			w.logger().Warn("the replication slot of watch.slot does not exist in the database: nothing captures the outbox's changes",
				"pipeline", name, "slot", want)
		}
		w.Metrics.SlotActive.WithLabelValues(name, want).Set(0)
		w.Metrics.SlotRetainedWAL.DeleteLabelValues(name, want)
		w.Metrics.SlotUnconfirmedWAL.DeleteLabelValues(name, want)
		w.Metrics.SlotSafeWALSize.DeleteLabelValues(name, want)
		for _, status := range WALStatuses() {
			w.Metrics.SlotWALStatus.DeleteLabelValues(name, want, status)
		}
		return
	}
	w.slotMissing = false
	for _, s := range slots {
		w.Metrics.SlotActive.WithLabelValues(name, s.Name).Set(boolToFloat(s.Active))
		w.Metrics.SlotRetainedWAL.WithLabelValues(name, s.Name).Set(float64(s.RetainedWAL))
		w.Metrics.SlotUnconfirmedWAL.WithLabelValues(name, s.Name).Set(float64(s.UnconfirmedWAL))
		if s.SafeWALSize != nil {
			w.Metrics.SlotSafeWALSize.WithLabelValues(name, s.Name).Set(float64(*s.SafeWALSize))
		} else {
			w.Metrics.SlotSafeWALSize.DeleteLabelValues(name, s.Name)
		}
		for _, status := range WALStatuses() {
			w.Metrics.SlotWALStatus.WithLabelValues(name, s.Name, status).Set(boolToFloat(status == s.WALStatus))
		}
	}
}

// failed logs and counts a failed probe, and reports whether it did. An
// error while ctx has been cancelled is the service shutting down, not the
// pipeline failing: it is neither counted nor logged as a failure (a
// deadline that runs out still is one).
func (w *Watcher) failed(ctx context.Context, watcher string, err error) bool {
	if errors.Is(ctx.Err(), context.Canceled) {
		w.logger().Debug("watcher stopped by shutdown", "pipeline", w.Pipeline.Name, "watcher", watcher, "err", err)
		return false
	}
	w.Metrics.WatchErrors.WithLabelValues(w.Pipeline.Name, watcher).Inc()
	w.logger().Warn("watcher failed", "pipeline", w.Pipeline.Name, "watcher", watcher, "err", err)
	return true
}

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *Watcher) logger() *slog.Logger {
	if w.Logger != nil {
		return w.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (w *Watcher) httpClient() *http.Client {
	if w.HTTP != nil {
		return w.HTTP
	}
	return &http.Client{Timeout: 5 * time.Second}
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
