package alerts

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	// clockSkewWindowMin: a skew ticket needs flagged canaries in every
	// 5-minute window (or two canary intervals, if longer) for three such
	// windows (clockSkewFor), at least four flagged canaries, so one
	// flagged canary, which holds the condition for one window, never
	// tickets.
	clockSkewWindowMin = 5 * time.Minute
	// slotInactiveFor rides out a connector restart.
	slotInactiveFor = 5 * time.Minute
	// oldestUnpublishedFor rides out the spike of rows that a long
	// transaction commits late with an old created_at, which the relay
	// then publishes at once.
	oldestUnpublishedFor = time.Minute
	// backlogDerivRange is the range of deriv() for backlog growth: long
	// enough to smooth a polling relay's batch sawtooth.
	backlogDerivRange = 5 * time.Minute
	// insertWindowMin is the shortest window the insert failure alert
	// looks back over.
	insertWindowMin = 5 * time.Minute
	// stallBlameMargin widens the window in which a stalled canary's bad
	// event is looked for beyond the stall threshold: by two scrapes of up
	// to a minute, so the window always holds a sample from before the
	// first bad event and one after it.
	stallBlameMargin = 2 * time.Minute
	// watcherFailingFor is how long a watcher must keep failing before
	// its ticket: a dozen or so failed samples at the default interval,
	// not one timeout.
	watcherFailingFor = 2 * time.Minute
	// dependencyDownFor rides out a broker or database restart (a Kafka
	// restart on a loaded machine has taken 38 s).
	dependencyDownFor = 2 * time.Minute
	// connectorTaskFailedFor rides out a task that Connect restarts by
	// itself (errors.retry, a rebalance).
	connectorTaskFailedFor = time.Minute
	// consumerLagFor is how long a business consumer group must stay
	// behind the end-to-end budget: consumers that batch or rebalance are
	// briefly behind all the time.
	consumerLagFor = 5 * time.Minute
	// badSignatureWindow and badSignatureBurst: this many messages with a
	// bad signature in the window is a burst, not a stray test message.
	badSignatureWindow = 10 * time.Minute
	badSignatureBurst  = 3
	// walGrowthFloor is how much WAL a slot must retain before its growth
	// is worth a ticket: one WAL segment at PostgreSQL's default
	// wal_segment_size. On a quiet database a healthy slot's retained WAL
	// is a sawtooth of a few kilobytes whose slope over the window is as
	// often positive as not (make detect: 2.6 to 5.3 kB, the ticket
	// pending within minutes of a fresh Prometheus, docs/detection.md);
	// and PostgreSQL keeps min_wal_size (80 MB by default) of WAL in any
	// case, so less than a segment retained costs no disk.
	walGrowthFloor = 16 << 20
	// binlogBehindFloor is how far behind the server's binlog a connector
	// must stay before its growth is worth a ticket, for the slot's
	// reason: less costs no disk worth a ticket, and Debezium commits its
	// offset only every offset.flush.interval.ms (a minute by default),
	// so a healthy connector's committed position trails by that much of
	// binlog.
	binlogBehindFloor = walGrowthFloor
	// binlogPurgeHeadroomFor rides out the minute after a binlog rotation
	// in which a healthy connector's committed file is the previous one
	// (its offset is committed once a minute by default).
	binlogPurgeHeadroomFor = 5 * time.Minute
)

// labelBinlogFile tells OutboxBinlogUnreadFileAtRisk's two cases apart:
// the connector's file is purged, or expiry may purge it soon.
const labelBinlogFile = "binlog_file"

// labelSlot is the prober's replication slot label (pg_replication_slots'
// slot_name).
const labelSlot = "slot"

