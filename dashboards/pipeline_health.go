package dashboards

import (
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/debezium"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Label names of the watcher metrics that only this dashboard reads.
const (
	labelSlot      = "slot"
	labelWALStatus = "wal_status"
	labelGroup     = "group"
	labelTopic     = "topic"
	labelConnector = "connector"
	labelWatcher   = "watcher"
)

// pipelineHealth follows the runbook's order, database to consumer: is
// the outbox draining, is a transaction hiding rows, is the replication
// slot keeping up (CDC), is the connector running (CDC), are the business
// consumers keeping up, and can the database's clock be trusted.
// Sections that only CDC relays feed start collapsed when no pipeline of
// the configuration uses one.
func pipelineHealth(m *slo.Model) (dashboard.Dashboard, error) {
	q := newQueries(m)
	b := newDashboard(m, dashboardSpec{
		uid:   UIDPipelineHealth,
		title: "outbox-canary / pipeline health",
		about: "Backlog, transactions, replication slot, Kafka Connect, Debezium's own metrics, consumer lag and clocks of a pipeline, in runbook order.",
		from:  "now-6h",
	}).
		WithVariable(dashboard.NewQueryVariableBuilder(varDebeziumServer).
			Label("Debezium server").
			Description("The Debezium connectors, by topic.prefix, whose own metrics the Kafka Connect worker's JMX exporter reports (deploy/local/connect/jmx-exporter.yml): pick this pipeline's connector (watch.connector's topic.prefix).").
			Datasource(datasource()).
			Query(dashboard.StringOrMap{String: cog.ToPtr(q.debeziumServerValues())}).
			Definition(q.debeziumServerValues()).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			Current(multiOption("All", allValue)))

	cdc := false
	for _, p := range m.Pipelines {
		cdc = cdc || p.RelayKind == config.RelayCDC
	}
	a := m.Alerting

	sections := []section{
		{title: "Outbox backlog", cells: []cell{
			{timeSeries("Unpublished rows",
				"Outbox rows the relay has not published yet. A quiet pipeline stays near zero; a stalled relay makes it grow.",
				"short",
				query(q.maxBy(q.sel(slo.MetricBacklogRows)), "rows")).
				Min(0), 8, 8},
			{alertLine(timeSeries("Oldest unpublished row",
				"Age of the oldest unpublished row (a partial index keeps this cheap). The dashed line is where the backlog age alert fires.",
				"s",
				query(q.maxBy(q.sel(slo.MetricOldestUnpublishedAge)), "age")), time.Duration(a.OldestUnpublishedAge)), 8, 8},
			{timeSeries("Backlog growth",
				"Rows per second the backlog grows by; sustained growth over "+slo.PromDuration(time.Duration(a.BacklogGrowthFor))+" alerts.",
				"short",
				query("deriv("+q.maxBy(q.sel(slo.MetricBacklogRows))+"[$__rate_interval:])", "rows/s")), 8, 8},
		}},
		{title: "Open transactions", cells: []cell{
			{alertLine(timeSeries("Oldest open transaction",
				"Age of the oldest open transaction in the database: the outbox rows it wrote stay invisible to the relay until it commits. The dashed line is where the long transaction alert fires.",
				"s",
				query(q.maxBy(q.sel(slo.MetricOldestTransactionAge)), "age")), time.Duration(a.LongTransactionAge)), 12, 8},
			{timeSeries("Long transactions",
				"Open transactions older than watch.long_transaction_threshold.",
				"short",
				query(q.maxBy(q.sel(slo.MetricLongTransactions)), "transactions")).
				Min(0).Decimals(0), 12, 8},
		}},
		{title: "Replication slot (CDC relays)", collapsed: !cdc, cells: []cell{
			{statPanel("Slot active",
				"Whether a consumer (the connector) is attached to the replication slot. An inactive slot retains WAL until the disk fills.",
				"short",
				instant(q.minBy(q.sel(slo.MetricSlotActive), labelSlot), "{{slot}}")).
				ColorMode(common.BigValueColorModeBackground).
				Mappings(stateMapping("inactive", "active", "red", "green")), 4, 8},
			{statPanel("WAL status",
				"The slot's wal_status: reserved and extended are fine, unreserved means WAL is about to be removed, lost means the slot is broken and the connector must be re-snapshotted.",
				"short",
				instant(q.maxBy(q.sel(slo.MetricSlotWALStatus)+" == 1", labelSlot, labelWALStatus), "{{slot}}: {{wal_status}}")).
				TextMode(common.BigValueTextModeName).
				ColorMode(common.BigValueColorModeBackground).
				OverrideByRegexp(".*: reserved", []dashboard.DynamicConfigValue{fixedColor("green")}).
				OverrideByRegexp(".*: extended", []dashboard.DynamicConfigValue{fixedColor("yellow")}).
				OverrideByRegexp(".*: unreserved", []dashboard.DynamicConfigValue{fixedColor("orange")}).
				OverrideByRegexp(".*: lost", []dashboard.DynamicConfigValue{fixedColor("red")}), 4, 8},
			{timeSeries("Slot WAL",
				"WAL the slot retains (from restart_lsn), WAL its consumer has not confirmed (from confirmed_flush_lsn), and WAL that can still be written before the slot is in danger (absent when max_slot_wal_keep_size is unlimited).",
				"bytes",
				query(q.maxBy(q.sel(slo.MetricSlotRetainedWAL), labelSlot), "{{slot}} retained"),
				query(q.maxBy(q.sel(slo.MetricSlotUnconfirmedWAL), labelSlot), "{{slot}} unconfirmed"),
				query(q.minBy(q.sel(slo.MetricSlotSafeWALSize), labelSlot), "{{slot}} safe size")).
				Min(0), 16, 8},
		}},
	}
	if m.CapturesBinlog() {
		// Only with a pipeline on a MySQL binlog, so the dashboards of a
		// configuration without one stay as they were.
		sections = append(sections, binlogSection(q))
	}
	sections = append(sections, []section{
		{title: "Kafka Connect (CDC relays)", collapsed: !cdc, cells: []cell{
			{statPanel("Connector",
				"Whether the connector and all its tasks are RUNNING.",
				"short",
				instant(q.minBy(q.sel(slo.MetricConnectorRunning), labelConnector), "{{connector}}")).
				ColorMode(common.BigValueColorModeBackground).
				Mappings(stateMapping("not running", "running", "red", "green")), 6, 8},
			{timeSeries("Failed tasks",
				"Tasks of the connector in state FAILED.",
				"short",
				query(q.maxBy(q.sel(slo.MetricConnectorTaskFailures), labelConnector), "{{connector}}")).
				Min(0).Decimals(0), 9, 8},
			{timeSeries("Restarts requested",
				"Restarts of the connector or its tasks that outbox-canary requested.",
				"short",
				query(q.maxBy("increase("+q.sel(slo.MetricConnectorRestarts)+"[$__rate_interval])", labelConnector), "{{connector}}")).
				Min(0), 9, 8},
		}},
		{title: "Debezium (CDC relays)", collapsed: !cdc, cells: []cell{
			{timeSeries("Commit to publish beside behind source",
				"The canary's commit_to_publish p99 (this pipeline) beside Debezium's MilliSecondsBehindSource of the connectors picked in Debezium server (their topic.prefix): "+
					"how late after its commit the last change event was read from the log. Publish on LogAppendTime topics adds Debezium's queue and the producer to what the canary sees; "+
					"behind source alone stays where it was while no event comes (docs/cdc.md).",
				"s",
				query(q.quantile("0.99", q.sel(slo.MetricSegmentLatency+"_bucket", slo.LabelSegment+`="`+config.SegmentName(config.StampCommit, config.StampPublish)+`"`)), "{{segment}} p99 (canary)"),
				query(q.maxBy(q.debezium(debezium.MetricBehindSource), debezium.LabelServer)+" / 1000", "{{server}} behind source (Debezium)")).
				Min(0), 12, 8},
			{timeSeries("Debezium queue",
				"Free slots of the queue between Debezium's log reader and its Kafka producer (max.queue.size). Near zero, the producer side is slow: the queue wait the canary sees as commit_to_publish.",
				"short",
				query(q.minBy(q.debezium(debezium.MetricQueueRemaining), debezium.LabelServer), "{{server}} remaining"),
				query(q.maxBy(q.debezium(debezium.MetricQueueTotal), debezium.LabelServer), "{{server}} total")).
				Min(0), 12, 8},
			{statPanel("Connected",
				"Whether Debezium holds its connection to the database's log (slot or binlog). It says the stream is up between canaries, and a task that retries a lost connection inside itself, which Connect still calls RUNNING.",
				"short",
				instant(q.minBy(q.debezium(debezium.MetricConnected), debezium.LabelServer), "{{server}}")).
				ColorMode(common.BigValueColorModeBackground).
				Mappings(stateMapping("disconnected", "connected", "red", "green")), 6, 8},
			{statPanel("Snapshot running",
				"Whether a snapshot runs: the stream waits behind it.",
				"short",
				instant(q.maxBy(q.debezium(debezium.MetricSnapshotRunning), debezium.LabelServer), "{{server}}")).
				ColorMode(common.BigValueColorModeBackground).
				Mappings(stateMapping("no", "running", "green", "orange")), 6, 8},
			{timeSeries("Change events read",
				"Change events Debezium reads from the log per second (TotalNumberOfEventsSeen): every table it captures, canaries included.",
				"cps",
				query(q.sumBy(rate(q.debezium(debezium.MetricEventsSeen)), debezium.LabelServer), "{{server}}")).
				Min(0), 12, 8},
		}},
		{title: "Business consumers", cells: []cell{
			{timeSeries("Consumer lag (messages)",
				"Messages each watched consumer group (watch.consumer_groups) has yet to consume.",
				"short",
				query(q.maxBy(q.sel(slo.MetricConsumerLagMessages), labelGroup, labelTopic), "{{group}} on {{topic}}")).
				Min(0), 12, 8},
			{timeSeries("Consumer lag (time)",
				"Age of the oldest message each watched consumer group has yet to consume.",
				"s",
				query(q.maxBy(q.sel(slo.MetricConsumerLagSeconds), labelGroup, labelTopic), "{{group}} on {{topic}}")).
				Min(0), 12, 8},
		}},
		{title: "Clocks and watchers", cells: []cell{
			{timeSeries("Database clock offset",
				"Database clock minus prober clock, with its error bound (half the round trip of the best sample), per prober instance: each measures its own. Stamps taken by the database are corrected by it.",
				"s",
				query(q.sumBy(q.sel(slo.MetricDBClockOffset), labelInstance), "{{instance}} offset"),
				query(q.sumBy(q.sel(slo.MetricDBClockOffset), labelInstance)+" - "+q.sumBy(q.sel(slo.MetricDBClockOffsetError), labelInstance), "{{instance}} lower bound"),
				query(q.sumBy(q.sel(slo.MetricDBClockOffset), labelInstance)+" + "+q.sumBy(q.sel(slo.MetricDBClockOffsetError), labelInstance), "{{instance}} upper bound")).
				OverrideByQuery("B", dottedGrey()).
				OverrideByQuery("C", dottedGrey()), 12, 8},
			{timeSeries("Watcher errors",
				"Failed runs of each watcher: its panels above may be stale or empty while it fails.",
				"cps",
				query(q.sumBy(rate(q.sel(slo.MetricWatchErrors)), labelWatcher), "{{watcher}}")), 12, 8},
		}},
	}...)
	return finish(b, sections)
}

// binlogSection is the replication slot's section for a connector reading
// a MySQL binlog: whether the file it must read next is still kept and for
// how long, how far behind the server it is, and what the server keeps.
// The file page's headroom threshold is drawn where the alert fires.
func binlogSection(q queries) section {
	return section{title: "Binlog (MySQL CDC relays)", cells: []cell{
		{statPanel("Connector's binlog file",
			"Whether the binlog file holding the connector's committed position is still on the server. Purged, the connector cannot resume from its offset: it must be re-created with a new snapshot (the analogue of a lost slot).",
			"short",
			instant(q.maxBy(q.sel(slo.MetricBinlogConnectorFilePurged), labelConnector), "{{connector}}")).
			ColorMode(common.BigValueColorModeBackground).
			Mappings(stateMapping("kept", "purged", "green", "red")), 4, 8},
		{statPanel("Purge headroom",
			"At least how long until binlog expiry may purge the connector's unread file (binlog_expire_logs_seconds minus the age of the last event it read there). Empty while the connector reads the current file or expiry is off: nothing to purge.",
			"s",
			instant(q.minBy(q.sel(slo.MetricBinlogConnectorPurgeHeadroom), labelConnector), "{{connector}}")).
			ColorMode(common.BigValueColorModeBackground).
			Thresholds(thresholds(step{nil, "red"}, step{at(slo.BinlogPurgeHeadroom.Seconds()), "green"})), 4, 8},
		{timeSeries("Connector behind the binlog",
			"Binlog the server has written past the connector's committed position. Debezium commits its offset every offset.flush.interval.ms, so a healthy connector's line is a sawtooth back near zero at each commit; a line that never comes down is a connector falling behind.",
			"bytes",
			query(q.maxBy(q.sel(slo.MetricBinlogConnectorBehindBytes), labelConnector), "{{connector}} behind")).
			Min(0), 8, 8},
		{timeSeries("Binlog kept",
			"Binlog files the server keeps, their total size, and the files between the connector's and the current one.",
			"bytes",
			query(q.maxBy(q.sel(slo.MetricBinlogRetainedBytes)), "retained"),
			query(q.maxBy(q.sel(slo.MetricBinlogRetainedFiles)), "files retained"),
			query(q.maxBy(q.sel(slo.MetricBinlogConnectorBehindFiles), labelConnector), "{{connector}} files behind")).
			OverrideByQuery("B", []dashboard.DynamicConfigValue{{Id: "unit", Value: "short"}, {Id: "custom.axisPlacement", Value: "right"}}).
			OverrideByQuery("C", []dashboard.DynamicConfigValue{{Id: "unit", Value: "short"}, {Id: "custom.axisPlacement", Value: "right"}}).
			Min(0), 8, 8},
	}}
}

// alertLine draws a dashed red line where an alert fires on the panel's
// series, a duration converted to the panel's seconds.
func alertLine(p *timeseries.PanelBuilder, threshold time.Duration) *timeseries.PanelBuilder {
	return p.
		Min(0).
		Thresholds(thresholds(step{nil, "green"}, step{at(threshold.Seconds()), "red"})).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
}

// dottedGrey draws a bound, not a measurement.
func dottedGrey() []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{
		fixedColor("text"),
		{Id: "custom.lineStyle", Value: map[string]any{"fill": "dot", "dash": []int{0, 10}}},
		{Id: "custom.fillOpacity", Value: 0},
	}
}
