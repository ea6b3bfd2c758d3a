package alerts

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// pipelineClass is the pipelines with the same canary interval and stall
// threshold (so, with alerting.stall_intervals, the same end-to-end
// budget): their alerts beyond the SLOs are written once for all of them,
// since their windows and the stall's threshold are literals, and what
// differs between the pipelines (owners, the relay's kind and segment,
// the watched slot, the order a stall blames segments in) the rules read
// from the objective series the prober exports for each pipeline's SLOs
// (slo.SLO.ObjectiveSeries), joined by the pipeline.
type pipelineClass struct {
	interval, stallThreshold time.Duration
	scope                    slo.Scope
	// blame is the most segments a stall of one of the class's
	// pipelines can be blamed on (slo.Pipeline.StallBlameSegments).
	blame int
	// polling, slots and binlogs say which alerts some pipeline of the
	// class needs: a polling relay's backlog, a PostgreSQL capture's
	// replication slot, a MySQL capture's binlog.
	polling, capture, slots, binlogs bool
}

// pipelineClasses are the model's pipeline classes, in the order the
// pipelines first name them.
func pipelineClasses(m *slo.Model) []pipelineClass {
	var out []pipelineClass
	for _, p := range m.Pipelines {
		thr := p.StallThreshold(m.Alerting.StallIntervals)
		i := slices.IndexFunc(out, func(c pipelineClass) bool { return c.interval == p.CanaryInterval && c.stallThreshold == thr })
		if i < 0 {
			i = len(out)
			out = append(out, pipelineClass{interval: p.CanaryInterval, stallThreshold: thr, scope: m.Scope})
		}
		c := &out[i]
		c.blame = max(c.blame, len(p.StallBlameSegments()))
		c.polling = c.polling || p.RelayKind == config.RelayPolling
		c.capture = c.capture || p.RelayKind == config.RelayCDC
		c.slots = c.slots || (p.RelayKind == config.RelayCDC && !p.CapturesBinlog())
		c.binlogs = c.binlogs || p.CapturesBinlog()
	}
	return out
}

// name is the class's group name's tail: its interval and threshold.
func (c pipelineClass) name() string {
	return slo.PromDuration(c.interval) + "-" + slo.PromDuration(c.stallThreshold)
}

// objectives selects the objective series of the class's pipelines'
// SLOs, in its scope, with further matchers (written out: eq, or
// `slot!=""`).
func (c pipelineClass) objectives(matchers ...string) string {
	m := append([]string{eq(slo.LabelCanaryInterval, slo.PromDuration(c.interval)), eq(slo.LabelStallThreshold, slo.PromDuration(c.stallThreshold))}, matchers...)
	return selectorOf(slo.MetricSLOObjective, append(m, c.scope.Matchers()...)...)
}

// eq is the matcher name="value".
func eq(name, value string) string { return fmt.Sprintf("%s=%q", name, value) }

// facts is one series per pipeline of the class (its end_to_end SLO's
// objective series, which every pipeline has), carrying the pipeline's
// facts (slo.PipelineSeriesLabels): one whatever the number of prober
// replicas that export it.
func (c pipelineClass) facts(matchers ...string) string {
	return "topk by (" + joinLabels(c.scope, slo.LabelPipeline) + ") (1, " +
		c.objectives(append([]string{eq(slo.LabelSegment, config.SegmentEndToEnd)}, matchers...)...) + ")"
}

// bySegment is one objective series per SLO of the class's pipelines.
func (c pipelineClass) bySegment(matchers ...string) string {
	return "topk by (" + joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment) + ") (1, " + c.objectives(matchers...) + ")"
}

// owned gives each series of expr (one per pipeline of the class, and
// what else it is by) the owner in the pipeline's fact ownerLabel, and,
// with segmentLabel, the segment in that fact; only the class's
// pipelines whose facts match matchers keep their series.
func (c pipelineClass) owned(expr, ownerLabel, segmentLabel string, matchers ...string) string {
	facts := `label_replace(` + c.facts(matchers...) + `, "` + slo.LabelOwner + `", "$1", "` + ownerLabel + `", "(.*)")`
	copied := slo.LabelOwner
	if segmentLabel != "" {
		facts = `label_replace(` + facts + `, "` + slo.LabelSegment + `", "$1", "` + segmentLabel + `", "(.*)")`
		copied += ", " + slo.LabelSegment
	}
	return lines(
		"(",
		indentText(expr),
		")",
		"* on ("+joinLabels(c.scope, slo.LabelPipeline)+") group_left ("+copied+")",
		"("+facts+" ^ 0)",
	)
}