// pipelineAlerts are the alerts beyond the SLOs for one pipeline: the ones
// that tell a stall from a quiet pipeline fast, the watchers' backlog,
// slot, connector, consumer and transaction signals that point at the
// failing stage, and the ones that say when the prober cannot see.
//
// Several prober replicas may measure the pipeline, each scraped as its
// own target (its own instance, pod, ... labels). Every alert aggregates
// by the pipeline, the scope and its own labels (slot, connector, ...),
// never by what tells replicas apart, so it is one alert per pipeline
// whatever the number of replicas, and Alertmanager sees one label set.
// Which replicas must see a fault depends on what the series are:
//
//   - The watchers' gauges (backlog, slot, connector, binlog, consumer
//     lag, transactions) are readings of one source (the database, Kafka
//     Connect, Kafka) that every replica reads alike: a reading is a fact
//     whichever replica took it, and a replica that did not report it has
//     read a moment earlier, or cannot read and has withdrawn its gauges.
//     So the worst reading counts (max; min for a state that is bad at 0).
//   - What a replica sees of its own sight (its connections, its watchers,
//     its inserts, its clock's skew) may be that replica's own trouble:
//     it fires only when every replica that reports it sees it, since
//     one replica's network or clock is not the pipeline's owner's fault,
//     and while another replica sees, the pipeline is measured. A replica
//     that cannot measure counts against redundancy
//     (OutboxCanaryRedundancyLost).
func (g generator) pipelineAlerts(p slo.Pipeline) Group {
	a := g.m.Alerting
	grp := Group{Name: "outbox-canary-pipeline-" + p.Name}
	pl := func(m string) string { return selector(m, scoped(p.Scope, slo.LabelPipeline, p.Name)...) }
	// by keeps the pipeline and the scope in aggregations and joins.
	by := joinLabels(p.Scope, slo.LabelPipeline)
	labels := func(level, segment string) map[string]string {
		l := map[string]string{labelSeverity: g.severity(level), slo.LabelPipeline: p.Name, slo.LabelOwner: p.Owner(segment)}
		if segment != "" {
			l[slo.LabelSegment] = segment
		}
		return g.labels(l)
	}
	// Alerts about the prober's own sight go to whoever runs the prober.
	proberSide := func(level string) map[string]string {
		return g.labels(map[string]string{labelSeverity: g.severity(level), slo.LabelPipeline: p.Name, slo.LabelOwner: g.proberSideOwner(p)})
	}
	annotate := func(alert, dashboard, summary, description string) map[string]string {
		return g.annotate(annotations{alert: alert, summary: summary, description: description, pipelineScoped: true, dashboard: dashboard})
	}
	keep := slo.PromDuration(g.keepFiringFor())
	// worst aggregates a watcher's reading across replicas (see above),
	// by the pipeline, the scope and the series' own labels.
	worst := func(op, expr string, labels ...string) string {
		return op + " by (" + joinLabels(p.Scope, append([]string{slo.LabelPipeline}, labels...)...) + ") (" + expr + ")"
	}
	// What a stall sets off by itself waits while its incident is open:
	// the stall alert is the incident's one page.
	unlessStall := "unless on (" + by + ") " + selector(RecordStallIncidentStart, scoped(p.Scope, slo.LabelPipeline, p.Name)...)
	dependencyDown := func(dep string) string {
		return "unless on (" + by + ") (" + dependencyDownExpr(p.Scope, p.Name, dep) + ")"
	}
	// What a Kafka outage sets off on the relay's side waits too, from the
	// outage until the relay has had kafkaOutageHealthy to catch up:
	// OutboxCanaryDependencyDown pages the brokers' owner for it.
	unlessKafkaOutage := UnlessKafkaOutage(p.Scope, p.Name, kafkaOutageHealthy)

	grp.Rules = append(grp.Rules, g.stallRules(p, dependencyDown(slo.DependencyKafka))...)

	// Insert failures with no successful insert: the prober is blind, the
	// SLO alerts cannot fire because no canary exists to be late. When the
	// prober's own connection to the database is down, DependencyDown
	// says so instead. Summed over replicas: while one replica's inserts
	// succeed, the pipeline is measured, and the failing one's trouble
	// (its connection, its pod) is not the database owner's page.
	insertWindow := max(insertWindowMin, time.Duration(a.StallIntervals+1)*p.CanaryInterval)
	rng := "[" + slo.PromDuration(insertWindow) + "]"
	grp.Rules = append(grp.Rules, Rule{
		Alert: AlertInsertsFailing,
		Expr: lines(
			"sum by ("+by+") (increase("+pl(slo.MetricCanaryInsertFailures)+rng+")) > 0",
			"unless on ("+by+")",
			"sum by ("+by+") (increase("+pl(slo.MetricCanariesSent)+rng+")) > 0",
			dependencyDown(slo.DependencyDatabase),
		),
		KeepFiringFor: keep,
		Labels:        labels(config.SeverityPage, config.SegmentInsertToCommit),
		Annotations: annotate(AlertInsertsFailing, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline %s: canary inserts are failing; the pipeline is not being measured.", p.Name),
			fmt.Sprintf("{{ $value | humanize }} canary inserts into the outbox of pipeline %s failed over the last %s and none succeeded. Until they do, no canary can be late, so the SLO alerts of this pipeline are blind. Check the database (reachable, not read-only, not out of connections) and the prober's log.",
				p.Name, slo.PromDuration(insertWindow))),
	})

	// The database page goes to whoever runs the prober. Kafka's is one
	// page per cluster, not per pipeline (kafkaAlerts).
	grp.Rules = append(grp.Rules, Rule{
		Alert:  AlertDependencyDown,
		Expr:   dependencyDownExpr(p.Scope, p.Name, slo.DependencyDatabase),
		For:    slo.PromDuration(dependencyDownFor),
		Labels: proberSide(config.SeverityPage),
		// Its own series vanish with the prober too.
		KeepFiringFor: keep,
		Annotations: annotate(AlertDependencyDown, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline %s: the prober has lost its own connection to {{ $labels.%s }}.", p.Name, slo.LabelDependency),
			fmt.Sprintf("The prober's connection to the %s of pipeline %s has been down for %s. Canaries can neither be written nor read, so the pipeline is not measured: its stall and SLO alerts are held back, as is everything else of the pipeline in Alertmanager. If the %s is down for everyone, this is the pipeline's incident too.",
				"{{ $labels."+slo.LabelDependency+" }}", p.Name, slo.PromDuration(dependencyDownFor), "{{ $labels."+slo.LabelDependency+" }}")),
	})
	grp.Rules = append(grp.Rules, Rule{
		Alert: AlertWatcherFailing,
		// Only when no replica's watcher reads: while one does, its
		// gauges keep the alerts that read them seeing.
		Expr:          worst("max", pl(slo.MetricWatcherUp), slo.LabelWatcher) + " == 0",
		For:           slo.PromDuration(watcherFailingFor),
		KeepFiringFor: keep,
		Labels:        proberSide(config.SeverityTicket),
		Annotations: annotate(AlertWatcherFailing, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline %s: the {{ $labels.%s }} watcher is failing; its signals are gone.", p.Name, slo.LabelWatcher),
			fmt.Sprintf("Every sample of the {{ $labels.%s }} watcher of pipeline %s has failed for %s. It has withdrawn its gauges rather than report old values, so the alerts that read them are blind (and held back in Alertmanager, so they do not resolve). Usually a privilege (pg_monitor, SELECT on the outbox table, access to Kafka Connect) or an unreachable server; the prober's log has the error.",
				slo.LabelWatcher, p.Name, slo.PromDuration(watcherFailingFor))),
	})

	relay := config.SegmentEndToEnd
	if rs := p.RelaySegments(); len(rs) > 0 {
		relay = rs[0]
	}
	if p.RelayKind == config.RelayPolling {
		grp.Rules = append(grp.Rules, Rule{
			Alert: AlertOldestUnpublished,
			// A relay that cannot reach the brokers cannot publish: while
			// the prober cannot reach them either, and for a while after,
			// the backlog is the brokers' (OutboxCanaryDependencyDown pages
			// their owner).
			Expr:          lines(worst("max", pl(slo.MetricOldestUnpublishedAge))+" > "+seconds(time.Duration(a.OldestUnpublishedAge)), unlessStall, unlessKafkaOutage),
			For:           slo.PromDuration(oldestUnpublishedFor),
			KeepFiringFor: keep,
			Labels:        labels(config.SeverityPage, relay),
			Annotations: annotate(AlertOldestUnpublished, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline %s: the oldest unpublished outbox row is {{ $value | humanizeDuration }} old.", p.Name),
				fmt.Sprintf("The oldest row in the outbox of pipeline %s that the relay has not published is {{ $value | humanizeDuration }} old (threshold %s). The fault is at or before the relay: check the relay's process and logs first.",
					p.Name, slo.PromDuration(time.Duration(a.OldestUnpublishedAge)))),
		}, Rule{
			Alert: AlertBacklogGrowing,
			// A healthy relay empties the backlog at every poll, so a
			// canary or a burst that is briefly unpublished makes deriv
			// positive on a quiet pipeline (seen in e2e/ on a real
			// Prometheus). Growth only counts if the backlog never emptied
			// over the same range.
			Expr: lines(
				"max by ("+by+") (",
				"  deriv("+pl(slo.MetricBacklogRows)+"["+slo.PromDuration(backlogDerivRange)+"]) > 0",
				"  and",
				"  min_over_time("+pl(slo.MetricBacklogRows)+"["+slo.PromDuration(backlogDerivRange)+"]) > 0",
				")",
				unlessStall,
				unlessKafkaOutage,
			),
			For:           slo.PromDuration(time.Duration(a.BacklogGrowthFor)),
			KeepFiringFor: keep,
			Labels:        labels(config.SeverityTicket, relay),
			Annotations: annotate(AlertBacklogGrowing, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline %s: the outbox backlog has been growing for %s.", p.Name, slo.PromDuration(time.Duration(a.BacklogGrowthFor))),
				fmt.Sprintf("The unpublished backlog of pipeline %s has grown by {{ $value | humanize }} rows per second on average for %s: the relay is falling behind the writers. It will trip the oldest-row age alert if it goes on.",
					p.Name, slo.PromDuration(time.Duration(a.BacklogGrowthFor)))),
		})
	}
	if p.RelayKind == config.RelayCDC {
		// What the source keeps for a stopped task: WAL for its slot on
		// PostgreSQL; on MySQL nothing, and expiry may purge its file.
		retained := "the replication slot retains WAL meanwhile"
		if p.CapturesBinlog() {
			retained = "binlog expiry goes on meanwhile and may purge the file the connector must resume from (" + AlertBinlogFileAtRisk + ")"
		}
		grp.Rules = append(grp.Rules, Rule{
			Alert:         AlertConnectorTaskFailed,
			Expr:          lines(worst("max", pl(slo.MetricConnectorTaskFailures), labelConnector)+" > 0", unlessStall, unlessKafkaOutage),
			For:           slo.PromDuration(connectorTaskFailedFor),
			KeepFiringFor: keep,
			Labels:        labels(config.SeverityPage, relay),
			Annotations: annotate(AlertConnectorTaskFailed, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline %s: {{ $value }} task(s) of connector {{ $labels.connector }} FAILED.", p.Name),
				fmt.Sprintf("Kafka Connect reports {{ $value }} task(s) of connector {{ $labels.connector }} of pipeline %s in state FAILED for %s. A failed task does not restart by itself: nothing is published until it is restarted, and %s. Its trace is in GET /connectors/{{ $labels.connector }}/status.",
					p.Name, slo.PromDuration(connectorTaskFailedFor), retained)),
		})
	}
	if p.CapturesBinlog() {
		grp.Rules = append(grp.Rules, g.binlogRules(p, pl, keep, labels(config.SeverityTicket, relay), labels(config.SeverityPage, relay), unlessStall, unlessKafkaOutage)...)
	} else if p.RelayKind == config.RelayCDC {
		// With watch.slot the alerts select that slot: another pipeline's
		// slot or a leftover one in the same database is not this
		// pipeline's to page for. Without it, every slot reported counts.
		slot := pl
		walStatus := fmt.Sprintf(`%s{%s=%q, %s=~"unreserved|lost"%s}`, slo.MetricSlotWALStatus, slo.LabelPipeline, p.Name, labelWALStatus, scopeMatchers(p.Scope))
		if p.Slot != "" {
			slot = func(m string) string {
				return selector(m, scoped(p.Scope, slo.LabelPipeline, p.Name, labelSlot, p.Slot)...)
			}
			walStatus = fmt.Sprintf(`%s{%s=%q, %s=%q, %s=~"unreserved|lost"%s}`, slo.MetricSlotWALStatus, slo.LabelPipeline, p.Name, labelSlot, p.Slot, labelWALStatus, scopeMatchers(p.Scope))
		}
		grp.Rules = append(grp.Rules, Rule{
			Alert:         AlertSlotInactive,
			Expr:          lines(worst("min", slot(slo.MetricSlotActive), labelSlot)+" == 0", unlessStall, unlessKafkaOutage),
			For:           slo.PromDuration(slotInactiveFor),
			KeepFiringFor: keep,
			Labels:        labels(config.SeverityPage, relay),
			Annotations: annotate(AlertSlotInactive, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline %s: the replication slot {{ $labels.slot }} has no consumer.", p.Name),
				fmt.Sprintf("The replication slot {{ $labels.slot }} of pipeline %s has been inactive (or does not exist) for %s: the connector is not streaming, nothing is published, and the database keeps WAL for the slot. Check the connector and its task status.",
					p.Name, slo.PromDuration(slotInactiveFor))),
		}, Rule{
			Alert: AlertSlotRetainedWALGrowth,
			// Three conditions: the slope over wal_growth_for is up; the
			// slot retains more than the floor; and the series existed a
			// whole range ago, so the slope is never taken from a slot's
			// (or the prober's) first minutes, when a fresh slot climbs
			// from a few hundred bytes to its idle sawtooth.
			Expr: lines(
				"max by ("+joinLabels(p.Scope, slo.LabelPipeline, labelSlot)+") (",
				"  deriv("+slot(slo.MetricSlotRetainedWAL)+"["+slo.PromDuration(time.Duration(a.WALGrowthFor))+"]) > 0",
				"  and",
				"  "+slot(slo.MetricSlotRetainedWAL)+" > "+strconv.Itoa(walGrowthFloor),
				"  and",
				"  "+slot(slo.MetricSlotRetainedWAL)+" offset "+slo.PromDuration(time.Duration(a.WALGrowthFor)),
				")",
				unlessStall,
				unlessKafkaOutage,
			),
			For:           slo.PromDuration(time.Duration(a.WALGrowthFor)),
			KeepFiringFor: keep,
			Labels:        labels(config.SeverityTicket, relay),
			Annotations: annotate(AlertSlotRetainedWALGrowth, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline %s: the replication slot {{ $labels.slot }} retains more and more WAL.", p.Name),
				fmt.Sprintf("WAL retained by the replication slot {{ $labels.slot }} of pipeline %s, over %s, has grown by {{ $value | humanize1024 }}B per second for %s: the connector is not confirming its position. The database disk is at risk.",
					p.Name, humanBytes(walGrowthFloor), slo.PromDuration(time.Duration(a.WALGrowthFor)))),
		}, Rule{
			Alert:         AlertSlotWALAtRisk,
			Expr:          worst("max", walStatus, labelSlot, labelWALStatus) + " == 1",
			KeepFiringFor: keep,
			Labels:        labels(config.SeverityPage, relay),
			Annotations: annotate(AlertSlotWALAtRisk, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline %s: the replication slot {{ $labels.slot }}'s WAL is {{ $labels.%s }}.", p.Name, labelWALStatus),
				fmt.Sprintf("The replication slot {{ $labels.slot }} of pipeline %s has wal_status {{ $labels.%s }}: past max_slot_wal_keep_size, WAL it needs is (unreserved) or has been (lost) removed. A lost slot cannot resume: the connector must be re-created with a new snapshot and events may be missing.",
					p.Name, labelWALStatus)),
		})
	}
	grp.Rules = append(grp.Rules, Rule{
		Alert:         AlertConsumerLag,
		Expr:          worst("max", pl(slo.MetricConsumerLagSeconds), slo.LabelGroup, slo.LabelTopic) + " > " + seconds(p.EndToEndBudget),
		For:           slo.PromDuration(consumerLagFor),
		KeepFiringFor: keep,
		Labels:        labels(config.SeverityTicket, ""),
		Annotations: annotate(AlertConsumerLag, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline %s: consumer group {{ $labels.%s }} is {{ $value | humanizeDuration }} behind on {{ $labels.%s }}.", p.Name, slo.LabelGroup, slo.LabelTopic),
			fmt.Sprintf("The oldest message that business consumer group {{ $labels.%s }} has yet to read from {{ $labels.%s }} is {{ $value | humanizeDuration }} old, over the pipeline's %s end-to-end budget, for %s. The outbox delivers on time (the canaries say so) but this consumer's users see the events late.",
				slo.LabelGroup, slo.LabelTopic, slo.PromDuration(p.EndToEndBudget), slo.PromDuration(consumerLagFor))),
	}, Rule{
		Alert:         AlertLongTransaction,
		Expr:          worst("max", pl(slo.MetricOldestTransactionAge)) + " > " + seconds(time.Duration(a.LongTransactionAge)),
		KeepFiringFor: keep,
		Labels:        labels(config.SeverityTicket, config.SegmentInsertToCommit),
		Annotations: annotate(AlertLongTransaction, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline %s: a transaction has been open for {{ $value | humanizeDuration }}.", p.Name),
			fmt.Sprintf("The oldest open transaction on the database of pipeline %s is {{ $value | humanizeDuration }} old (threshold %s). Rows it wrote stay invisible to the relay until it commits, then arrive late all at once; it also holds back vacuum and, for log capture, the slot.",
				p.Name, slo.PromDuration(time.Duration(a.LongTransactionAge)))),
	}, Rule{
		Alert: AlertBadSignatures,
		// The largest count of one replica, not their sum: every replica
		// reads every message on the topic, so one forged message is
		// skipped by each. A key rotated on one replica only is seen by
		// that replica (and by the others, in its canaries) and fires.
		Expr: fmt.Sprintf("max by (%s) (increase(%s[%s])) >= %d",
			by, selector(slo.MetricMessagesSkipped, scoped(p.Scope, slo.LabelPipeline, p.Name, slo.LabelReason, slo.ReasonBadSignature)...),
			slo.PromDuration(badSignatureWindow), badSignatureBurst),
		KeepFiringFor: keep,
		Labels:        proberSide(config.SeverityTicket),
		Annotations: annotate(AlertBadSignatures, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline %s: {{ $value | humanize }} messages with a bad signature on the canary topic.", p.Name),
			fmt.Sprintf("{{ $value | humanize }} messages on the canary topic of pipeline %s over the last %s looked like canaries but failed signature verification, and were skipped. Either another prober writes to the topic with a different signing key (a key rotated on one instance only) or someone is forging canaries: forged canaries cannot fake health, but find the writer.",
				p.Name, slo.PromDuration(badSignatureWindow))),
	})
	grp.Rules = append(grp.Rules, g.clockSkewRules(p, keep)...)
	grp.Rules = append(grp.Rules, g.unmeasuredRecording(p))
	return grp
}

