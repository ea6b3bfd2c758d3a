// Package slo holds budgets, objectives and burn-rate math for outbox-canary.
// It knows nothing of Kafka or SQL: the prober exports the metrics named
// here, and alerts and dashboards read the same names, so the contract
// between what is measured and what is alerted on lives in one place.
package slo

import "time"

// Metric names exported by the prober. Labels: pipeline always; segment on
// per-segment series; outcome on SLI events.
const (
	MetricBuildInfo = "outbox_canary_build_info"

	// Canary lifecycle, per pipeline.
	MetricCanariesSent          = "outbox_canary_canaries_sent_total"          // committed canary inserts
	MetricCanaryInsertFailures  = "outbox_canary_canary_insert_failures_total" // inserts that failed (not SLI events)
	MetricCanariesReceived      = "outbox_canary_canaries_received_total"      // first arrivals of our canaries
	MetricCanariesLate          = "outbox_canary_canaries_late_total"          // first arrivals after the end_to_end deadline
	MetricCanariesLost          = "outbox_canary_canaries_lost_total"          // never arrived within lost_after
	MetricCanariesDuplicate     = "outbox_canary_canaries_duplicate_total"     // second and later arrivals
	MetricCanariesOutOfOrder    = "outbox_canary_canaries_out_of_order_total"  // arrived after a later canary of the same key
	MetricMessagesSkipped       = "outbox_canary_messages_skipped_total"       // label reason: foreign_instance, malformed, bad_signature, unknown_canary
	MetricConsumerOffsetResets  = "outbox_canary_consumer_offset_resets_total" // stored offset beyond the partition's end: read again from the start position
	MetricCanariesInFlight      = "outbox_canary_canaries_in_flight"           // sent, not yet arrived nor lost
	MetricLastSentTimestamp     = "outbox_canary_last_sent_timestamp_seconds"
	MetricLastReceivedTimestamp = "outbox_canary_last_received_timestamp_seconds"
	MetricLastSuccessTimestamp  = "outbox_canary_last_success_timestamp_seconds" // last canary good end to end

	// Per segment.
	MetricSegmentLatency = "outbox_canary_segment_latency_seconds" // histogram, label segment
	MetricSLIEvents      = "outbox_canary_sli_events_total"        // labels segment, outcome=good|bad
	MetricClockSkew      = "outbox_canary_clock_skew_suspected_total"
	MetricSegmentBudget  = "outbox_canary_segment_budget_seconds" // gauge: the configured budget, for dashboards
	// MetricSLOObjective is one series per SLO (ObjectiveSeries): the
	// generated rules read each SLO's objective and labels from it, so
	// that they are written once per SLO window, not once per SLO.
	MetricSLOObjective  = "outbox_canary_slo_objective_ratio"
	MetricStampsMissing = "outbox_canary_stamps_missing_total" // label stamp: arrivals without a configured stamp (their segments are not judged)

	// The prober's own dependencies (its database pool and its canary
	// readers), label dependency: database or kafka.
	MetricDependencyUp     = "outbox_canary_dependency_up"
	MetricDependencyErrors = "outbox_canary_dependency_errors_total"

	// Clocks.
	MetricDBClockOffset      = "outbox_canary_db_clock_offset_seconds"       // DB clock minus prober clock
	MetricDBClockOffsetError = "outbox_canary_db_clock_offset_error_seconds" // half the best sample's RTT

	// Watchers (database, relay, consumers).
	MetricBacklogRows           = "outbox_canary_outbox_backlog_rows"
	MetricOldestUnpublishedAge  = "outbox_canary_outbox_oldest_unpublished_age_seconds"
	MetricWatchErrors           = "outbox_canary_watch_errors_total" // label watcher
	MetricSlotRetainedWAL       = "outbox_canary_replication_slot_retained_wal_bytes"
	MetricSlotUnconfirmedWAL    = "outbox_canary_replication_slot_unconfirmed_wal_bytes"
	MetricSlotActive            = "outbox_canary_replication_slot_active"
	MetricSlotWALStatus         = "outbox_canary_replication_slot_wal_status" // 1 for the current wal_status label
	MetricSlotSafeWALSize       = "outbox_canary_replication_slot_safe_wal_size_bytes"
	MetricOldestTransactionAge  = "outbox_canary_oldest_transaction_age_seconds"
	MetricLongTransactions      = "outbox_canary_long_transactions"
	MetricConsumerLagMessages   = "outbox_canary_consumer_group_lag_messages" // labels group, topic
	MetricConsumerLagSeconds    = "outbox_canary_consumer_group_lag_seconds"
	MetricConnectorRunning      = "outbox_canary_connector_running"        // label connector
	MetricConnectorTaskFailures = "outbox_canary_connector_task_failed"    // label connector
	MetricConnectorRestarts     = "outbox_canary_connector_restarts_total" // label connector
	// MySQL and MariaDB: the binlog that log capture reads.
	MetricBinlogWritten       = "outbox_canary_binlog_written_bytes"
	MetricBinlogRetainedBytes = "outbox_canary_binlog_retained_bytes"
	MetricBinlogRetainedFiles = "outbox_canary_binlog_retained_files"
	MetricBinlogExpiry        = "outbox_canary_binlog_expire_seconds"
	// The connector's committed binlog position (label connector).
	MetricBinlogConnectorPosition      = "outbox_canary_binlog_connector_position_bytes"
	MetricBinlogConnectorBehindBytes   = "outbox_canary_binlog_connector_behind_bytes"
	MetricBinlogConnectorBehindFiles   = "outbox_canary_binlog_connector_behind_files"
	MetricBinlogConnectorFilePurged    = "outbox_canary_binlog_connector_file_purged"
	MetricBinlogConnectorPurgeHeadroom = "outbox_canary_binlog_connector_purge_headroom_seconds"

	// Whether the prober can see. A failing watcher deletes its data
	// gauges, so an alert on them cannot read an old value as healthy.
	MetricWatcherUp          = "outbox_canary_watcher_up"                             // label watcher: 1 if its last sample succeeded, else 0
	MetricWatcherLastSuccess = "outbox_canary_watcher_last_success_timestamp_seconds" // label watcher
	MetricCanariesUnjudged   = "outbox_canary_canaries_unjudged_total"                // labels segment, reason: canaries no segment's owner is charged for
	MetricStampOrder         = "outbox_canary_stamp_order_total"                      // label segment: negative segments explained by a late stamp, not skew
	MetricStampsInvalid      = "outbox_canary_stamps_invalid_total"                   // labels stamp, reason: stamps far outside [commit, consume]
	MetricStateResets        = "outbox_canary_state_resets_total"                     // label reason: state files moved aside (corrupt, other version)
	MetricStateWriteFailures = "outbox_canary_state_write_failures_total"             // state writes that failed (the state stays in memory)
	MetricStateTornRecords   = "outbox_canary_state_torn_records_total"               // journal records torn by a crash, ignored on load
)