// pipelineAlerts are the alerts beyond the SLOs for the class's
// pipelines: the ones that tell a stall from a quiet pipeline fast, the
// watchers' backlog, slot, connector, consumer and transaction signals
// that point at the failing stage, and the ones that say when the prober
// cannot see.
//
// Several prober replicas may measure a pipeline, each scraped as its own
// target (its own instance, pod, ... labels). Every alert aggregates by
// the pipeline, the scope and its own labels (slot, connector, ...),
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
func (g generator) pipelineAlerts(c pipelineClass) Group {
	a := g.m.Alerting
	grp := Group{Name: "outbox-canary-pipelines-" + c.name(), EveryPipeline: true}
	sel := func(m string, matchers ...string) string { return selector(m, append(matchers, c.scope.Pairs()...)...) }
	// by keeps the pipeline and the scope in aggregations and joins.
	by := joinLabels(c.scope, slo.LabelPipeline)
	severity := func(level string, labels ...string) map[string]string {
		l := map[string]string{labelSeverity: g.severity(level)}
		for i := 0; i+1 < len(labels); i += 2 {
			l[labels[i]] = labels[i+1]
		}
		return g.labels(l)
	}
	annotate := func(alert, dashboard, summary, description string) map[string]string {
		return g.annotate(annotations{alert: alert, summary: summary, description: description, pipelineScoped: true, dashboard: dashboard})
	}
	keep := slo.PromDuration(g.keepFiringFor())
	// worst aggregates a watcher's reading across replicas (see above),
	// by the pipeline, the scope and the series' own labels.
	worst := func(op, expr string, labels ...string) string {
		return op + " by (" + joinLabels(c.scope, append([]string{slo.LabelPipeline}, labels...)...) + ") (" + expr + ")"
	}
	// What a stall sets off by itself waits while its incident is open:
	// the stall alert is the incident's one page.
	unlessStall := "unless on (" + by + ") " + sel(RecordStallIncidentStart)
	dependencyDown := func(dep string) string {
		return "unless on (" + by + ") (" + dependencyDownExpr(c.scope, "", dep) + ")"
	}
	// What a Kafka outage sets off on the relay's side waits too, from the
	// outage until the relay has had kafkaOutageHealthy to catch up:
	// OutboxCanaryDependencyDown pages the brokers' owner for it.
	unlessKafkaOutage := UnlessKafkaOutage(c.scope, "", kafkaOutageHealthy)
	relayOwned := func(expr string, matchers ...string) string {
		return c.owned(expr, slo.LabelRelayOwner, slo.LabelRelaySegment, matchers...)
	}
	withLines := func(expr string, more ...string) string {
		return strings.TrimSuffix(expr, "\n") + "\n" + strings.Join(more, "\n") + "\n"
	}

	grp.Rules = append(grp.Rules, g.stallRules(c, dependencyDown(slo.DependencyKafka))...)

	// Insert failures with no successful insert: the prober is blind, the
	// SLO alerts cannot fire because no canary exists to be late. When the
	// prober's own connection to the database is down, DependencyDown
	// says so instead. Summed over replicas: while one replica's inserts
	// succeed, the pipeline is measured, and the failing one's trouble
	// (its connection, its pod) is not the database owner's page.
	insertWindow := max(insertWindowMin, time.Duration(a.StallIntervals+1)*c.interval)
	rng := "[" + slo.PromDuration(insertWindow) + "]"
	grp.Rules = append(grp.Rules, Rule{
		Alert: AlertInsertsFailing,
		Expr: withLines(c.owned(lines(
			"sum by ("+by+") (increase("+sel(slo.MetricCanaryInsertFailures)+rng+")) > 0",
			"unless on ("+by+")",
			"sum by ("+by+") (increase("+sel(slo.MetricCanariesSent)+rng+")) > 0",
		), slo.LabelInsertOwner, ""), dependencyDown(slo.DependencyDatabase)),
		KeepFiringFor: keep,
		Labels:        severity(config.SeverityPage, slo.LabelSegment, config.SegmentInsertToCommit),
		Annotations: annotate(AlertInsertsFailing, slo.DashboardPipelineHealth,
			"Pipeline {{ $labels.pipeline }}: canary inserts are failing; the pipeline is not being measured.",
			fmt.Sprintf("{{ $value | humanize }} canary inserts into the outbox of pipeline {{ $labels.pipeline }} failed over the last %s and none succeeded. Until they do, no canary can be late, so the SLO alerts of this pipeline are blind. Check the database (reachable, not read-only, not out of connections) and the prober's log.",
				slo.PromDuration(insertWindow))),
	})

	// The database page goes to whoever runs the prober. Kafka's is one
	// page per cluster, not per pipeline (kafkaAlerts).
	grp.Rules = append(grp.Rules, Rule{
		Alert:  AlertDependencyDown,
		Expr:   c.owned(dependencyDownExpr(c.scope, "", slo.DependencyDatabase), slo.LabelProberOwner, ""),
		For:    slo.PromDuration(dependencyDownFor),
		Labels: severity(config.SeverityPage),
		// Its own series vanish with the prober too.
		KeepFiringFor: keep,
		Annotations: annotate(AlertDependencyDown, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline {{ $labels.pipeline }}: the prober has lost its own connection to {{ $labels.%s }}.", slo.LabelDependency),
			fmt.Sprintf("The prober's connection to the %s of pipeline {{ $labels.pipeline }} has been down for %s. Canaries can neither be written nor read, so the pipeline is not measured: its stall and SLO alerts are held back, as is everything else of the pipeline in Alertmanager. If the %s is down for everyone, this is the pipeline's incident too.",
				"{{ $labels."+slo.LabelDependency+" }}", slo.PromDuration(dependencyDownFor), "{{ $labels."+slo.LabelDependency+" }}")),
	})
	grp.Rules = append(grp.Rules, Rule{
		Alert: AlertWatcherFailing,
		// Only when no replica's watcher reads: while one does, its
		// gauges keep the alerts that read them seeing.
		Expr:          c.owned(worst("max", sel(slo.MetricWatcherUp), slo.LabelWatcher)+" == 0", slo.LabelProberOwner, ""),
		For:           slo.PromDuration(watcherFailingFor),
		KeepFiringFor: keep,
		Labels:        severity(config.SeverityTicket),
		Annotations: annotate(AlertWatcherFailing, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline {{ $labels.pipeline }}: the {{ $labels.%s }} watcher is failing; its signals are gone.", slo.LabelWatcher),
			fmt.Sprintf("Every sample of the {{ $labels.%s }} watcher of pipeline {{ $labels.pipeline }} has failed for %s. It has withdrawn its gauges rather than report old values, so the alerts that read them are blind (and held back in Alertmanager, so they do not resolve). Usually a privilege (pg_monitor, SELECT on the outbox table, access to Kafka Connect) or an unreachable server; the prober's log has the error.",
				slo.LabelWatcher, slo.PromDuration(watcherFailingFor))),
	})

	polling := []string{eq(slo.LabelRelayKind, config.RelayPolling)}
	if c.polling {
		grp.Rules = append(grp.Rules, Rule{
			Alert: AlertOldestUnpublished,
			// A relay that cannot reach the brokers cannot publish: while
			// the prober cannot reach them either, and for a while after,
			// the backlog is the brokers' (OutboxCanaryDependencyDown pages
			// their owner).
			Expr:          withLines(relayOwned(worst("max", sel(slo.MetricOldestUnpublishedAge))+" > "+seconds(time.Duration(a.OldestUnpublishedAge)), polling...), unlessStall, unlessKafkaOutage),
			For:           slo.PromDuration(oldestUnpublishedFor),
			KeepFiringFor: keep,
			Labels:        severity(config.SeverityPage),
			Annotations: annotate(AlertOldestUnpublished, slo.DashboardPipelineHealth,
				"Pipeline {{ $labels.pipeline }}: the oldest unpublished outbox row is {{ $value | humanizeDuration }} old.",
				fmt.Sprintf("The oldest row in the outbox of pipeline {{ $labels.pipeline }} that the relay has not published is {{ $value | humanizeDuration }} old (threshold %s). The fault is at or before the relay: check the relay's process and logs first.",
					slo.PromDuration(time.Duration(a.OldestUnpublishedAge)))),
		}, Rule{
			Alert: AlertBacklogGrowing,
			// A healthy relay empties the backlog at every poll, so a
			// canary or a burst that is briefly unpublished makes deriv
			// positive on a quiet pipeline (seen in e2e/ on a real
			// Prometheus). Growth only counts if the backlog never emptied
			// over the same range.
			Expr: withLines(relayOwned(lines(
				"max by ("+by+") (",
				"  deriv("+sel(slo.MetricBacklogRows)+"["+slo.PromDuration(backlogDerivRange)+"]) > 0",
				"  and",
				"  min_over_time("+sel(slo.MetricBacklogRows)+"["+slo.PromDuration(backlogDerivRange)+"]) > 0",
				")",
			), polling...), unlessStall, unlessKafkaOutage),
			For:           slo.PromDuration(time.Duration(a.BacklogGrowthFor)),
			KeepFiringFor: keep,
			Labels:        severity(config.SeverityTicket),
			Annotations: annotate(AlertBacklogGrowing, slo.DashboardPipelineHealth,
				fmt.Sprintf("Pipeline {{ $labels.pipeline }}: the outbox backlog has been growing for %s.", slo.PromDuration(time.Duration(a.BacklogGrowthFor))),
				fmt.Sprintf("The unpublished backlog of pipeline {{ $labels.pipeline }} has grown by {{ $value | humanize }} rows per second on average for %s: the relay is falling behind the writers. It will trip the oldest-row age alert if it goes on.",
					slo.PromDuration(time.Duration(a.BacklogGrowthFor)))),
		})
	}
	if c.capture {
		// What the source keeps for a stopped task: WAL for its slot on
		// PostgreSQL; on MySQL nothing, and expiry may purge its file.
		for _, family := range []struct{ kind, retained string }{
			{config.KindPostgres, "the replication slot retains WAL meanwhile"},
			{config.KindMySQL, "binlog expiry goes on meanwhile and may purge the file the connector must resume from (" + AlertBinlogFileAtRisk + ")"},
		} {
			if family.kind == config.KindPostgres && !c.slots || family.kind == config.KindMySQL && !c.binlogs {
				continue
			}
			grp.Rules = append(grp.Rules, Rule{
				Alert:         AlertConnectorTaskFailed,
				Expr:          withLines(relayOwned(worst("max", sel(slo.MetricConnectorTaskFailures), labelConnector)+" > 0", eq(slo.LabelRelayKind, config.RelayCDC), eq(slo.LabelDatabaseFamily, family.kind)), unlessStall, unlessKafkaOutage),
				For:           slo.PromDuration(connectorTaskFailedFor),
				KeepFiringFor: keep,
				Labels:        severity(config.SeverityPage),
				Annotations: annotate(AlertConnectorTaskFailed, slo.DashboardPipelineHealth,
					"Pipeline {{ $labels.pipeline }}: {{ $value }} task(s) of connector {{ $labels.connector }} FAILED.",
					fmt.Sprintf("Kafka Connect reports {{ $value }} task(s) of connector {{ $labels.connector }} of pipeline {{ $labels.pipeline }} in state FAILED for %s. A failed task does not restart by itself: nothing is published until it is restarted, and %s. Its trace is in GET /connectors/{{ $labels.connector }}/status.",
						slo.PromDuration(connectorTaskFailedFor), family.retained)),
			})
		}
	}
	if c.binlogs {
		grp.Rules = append(grp.Rules, g.binlogRules(c, keep, unlessStall, unlessKafkaOutage)...)
	}
	if c.slots {
		grp.Rules = append(grp.Rules, g.slotRules(c, keep, unlessStall, unlessKafkaOutage)...)
	}
	grp.Rules = append(grp.Rules, Rule{
		Alert:         AlertConsumerLag,
		Expr:          c.owned(worst("max", sel(slo.MetricConsumerLagSeconds), slo.LabelGroup, slo.LabelTopic)+" > "+seconds(c.endToEndBudget(a.StallIntervals)), slo.LabelDefaultOwner, ""),
		For:           slo.PromDuration(consumerLagFor),
		KeepFiringFor: keep,
		Labels:        severity(config.SeverityTicket),
		Annotations: annotate(AlertConsumerLag, slo.DashboardPipelineHealth,
			fmt.Sprintf("Pipeline {{ $labels.pipeline }}: consumer group {{ $labels.%s }} is {{ $value | humanizeDuration }} behind on {{ $labels.%s }}.", slo.LabelGroup, slo.LabelTopic),
			fmt.Sprintf("The oldest message that business consumer group {{ $labels.%s }} has yet to read from {{ $labels.%s }} is {{ $value | humanizeDuration }} old, over the pipeline's %s end-to-end budget, for %s. The outbox delivers on time (the canaries say so) but this consumer's users see the events late.",
				slo.LabelGroup, slo.LabelTopic, slo.PromDuration(c.endToEndBudget(a.StallIntervals)), slo.PromDuration(consumerLagFor))),
	}, Rule{
		Alert:         AlertLongTransaction,
		Expr:          c.owned(worst("max", sel(slo.MetricOldestTransactionAge))+" > "+seconds(time.Duration(a.LongTransactionAge)), slo.LabelInsertOwner, ""),
		KeepFiringFor: keep,
		Labels:        severity(config.SeverityTicket, slo.LabelSegment, config.SegmentInsertToCommit),
		Annotations: annotate(AlertLongTransaction, slo.DashboardPipelineHealth,
			"Pipeline {{ $labels.pipeline }}: a transaction has been open for {{ $value | humanizeDuration }}.",
			fmt.Sprintf("The oldest open transaction on the database of pipeline {{ $labels.pipeline }} is {{ $value | humanizeDuration }} old (threshold %s). Rows it wrote stay invisible to the relay until it commits, then arrive late all at once; it also holds back vacuum and, for log capture, the slot.",
				slo.PromDuration(time.Duration(a.LongTransactionAge)))),
	}, Rule{
		Alert: AlertBadSignatures,
		// The largest count of one replica, not their sum: every replica
		// reads every message on the topic, so one forged message is
		// skipped by each. A key rotated on one replica only is seen by
		// that replica (and by the others, in its canaries) and fires.
		Expr: c.owned(fmt.Sprintf("max by (%s) (increase(%s[%s])) >= %d",
			by, sel(slo.MetricMessagesSkipped, slo.LabelReason, slo.ReasonBadSignature),
			slo.PromDuration(badSignatureWindow), badSignatureBurst), slo.LabelProberOwner, ""),
		KeepFiringFor: keep,
		Labels:        severity(config.SeverityTicket),
		Annotations: annotate(AlertBadSignatures, slo.DashboardPipelineHealth,
			"Pipeline {{ $labels.pipeline }}: {{ $value | humanize }} messages with a bad signature on the canary topic.",
			fmt.Sprintf("{{ $value | humanize }} messages on the canary topic of pipeline {{ $labels.pipeline }} over the last %s looked like canaries but failed signature verification, and were skipped. Either another prober writes to the topic with a different signing key (a key rotated on one instance only) or someone is forging canaries: forged canaries cannot fake health, but find the writer.",
				slo.PromDuration(badSignatureWindow))),
	})
	grp.Rules = append(grp.Rules, g.clockSkewRules(c, keep)...)
	return grp
}