// binlogRules are the MySQL analogues of the replication slot alerts,
// read from the binlog_connector watcher's series: a connector whose
// committed position falls ever further behind the server's binlog (the
// retained WAL's growth), and an unread binlog file that expiry has
// purged or may purge soon (wal_status unreserved or lost). There is no
// analogue of an inactive slot: the server keeps no position for a
// connector, which OutboxConnectorTaskFailed and the stall cover.
func (g generator) binlogRules(p slo.Pipeline, pl func(string) string, keep string, ticket, page map[string]string, unlessStall, unlessKafkaOutage string) []Rule {
	a := g.m.Alerting
	growth := time.Duration(a.WALGrowthFor)
	behind := pl(slo.MetricBinlogConnectorBehindBytes)
	byConnector := joinLabels(p.Scope, slo.LabelPipeline, labelConnector)
	on := "on (" + byConnector + ")"
	return []Rule{{
		Alert: AlertBinlogConnectorBehind,
		// As the slot's growth, with one condition more: the connector
		// never caught up within the range. Its committed position jumps
		// forward at each offset flush, so a healthy one's distance is a
		// sawtooth whose troughs are near zero.
		Expr: lines(
			"max by ("+byConnector+") (",
			"  deriv("+behind+"["+slo.PromDuration(growth)+"]) > 0",
			"  and",
			"  min_over_time("+behind+"["+slo.PromDuration(growth)+"]) > "+strconv.Itoa(binlogBehindFloor),
			"  and",
			"  "+behind+" offset "+slo.PromDuration(growth),
			")",
			unlessStall,
			unlessKafkaOutage,
		),
		For:           slo.PromDuration(growth),
		KeepFiringFor: keep,
		Labels:        ticket,
		Annotations: g.annotate(annotations{alert: AlertBinlogConnectorBehind, pipelineScoped: true, dashboard: slo.DashboardPipelineHealth,
			summary: fmt.Sprintf("Pipeline %s: connector {{ $labels.connector }} falls further and further behind the binlog.", p.Name),
			description: fmt.Sprintf("The committed binlog position of connector {{ $labels.connector }} of pipeline %s has stayed over %s behind the server's for %s and the distance has grown by {{ $value | humanize1024 }}B per second: the connector reads or commits slower than the server writes, or not at all. Its unread files are kept only until binlog expiry purges them.",
				p.Name, humanBytes(binlogBehindFloor), slo.PromDuration(growth)),
		}),
	}, {
		Alert: AlertBinlogFileAtRisk,
		// Purged on any replica's reading wins over expiring on another's
		// (read before the purge).
		Expr: lines(
			"max by ("+joinLabels(p.Scope, slo.LabelPipeline, labelConnector, labelBinlogFile)+") (",
			`  label_replace(`+pl(slo.MetricBinlogConnectorFilePurged)+` == 1, "`+labelBinlogFile+`", "purged", "", "")`,
			"  or",
			`  label_replace(`+pl(slo.MetricBinlogConnectorPurgeHeadroom)+` < `+seconds(slo.BinlogPurgeHeadroom)+`, "`+labelBinlogFile+`", "expiring", "", "")`,
			"    unless "+on+" ("+pl(slo.MetricBinlogConnectorFilePurged)+" == 1)",
			")",
		),
		For:           slo.PromDuration(binlogPurgeHeadroomFor),
		KeepFiringFor: keep,
		Labels:        page,
		Annotations: g.annotate(annotations{alert: AlertBinlogFileAtRisk, pipelineScoped: true, dashboard: slo.DashboardPipelineHealth,
			summary: fmt.Sprintf("Pipeline %s: the binlog file connector {{ $labels.connector }} must read next is {{ $labels.%s }}.", p.Name, labelBinlogFile),
			description: fmt.Sprintf("The binlog file holding the committed position of connector {{ $labels.connector }} of pipeline %s is {{ $labels.%s }}: purged, the server no longer has it and the connector cannot resume from its offset (it must be re-created with a new snapshot, and events may be missing); expiring, binlog expiry (binlog_expire_logs_seconds) may purge it within %s while the connector has not read past it. Raising binlog_expire_logs_seconds stops the purge at once.",
				p.Name, labelBinlogFile, slo.PromDuration(slo.BinlogPurgeHeadroom)),
		}),
	}}
}

