package watch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/metricsdoc"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Label names of the watchers' series besides pipeline.
const (
	labelWatcher   = slo.LabelWatcher
	labelSlot      = "slot"
	labelWALStatus = "wal_status"
	labelGroup     = slo.LabelGroup
	labelTopic     = slo.LabelTopic
	labelConnector = "connector"
)

var (
	lp  = []string{slo.LabelPipeline}
	lpw = []string{slo.LabelPipeline, labelWatcher}
	lps = []string{slo.LabelPipeline, labelSlot}
	lpc = []string{slo.LabelPipeline, labelConnector}
)

// catalogue is what the watchers export, in the order of docs/metrics.md.
var catalogue = []metricsdoc.Family{
	{Name: slo.MetricWatcherUp, Type: metricsdoc.Gauge, Labels: lpw,
		Help: "1 if the watcher's last sample succeeded, 0 if it failed (its data series are then removed, so no alert reads an old value as healthy)."},
	{Name: slo.MetricWatcherLastSuccess, Type: metricsdoc.Gauge, Labels: lpw,
		Help: "Unix time of the watcher's last successful sample."},
	{Name: slo.MetricWatchErrors, Type: metricsdoc.Counter, Labels: lpw,
		Help: "Failed watcher samples, by watcher."},
	{Name: slo.MetricBacklogRows, Type: metricsdoc.Gauge, Labels: lp,
		Help: "Outbox rows not yet published."},
	{Name: slo.MetricOldestUnpublishedAge, Type: metricsdoc.Gauge, Labels: lp,
		Help: "Age of the oldest unpublished outbox row; 0 when there is none."},
	{Name: slo.MetricOldestTransactionAge, Type: metricsdoc.Gauge, Labels: lp,
		Help: "Age of the oldest open transaction in the database; its outbox rows stay invisible until it commits."},
	{Name: slo.MetricLongTransactions, Type: metricsdoc.Gauge, Labels: lp,
		Help: "Open transactions older than watch.long_transaction_threshold."},
	{Name: slo.MetricSlotRetainedWAL, Type: metricsdoc.Gauge, Labels: lps,
		Help: "WAL retained by the replication slot (current LSN minus restart_lsn)."},
	{Name: slo.MetricSlotUnconfirmedWAL, Type: metricsdoc.Gauge, Labels: lps,
		Help: "WAL not yet confirmed by the slot's consumer (current LSN minus confirmed_flush_lsn)."},
	{Name: slo.MetricSlotActive, Type: metricsdoc.Gauge, Labels: lps,
		Help: "1 if a consumer is attached to the replication slot, else 0."},
	{Name: slo.MetricSlotWALStatus, Type: metricsdoc.Gauge, Labels: []string{slo.LabelPipeline, labelSlot, labelWALStatus},
		Help: "1 for the slot's current wal_status (reserved, extended, unreserved, lost), 0 for the others."},
	{Name: slo.MetricSlotSafeWALSize, Type: metricsdoc.Gauge, Labels: lps,
		Help: "WAL that can still be written before the slot is in danger of losing required WAL; absent when unlimited."},
	{Name: slo.MetricBinlogWritten, Type: metricsdoc.Gauge, Labels: lp,
		Help: "MySQL/MariaDB: the server's binlog write position as bytes (the sizes of the files before the current one plus its position), for cdc pipelines; its rate is the binlog written per second."},
	{Name: slo.MetricBinlogRetainedBytes, Type: metricsdoc.Gauge, Labels: lp,
		Help: "MySQL/MariaDB: total size of the binlog files the server keeps."},
	{Name: slo.MetricBinlogRetainedFiles, Type: metricsdoc.Gauge, Labels: lp,
		Help: "MySQL/MariaDB: binlog files the server keeps."},
	{Name: slo.MetricBinlogExpiry, Type: metricsdoc.Gauge, Labels: lp,
		Help: "MySQL/MariaDB: binlog_expire_logs_seconds, after which the server purges a binlog file whether or not a connector has read it; 0 when never."},
	{Name: slo.MetricBinlogConnectorPosition, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "MySQL/MariaDB: the connector's committed binlog position (Kafka Connect's offsets API) as bytes on the scale of outbox_canary_binlog_written_bytes; absent when its file is purged."},
	{Name: slo.MetricBinlogConnectorBehindBytes, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "MySQL/MariaDB: binlog bytes the server has written past the connector's committed position; absent when its file is purged."},
	{Name: slo.MetricBinlogConnectorBehindFiles, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "MySQL/MariaDB: binlog files between the connector's committed file and the one the server writes (0: the same file)."},
	{Name: slo.MetricBinlogConnectorFilePurged, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "MySQL/MariaDB: 1 if the connector's committed binlog file is older than the oldest the server keeps (purged before it was read: the connector cannot resume; the analogue of wal_status lost), else 0."},
	{Name: slo.MetricBinlogConnectorPurgeHeadroom, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "MySQL/MariaDB: at least how long until binlog expiry may purge the connector's committed file: binlog_expire_logs_seconds minus the age of the last event it read there; absent while it reads the current file or expiry is off, negative when due."},
	{Name: slo.MetricConsumerLagMessages, Type: metricsdoc.Gauge, Labels: []string{slo.LabelPipeline, labelGroup, labelTopic},
		Help: "Messages a watched business consumer group has yet to consume, by group and topic."},
	{Name: slo.MetricConsumerLagSeconds, Type: metricsdoc.Gauge, Labels: []string{slo.LabelPipeline, labelGroup, labelTopic},
		Help: "Age of the oldest message a watched consumer group has yet to consume, by group and topic."},
	{Name: slo.MetricConnectorRunning, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "1 if the Kafka Connect connector and all its tasks are RUNNING, else 0."},
	{Name: slo.MetricConnectorTaskFailures, Type: metricsdoc.Gauge, Labels: lpc,
		Help: "Tasks of the Kafka Connect connector in state FAILED."},
	{Name: slo.MetricConnectorRestarts, Type: metricsdoc.Counter, Labels: lpc,
		Help: "Restarts of the connector or its tasks seen by sampling Kafka Connect's status (a lower bound: restarts between samples are missed)."},
}