// endToEndBudget is the class's pipelines' end-to-end budget: the stall
// threshold less stall_intervals canary intervals.
func (c pipelineClass) endToEndBudget(stallIntervals int) time.Duration {
	return c.stallThreshold - time.Duration(stallIntervals)*c.interval
}

// slotRules are a PostgreSQL capture's replication slot alerts. With
// watch.slot the alerts select that slot (the pipeline's fact slot): another
// pipeline's slot or a leftover one in the same database is not this
// pipeline's to page for. Without it, every slot reported counts.
func (g generator) slotRules(c pipelineClass, keep, unlessStall, unlessKafkaOutage string) []Rule {
	a := g.m.Alerting
	slotPipelines := []string{eq(slo.LabelRelayKind, config.RelayCDC), eq(slo.LabelDatabaseFamily, config.KindPostgres)}
	// watched keeps the series of expr of the watched slot, or of every
	// slot where none is watched.
	watched := func(expr string) string {
		return "(" + expr + " and on (" + joinLabels(c.scope, slo.LabelPipeline, labelSlot) + ") " + c.facts(slo.LabelSlot+`!=""`) +
			" or " + expr + " and on (" + joinLabels(c.scope, slo.LabelPipeline) + ") " + c.facts(eq(slo.LabelSlot, "")) + ")"
	}
	slot := func(metric string, matchers ...string) string {
		return watched(selectorOf(metric, append(matchers, c.scope.Matchers()...)...))
	}
	raw := func(metric string) string { return selectorOf(metric, c.scope.Matchers()...) }
	worst := func(op, expr string, labels ...string) string {
		return op + " by (" + joinLabels(c.scope, append([]string{slo.LabelPipeline}, labels...)...) + ") (" + expr + ")"
	}
	owned := func(expr string) string {
		return c.owned(expr, slo.LabelRelayOwner, slo.LabelRelaySegment, slotPipelines...)
	}
	withLines := func(expr string, more ...string) string {
		return strings.TrimSuffix(expr, "\n") + "\n" + strings.Join(more, "\n") + "\n"
	}
	page := g.labels(map[string]string{labelSeverity: g.severity(config.SeverityPage)})
	ticket := g.labels(map[string]string{labelSeverity: g.severity(config.SeverityTicket)})
	annotate := func(alert, summary, description string) map[string]string {
		return g.annotate(annotations{alert: alert, summary: summary, description: description, pipelineScoped: true, dashboard: slo.DashboardPipelineHealth})
	}
	return []Rule{{
		Alert:         AlertSlotInactive,
		Expr:          withLines(owned(worst("min", slot(slo.MetricSlotActive), labelSlot)+" == 0"), unlessStall, unlessKafkaOutage),
		For:           slo.PromDuration(slotInactiveFor),
		KeepFiringFor: keep,
		Labels:        page,
		Annotations: annotate(AlertSlotInactive,
			"Pipeline {{ $labels.pipeline }}: the replication slot {{ $labels.slot }} has no consumer.",
			fmt.Sprintf("The replication slot {{ $labels.slot }} of pipeline {{ $labels.pipeline }} has been inactive (or does not exist) for %s: the connector is not streaming, nothing is published, and the database keeps WAL for the slot. Check the connector and its task status.",
				slo.PromDuration(slotInactiveFor))),
	}, {
		Alert: AlertSlotRetainedWALGrowth,
		// Three conditions: the slope over wal_growth_for is up; the
		// slot retains more than the floor; and the series existed a
		// whole range ago, so the slope is never taken from a slot's
		// (or the prober's) first minutes, when a fresh slot climbs
		// from a few hundred bytes to its idle sawtooth.
		Expr: withLines(owned(lines(
			"max by ("+joinLabels(c.scope, slo.LabelPipeline, labelSlot)+") (",
			"  "+watched("deriv("+raw(slo.MetricSlotRetainedWAL)+"["+slo.PromDuration(time.Duration(a.WALGrowthFor))+"])")+" > 0",
			"  and",
			"  "+slot(slo.MetricSlotRetainedWAL)+" > "+strconv.Itoa(walGrowthFloor),
			"  and",
			"  "+watched(raw(slo.MetricSlotRetainedWAL)+" offset "+slo.PromDuration(time.Duration(a.WALGrowthFor))),
			")",
		)), unlessStall, unlessKafkaOutage),
		For:           slo.PromDuration(time.Duration(a.WALGrowthFor)),
		KeepFiringFor: keep,
		Labels:        ticket,
		Annotations: annotate(AlertSlotRetainedWALGrowth,
			"Pipeline {{ $labels.pipeline }}: the replication slot {{ $labels.slot }} retains more and more WAL.",
			fmt.Sprintf("WAL retained by the replication slot {{ $labels.slot }} of pipeline {{ $labels.pipeline }}, over %s, has grown by {{ $value | humanize1024 }}B per second for %s: the connector is not confirming its position. The database disk is at risk.",
				humanBytes(walGrowthFloor), slo.PromDuration(time.Duration(a.WALGrowthFor)))),
	}, {
		Alert:         AlertSlotWALAtRisk,
		Expr:          owned(worst("max", slot(slo.MetricSlotWALStatus, labelWALStatus+`=~"unreserved|lost"`), labelSlot, labelWALStatus) + " == 1"),
		KeepFiringFor: keep,
		Labels:        page,
		Annotations: annotate(AlertSlotWALAtRisk,
			fmt.Sprintf("Pipeline {{ $labels.pipeline }}: the replication slot {{ $labels.slot }}'s WAL is {{ $labels.%s }}.", labelWALStatus),
			fmt.Sprintf("The replication slot {{ $labels.slot }} of pipeline {{ $labels.pipeline }} has wal_status {{ $labels.%s }}: past max_slot_wal_keep_size, WAL it needs is (unreserved) or has been (lost) removed. A lost slot cannot resume: the connector must be re-created with a new snapshot and events may be missing.",
				labelWALStatus)),
	}}
}