// clockSkewRules are the skew tickets of a pipeline, one per owner of the
// segments that can measure skew (every segment but end_to_end, whose two
// ends are the prober's clock), so each goes to the team that owns the
// segment, as that segment's burn alerts do.
//
// A ticket needs flagged canaries in every clockSkewRange window for
// clockSkewFor: a rate that lasts, not one event. A single canary a
// millisecond early (a stamp at the edge of relay.skew_tolerance) keeps
// the condition true for one range and is forgotten; a clock that is off
// flags canaries again and again.
//
// Every replica must flag them (min across replicas): a segment's two
// stamps come from the segment's far clock and the replica's own, so
// skew that one replica alone measures is most likely its own clock's,
// not the segment owner's to fix.
func (g generator) clockSkewRules(p slo.Pipeline, keep string) []Rule {
	var owners []string
	segments := map[string][]string{}
	for _, seg := range p.Segments {
		if seg == config.SegmentEndToEnd {
			continue
		}
		o := p.Owner(seg)
		if _, ok := segments[o]; !ok {
			owners = append(owners, o)
		}
		segments[o] = append(segments[o], seg)
	}
	rng := clockSkewRange(p.CanaryInterval)
	forDur := clockSkewFor(rng)
	var rules []Rule
	for _, o := range owners {
		matcher := promMatchAny(slo.LabelSegment, segments[o])
		series := fmt.Sprintf("%s{%s=%q, %s%s}", slo.MetricClockSkew, slo.LabelPipeline, p.Name, matcher, scopeMatchers(p.Scope))
		rules = append(rules, Rule{
			Alert:         AlertClockSkewSuspected,
			Expr:          fmt.Sprintf("min by (%s) (increase(%s[%s])) > 0\n", joinLabels(p.Scope, slo.LabelPipeline, slo.LabelSegment), series, slo.PromDuration(rng)),
			For:           slo.PromDuration(forDur),
			KeepFiringFor: keep,
			Labels:        g.labels(map[string]string{labelSeverity: g.severity(config.SeverityTicket), slo.LabelPipeline: p.Name, slo.LabelOwner: o}),
			Annotations: g.annotate(annotations{alert: AlertClockSkewSuspected, pipelineScoped: true, dashboard: slo.DashboardSegmentLatency, segment: true,
				summary: fmt.Sprintf("Pipeline %s: clock skew suspected on segment {{ $labels.segment }}.", p.Name),
				description: fmt.Sprintf("Canaries of pipeline %s have kept measuring a negative duration on segment {{ $labels.segment }} for %s ({{ $value | humanize }} in the last %s): the clocks stamping its two ends disagree. The segment's latencies and its SLO are unreliable until the clocks (NTP/chrony on the relay, broker or database host) are fixed. Owner: %s.",
					p.Name, slo.PromDuration(forDur), slo.PromDuration(rng), o)}),
		})
	}
	return rules
}

// clockSkewRange is the range each skew window looks back over: at least
// clockSkewWindowMin, and two canary intervals, so that a skew that
// flags every canary leaves no window empty.
func clockSkewRange(interval time.Duration) time.Duration {
	return max(clockSkewWindowMin, 2*interval)
}