// Catalogue describes every family the watchers export.
func Catalogue() []metricsdoc.Family {
	return metricsdoc.Clone(catalogue)
}

func family(name string) metricsdoc.Family {
	f, _ := metricsdoc.Find(catalogue, name) // every name used here is in the catalogue (TestMetricsDoc)
	return f
}

// Metrics are the watchers' series. Created empty: a series appears once
// its watcher has measured something, so a watcher that is not configured
// does not report a reassuring zero, and one that fails removes its data.
type Metrics struct {
	Up                           *compactvec.GaugeVec   // pipeline, watcher
	LastSuccess                  *compactvec.GaugeVec   // pipeline, watcher
	Errors                       *compactvec.CounterVec // pipeline, watcher
	BacklogRows                  *compactvec.GaugeVec   // pipeline
	OldestUnpublishedAge         *compactvec.GaugeVec   // pipeline
	OldestTransactionAge         *compactvec.GaugeVec   // pipeline
	LongTransactions             *compactvec.GaugeVec   // pipeline
	SlotRetainedWAL              *compactvec.GaugeVec   // pipeline, slot
	SlotUnconfirmedWAL           *compactvec.GaugeVec   // pipeline, slot
	SlotActive                   *compactvec.GaugeVec   // pipeline, slot
	SlotWALStatus                *compactvec.GaugeVec   // pipeline, slot, wal_status
	SlotSafeWALSize              *compactvec.GaugeVec   // pipeline, slot
	BinlogWritten                *compactvec.GaugeVec   // pipeline
	BinlogRetainedBytes          *compactvec.GaugeVec   // pipeline
	BinlogRetainedFiles          *compactvec.GaugeVec   // pipeline
	BinlogExpiry                 *compactvec.GaugeVec   // pipeline
	BinlogConnectorPosition      *compactvec.GaugeVec   // pipeline, connector
	BinlogConnectorBehindBytes   *compactvec.GaugeVec   // pipeline, connector
	BinlogConnectorBehindFiles   *compactvec.GaugeVec   // pipeline, connector
	BinlogConnectorFilePurged    *compactvec.GaugeVec   // pipeline, connector
	BinlogConnectorPurgeHeadroom *compactvec.GaugeVec   // pipeline, connector
	ConsumerLagMessages          *compactvec.GaugeVec   // pipeline, group, topic
	ConsumerLagSeconds           *compactvec.GaugeVec   // pipeline, group, topic
	ConnectorRunning             *compactvec.GaugeVec   // pipeline, connector
	ConnectorTaskFailures        *compactvec.GaugeVec   // pipeline, connector
	ConnectorRestarts            *compactvec.CounterVec // pipeline, connector
}