// stallRules are the stall recordings and alerts of the class's
// pipelines: one alert per place in the order a stalled canary's segment
// is blamed in (the first segment, in pipeline order, with bad events),
// and one for a stall no segment can be blamed for.
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
// the relay's segment and never reaches the next): the objective series
// of each segment a stall can be blamed on says its place in that order
// (blame_order). With no segment to blame it is the end_to_end owner's.
// A prober that restarts after a downtime longer than the threshold sees
// an old last arrival too, but canaries it could not judge while down are
// no one's bad events, so it does not page.
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
func (g generator) stallRules(c pipelineClass, unlessKafkaDown string) []Rule {
	n := g.m.Alerting.StallIntervals
	thr := c.stallThreshold
	recv := selector(slo.MetricLastReceivedTimestamp, c.scope.Pairs()...)
	sent := selector(slo.MetricLastSentTimestamp, c.scope.Pairs()...)
	by := joinLabels(c.scope, slo.LabelPipeline)
	window := "[" + slo.PromDuration(thr+stallBlameMargin) + "]"
	// bad is true for the pipelines with bad events in the window on a
	// segment whose objective series matches matchers.
	bad := func(matchers ...string) string {
		events := selector(slo.MetricSLIEvents, append([]string{slo.LabelOutcome, slo.OutcomeBad}, c.scope.Pairs()...)...)
		return fmt.Sprintf("(sum by (%s) (increase(%s%s) * on (%s) group_left () (%s ^ 0)) > 0)",
			by, events, window, joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment), c.bySegment(matchers...))
	}
	on := "on (" + by + ") "
	// The value is the last delivery's time: constant through a stall.
	// A replica that has never received a canary (a new one, with no
	// state yet) judges nothing, and "and recv > 0" leaves it out.
	stalled := []string{
		"(",
		"  max by (" + by + ") (" + recv + ")",
		"  and " + on + "min by (" + by + ") (timestamp(" + recv + ") - " + recv + " and " + recv + " > 0) > " + seconds(thr),
		"  and " + on + "min by (" + by + ") (" + sent + " - " + recv + " and " + recv + " > 0) > " + seconds(thr-c.interval),
		"  and " + on + c.facts(),
		")",
	}
	stallRec := selector(RecordStall, c.scope.Pairs()...)
	incident := selector(RecordStallIncidentStart, c.scope.Pairs()...)
	recLabels := g.labels(map[string]string{})
	rules := []Rule{{
		// Stalled now, blamed on any segment: what an incident is made of.
		Record: RecordStall,
		Expr:   lines(append(slices.Clone(stalled), "and "+on+bad(slo.LabelSegment+`!="`+config.SegmentInsertToCommit+`"`))...),
		Labels: recLabels,
	}, {
		// The incident's start: kept while a stall was seen within
		// StallIncidentHealthy (this evaluation's included), else the
		// last delivery before this stall. Rules of a group run in order:
		// it reads this evaluation's stall and its own previous value.
		// Only the class's: each class records its own pipelines'.
		Record: RecordStallIncidentStart,
		Expr: lines(
			"(",
			"  (",
			"    "+incident,
			"    and",
			"    max_over_time("+stallRec+"["+slo.PromDuration(StallIncidentHealthy)+"])",
			"  )",
			"  or",
			"  "+stallRec,
			")",
			"and "+on+c.facts(),
		),
		Labels: recLabels,
	}}
	// The alert's value is the incident's start; its labels are the
	// pipeline's and the scope's, and the blamed segment and its owner
	// from the segment's objective series.
	rule := func(blamed string, expr []string, why string) Rule {
		return Rule{
			Alert: AlertStalled,
			Expr: lines(append(append([]string{"(", "  " + incident, "  and " + on + "("}, indent(indent(expr))...),
				"  )",
				")",
				"* "+on+"group_left ("+slo.LabelSegment+", "+slo.LabelOwner+")",
				"("+c.bySegment(blamed)+" ^ 0)",
				unlessKafkaDown)...),
			KeepFiringFor: slo.PromDuration(g.stallKeepFiringFor()),
			Labels: g.labels(map[string]string{
				labelSeverity:     g.severity(config.SeverityPage),
				LabelStalledSince: stalledSinceTemplate,
			}),
			Annotations: g.annotate(annotations{
				alert: AlertStalled,
				// Annotations see the series' labels, not the rule's
				// templated ones: they render the value themselves.
				summary: fmt.Sprintf("Pipeline {{ $labels.pipeline }} is stalled, since %s.", stalledSinceTemplate),
				description: fmt.Sprintf("No canary of pipeline {{ $labels.pipeline }} has arrived for longer than the %s end-to-end budget plus %d canary intervals of %s (%s), while canaries kept being sent. The incident began after the last delivery at %s; until the pipeline has gone %s without a stall, a new stall is the same incident. %s Walk the pipeline in order from there: oldest unpublished row, relay or connector, replication slot, broker, consumer.",
					slo.PromDuration(c.endToEndBudget(n)), n, slo.PromDuration(c.interval), slo.PromDuration(thr), stalledSinceTemplate, slo.PromDuration(StallIncidentHealthy), why),
				pipelineScoped: true,
				dashboard:      slo.DashboardPipelineHealth,
			}),
		}
	}
	var before []string
	for k := 1; k <= c.blame; k++ {
		at := eq(slo.LabelBlameOrder, strconv.Itoa(k))
		expr := append(slices.Clone(stalled), "and "+on+bad(at))
		if len(before) > 0 {
			expr = append(expr, "unless "+on+bad(slo.LabelBlameOrder+`=~"`+strings.Join(before, "|")+`"`))
		}
		rules = append(rules, rule(at, expr, "The canaries sent since are past their budget on segment {{ $labels.segment }}, owned by {{ $labels.owner }}: that is where they are stuck."))
		before = append(before, strconv.Itoa(k))
	}
	expr := append(slices.Clone(stalled), "and "+on+bad(eq(slo.LabelSegment, config.SegmentEndToEnd)))
	if c.blame > 0 {
		expr = append(expr, "unless "+on+bad(slo.LabelBlameOrder+`!=""`))
	}
	return append(rules, rule(eq(slo.LabelSegment, config.SegmentEndToEnd), expr, "No segment can be blamed: the canaries are late end to end, but no segment has judged them yet."))
}