// clockSkewFor is the skew ticket's for: three of its ranges.
func clockSkewFor(rng time.Duration) time.Duration { return 3 * rng }

// proberSideOwner owns the alerts about the prober's own sight:
// alerting.prober_owner, or the pipeline's default owner.
func (g generator) proberSideOwner(p slo.Pipeline) string {
	if o := g.m.Alerting.ProberOwner; o != "" {
		return o
	}
	return p.DefaultOwner
}

// stallRules are the stall recordings and alerts of a pipeline: one alert
// per segment a stalled canary can be stuck in, and one for a stall no
// segment can be blamed for.
//
// The age of the last delivery, taken at the scrape (timestamp(x) - x, so
// neither the evaluation lag nor a late scrape inflates it), grows one
// second per second while nothing arrives: "older than the threshold" is a
// stall that has lasted that long, proven by one sample. The threshold
// (slo.Pipeline.StallThreshold) is the end-to-end budget plus
// stall_intervals canary intervals, which no healthy pipeline and no pause
// shorter than the budget plus stall_intervals-1 intervals reaches; that
// margin is the alert's for:, and needs no evaluation to pass.
//
// Second, measured on the prober's clock alone, the last canary sent must
// be more than the threshold less one interval younger than the last
// arrival: it is, in a stall, because canaries keep being sent, and it
// keeps a prober whose clock runs behind Prometheus's from paging.
//
// Third, evidence: canaries sent since the last arrival went bad on a
// segment. The alert carries that segment and its owner, the first in
// pipeline order with bad events (a canary stuck in the relay is bad on
// the relay's segment and never reaches the next). With no segment to
// blame it is the end_to_end owner's. A prober that restarts after a
// downtime longer than the threshold sees an old last arrival too, but
// canaries it could not judge while down are no one's bad events, so it
// does not page.
//
// A stall is one incident until the pipeline has gone StallIncidentHealthy
// without one (RecordStallIncidentStart): a relay that crash-loops,
// restarts with back-off or delivers once a minute stalls again and again,
// and each time the last delivery is new. The alert's value, and so its
// stalled_since label, is the incident's start, the same through every
// stall of it; keep_firing_for (longer than StallIncidentHealthy) holds
// it between them, so the incident is one alert, one page.
//
// With several prober replicas, each judges its own canaries, and the
// pipeline is stalled when every replica that is up (that Prometheus
// scrapes) and has ever received a canary sees the first two
// conditions: the youngest last delivery any of them saw is older than
// the threshold, each on its own clock. A replica whose own consumer is
// stuck while another receives canaries does not page the relay's owner;
// a replica that is down has no vote. The evidence is the replicas'
// bad events together (their canaries cross the same stages), and the
// value the latest delivery any of them saw. With one replica this is
// the single prober's condition.
func (g generator) stallRules(p slo.Pipeline, unlessKafkaDown string) []Rule {
	n := g.m.Alerting.StallIntervals
	thr := p.StallThreshold(n)
	recv := selector(slo.MetricLastReceivedTimestamp, scoped(p.Scope, slo.LabelPipeline, p.Name)...)
	sent := selector(slo.MetricLastSentTimestamp, scoped(p.Scope, slo.LabelPipeline, p.Name)...)
	by := joinLabels(p.Scope, slo.LabelPipeline)
	window := "[" + slo.PromDuration(thr+stallBlameMargin) + "]"
	bad := func(segments []string) string {
		seg := promMatchAny(slo.LabelSegment, segments)
		return fmt.Sprintf("(sum by (%s) (increase(%s{%s=%q, %s, %s=%q%s}%s)) > 0)",
			by, slo.MetricSLIEvents, slo.LabelPipeline, p.Name, seg, slo.LabelOutcome, slo.OutcomeBad, scopeMatchers(p.Scope), window)
	}
	on := "on (" + by + ") "
	// The value is the last delivery's time: constant through a stall.
	// A replica that has never received a canary (a new one, with no
	// state yet) judges nothing, and "and recv > 0" leaves it out.
	stalled := []string{
		"(",
		"  max by (" + by + ") (" + recv + ")",
		"  and " + on + "min by (" + by + ") (timestamp(" + recv + ") - " + recv + " and " + recv + " > 0) > " + seconds(thr),
		"  and " + on + "min by (" + by + ") (" + sent + " - " + recv + " and " + recv + " > 0) > " + seconds(thr-p.CanaryInterval),
		")",
	}
	segments := p.StallBlameSegments()
	stallRec := selector(RecordStall, scoped(p.Scope, slo.LabelPipeline, p.Name)...)
	incident := selector(RecordStallIncidentStart, scoped(p.Scope, slo.LabelPipeline, p.Name)...)
	recLabels := g.labels(map[string]string{})
	rules := []Rule{{
		// Stalled now, blamed on any segment: what an incident is made of.
		Record: RecordStall,
		Expr:   lines(append(append([]string{}, stalled...), "and "+on+bad(append(append([]string{}, segments...), config.SegmentEndToEnd)))...),
		Labels: recLabels,
	}, {
		// The incident's start: kept while a stall was seen within
		// StallIncidentHealthy (this evaluation's included), else the
		// last delivery before this stall. Rules of a group run in order:
		// it reads this evaluation's stall and its own previous value.
		Record: RecordStallIncidentStart,
		Expr: lines(
			"(",
			"  "+incident,
			"  and",
			"  max_over_time("+stallRec+"["+slo.PromDuration(StallIncidentHealthy)+"])",
			")",
			"or",
			stallRec,
		),
		Labels: recLabels,
	}}
	// The alert's value is the incident's start; its labels are the
	// pipeline's and the scope's (the recording adds alerting.labels,
	// which the rule sets again).
	rule := func(segment string, expr []string, why string) Rule {
		stall := Rule{
			Alert:         AlertStalled,
			Expr:          lines(append(append([]string{incident, "and " + on + "("}, indent(expr)...), ")", unlessKafkaDown)...),
			KeepFiringFor: slo.PromDuration(g.stallKeepFiringFor()),
			Labels: g.labels(map[string]string{
				labelSeverity: g.severity(config.SeverityPage), slo.LabelPipeline: p.Name,
				slo.LabelSegment: segment, slo.LabelOwner: p.Owner(segment),
				LabelStalledSince: stalledSinceTemplate,
			}),
			Annotations: g.annotate(annotations{
				alert: AlertStalled,
				// Annotations see the series' labels, not the rule's
				// templated ones: they render the value themselves.
				summary: fmt.Sprintf("Pipeline %s is stalled, since %s.", p.Name, stalledSinceTemplate),
				description: fmt.Sprintf("No canary of pipeline %s has arrived for longer than the %s end-to-end budget plus %d canary intervals of %s (%s), while canaries kept being sent. The incident began after the last delivery at %s; until the pipeline has gone %s without a stall, a new stall is the same incident. %s Walk the pipeline in order from there: oldest unpublished row, relay or connector, replication slot, broker, consumer.",
					p.Name, slo.PromDuration(p.EndToEndBudget), n, slo.PromDuration(p.CanaryInterval), slo.PromDuration(thr), stalledSinceTemplate, slo.PromDuration(StallIncidentHealthy), why),
				pipelineScoped: true,
				dashboard:      slo.DashboardPipelineHealth,
			}),
		}
		return stall
	}
	for i, seg := range segments {
		expr := append(append([]string{}, stalled...), "and "+on+bad([]string{seg}))
		if i > 0 {
			expr = append(expr, "unless "+on+bad(segments[:i]))
		}
		rules = append(rules, rule(seg, expr, fmt.Sprintf("The canaries sent since are past their budget on segment %s, owned by %s: that is where they are stuck.", seg, p.Owner(seg))))
	}
	expr := append(append([]string{}, stalled...), "and "+on+bad([]string{config.SegmentEndToEnd}))
	if len(segments) > 0 {
		expr = append(expr, "unless "+on+bad(segments))
	}
	return append(rules, rule(config.SegmentEndToEnd, expr, "No segment can be blamed: the canaries are late end to end, but no segment has judged them yet."))
}

