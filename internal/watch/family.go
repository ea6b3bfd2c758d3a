package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// OpenOn builds the watcher of a pipeline whose database is reached
// through the family seam (outboxdb.DB: MySQL and MariaDB) rather than a
// PostgreSQL pool: its backlog (polling relays) and open transactions, the
// same series as on PostgreSQL, asked per pipeline; for a cdc pipeline the
// capture log (the binlog's position, the files kept and their expiry);
// and, as Open does, its consumer groups on the cluster's transport.
func OpenOn(p *config.Pipeline, db outboxdb.DB, clusters *kafkaclient.Clusters, m *Metrics, log *slog.Logger) (*Watcher, error) {
	o := Options{Pipeline: p, Family: db, Metrics: m, Logger: log}
	if len(p.Watch.ConsumerGroups) > 0 {
		cluster, err := clusters.For(p.Kafka)
		if err != nil {
			return nil, fmt.Errorf("consumer lag watcher: %w", err)
		}
		o.Kafka = cluster.Client(p.Kafka, sampleTimeoutMax)
	}
	return New(o)
}

// Add runs w, a watcher of its own (OpenOn), with the set: its database
// and Kafka watchers in one loop of its own.
func (s *Set) Add(w *Watcher) { s.own = append(s.own, w) }

// sampleFamily asks the family seam the pipeline's database questions.
func (w *Watcher) sampleFamily(ctx context.Context) {
	p, db := w.p, w.family
	w.run(ctx, WatcherTransactions, func(ctx context.Context) error {
		tx, err := db.OpenTransactions(ctx, time.Duration(p.Watch.LongTransactionThreshold))
		if err != nil {
			return db.Explain(err)
		}
		w.setTransactions(postgres.Transactions{OldestAge: tx.OldestAge, OverLimit: tx.OverThreshold})
		return nil
	}, w.dropTransactions)
	if p.Relay.Kind == config.RelayCDC {
		var binlog *outboxdb.CaptureLog
		w.run(ctx, WatcherBinlog, func(ctx context.Context) error {
			c, err := db.CaptureLog(ctx)
			if err != nil {
				return db.Explain(err)
			}
			if !c.Enabled {
				return errors.New("log_bin is OFF: the server writes no binlog for log capture to read")
			}
			w.setBinlog(c)
			binlog = &c
			return nil
		}, w.dropBinlog)
		if p.Watch.ConnectURL != "" && p.Watch.Connector != "" {
			w.run(ctx, WatcherBinlogConnector, func(ctx context.Context) error {
				if binlog == nil {
					return errors.New("the server's binlog could not be read (watcher binlog): the connector's position has nothing to be compared with")
				}
				offsets, err := connect.QueryOffsets(ctx, w.http, p.Watch.ConnectURL, p.Watch.Connector)
				if err != nil {
					return err
				}
				pos, ok := connect.BinlogOffset(offsets)
				if !ok {
					return fmt.Errorf("connector %s has committed no binlog position (GET /connectors/%s/offsets)", p.Watch.Connector, p.Watch.Connector)
				}
				lag, err := connect.ConnectorBinlogLag(*binlog, pos, w.now())
				if err != nil {
					return err
				}
				w.setBinlogConnector(lag)
				return nil
			}, w.dropBinlogConnector)
		}
		return
	}
	c := p.Outbox.Columns
	table := outboxdb.Table{Name: p.Outbox.Table, ID: c.ID, PublishedAt: c.PublishedAt, CreatedAt: c.CreatedAt}
	w.run(ctx, WatcherBacklog, func(ctx context.Context) error {
		b, err := db.Backlog(ctx, table)
		if err != nil {
			return db.Explain(err)
		}
		w.setBacklog(postgres.Backlog(b))
		return nil
	}, w.dropBacklog)
}

func (w *Watcher) setBinlog(c outboxdb.CaptureLog) {
	name := w.p.Name
	w.m.BinlogWritten.WithLabelValues(name).Set(float64(c.Written))
	w.m.BinlogRetainedBytes.WithLabelValues(name).Set(float64(c.RetainedBytes))
	w.m.BinlogRetainedFiles.WithLabelValues(name).Set(float64(c.RetainedFiles))
	w.m.BinlogExpiry.WithLabelValues(name).Set(c.Expiry.Seconds())
}

func (w *Watcher) setBinlogConnector(lag connect.BinlogLag) {
	name, c := w.p.Name, w.p.Watch.Connector
	if lag.Purged {
		w.m.BinlogConnectorPosition.DeleteLabelValues(name, c)
		w.m.BinlogConnectorBehindBytes.DeleteLabelValues(name, c)
		w.m.BinlogConnectorFilePurged.WithLabelValues(name, c).Set(1)
	} else {
		w.m.BinlogConnectorPosition.WithLabelValues(name, c).Set(float64(lag.Position))
		w.m.BinlogConnectorBehindBytes.WithLabelValues(name, c).Set(float64(lag.BehindBytes))
		w.m.BinlogConnectorFilePurged.WithLabelValues(name, c).Set(0)
	}
	w.m.BinlogConnectorBehindFiles.WithLabelValues(name, c).Set(float64(lag.BehindFiles))
	if lag.HasHeadroom {
		w.m.BinlogConnectorPurgeHeadroom.WithLabelValues(name, c).Set(lag.Headroom.Seconds())
	} else {
		w.m.BinlogConnectorPurgeHeadroom.DeleteLabelValues(name, c)
	}
}

func (w *Watcher) dropBinlogConnector() {
	name, c := w.p.Name, w.p.Watch.Connector
	w.m.BinlogConnectorPosition.DeleteLabelValues(name, c)
	w.m.BinlogConnectorBehindBytes.DeleteLabelValues(name, c)
	w.m.BinlogConnectorBehindFiles.DeleteLabelValues(name, c)
	w.m.BinlogConnectorFilePurged.DeleteLabelValues(name, c)
	w.m.BinlogConnectorPurgeHeadroom.DeleteLabelValues(name, c)
}

func (w *Watcher) dropBinlog() {
	name := w.p.Name
	w.m.BinlogWritten.DeleteLabelValues(name)
	w.m.BinlogRetainedBytes.DeleteLabelValues(name)
	w.m.BinlogRetainedFiles.DeleteLabelValues(name)
	w.m.BinlogExpiry.DeleteLabelValues(name)
}
