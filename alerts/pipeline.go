package alerts

import (
	"fmt"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	// clockSkewWindow is how far back a suspected skew keeps its ticket
	// open: long enough to be seen, short enough to resolve once fixed.
	clockSkewWindow = 15 * time.Minute
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
)

// labelSlot is the prober's replication slot label (pg_replication_slots'
// slot_name).
const labelSlot = "slot"

// pipelineAlerts are the alerts beyond the SLOs for one pipeline: the ones
// that tell a stall from a quiet pipeline fast, and the watchers' backlog,
// slot and transaction signals that point at the failing stage.
func (g generator) pipelineAlerts(p slo.Pipeline) Group {
	a := g.m.Alerting
	grp := Group{Name: "outbox-canary-pipeline-" + p.Name}
	pl := func(m string) string { return selector(m, slo.LabelPipeline, p.Name) }
	labels := func(severity, segment string) map[string]string {
		l := map[string]string{labelSeverity: severity, slo.LabelPipeline: p.Name, slo.LabelOwner: p.Owner(segment)}
		if segment != "" {
			l[slo.LabelSegment] = segment
		}
		return g.labels(l)
	}
	annotate := func(alert, summary, description string) map[string]string {
		return map[string]string{"summary": summary, "description": description, "runbook_url": g.runbook(alert)}
	}

	// Stall: canaries keep being sent after the last one that arrived. The
	// "> 0" guard keeps a fresh prober (nothing received yet) quiet; the
	// burn-rate page covers a pipeline that never delivers at all.
	stallAfter := time.Duration(a.StallIntervals) * p.CanaryInterval
	grp.Rules = append(grp.Rules, Rule{
		Alert: AlertStalled,
		Expr: lines(
			"(",
			"  "+pl(slo.MetricLastSentTimestamp),
			"  - "+pl(slo.MetricLastReceivedTimestamp),
			") > "+seconds(stallAfter),
			"and",
			pl(slo.MetricLastReceivedTimestamp)+" > 0",
		),
		Labels: labels(config.SeverityPage, config.SegmentEndToEnd),
		Annotations: annotate(AlertStalled,
			fmt.Sprintf("Pipeline %s is stalled: canaries are sent but none arrives.", p.Name),
			fmt.Sprintf("The last canary of pipeline %s that arrived was sent {{ $value | humanizeDuration }} before the last one sent: %d canary intervals (%s) without a delivery. Walk the pipeline in order: oldest unpublished row age, relay or connector, replication slot, broker, consumer.",
				p.Name, a.StallIntervals, slo.PromDuration(stallAfter))),
	})

	// Insert failures with no successful insert: the prober is blind, the
	// SLO alerts cannot fire because no canary exists to be late.
	insertWindow := max(insertWindowMin, time.Duration(a.StallIntervals+1)*p.CanaryInterval)
	rng := "[" + slo.PromDuration(insertWindow) + "]"
	grp.Rules = append(grp.Rules, Rule{
		Alert: AlertInsertsFailing,
		Expr: lines(
			"sum by ("+slo.LabelPipeline+") (increase("+pl(slo.MetricCanaryInsertFailures)+rng+")) > 0",
			"unless on ("+slo.LabelPipeline+")",
			"sum by ("+slo.LabelPipeline+") (increase("+pl(slo.MetricCanariesSent)+rng+")) > 0",
		),
		Labels: labels(config.SeverityPage, config.SegmentInsertToCommit),
		Annotations: annotate(AlertInsertsFailing,
			fmt.Sprintf("Pipeline %s: canary inserts are failing; the pipeline is not being measured.", p.Name),
			fmt.Sprintf("{{ $value | humanize }} canary inserts into the outbox of pipeline %s failed over the last %s and none succeeded. Until they do, no canary can be late, so the SLO alerts of this pipeline are blind. Check the database (reachable, not read-only, not out of connections) and the prober's log.",
				p.Name, slo.PromDuration(insertWindow))),
	})

	relay := config.SegmentEndToEnd
	if rs := p.RelaySegments(); len(rs) > 0 {
		relay = rs[0]
	}
	if p.RelayKind == config.RelayPolling {
		grp.Rules = append(grp.Rules, Rule{
			Alert:  AlertOldestUnpublished,
			Expr:   pl(slo.MetricOldestUnpublishedAge) + " > " + seconds(time.Duration(a.OldestUnpublishedAge)),
			For:    slo.PromDuration(oldestUnpublishedFor),
			Labels: labels(config.SeverityPage, relay),
			Annotations: annotate(AlertOldestUnpublished,
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
				"deriv("+pl(slo.MetricBacklogRows)+"["+slo.PromDuration(backlogDerivRange)+"]) > 0",
				"and",
				"min_over_time("+pl(slo.MetricBacklogRows)+"["+slo.PromDuration(backlogDerivRange)+"]) > 0",
			),
			For:    slo.PromDuration(time.Duration(a.BacklogGrowthFor)),
			Labels: labels(config.SeverityTicket, relay),
			Annotations: annotate(AlertBacklogGrowing,
				fmt.Sprintf("Pipeline %s: the outbox backlog has been growing for %s.", p.Name, slo.PromDuration(time.Duration(a.BacklogGrowthFor))),
				fmt.Sprintf("The unpublished backlog of pipeline %s has grown by {{ $value | humanize }} rows per second on average for %s: the relay is falling behind the writers. It will trip the oldest-row age alert if it goes on.",
					p.Name, slo.PromDuration(time.Duration(a.BacklogGrowthFor)))),
		})
	}
	if p.RelayKind == config.RelayCDC {
		// With watch.slot the alerts select that slot: another pipeline's
		// slot or a leftover one in the same database is not this
		// pipeline's to page for. Without it, every slot reported counts.
		slot := pl
		walStatus := fmt.Sprintf(`%s{%s=%q, %s=~"unreserved|lost"}`, slo.MetricSlotWALStatus, slo.LabelPipeline, p.Name, labelWALStatus)
		if p.Slot != "" {
			slot = func(m string) string { return selector(m, slo.LabelPipeline, p.Name, labelSlot, p.Slot) }
			walStatus = fmt.Sprintf(`%s{%s=%q, %s=%q, %s=~"unreserved|lost"}`, slo.MetricSlotWALStatus, slo.LabelPipeline, p.Name, labelSlot, p.Slot, labelWALStatus)
		}
		grp.Rules = append(grp.Rules, Rule{
			Alert:  AlertSlotInactive,
			Expr:   slot(slo.MetricSlotActive) + " == 0",
			For:    slo.PromDuration(slotInactiveFor),
			Labels: labels(config.SeverityPage, relay),
			Annotations: annotate(AlertSlotInactive,
				fmt.Sprintf("Pipeline %s: the replication slot {{ $labels.slot }} has no consumer.", p.Name),
				fmt.Sprintf("The replication slot {{ $labels.slot }} of pipeline %s has been inactive (or does not exist) for %s: the connector is not streaming, nothing is published, and the database keeps WAL for the slot. Check the connector and its task status.",
					p.Name, slo.PromDuration(slotInactiveFor))),
		}, Rule{
			Alert:  AlertSlotRetainedWALGrowth,
			Expr:   "deriv(" + slot(slo.MetricSlotRetainedWAL) + "[" + slo.PromDuration(time.Duration(a.WALGrowthFor)) + "]) > 0",
			For:    slo.PromDuration(time.Duration(a.WALGrowthFor)),
			Labels: labels(config.SeverityTicket, relay),
			Annotations: annotate(AlertSlotRetainedWALGrowth,
				fmt.Sprintf("Pipeline %s: the replication slot {{ $labels.slot }} retains more and more WAL.", p.Name),
				fmt.Sprintf("WAL retained by the replication slot {{ $labels.slot }} of pipeline %s has grown by {{ $value | humanize1024 }}B per second for %s: the connector is not confirming its position. The database disk is at risk.",
					p.Name, slo.PromDuration(time.Duration(a.WALGrowthFor)))),
		}, Rule{
			Alert:  AlertSlotWALAtRisk,
			Expr:   walStatus + " == 1",
			Labels: labels(config.SeverityPage, relay),
			Annotations: annotate(AlertSlotWALAtRisk,
				fmt.Sprintf("Pipeline %s: the replication slot {{ $labels.slot }}'s WAL is {{ $labels.%s }}.", p.Name, labelWALStatus),
				fmt.Sprintf("The replication slot {{ $labels.slot }} of pipeline %s has wal_status {{ $labels.%s }}: past max_slot_wal_keep_size, WAL it needs is (unreserved) or has been (lost) removed. A lost slot cannot resume: the connector must be re-created and events may be missing.",
					p.Name, labelWALStatus)),
		})
	}
	grp.Rules = append(grp.Rules, Rule{
		Alert:  AlertLongTransaction,
		Expr:   pl(slo.MetricOldestTransactionAge) + " > " + seconds(time.Duration(a.LongTransactionAge)),
		Labels: labels(config.SeverityTicket, config.SegmentInsertToCommit),
		Annotations: annotate(AlertLongTransaction,
			fmt.Sprintf("Pipeline %s: a transaction has been open for {{ $value | humanizeDuration }}.", p.Name),
			fmt.Sprintf("The oldest open transaction on the database of pipeline %s is {{ $value | humanizeDuration }} old (threshold %s). Rows it wrote stay invisible to the relay until it commits, then arrive late all at once; it also holds back vacuum and, for log capture, the slot.",
				p.Name, slo.PromDuration(time.Duration(a.LongTransactionAge)))),
	}, Rule{
		Alert:  AlertClockSkewSuspected,
		Expr:   "increase(" + pl(slo.MetricClockSkew) + "[" + slo.PromDuration(clockSkewWindow) + "]) > 0",
		Labels: labels(config.SeverityTicket, ""),
		Annotations: annotate(AlertClockSkewSuspected,
			fmt.Sprintf("Pipeline %s: clock skew suspected on segment {{ $labels.segment }}.", p.Name),
			fmt.Sprintf("{{ $value | humanize }} canaries of pipeline %s measured a negative duration on segment {{ $labels.segment }} over the last %s: the clocks stamping its two ends disagree. The segment's latencies are unreliable until the clocks (NTP/chrony on the relay, broker or database host) are fixed.",
				p.Name, slo.PromDuration(clockSkewWindow))),
	})
	return grp
}

