package prober

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/metricsdoc"
	"github.com/outbox-canary/outbox-canary/internal/version"
	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Reasons a message read from the canary topic is skipped, the values of the
// "reason" label of outbox_canary_messages_skipped_total. Every one is created
// at zero per pipeline so a rate() over it never starts from absent.
const (
	ReasonForeignInstance = "foreign_instance" // a canary of another prober instance sharing the topic
	ReasonMalformed       = "malformed"        // not a canary payload at all
	ReasonBadSignature    = "bad_signature"    // a canary whose HMAC does not verify: a forgery or a key mismatch
	ReasonUnknownCanary   = "unknown_canary"   // ours, but not in the tracker's state (see Tracker for when)
	ReasonUnknownPipeline = "unknown_pipeline" // signed by us for another pipeline than the topic's
	// ReasonUnsupportedEncoding: framed by a schema registry (magic byte 0
	// and a schema id: Avro, Protobuf, JSON Schema), which the prober does
	// not read; the relay's converter must write JSON or text.
	ReasonUnsupportedEncoding = "unsupported_encoding"
)

// SkipReasons lists every skip reason, in the order the docs show them. A
// function, so no caller can change the list the metrics are created from.
func SkipReasons() []string {
	return []string{ReasonForeignInstance, ReasonMalformed, ReasonBadSignature, ReasonUnknownCanary, ReasonUnknownPipeline, ReasonUnsupportedEncoding}
}

// Label names used only by the prober's metrics; the shared ones (pipeline,
// segment, outcome, reason) live in package slo.
const (
	labelVersion    = "version"
	labelRevision   = "revision"
	labelGoVersion  = "goversion"
	labelStamp      = "stamp"
	labelDependency = slo.LabelDependency
)

// Native histogram settings of the segment latency histogram: a 10% bucket
// growth keeps the error of any quantile under 5%, and the cap plus the reset
// bound the memory a long-running prober spends on a wide latency spread
// (compactvec keeps a bucket in 16 bytes, where client_golang's cost about
// 260: 8.7 MB of the heap at 300 pipelines).
const (
	nativeBucketFactor    = 1.1
	nativeMaxBuckets      = 160
	nativeMinResetSeconds = time.Hour
)

// Metrics holds every metric the prober exports (names from package slo,
// which alerts and dashboards read too). Fields are exported so the sender,
// the consumer and the watchers set them directly; the tracker owns the SLI
// and latency series. Every vector has the pipeline label first.
type Metrics struct {
	BuildInfo *compactvec.GaugeVec // version, revision, goversion; always 1

	// Canary lifecycle, label pipeline.
	CanariesSent         *compactvec.CounterVec
	CanaryInsertFailures *compactvec.CounterVec
	CanariesReceived     *compactvec.CounterVec
	CanariesLate         *compactvec.CounterVec // first arrivals after the end_to_end deadline
	CanariesLost         *compactvec.CounterVec
	CanariesDuplicate    *compactvec.CounterVec
	CanariesOutOfOrder   *compactvec.CounterVec
	MessagesSkipped      *compactvec.CounterVec // pipeline, reason (one of SkipReasons())
	OffsetResets         *compactvec.CounterVec // stored offsets beyond a partition's end
	InFlight             *compactvec.GaugeVec
	LastSent             *compactvec.GaugeVec // unix seconds
	LastReceived         *compactvec.GaugeVec // unix seconds
	LastSuccess          *compactvec.GaugeVec // unix seconds of the last canary good end to end

	// Per segment, labels pipeline, segment (and outcome). SegmentLatency is
	// keyed by pipeline, then segment, because each segment has classic
	// buckets derived from its own budget; use ObserveLatency.
	SegmentLatency map[string]map[string]*compactvec.Histogram
	SLIEvents      *compactvec.CounterVec
	ClockSkew      *compactvec.CounterVec
	SegmentBudget  *compactvec.GaugeVec
	// SLOObjective is one series per SLO, for the generated rules
	// (ExportObjectives).
	SLOObjective  *compactvec.GaugeVec
	StampsMissing *compactvec.CounterVec // pipeline, stamp
	// Verdicts that are not SLI events, and negative segments that are
	// stamp order rather than skew.
	CanariesUnjudged *compactvec.CounterVec // pipeline, segment, reason
	StampOrder       *compactvec.CounterVec // pipeline, segment
	StampsInvalid    *compactvec.CounterVec // pipeline, stamp, reason

	// The tracker's state file.
	StateResets        *compactvec.CounterVec // pipeline, reason
	StateWriteFailures *compactvec.CounterVec // pipeline
	// Torn journal tails ignored on load.
	StateTornRecords *compactvec.CounterVec // pipeline

	// Clocks, label pipeline.
	DBClockOffset      *compactvec.GaugeVec
	DBClockOffsetError *compactvec.GaugeVec

	// The prober's own dependencies, label dependency (database, kafka).
	DependencyUp     *compactvec.GaugeVec
	DependencyErrors *compactvec.CounterVec
}