// binlogRules are the MySQL analogues of the replication slot alerts,
// read from the binlog_connector watcher's series: a connector whose
// committed position falls ever further behind the server's binlog (the
// retained WAL's growth), and an unread binlog file that expiry has
// purged or may purge soon (wal_status unreserved or lost). There is no
// analogue of an inactive slot: the server keeps no position for a
// connector, which OutboxConnectorTaskFailed and the stall cover.
func (g generator) binlogRules(c pipelineClass, keep, unlessStall, unlessKafkaOutage string) []Rule {
	a := g.m.Alerting
	growth := time.Duration(a.WALGrowthFor)
	sel := func(m string) string { return selector(m, c.scope.Pairs()...) }
	behind := sel(slo.MetricBinlogConnectorBehindBytes)
	byConnector := joinLabels(c.scope, slo.LabelPipeline, labelConnector)
	on := "on (" + byConnector + ")"
	owned := func(expr string) string {
		return c.owned(expr, slo.LabelRelayOwner, slo.LabelRelaySegment, eq(slo.LabelRelayKind, config.RelayCDC), eq(slo.LabelDatabaseFamily, config.KindMySQL))
	}
	withLines := func(expr string, more ...string) string {
		return strings.TrimSuffix(expr, "\n") + "\n" + strings.Join(more, "\n") + "\n"
	}
	annotate := func(alert, summary, description string) map[string]string {
		return g.annotate(annotations{alert: alert, summary: summary, description: description, pipelineScoped: true, dashboard: slo.DashboardPipelineHealth})
	}
	return []Rule{{
		Alert: AlertBinlogConnectorBehind,
		// As the slot's growth, with one condition more: the connector
		// never caught up within the range. Its committed position jumps
		// forward at each offset flush, so a healthy one's distance is a
		// sawtooth whose troughs are near zero.
		Expr: withLines(owned(lines(
			"max by ("+byConnector+") (",
			"  deriv("+behind+"["+slo.PromDuration(growth)+"]) > 0",
			"  and",
			"  min_over_time("+behind+"["+slo.PromDuration(growth)+"]) > "+strconv.Itoa(binlogBehindFloor),
			"  and",
			"  "+behind+" offset "+slo.PromDuration(growth),
			")",
		)), unlessStall, unlessKafkaOutage),
		For:           slo.PromDuration(growth),
		KeepFiringFor: keep,
		Labels:        g.labels(map[string]string{labelSeverity: g.severity(config.SeverityTicket)}),
		Annotations: annotate(AlertBinlogConnectorBehind,
			"Pipeline {{ $labels.pipeline }}: connector {{ $labels.connector }} falls further and further behind the binlog.",
			fmt.Sprintf("The committed binlog position of connector {{ $labels.connector }} of pipeline {{ $labels.pipeline }} has stayed over %s behind the server's for %s and the distance has grown by {{ $value | humanize1024 }}B per second: the connector reads or commits slower than the server writes, or not at all. Its unread files are kept only until binlog expiry purges them.",
				humanBytes(binlogBehindFloor), slo.PromDuration(growth))),
	}, {
		Alert: AlertBinlogFileAtRisk,
		// Purged on any replica's reading wins over expiring on another's
		// (read before the purge).
		Expr: owned(lines(
			"max by ("+joinLabels(c.scope, slo.LabelPipeline, labelConnector, labelBinlogFile)+") (",
			`  label_replace(`+sel(slo.MetricBinlogConnectorFilePurged)+` == 1, "`+labelBinlogFile+`", "purged", "", "")`,
			"  or",
			`  label_replace(`+sel(slo.MetricBinlogConnectorPurgeHeadroom)+` < `+seconds(slo.BinlogPurgeHeadroom)+`, "`+labelBinlogFile+`", "expiring", "", "")`,
			"    unless "+on+" ("+sel(slo.MetricBinlogConnectorFilePurged)+" == 1)",
			")",
		)),
		For:           slo.PromDuration(binlogPurgeHeadroomFor),
		KeepFiringFor: keep,
		Labels:        g.labels(map[string]string{labelSeverity: g.severity(config.SeverityPage)}),
		Annotations: annotate(AlertBinlogFileAtRisk,
			fmt.Sprintf("Pipeline {{ $labels.pipeline }}: the binlog file connector {{ $labels.connector }} must read next is {{ $labels.%s }}.", labelBinlogFile),
			fmt.Sprintf("The binlog file holding the committed position of connector {{ $labels.connector }} of pipeline {{ $labels.pipeline }} is {{ $labels.%s }}: purged, the server no longer has it and the connector cannot resume from its offset (it must be re-created with a new snapshot, and events may be missing); expiring, binlog expiry (binlog_expire_logs_seconds) may purge it within %s while the connector has not read past it. Raising binlog_expire_logs_seconds stops the purge at once.",
				labelBinlogFile, slo.PromDuration(slo.BinlogPurgeHeadroom))),
	}}
}