// indent indents expression lines by two spaces.
func indent(ls []string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = "  " + l
	}
	return out
}

// Recorded series of the stall rules, one per pipeline whatever the
// number of prober replicas, labelled by the pipeline, the scope and
// alerting.labels.
const (
	// RecordStall is present while the pipeline is stalled (every
	// condition of OutboxCanaryStalled, on any segment); its value is the
	// last delivery's time.
	RecordStall = "outbox_canary:stall:last_delivery_timestamp_seconds"
	// RecordStallIncidentStart is present while a stall incident is open:
	// from its first stall until StallIncidentHealthy after its last. Its
	// value is the last delivery before the first stall.
	RecordStallIncidentStart = "outbox_canary:stall_incident:start_timestamp_seconds"
)

// StallIncidentHealthy is how long a pipeline must go without a stall for
// the next stall to be a new incident, a new page: longer than the
// healthy stretches of a relay that crash-loops (Kubernetes restarts a
// crashing container within seconds, and backs off at most 5 minutes,
// which is a stall, not a healthy stretch) or that delivers once a minute.
// The stall recording ends a scrape and an evaluation after the first
// delivery, so an incident closes about this long plus 30 s (at 15 s
// intervals) after the relay resumes; a stall before that is the same
// incident, its page still firing (make detect's second-stall scenario
// measured the first's 5m short windows clear 290 s after the resume,
// inside it).
const StallIncidentHealthy = 5 * time.Minute

// kafkaOutageHealthy is how long after the prober last saw Kafka out of
// reach the alerts a Kafka outage sets off still wait: as long as a
// pipeline must go without a stall for the next to be a new incident, time
// for the relay or connector to reconnect and publish what piled up. One
// that has not by then (a connector task that failed on the outage and
// does not restart) pages its owner.
const kafkaOutageHealthy = StallIncidentHealthy

// UnlessKafkaOutage drops a pipeline alert while the prober's own Kafka
// connection has been down within the span: the brokers' owner is paged
// for the outage (OutboxCanaryDependencyDown), and what it sets off
// downstream is its consequence, not a second incident. With several
// replicas, only if none of them reached Kafka all through the span: an
// outage of one replica's connection is its own, not the brokers'. With
// no pipeline named, for every pipeline.
func UnlessKafkaOutage(scope slo.Scope, pipeline string, span time.Duration) string {
	match := []string{slo.LabelDependency, slo.DependencyKafka}
	if pipeline != "" {
		match = append([]string{slo.LabelPipeline, pipeline}, match...)
	}
	up := selector(slo.MetricDependencyUp, append(match, scope.Pairs()...)...)
	on := "on (" + joinLabels(scope, slo.LabelPipeline) + ")"
	lowest := "min_over_time(" + up + "[" + slo.PromDuration(span) + "])"
	return "unless " + on + " (" + lowest + " == 0 unless " + on + " " + lowest + " > 0)"
}

// dependencyDownExpr is true while no replica reaches the dependency: a
// connection that one replica has lost is that replica's (its network,
// its pod), the pipeline is still measured by the others, and the
// redundancy ticket counts it as not measuring.
func dependencyDownExpr(scope slo.Scope, pipeline, dep string) string {
	up := selector(slo.MetricDependencyUp, scoped(scope, slo.LabelPipeline, pipeline, slo.LabelDependency, dep)...)
	return "max by (" + joinLabels(scope, slo.LabelPipeline, slo.LabelDependency) + ") (" + up + ") == 0"
}

// LabelBrokers names a Kafka cluster on OutboxCanaryDependencyDown: its
// pipelines' bootstrap brokers, sorted and comma-separated.
const LabelBrokers = "brokers"

// kafkaCluster is the pipelines that list the same Kafka brokers and whose
// publish_to_consume has the same owner: one Kafka page.
type kafkaCluster struct {
	Brokers   string
	Owner     string
	Pipelines []string
}

// kafkaClusters groups a model's pipelines by their brokers and the owner
// of their publish_to_consume, in the pipelines' order.
func kafkaClusters(m *slo.Model) []kafkaCluster {
	var out []kafkaCluster
	index := map[[2]string]int{}
	for _, p := range m.Pipelines {
		key := [2]string{strings.Join(p.Brokers, ","), p.Owner(config.SegmentName(config.StampPublish, config.StampConsume))}
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, kafkaCluster{Brokers: key[0], Owner: key[1]})
		}
		out[i].Pipelines = append(out[i].Pipelines, p.Name)
	}
	return out
}

// kafkaAlerts page the brokers' owner when the prober has lost Kafka. The
// prober's Kafka is the pipelines' brokers: out of the prober's reach they
// are most often out of the relays' too, and the relays' segments are not
// charged for it (package judge), so the page goes to the brokers' owner,
// the owner of publish_to_consume. It is one alert per cluster (the
// pipelines that list the same brokers) and owner, valued at the number of
// its pipelines the prober cannot reach it from, with no pipeline label:
// one outage of a broker that three pipelines share paged the owner three
// times, once per pipeline, with an Alertmanager that groups by pipeline.
// A pipeline counts when every prober replica has lost Kafka, as the
// pipeline's own rules hold its alerts back (dependencyDownExpr).
func (g generator) kafkaAlerts() Group {
	grp := Group{Name: "outbox-canary-kafka"}
	keep := slo.PromDuration(g.keepFiringFor())
	for _, c := range kafkaClusters(g.m) {
		up := slo.MetricDependencyUp + `{` + slo.LabelDependency + `="` + slo.DependencyKafka + `", ` +
			promMatchAny(slo.LabelPipeline, c.Pipelines) + scopeMatchers(g.m.Scope) + `}`
		count := "count"
		if by := joinLabels(g.m.Scope); by != "" {
			count += " by (" + by + ")"
		}
		grp.Rules = append(grp.Rules, Rule{
			Alert: AlertDependencyDown,
			Expr: lines(
				count+" (",
				"  max by ("+joinLabels(g.m.Scope, slo.LabelPipeline)+") ("+up+") == 0",
				")",
			),
			For: slo.PromDuration(dependencyDownFor),
			Labels: g.labels(map[string]string{
				labelSeverity: g.severity(config.SeverityPage), slo.LabelOwner: c.Owner,
				slo.LabelDependency: slo.DependencyKafka, LabelBrokers: c.Brokers,
			}),
			KeepFiringFor: keep,
			Annotations: g.annotate(annotations{
				alert:   AlertDependencyDown,
				summary: "The prober has lost Kafka (" + c.Brokers + ") for {{ $value }} pipeline(s).",
				description: fmt.Sprintf("The prober's connections to the Kafka brokers %s have been down for %s, for {{ $value }} of the pipelines that use them (%s). Canaries can be neither published nor read there, so those pipelines are not measured: their stall and SLO alerts, and the relays' alerts the outage sets off, are held back. Brokers out of the prober's reach are most often out of the relays' too: check the brokers (kafka-broker-api-versions.sh --bootstrap-server %s), then the network between the prober and them. Which pipelines: max by (pipeline) (%s) == 0.",
					c.Brokers, slo.PromDuration(dependencyDownFor), strings.Join(c.Pipelines, ", "), c.Brokers, up),
				dashboard: slo.DashboardPipelineHealth,
			}),
		})
	}
	return grp
}

