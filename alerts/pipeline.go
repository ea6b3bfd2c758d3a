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

// clockSkewRange is the range each skew window looks back over: at least
// clockSkewWindowMin, and two canary intervals, so that a skew that
// flags every canary leaves no window empty.
func clockSkewRange(interval time.Duration) time.Duration {
	return max(clockSkewWindowMin, 2*interval)
}

// clockSkewFor is the skew ticket's for: three of its ranges.
func clockSkewFor(rng time.Duration) time.Duration { return 3 * rng }

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
	match := []string{slo.LabelDependency, dep}
	if pipeline != "" {
		match = append([]string{slo.LabelPipeline, pipeline}, match...)
	}
	up := selector(slo.MetricDependencyUp, append(match, scope.Pairs()...)...)
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

// unmeasuredRecording records RecordUnmeasured for every pipeline of the
// rules, and for every pipeline a prober too old for them measures, in
// one rule of a group of its own: absent() needs each
// pipeline's name, so this is the one rule that grows with the pipelines,
// by one line each, and the page that counts them (pipelinesUnmeasured)
// stays one line however many pipelines there are.
func (g generator) unmeasuredRecording() Rule {
	var absent []string
	for _, p := range g.m.Pipelines {
		absent = append(absent, "absent("+selector(slo.MetricLastSentTimestamp, scoped(p.Scope, labelJob, g.m.Alerting.ProberJob, slo.LabelPipeline, p.Name)...)+")")
	}
	// A prober older than the rules measures nothing they read: the
	// pipeline's facts and SLOs come from its objective series.
	job := scoped(g.m.Scope, labelJob, g.m.Alerting.ProberJob)
	old := "group by (" + joinLabels(g.m.Scope, labelJob, slo.LabelPipeline) + ") (" + selector(slo.MetricLastSentTimestamp, job...) + ")" +
		" unless on (" + joinLabels(g.m.Scope, slo.LabelPipeline) + ") " + selector(slo.MetricSLOObjective, g.m.Scope.Pairs()...)
	return Rule{
		Record: RecordUnmeasured,
		Expr:   lines(strings.Join(absent, "\nor "), "or "+old),
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