// clockSkewRules are the skew tickets of the class's pipelines, one per
// segment that can measure skew (every segment but end_to_end, whose two
// ends are the prober's clock), each to the team that owns the segment,
// as that segment's burn alerts go: a budgeted segment's owner from its
// objective series, insert_to_commit's from the pipeline's facts, and
// an unbudgeted one's, which no series names, to the pipeline's default
// owner.
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
func (g generator) clockSkewRules(c pipelineClass, keep string) []Rule {
	rng := clockSkewRange(c.interval)
	forDur := clockSkewFor(rng)
	bySeg := joinLabels(c.scope, slo.LabelPipeline, slo.LabelSegment)
	flagged := func(segment string) string {
		return fmt.Sprintf("(min by (%s) (increase(%s{%s%s}[%s])) > 0)", bySeg, slo.MetricClockSkew, segment, scopeMatchers(c.scope), slo.PromDuration(rng))
	}
	factOwner := func(label string) string {
		return `(label_replace(` + c.facts() + `, "` + slo.LabelOwner + `", "$1", "` + label + `", "(.*)") ^ 0)`
	}
	notEndToEnd := slo.LabelSegment + `!="` + config.SegmentEndToEnd + `"`
	onPipeline := "on (" + joinLabels(c.scope, slo.LabelPipeline) + ") group_left (" + slo.LabelOwner + ")"
	return []Rule{{
		Alert: AlertClockSkewSuspected,
		Expr: lines(
			flagged(notEndToEnd)+" * on ("+bySeg+") group_left ("+slo.LabelOwner+") ("+c.bySegment()+" ^ 0)",
			"or on ("+bySeg+")",
			flagged(eq(slo.LabelSegment, config.SegmentInsertToCommit))+" * "+onPipeline+" "+factOwner(slo.LabelInsertOwner),
			"or on ("+bySeg+")",
			flagged(notEndToEnd)+" * "+onPipeline+" "+factOwner(slo.LabelDefaultOwner),
		),
		For:           slo.PromDuration(forDur),
		KeepFiringFor: keep,
		Labels:        g.labels(map[string]string{labelSeverity: g.severity(config.SeverityTicket)}),
		Annotations: g.annotate(annotations{alert: AlertClockSkewSuspected, pipelineScoped: true, dashboard: slo.DashboardSegmentLatency, segment: true,
			summary: "Pipeline {{ $labels.pipeline }}: clock skew suspected on segment {{ $labels.segment }}.",
			description: fmt.Sprintf("Canaries of pipeline {{ $labels.pipeline }} have kept measuring a negative duration on segment {{ $labels.segment }} for %s ({{ $value | humanize }} in the last %s): the clocks stamping its two ends disagree. The segment's latencies and its SLO are unreliable until the clocks (NTP/chrony on the relay, broker or database host) are fixed. Owner: {{ $labels.owner }}.",
				slo.PromDuration(forDur), slo.PromDuration(rng))}),
	}}
}