// stallKeepFiringFor is the stall alert's keep_firing_for: that of the
// alerts that inhibit another team's, and more than StallIncidentHealthy,
// so the alert of an open incident keeps firing between its stalls.
func (g generator) stallKeepFiringFor() time.Duration {
	return max(g.keepFiringForSource(), StallIncidentHealthy+keepFiringMargin)
}

// LabelStalledSince names a stall incident on OutboxCanaryStalled: the
// time of the pipeline's last delivery before its first stall, RFC 3339
// in UTC. It is constant through an incident, however often the pipeline
// recovers and stalls again within StallIncidentHealthy, and new for the
// next incident, so that one is a new alert (even while the first one's
// keep_firing_for still holds it) and, grouped by it in Alertmanager, a
// new notification group.
const LabelStalledSince = "stalled_since"

// stalledSinceTemplate renders the stall alert's value, the incident's
// start as a Unix time, as LabelStalledSince.
const stalledSinceTemplate = `{{ ($value | toTime).Format "2006-01-02T15:04:05Z07:00" }}`

// proberAbsentGrace is how long the prober must stay absent before the dead
// man pages, on top of the absent_over_time window.
const proberAbsentGrace = time.Minute

// proberAlerts is the dead man: the prober's own series are gone. absent()
// of up{job=...} is fragile (it depends on the scrape config's job being
// exactly one target); absent_over_time of the build info gauge fires when
// the prober is down, unscraped or relabelled away alike. With several
// replicas it fires only when every one of them is gone: the series of any
// replica is the job's. Fewer replicas than alerting.replicas is the
// redundancy ticket (redundancyLost).
func (g generator) proberAlerts() Group {
	a := g.m.Alerting
	l := map[string]string{labelSeverity: g.severity(config.SeverityPage)}
	if a.ProberOwner != "" {
		l[slo.LabelOwner] = a.ProberOwner
	}
	absent := time.Duration(a.ProberAbsentFor)
	grp := Group{
		Name: "outbox-canary-prober",
		Rules: []Rule{{
			Alert: AlertProberAbsent,
			// One per scope: absent_over_time keeps the job and scope
			// matchers as the alert's labels.
			Expr: "absent_over_time(" + selector(slo.MetricBuildInfo, scoped(g.m.Scope, labelJob, a.ProberJob)...) + "[" + slo.PromDuration(absent) + "])",
			// A Prometheus that just started has no sample yet either; the
			// for: keeps its first scrapes from paging (seen on a real
			// Prometheus 2.42 in e2e/: it fired before the first scrape).
			For:    slo.PromDuration(proberAbsentGrace),
			Labels: g.labels(l),
			Annotations: g.annotate(annotations{
				alert:   AlertProberAbsent,
				summary: "The outbox-canary prober is gone: no pipeline is being measured.",
				description: fmt.Sprintf("Prometheus has had no %s series from job %q for %s. Without the prober no canary is sent, so no SLO alert can fire: the pipelines are unwatched, and their open alerts are held back rather than resolved. Check the prober's deployment and Prometheus's scrape targets.",
					slo.MetricBuildInfo, a.ProberJob, slo.PromDuration(absent)),
				dashboard: slo.DashboardSLOOverview,
			}),
		}},
	}
	grp.Rules = append(grp.Rules, g.pipelinesUnmeasured(), g.rulesOutdated())
	if a.Replicas > 1 {
		grp.Rules = append(grp.Rules, g.redundancyLost())
	}
	return grp
}

// rulesOutdatedFor rides out a rollout: probers with a new configuration
// may start before the rules of that configuration are loaded.
const rulesOutdatedFor = 15 * time.Minute

// rulesOutdated tickets SLOs that the probers measure and no rule reads:
// the SLO rules are written once per SLO window and burn class (canary
// interval, stall threshold), and select their SLOs by those labels of
// the objective series, so an SLO of a window or class the rules were
// not generated for would have neither recordings nor burn alerts. One
// alert per scope, valued at the number of such SLOs.
func (g generator) rulesOutdated() Rule {
	var known []string
	for _, c := range sloClasses(g.m) {
		for _, b := range burnClasses(g.m, c) {
			known = append(known, b.objectives())
		}
	}
	objectives := selector(slo.MetricSLOObjective, g.m.Scope.Pairs()...)
	expr := "count" + g.m.Scope.ByClause() + " (" + objectives + ")"
	if len(known) > 0 {
		expr = lines(
			"count "+g.m.Scope.ByClause()+" (",
			"  "+objectives,
			"  unless on ("+joinLabels(g.m.Scope, slo.LabelPipeline, slo.LabelSegment, slo.LabelSLOWindow, slo.LabelCanaryInterval, slo.LabelStallThreshold)+")",
			"  (",
			"    "+strings.Join(known, "\n    or "),
			"  )",
			")",
		)
	}
	l := map[string]string{labelSeverity: g.severity(config.SeverityTicket)}
	if g.m.Alerting.ProberOwner != "" {
		l[slo.LabelOwner] = g.m.Alerting.ProberOwner
	}
	return Rule{
		Alert: AlertRulesOutdated,
		Expr:  expr,
		For:   slo.PromDuration(rulesOutdatedFor),
		// Its series vanish with the prober.
		KeepFiringFor: slo.PromDuration(g.keepFiringFor()),
		Labels:        g.labels(l),
		Annotations: g.annotate(annotations{
			alert:   AlertRulesOutdated,
			summary: "{{ $value }} SLO(s) measured by the prober have no rules: their budgets are not watched.",
			description: fmt.Sprintf("For %s, the probers have exported {{ $value }} SLO(s) (%s) whose SLO window, canary interval or stall threshold the loaded rules were not generated for: they record no SLI and raise no burn alert. The probers run a newer configuration than the rules: generate the rules from the probers' configuration (outbox-canary rules) and load them.",
				slo.PromDuration(rulesOutdatedFor), slo.MetricSLOObjective),
			dashboard: slo.DashboardSLOOverview,
		}),
	}
}

// RecordUnmeasured is present while no prober of the job exports the
// pipeline's last canary sent (absent() of it): one series per pipeline,
// labelled by the job, the pipeline, the scope and alerting.labels.
const RecordUnmeasured = "outbox_canary:last_sent_timestamp_seconds:absent"

// unmeasuredRecording records RecordUnmeasured for one pipeline, in the
// pipeline's own group: the page that counts them (pipelinesUnmeasured)
// stays one line however many pipelines there are, and the prober's
// PrometheusRule does not grow with them.
func (g generator) unmeasuredRecording(p slo.Pipeline) Rule {
	return Rule{
		Record: RecordUnmeasured,
		Expr:   "absent(" + selector(slo.MetricLastSentTimestamp, scoped(p.Scope, labelJob, g.m.Alerting.ProberJob, slo.LabelPipeline, p.Name)...) + ")",
		Labels: g.labels(map[string]string{}),
	}
}