var (
	lp   = []string{slo.LabelPipeline}
	lps  = []string{slo.LabelPipeline, slo.LabelSegment}
	lpso = []string{slo.LabelPipeline, slo.LabelSegment, slo.LabelOutcome}
	lpsr = []string{slo.LabelPipeline, slo.LabelSegment, slo.LabelReason}
)

// catalogue is the single list of what the prober exports. Order is the
// order of docs/metrics.md.
var catalogue = []metricsdoc.Family{
	{Name: slo.MetricBuildInfo, Type: metricsdoc.Gauge, Help: "Always 1; the labels say which build of outbox-canary is running.", Labels: []string{labelVersion, labelRevision, labelGoVersion}},

	{Name: slo.MetricCanariesSent, Type: metricsdoc.Counter, Help: "Canary rows whose insert transaction committed.", Labels: lp},
	{Name: slo.MetricCanaryInsertFailures, Type: metricsdoc.Counter, Help: "Canary inserts that failed; not SLI events (the pipeline was not exercised), watch them separately.", Labels: lp},
	{Name: slo.MetricCanariesReceived, Type: metricsdoc.Counter, Help: "First arrivals of this instance's canaries on the canary topic, late ones included.", Labels: lp},
	{Name: slo.MetricCanariesLate, Type: metricsdoc.Counter, Help: "First arrivals of canaries after their end_to_end deadline (lost ones that turned up included); each was already counted bad, and is counted here once.", Labels: lp},
	{Name: slo.MetricCanariesLost, Type: metricsdoc.Counter, Help: "Canaries that did not arrive within canary.lost_after of their commit.", Labels: lp},
	{Name: slo.MetricCanariesDuplicate, Type: metricsdoc.Counter, Help: "Second and later arrivals of a canary (at-least-once delivery); never SLI events.", Labels: lp},
	{Name: slo.MetricCanariesOutOfOrder, Type: metricsdoc.Counter, Help: "Canaries that arrived after a later canary of the same message key.", Labels: lp},
	{Name: slo.MetricMessagesSkipped, Type: metricsdoc.Counter, Help: "Messages on the canary topic that were not counted as canaries, by reason.", Labels: []string{slo.LabelPipeline, slo.LabelReason}},
	{Name: slo.MetricConsumerOffsetResets, Type: metricsdoc.Counter, Help: "Partitions of the canary topic whose stored next offset was beyond the partition's end (topic deleted and recreated): read again from the start position instead of waiting there forever.", Labels: lp},
	{Name: slo.MetricCanariesInFlight, Type: metricsdoc.Gauge, Help: "Canaries sent that have neither arrived nor been declared lost.", Labels: lp},
	{Name: slo.MetricLastSentTimestamp, Type: metricsdoc.Gauge, Help: "Unix time of the last committed canary insert; 0 until the first.", Labels: lp},
	{Name: slo.MetricLastReceivedTimestamp, Type: metricsdoc.Gauge, Help: "Unix time of the last first arrival of a canary; 0 until the first.", Labels: lp},
	{Name: slo.MetricLastSuccessTimestamp, Type: metricsdoc.Gauge, Help: "Unix time of the last canary good end to end; 0 until the first.", Labels: lp},

	{Name: slo.MetricSegmentLatency, Type: metricsdoc.Histogram, Help: "Latency of each segment of each arrived canary (late ones included); negative segments are not observed but counted as suspected clock skew. Classic buckets are 0.1x to 10x of the segment's own budget (of end_to_end's for a segment without one), the budget among them; native buckets too.", Labels: lps},
	{Name: slo.MetricSLIEvents, Type: metricsdoc.Counter, Help: "One event per canary and budgeted segment, good if the segment ended within its budget, bad once its deadline passed without it.", Labels: lpso},
	{Name: slo.MetricClockSkew, Type: metricsdoc.Counter, Help: "Segments measured negative beyond relay.skew_tolerance by stamps from clocks that disagree (a relay's, the database's); not observed, not judged. A published_at marked after consumption is stamp order, not skew. Created for the segments with a pipeline's stamp at one end, and insert_to_commit (the skew alerts select it; it never counts); not end_to_end, whose two ends are the prober's.", Labels: lps},
	{Name: slo.MetricStampOrder, Type: metricsdoc.Counter, Help: "Segments measured negative because a stamp was taken after its event (published_at marked after the record was consumed): not clock skew; the segments next to it are judged by what can be proven. Created for the segments with a pipeline's stamp at one end.", Labels: lps},
	{Name: slo.MetricCanariesUnjudged, Type: metricsdoc.Counter, Help: "Segments a canary entered that are not SLI events, by reason: prober_down, prober_lag (the prober's own downtime or backlog), unknown (its own dependency was down), invalid_stamp, missing_stamp, stamp_order, clock_skew, lost, brokers_unreachable (a relay's segment overlapped a time the prober could not reach the brokers). Not created at zero: a series appears when it first counts (no rule or dashboard takes its rate). The reasons that can apply: on end_to_end prober_down, prober_lag and lost; prober_lag only on the segment that ends at consume, prober_down on it and on those that end at or before publish (an outage the prober could not see while down), brokers_unreachable only on those that end at or before publish; none on insert_to_commit.", Labels: lpsr},
	{Name: slo.MetricStampsInvalid, Type: metricsdoc.Counter, Help: "Stamps more than relay.max_clock_skew before the commit (before_commit) or after the consumption (after_consume), or headers that hold no time (unparseable, created for header stamps only): not observed, their segments not judged.", Labels: []string{slo.LabelPipeline, labelStamp, slo.LabelReason}},
	{Name: slo.MetricSegmentBudget, Type: metricsdoc.Gauge, Help: "The configured latency budget of each budgeted segment.", Labels: lps},
	{Name: slo.MetricSLOObjective, Type: metricsdoc.Gauge, Help: "One series per SLO, its value the objective as a ratio (0.999); its labels are what the generated rules give the SLO's recordings: Sloth's identity (sloth_id, sloth_service, sloth_slo), the segment's owner, the objective as Sloth's info prints it, the budget as the alerts print it, what picks the rules that read it (the SLO window, the pipeline's canary interval and its stall threshold), the segment's place in the order a stall is blamed (blame_order, empty for none), and the pipeline's facts its alerts read: its relay's kind, its database's family, its watched slot, its relay's first segment, and the owners of its relay, its inserts, the rest (default_owner) and the prober's own sight.", Labels: []string{slo.LabelPipeline, slo.LabelSegment, slo.LabelSlothID, slo.LabelSlothService, slo.LabelSlothSLO, slo.LabelOwner, slo.LabelSlothObjective, slo.LabelSLOWindow, slo.LabelSLOBudget, slo.LabelCanaryInterval, slo.LabelStallThreshold, slo.LabelBlameOrder, slo.LabelRelayKind, slo.LabelDatabaseFamily, slo.LabelSlot, slo.LabelRelaySegment, slo.LabelRelayOwner, slo.LabelInsertOwner, slo.LabelDefaultOwner, slo.LabelProberOwner}},
	{Name: slo.MetricStampsMissing, Type: metricsdoc.Counter, Help: "Canaries that arrived without a configured stamp (a relay header, the publish time); the segments next to it are not judged.", Labels: []string{slo.LabelPipeline, labelStamp}},

	{Name: slo.MetricDBClockOffset, Type: metricsdoc.Gauge, Help: "Estimated database clock minus prober clock, from the lowest round-trip sample.", Labels: lp},
	{Name: slo.MetricDBClockOffsetError, Type: metricsdoc.Gauge, Help: "Error bound of the database clock offset: half the round trip of the sample used.", Labels: lp},

	{Name: slo.MetricStateResets, Type: metricsdoc.Counter, Help: "State files moved aside with a timestamp because this release cannot use them (corrupt, another version, another pipeline's); the pipeline started afresh.", Labels: []string{slo.LabelPipeline, slo.LabelReason}},
	{Name: slo.MetricStateWriteFailures, Type: metricsdoc.Counter, Help: "Writes of the state file that failed; the state stays in memory and a restart may recount what it held.", Labels: lp},
	{Name: slo.MetricStateTornRecords, Type: metricsdoc.Counter, Help: "Incomplete or damaged records at the end of a state journal, ignored when it was read: a crash while one was written. Nothing they held had been counted; the messages they recorded are read again. Counted for the pipeline the record names; one too damaged to name it is only logged.", Labels: lp},
	{Name: slo.MetricDependencyUp, Type: metricsdoc.Gauge, Help: "1 while the prober reaches its dependency (its database pool, its Kafka readers), else 0. Not readiness: a downstream outage must not make the prober's pod unready.", Labels: []string{slo.LabelPipeline, labelDependency}},
	{Name: slo.MetricDependencyErrors, Type: metricsdoc.Counter, Help: "Failed checks of a dependency of the prober (database pings and clock samples, Kafka metadata requests).", Labels: []string{slo.LabelPipeline, labelDependency}},
}