// proberAbsentGrace is how long the prober must stay absent before the dead
// man pages, on top of the absent_over_time window.
const proberAbsentGrace = time.Minute

// proberAlerts is the dead man: the prober's own series are gone. absent()
// of up{job=...} is fragile (it depends on the scrape config's job being
// exactly one target); absent_over_time of the build info gauge fires when
// the prober is down, unscraped or relabelled away alike.
func (g generator) proberAlerts() Group {
	a := g.m.Alerting
	l := map[string]string{labelSeverity: config.SeverityPage}
	if a.ProberOwner != "" {
		l[slo.LabelOwner] = a.ProberOwner
	}
	absent := time.Duration(a.ProberAbsentFor)
	return Group{
		Name: "outbox-canary-prober",
		Rules: []Rule{{
			Alert: AlertProberAbsent,
			Expr:  "absent_over_time(" + selector(slo.MetricBuildInfo, labelJob, a.ProberJob) + "[" + slo.PromDuration(absent) + "])",
			// A Prometheus that just started has no sample yet either; the
			// for: keeps its first scrapes from paging (seen on a real
			// Prometheus 2.42 in e2e/: it fired before the first scrape).
			For:    slo.PromDuration(proberAbsentGrace),
			Labels: g.labels(l),
			Annotations: map[string]string{
				"summary": "The outbox-canary prober is gone: no pipeline is being measured.",
				"description": fmt.Sprintf("Prometheus has had no %s series from job %q for %s. Without the prober no canary is sent, so no SLO alert can fire: the pipelines are unwatched. Check the prober's deployment and Prometheus's scrape targets.",
					slo.MetricBuildInfo, a.ProberJob, slo.PromDuration(absent)),
				"runbook_url": g.runbook(AlertProberAbsent),
			},
		}},
	}
}
