package prober

import (
	"context"
	"log/slog"
	"net/http"
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
			w.failed(WatcherTransactions, err)
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
				w.failed(WatcherConsumers, err)
				continue
			}
			w.Metrics.ConsumerLagMessages.WithLabelValues(name, g.Group, g.Topic).Set(float64(lag.Messages))
			w.Metrics.ConsumerLagSeconds.WithLabelValues(name, g.Group, g.Topic).Set(lag.OldestAge.Seconds())
		}
	}
	if p.Watch.ConnectURL != "" && p.Watch.Connector != "" {
		st, err := QueryConnector(ctx, w.httpClient(), p.Watch.ConnectURL, p.Watch.Connector)
		if err != nil {
			w.failed(WatcherConnector, err)
			w.Metrics.ConnectorRunning.WithLabelValues(name, p.Watch.Connector).Set(0)
		} else {
			w.Metrics.ConnectorRunning.WithLabelValues(name, p.Watch.Connector).Set(boolToFloat(st.Running()))
			w.Metrics.ConnectorTaskFailures.WithLabelValues(name, p.Watch.Connector).Set(float64(st.FailedTasks()))
		}
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
		w.failed(WatcherBacklog, err)
		return
	}
	w.Metrics.BacklogRows.WithLabelValues(p.Name).Set(float64(b.Rows))
	w.Metrics.OldestUnpublishedAge.WithLabelValues(p.Name).Set(b.OldestAge.Seconds())
}

func (w *Watcher) sampleSlots(ctx context.Context) {
	name := w.Pipeline.Name
	slots, err := QuerySlots(ctx, w.DB)
	if err != nil {
		w.failed(WatcherSlots, err)
		return
	}
	for _, s := range slots {
		w.Metrics.SlotActive.WithLabelValues(name, s.Name).Set(boolToFloat(s.Active))
		w.Metrics.SlotRetainedWAL.WithLabelValues(name, s.Name).Set(float64(s.RetainedWAL))
		w.Metrics.SlotUnconfirmedWAL.WithLabelValues(name, s.Name).Set(float64(s.UnconfirmedWAL))
		if s.SafeWALSize != nil {
			w.Metrics.SlotSafeWALSize.WithLabelValues(name, s.Name).Set(float64(*s.SafeWALSize))
		} else {
			w.Metrics.SlotSafeWALSize.DeleteLabelValues(name, s.Name)
		}
		for _, status := range WALStatuses {
			w.Metrics.SlotWALStatus.WithLabelValues(name, s.Name, status).Set(boolToFloat(status == s.WALStatus))
		}
	}
}

func (w *Watcher) failed(watcher string, err error) {
	w.Metrics.WatchErrors.WithLabelValues(w.Pipeline.Name, watcher).Inc()
	w.logger().Warn("watcher failed", "pipeline", w.Pipeline.Name, "watcher", watcher, "err", err)
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