// Catalogue describes every family the prober's canary engine exports.
func Catalogue() []metricsdoc.Family {
	return metricsdoc.Clone(catalogue)
}

func family(name string) metricsdoc.Family {
	f, _ := metricsdoc.Find(catalogue, name) // every name used here is in the catalogue (TestMetricsDoc)
	return f
}

// The counters and gauges are compact vectors: a pipeline has about ninety
// series, and client_golang's vectors cost 600 bytes each (16 MB at 300
// pipelines, half the prober's live heap there).
func counterVec(name string) *compactvec.CounterVec { return family(name).CounterVec() }

func gaugeVec(name string) *compactvec.GaugeVec { return family(name).GaugeVec() }

// NewMetrics creates and registers the prober's metrics for the given
// pipelines, creates the per-pipeline series at zero (every skip reason,
// every budgeted segment and outcome) and sets the budget gauges.
func NewMetrics(reg prometheus.Registerer, pipelines []config.Pipeline) (*Metrics, error) {
	m := &Metrics{
		BuildInfo:            gaugeVec(slo.MetricBuildInfo),
		CanariesSent:         counterVec(slo.MetricCanariesSent),
		CanaryInsertFailures: counterVec(slo.MetricCanaryInsertFailures),
		CanariesReceived:     counterVec(slo.MetricCanariesReceived),
		CanariesLate:         counterVec(slo.MetricCanariesLate),
		CanariesLost:         counterVec(slo.MetricCanariesLost),
		CanariesDuplicate:    counterVec(slo.MetricCanariesDuplicate),
		CanariesOutOfOrder:   counterVec(slo.MetricCanariesOutOfOrder),
		MessagesSkipped:      counterVec(slo.MetricMessagesSkipped),
		OffsetResets:         counterVec(slo.MetricConsumerOffsetResets),
		InFlight:             gaugeVec(slo.MetricCanariesInFlight),
		LastSent:             gaugeVec(slo.MetricLastSentTimestamp),
		LastReceived:         gaugeVec(slo.MetricLastReceivedTimestamp),
		LastSuccess:          gaugeVec(slo.MetricLastSuccessTimestamp),
		SegmentLatency:       make(map[string]map[string]*compactvec.Histogram, len(pipelines)),
		SLIEvents:            counterVec(slo.MetricSLIEvents),
		ClockSkew:            counterVec(slo.MetricClockSkew),
		SegmentBudget:        gaugeVec(slo.MetricSegmentBudget),
		SLOObjective:         gaugeVec(slo.MetricSLOObjective),
		StampsMissing:        counterVec(slo.MetricStampsMissing),
		CanariesUnjudged:     counterVec(slo.MetricCanariesUnjudged),
		StampOrder:           counterVec(slo.MetricStampOrder),
		StampsInvalid:        counterVec(slo.MetricStampsInvalid),
		StateResets:          counterVec(slo.MetricStateResets),
		StateWriteFailures:   counterVec(slo.MetricStateWriteFailures),
		StateTornRecords:     counterVec(slo.MetricStateTornRecords),
		DBClockOffset:        gaugeVec(slo.MetricDBClockOffset),
		DBClockOffsetError:   gaugeVec(slo.MetricDBClockOffsetError),
		DependencyUp:         gaugeVec(slo.MetricDependencyUp),
		DependencyErrors:     counterVec(slo.MetricDependencyErrors),
	}
	m.BuildInfo.WithLabelValues(version.Version, version.Revision, version.GoVersion()).Set(1)

	collectors := []prometheus.Collector{
		m.BuildInfo, m.CanariesSent, m.CanaryInsertFailures, m.CanariesReceived, m.CanariesLate, m.CanariesLost, m.OffsetResets,
		m.CanariesDuplicate, m.CanariesOutOfOrder, m.MessagesSkipped, m.InFlight, m.LastSent,
		m.LastReceived, m.LastSuccess, m.SLIEvents, m.ClockSkew, m.SegmentBudget, m.SLOObjective, m.StampsMissing,
		m.CanariesUnjudged, m.StampOrder, m.StampsInvalid, m.StateResets, m.StateWriteFailures, m.StateTornRecords,
		m.DBClockOffset, m.DBClockOffsetError, m.DependencyUp, m.DependencyErrors,
	}

	latency := family(slo.MetricSegmentLatency)
	for i := range pipelines {
		p := &pipelines[i]
		if _, dup := m.SegmentLatency[p.Name]; dup {
			return nil, fmt.Errorf("metrics: pipeline %q listed twice", p.Name)
		}
		// One histogram vector per pipeline and segment, both as constant
		// labels: the registry accepts several collectors of one family
		// that differ in constant label values, and that is what lets
		// each segment have buckets around its own budget (a pipeline's
		// budgets merged cost every segment the bounds of all of them).
		// Sorted by segment, as one vector would expose them.
		segments := append(p.Segments(), config.SegmentInsertToCommit)
		slices.Sort(segments)
		m.SegmentLatency[p.Name] = make(map[string]*compactvec.Histogram, len(segments))
		for _, s := range segments {
			h, err := compactvec.NewHistogramVec(compactvec.HistogramOpts{
				Name:                   latency.Name,
				Help:                   latency.Help,
				ConstLabels:            prometheus.Labels{slo.LabelPipeline: p.Name, slo.LabelSegment: s},
				Buckets:                LatencyBuckets(p, s),
				NativeBucketFactor:     nativeBucketFactor,
				NativeMaxBuckets:       nativeMaxBuckets,
				NativeMinResetDuration: nativeMinResetSeconds,
			}, nil)
			if err != nil {
				return nil, fmt.Errorf("metrics: pipeline %q: segment %s: latency histogram: %w", p.Name, s, err)
			}
			m.SegmentLatency[p.Name][s] = h.WithLabelValues()
			collectors = append(collectors, h)
		}
	}

	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}

	for i := range pipelines {
		m.initPipeline(&pipelines[i])
	}
	return m, nil
}