// NewMetrics creates and registers the watchers' series.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Up:                           family(slo.MetricWatcherUp).GaugeVec(),
		LastSuccess:                  family(slo.MetricWatcherLastSuccess).GaugeVec(),
		Errors:                       family(slo.MetricWatchErrors).CounterVec(),
		BacklogRows:                  family(slo.MetricBacklogRows).GaugeVec(),
		OldestUnpublishedAge:         family(slo.MetricOldestUnpublishedAge).GaugeVec(),
		OldestTransactionAge:         family(slo.MetricOldestTransactionAge).GaugeVec(),
		LongTransactions:             family(slo.MetricLongTransactions).GaugeVec(),
		SlotRetainedWAL:              family(slo.MetricSlotRetainedWAL).GaugeVec(),
		SlotUnconfirmedWAL:           family(slo.MetricSlotUnconfirmedWAL).GaugeVec(),
		SlotActive:                   family(slo.MetricSlotActive).GaugeVec(),
		SlotWALStatus:                family(slo.MetricSlotWALStatus).GaugeVec(),
		SlotSafeWALSize:              family(slo.MetricSlotSafeWALSize).GaugeVec(),
		BinlogWritten:                family(slo.MetricBinlogWritten).GaugeVec(),
		BinlogRetainedBytes:          family(slo.MetricBinlogRetainedBytes).GaugeVec(),
		BinlogRetainedFiles:          family(slo.MetricBinlogRetainedFiles).GaugeVec(),
		BinlogExpiry:                 family(slo.MetricBinlogExpiry).GaugeVec(),
		BinlogConnectorPosition:      family(slo.MetricBinlogConnectorPosition).GaugeVec(),
		BinlogConnectorBehindBytes:   family(slo.MetricBinlogConnectorBehindBytes).GaugeVec(),
		BinlogConnectorBehindFiles:   family(slo.MetricBinlogConnectorBehindFiles).GaugeVec(),
		BinlogConnectorFilePurged:    family(slo.MetricBinlogConnectorFilePurged).GaugeVec(),
		BinlogConnectorPurgeHeadroom: family(slo.MetricBinlogConnectorPurgeHeadroom).GaugeVec(),
		ConsumerLagMessages:          family(slo.MetricConsumerLagMessages).GaugeVec(),
		ConsumerLagSeconds:           family(slo.MetricConsumerLagSeconds).GaugeVec(),
		ConnectorRunning:             family(slo.MetricConnectorRunning).GaugeVec(),
		ConnectorTaskFailures:        family(slo.MetricConnectorTaskFailures).GaugeVec(),
		ConnectorRestarts:            family(slo.MetricConnectorRestarts).CounterVec(),
	}
	for _, c := range []prometheus.Collector{
		m.Up, m.LastSuccess, m.Errors, m.BacklogRows, m.OldestUnpublishedAge, m.OldestTransactionAge, m.LongTransactions,
		m.SlotRetainedWAL, m.SlotUnconfirmedWAL, m.SlotActive, m.SlotWALStatus, m.SlotSafeWALSize,
		m.BinlogWritten, m.BinlogRetainedBytes, m.BinlogRetainedFiles, m.BinlogExpiry,
		m.BinlogConnectorPosition, m.BinlogConnectorBehindBytes, m.BinlogConnectorBehindFiles,
		m.BinlogConnectorFilePurged, m.BinlogConnectorPurgeHeadroom,
		m.ConsumerLagMessages, m.ConsumerLagSeconds, m.ConnectorRunning, m.ConnectorTaskFailures, m.ConnectorRestarts,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register watcher metrics: %w", err)
		}
	}
	return m, nil
}