// Watchers, the values of the watcher label.
const (
	WatcherBacklog          = "backlog"
	WatcherTransactions     = "transactions"
	WatcherReplicationSlots = "replication_slots"
	WatcherConsumerLag      = "consumer_lag"
	WatcherConnector        = "connector"
	WatcherBinlog           = "binlog"
	WatcherBinlogConnector  = "binlog_connector"
)

// Dependencies of the prober itself, the values of the dependency label.
const (
	DependencyDatabase = "database"
	DependencyKafka    = "kafka"
)

// Reasons of MetricMessagesSkipped that alerts read.
const ReasonBadSignature = "bad_signature"

// Label names and values.
const (
	LabelPipeline = "pipeline"
	LabelSegment  = "segment"
	LabelOutcome  = "outcome"
	LabelReason   = "reason"
	LabelOwner    = "owner"
	// LabelWatcher and LabelDependency name what cannot be seen.
	LabelWatcher    = "watcher"
	LabelDependency = "dependency"
	// LabelGroup and LabelTopic name a watched business consumer group.
	LabelGroup = "group"
	LabelTopic = "topic"
	// Sloth's labels of an SLO's series, and ours for its period.
	LabelSlothID        = "sloth_id"
	LabelSlothService   = "sloth_service"
	LabelSlothSLO       = "sloth_slo"
	LabelSlothObjective = "sloth_objective"
	LabelSLOWindow      = "slo_window"
	LabelSLOBudget      = "slo_budget"
	LabelCanaryInterval = "canary_interval"
	LabelStallThreshold = "stall_threshold"
	LabelBlameOrder     = "blame_order"
	LabelRelayKind      = "relay_kind"
	LabelDatabaseFamily = "database_family"
	LabelSlot           = "slot"
	LabelRelayOwner     = "relay_owner"
	LabelRelaySegment   = "relay_segment"
	LabelInsertOwner    = "insert_owner"
	LabelDefaultOwner   = "default_owner"
	LabelProberOwner    = "prober_owner"

	OutcomeGood = "good"
	OutcomeBad  = "bad"
)

// Series recorded by the generated rules (package alerts) and read by the
// dashboards. They are named as Sloth names them, so Sloth's own
// dashboards and tools read them too. Each carries sloth_id, sloth_service
// and sloth_slo, and the pipeline, segment and owner labels.
const (
	RecordObjective      = "slo:objective:ratio"
	RecordErrorBudget    = "slo:error_budget:ratio"
	RecordTimePeriodDays = "slo:time_period:days"
	// RecordCurrentBurnRate is the burn rate over CurrentBurnWindow.
	RecordCurrentBurnRate = "slo:current_burn_rate:ratio"
	// RecordPeriodBurnRate is the burn rate over the whole SLO window.
	RecordPeriodBurnRate             = "slo:period_burn_rate:ratio"
	RecordPeriodErrorBudgetRemaining = "slo:period_error_budget_remaining:ratio"
	RecordSLOInfo                    = "sloth_slo_info"

	// RecordSLIDataTimestamp is ours, not Sloth's: the evaluation time
	// whenever the SLO had SLI events in CurrentBurnWindow. Its minimum
	// over the SLO window is when the data Prometheus holds begins.
	RecordSLIDataTimestamp = "slo:sli_data:timestamp"
	// RecordPeriodCoverage is ours: the share of the SLO window that
	// Prometheus holds data for, 0 to 1. Below 1 (a fresh Prometheus, or
	// a retention shorter than the window) the period burn rate and
	// budget remaining count the part without data as good.
	RecordPeriodCoverage = "slo:period_coverage:ratio"
)

// Dashboard UIDs of the generated Grafana dashboards: alerts link them
// (alerting.dashboard_url), so both packages read them from here.
const (
	DashboardSLOOverview    = "outbox-canary-slo-overview"
	DashboardSegmentLatency = "outbox-canary-segment-latency"
	DashboardPipelineHealth = "outbox-canary-pipeline-health"
)

// RecordSLIError is the name of the recorded error ratio (bad SLI events
// over all of them) over a window, e.g. slo:sli_error:ratio_rate5m.
func RecordSLIError(w time.Duration) string {
	return "slo:sli_error:ratio_rate" + PromDuration(w)
}