// initPipeline creates a pipeline's series at zero, so that rates and
// ratios have a starting point and absent() means "not running", not
// "nothing happened yet": every series that can count, and no other (a
// series that can never count is a cost in every Prometheus that
// scrapes it; TestSeriesPerPipeline). The unjudged counters are the
// exception: no rule or dashboard takes their rate, so they appear when
// they first count, and cost nothing until then.
func (m *Metrics) initPipeline(p *config.Pipeline) {
	n := p.Name
	for _, c := range []*compactvec.CounterVec{m.CanariesSent, m.CanaryInsertFailures, m.CanariesReceived,
		m.CanariesLate, m.CanariesLost, m.CanariesDuplicate, m.CanariesOutOfOrder, m.OffsetResets} {
		c.WithLabelValues(n)
	}
	for _, g := range []*compactvec.GaugeVec{m.InFlight, m.LastSent, m.LastReceived, m.LastSuccess} {
		g.WithLabelValues(n)
	}
	for _, r := range SkipReasons() {
		m.MessagesSkipped.WithLabelValues(n, r)
	}
	// Only what can count is created: the judge's plan says which
	// segments can be measured negative and which reasons can leave a
	// segment unjudged (end to end and insert_to_commit have the
	// prober's clock at both ends; the prober's trouble excuses only the
	// wait in the topic, the brokers' outage only the relay).
	plan := planOf(p)
	for _, s := range p.Segments() {
		if plan.Skewable(s) {
			m.ClockSkew.WithLabelValues(n, s)
			m.StampOrder.WithLabelValues(n, s)
		}
	}
	for _, r := range StateResetReasons() {
		m.StateResets.WithLabelValues(n, r)
	}
	m.StateWriteFailures.WithLabelValues(n)
	m.StateTornRecords.WithLabelValues(n)
	for _, s := range p.StampOrder() {
		if s != config.StampCommit && s != config.StampConsume {
			m.StampsMissing.WithLabelValues(n, s)
			m.StampsInvalid.WithLabelValues(n, s, judge.InvalidBeforeCommit)
			m.StampsInvalid.WithLabelValues(n, s, judge.InvalidAfterConsume)
			// Only a header can hold something that is no time: not a
			// published_at column nor a record timestamp (Consumer.stamps).
			if s != config.StampPublish || p.Relay.PublishedStamp == config.PublishedFromHeader {
				m.StampsInvalid.WithLabelValues(n, s, judge.InvalidUnparseable)
			}
		}
	}
	for _, s := range p.BudgetedSegments() {
		b, _ := p.Budget(s)
		m.SegmentBudget.WithLabelValues(n, s).Set(b.Seconds())
		m.SLIEvents.WithLabelValues(n, s, slo.OutcomeGood)
		m.SLIEvents.WithLabelValues(n, s, slo.OutcomeBad)
	}
	// insert_to_commit is never measured negative, but the generated skew
	// alerts select it with its owner's other segments: no rule reads a
	// selector that matches nothing.
	m.ClockSkew.WithLabelValues(n, config.SegmentInsertToCommit)
}