// pipelinesUnmeasured pages when pipelines the rules know have had no
// prober's series for as long as the dead man waits, while the job is up:
// with --shard.count every replica of one shard is down, or, sharded or
// not, the probers run an older configuration than the rules. The dead
// man cannot see it (the other probers' build info is there), and neither
// can the redundancy ticket (it counts the replicas of the pipelines some
// replica measures).
//
// It is generated whatever the sharding, since the rules know every
// pipeline of the file (each records RecordUnmeasured). One alert per
// scope, valued at the number of pipelines unmeasured, not one per
// pipeline: a shard takes all of its pipelines with it, and that is one
// incident.
//
// The wait is all in for: (absent() now, for prober_absent_for and the
// grace), as the redundancy ticket's, not in an absent_over_time window:
// a pipeline no prober has ever measured is absent over any window at
// once, and would page a minute after the rules that add it are loaded,
// in the middle of the rollout that brings the probers the new
// configuration.
//
// While the whole job has been absent for the grace minute the alert is
// false, in PromQL rather than by an inhibit rule, so that an Alertmanager
// grouping by alertname gets one page for a total outage, the dead man's:
// also when the last shard goes minutes after the first (less than this
// for: less that minute), and a failed scrape or two of every prober
// resets nothing. It keeps firing past that moment so its end is not sent
// as resolved before the dead man inhibits it.
func (g generator) pipelinesUnmeasured() Rule {
	a := g.m.Alerting
	l := map[string]string{labelSeverity: g.severity(config.SeverityPage)}
	if a.ProberOwner != "" {
		l[slo.LabelOwner] = a.ProberOwner
	}
	unmeasured := selector(RecordUnmeasured, scoped(g.m.Scope, labelJob, a.ProberJob)...)
	jobAbsent := "absent_over_time(" + selector(slo.MetricBuildInfo, scoped(g.m.Scope, labelJob, a.ProberJob)...) + "[" + slo.PromDuration(proberAbsentGrace) + "])"
	waits := time.Duration(a.ProberAbsentFor) + proberAbsentGrace
	return Rule{
		Alert: AlertPipelinesUnmeasured,
		Expr: lines(
			"count by ("+joinLabels(g.m.Scope, labelJob)+") ("+unmeasured+")",
			"unless on ("+joinLabels(g.m.Scope, labelJob)+") "+jobAbsent,
		),
		For:           slo.PromDuration(waits),
		KeepFiringFor: slo.PromDuration(g.keepFiringFor()),
		Labels:        g.labels(l),
		Annotations: g.annotate(annotations{
			alert:   AlertPipelinesUnmeasured,
			summary: fmt.Sprintf("{{ $value }} of the %d configured pipelines are measured by no outbox-canary prober.", len(g.m.Pipelines)),
			// The notification names the pipelines.
			description: fmt.Sprintf("For %s, Prometheus has had no %s series from job %q for pipelines {{ range query `%s` | sortByLabel \"%s\" }}{{ .Labels.%s }} {{ end }}while other probers of the job are up (%s lists them). No canary goes through them, so none of their alerts can fire. With --shard.count, every replica of the shard that owns them is down (outbox-canary validate --shard.count N prints which shard owns which pipeline); sharded or not, the probers may run an older configuration than these rules. Check that shard's pods (kubectl get pods) and Prometheus's targets page, and that the probers run the configuration the rules were generated from.",
				slo.PromDuration(waits), slo.MetricLastSentTimestamp, a.ProberJob, unmeasured, slo.LabelPipeline, slo.LabelPipeline, unmeasured),
			dashboard: slo.DashboardSLOOverview,
		}),
	}
}

// redundancyLost is the ticket for fewer prober replicas measuring a
// pipeline than alerting.replicas: one down, or up without its database
// or Kafka. The pipelines are still measured (every alert aggregates
// across replicas), so it is a ticket: one more loss is a hole in the
// SLIs and, when it is the last replica, the dead man.
//
// It counts replicas per pipeline, not build_info series per job, so it
// holds with sharding too (each shard's replicas measure its pipelines),
// and it is one alert per scope, valued at the fewest replicas measuring
// a pipeline, not one per pipeline: one replica down takes every pipeline
// of its shard with it. A pipeline no replica measures is not counted:
// OutboxCanaryPipelinesUnmeasured, the dead man or
// OutboxCanaryDependencyDown pages for it.
//
// Emitted only when alerting.replicas is above 1: at 1 its condition
// (fewer than one replica, yet a series to count) can never hold.
//
// It waits as long as the dead man does (prober_absent_for and its
// grace), so a replica's restart or a rolling update is no ticket, and
// keeps firing for as long as the dead man (or, for a shard,
// pipelinesUnmeasured) takes to page when the last replica goes too; the
// page inhibits it in Alertmanager (a page inhibits the tickets of its
// owner, and neither has a pipeline label).
func (g generator) redundancyLost() Rule {
	a := g.m.Alerting
	l := map[string]string{labelSeverity: g.severity(config.SeverityTicket)}
	if a.ProberOwner != "" {
		l[slo.LabelOwner] = a.ProberOwner
	}
	job := scoped(g.m.Scope, labelJob, a.ProberJob)
	measuring := selector(slo.MetricLastSentTimestamp, job...) +
		" unless ignoring (" + slo.LabelDependency + ") (" + selector(slo.MetricDependencyUp, job...) + " == 0)"
	waits := time.Duration(a.ProberAbsentFor) + proberAbsentGrace
	return Rule{
		Alert: AlertRedundancyLost,
		Expr: lines(
			"min by ("+joinLabels(g.m.Scope, labelJob)+") (",
			"  count by ("+joinLabels(g.m.Scope, labelJob, slo.LabelPipeline)+") (",
			"    "+measuring,
			"  )",
			") < "+strconv.Itoa(a.Replicas),
		),
		For:           slo.PromDuration(waits),
		KeepFiringFor: slo.PromDuration(g.keepFiringFor()),
		Labels:        g.labels(l),
		Annotations: g.annotate(annotations{
			alert:   AlertRedundancyLost,
			summary: fmt.Sprintf("Only {{ $value }} of the %d outbox-canary prober replicas measure some pipelines.", a.Replicas),
			description: fmt.Sprintf("For %s, some pipelines of job %q have been measured by only {{ $value }} prober replica(s) of the %d configured (alerting.replicas): the others are down, unscraped, or up without their database or Kafka connection. The pipelines are still measured and their alerts still fire, but one more loss leaves holes in their SLIs, and the last one is OutboxCanaryPipelinesUnmeasured (a shard's last replica) or OutboxCanaryProberAbsent (the job's). Find the missing replica (kubectl get pods; Prometheus's targets page; count by (instance) (%s{job=%q}) lists the replicas that are up) and bring it back.",
				slo.PromDuration(waits), a.ProberJob, a.Replicas, slo.MetricBuildInfo, a.ProberJob),
			dashboard: slo.DashboardSLOOverview,
		}),
	}
}

// humanBytes prints a power-of-two byte count as people write it: 16 MiB.
func humanBytes(n int) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.Itoa(n>>u.shift) + " " + u.name
		}
	}
	return strconv.Itoa(n) + " B"
}

// promMatchAny is a PromQL label matcher for one of the values exactly
// (matchAny is Alertmanager's).
func promMatchAny(label string, values []string) string {
	if len(values) == 1 {
		return fmt.Sprintf("%s=%q", label, values[0])
	}
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = regexp.QuoteMeta(v)
	}
	return fmt.Sprintf("%s=~%q", label, strings.Join(quoted, "|"))
}

// scoped appends the scope's matchers to name, value pairs for selector.
func scoped(scope slo.Scope, pairs ...string) []string {
	return append(pairs, scope.Pairs()...)
}

// scopeMatchers are the scope's matchers for a selector written by hand:
// `, env="prod"`, or "" with no scope.
func scopeMatchers(scope slo.Scope) string {
	var b strings.Builder
	for _, m := range scope.Matchers() {
		b.WriteString(", " + m)
	}
	return b.String()
}

// joinLabels is labels and the scope's labels, comma-separated, for a
// by () or on () clause that must keep the scope.
func joinLabels(scope slo.Scope, labels ...string) string {
	return strings.Join(scope.By(labels...), ", ")
}