// ExportObjectives sets the objective series of the SLOs of the given
// pipelines of the model: the generated rules take each SLO's labels and
// objective from them (slo.SLO.ObjectiveSeries).
func (m *Metrics) ExportObjectives(model *slo.Model, pipelines []config.Pipeline) {
	for _, p := range model.Pipelines {
		if !slices.ContainsFunc(pipelines, func(c config.Pipeline) bool { return c.Name == p.Name }) {
			continue
		}
		for _, s := range p.SLOs {
			l, ratio := s.ObjectiveSeries()
			f := family(slo.MetricSLOObjective)
			values := make([]string, len(f.Labels))
			for i, name := range f.Labels {
				values[i] = l[name]
			}
			m.SLOObjective.WithLabelValues(values...).Set(ratio)
		}
	}
}

// ObserveLatency records a segment's duration in its histogram. Unknown
// pipelines and segments are ignored: the tracker only observes the
// configured ones.
func (m *Metrics) ObserveLatency(pipeline, segment string, d time.Duration) {
	if h, ok := m.SegmentLatency[pipeline][segment]; ok {
		h.Observe(d.Seconds())
	}
}

// latencyMultipliers are the fractions and multiples of a budget that
// become classic bucket bounds, as num/den so the bounds are computed in
// integer nanoseconds (3s * 0.1 would print as 0.30000000000000004).
var latencyMultipliers = [][2]int64{
	{1, 10}, {1, 4}, {1, 2}, {3, 4}, {1, 1}, {3, 2}, {2, 1}, {5, 1}, {10, 1},
}

// LatencyBuckets returns the classic histogram bounds of a segment of a
// pipeline: 0.1x to 10x of the segment's budget, which is itself a bound,
// so the fraction of canaries within budget can be read from the
// histogram exactly. A segment without a budget (insert_to_commit by
// default, or a relay stamp's segment) gets the bounds of end_to_end, the
// longest any part of the pipeline is meant to take; a pipeline without
// one, client_golang's default buckets.
func LatencyBuckets(p *config.Pipeline, segment string) []float64 {
	b, ok := p.Budget(segment)
	if !ok {
		b, ok = p.Budget(config.SegmentEndToEnd)
	}
	if !ok || b <= 0 {
		return prometheus.DefBuckets
	}
	out := make([]float64, 0, len(latencyMultipliers))
	for _, f := range latencyMultipliers {
		if v := int64(b) * f[0] / f[1]; v > 0 && (len(out) == 0 || time.Duration(v).Seconds() > out[len(out)-1]) {
			out = append(out, time.Duration(v).Seconds())
		}
	}
	return out
}
