package slo

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// Model is the internal SLO model of a configuration: what rules and
// dashboards are generated from. It is built once from the config.
type Model struct {
	Pipelines []Pipeline
	Alerting  config.Alerting
	// Scope is alerting.selector; every Pipeline and SLO carries it too.
	Scope Scope
}

// Pipeline is one pipeline's SLOs and the facts about its canaries that
// rules need.
type Pipeline struct {
	Name string
	// CanaryInterval is the (longest) interval between two canaries.
	CanaryInterval time.Duration
	// LostAfter is when an undelivered canary is declared lost.
	LostAfter time.Duration
	// EndToEndBudget is the end_to_end budget: commit to consume.
	EndToEndBudget time.Duration
	RelayKind      string
	// Family is the database family (config.KindPostgres or KindMySQL)
	// as the configuration declares it (database.kind, or an inline
	// DSN's form); PostgreSQL when only a secret could tell.
	Family string
	// Slot is the replication slot of a cdc pipeline (watch.slot); ""
	// when unset, and the slot alerts then take every slot reported.
	Slot string
	// Segments lists every measured segment in pipeline order, budgeted
	// or not.
	Segments []string
	SLOs     []SLO
	// Owners maps every segment of Segments to its owner (the segment's
	// own, or the pipeline's default).
	Owners map[string]string
	// DefaultOwner owns what cannot be blamed on one segment.
	DefaultOwner string
	// Scope is the model's scope (alerting.selector).
	Scope Scope
	// Brokers are the pipeline's Kafka bootstrap brokers, sorted:
	// pipelines that list the same brokers share a Kafka cluster, and an
	// outage of it is one incident, not one per pipeline.
	Brokers []string
}

// Owner returns the owner of a segment, or the default owner.
func (p Pipeline) Owner(segment string) string {
	if o, ok := p.Owners[segment]; ok {
		return o
	}
	return p.DefaultOwner
}

// BinlogPurgeHeadroom is where the alert on a connector's unread binlog
// file fires and its dashboard panel turns red: expiry may purge the file
// within this long. SET GLOBAL binlog_expire_logs_seconds stops it at
// once, so an hour is time enough to act.
const BinlogPurgeHeadroom = time.Hour

// CapturesBinlog reports whether a pipeline of the model captures a MySQL
// binlog.
func (m *Model) CapturesBinlog() bool {
	for _, p := range m.Pipelines {
		if p.CapturesBinlog() {
			return true
		}
	}
	return false
}

// CapturesBinlog reports whether the pipeline's relay is log capture from
// a MySQL binlog: its alerts and panels are the binlog's, not a
// replication slot's.
func (p Pipeline) CapturesBinlog() bool {
	return p.RelayKind == config.RelayCDC && p.Family == config.KindMySQL
}

// RelaySegments lists the segments between commit and publish (one, or
// more when extra stamps split it): the relay's part of the pipeline.
func (p Pipeline) RelaySegments() []string {
	var out []string
	in := false
	for _, s := range p.Segments {
		in = in || strings.HasPrefix(s, config.StampCommit+"_to_")
		if !in {
			continue
		}
		out = append(out, s)
		if strings.HasSuffix(s, "_to_"+config.StampPublish) {
			break
		}
	}
	return out
}

// SLO is one objective: a pipeline's segment judged against its budget.
type SLO struct {
	// ID is unique per configuration: "<pipeline>-<segment>".
	ID       string
	Pipeline string
	Segment  string
	// Objective in percent, e.g. 99.9.
	Objective float64
	Window    time.Duration
	// Budget is the latency a canary must beat on this segment to be good.
	Budget time.Duration
	Owner  string
	// Burn lists the multiwindow burn-rate alerts, factors already derived
	// for Window.
	Burn []BurnAlert
	// Scope is the model's scope (alerting.selector).
	Scope Scope
	// CanaryInterval and StallThreshold are the pipeline's: a burn page
	// counts its minimum of bad canaries in canary intervals and waits a
	// stall threshold for the stall that would explain it.
	CanaryInterval, StallThreshold time.Duration
	// BlameOrder is the segment's place among the pipeline's
	// StallBlameSegments, from 1; 0 when a stall is never blamed on it.
	BlameOrder int
	// PipelineLabels are the pipeline's facts that its rules read, the
	// same on each of its SLOs' objective series (PipelineSeriesLabels).
	PipelineLabels map[string]string
}

// FromConfig builds the model of a validated configuration. The burn
// windows are alerting.burn_windows when set, the SRE Workbook's otherwise.
func FromConfig(cfg *config.Config) (*Model, error) {
	m := &Model{Alerting: cfg.Alerting, Scope: Scope(cfg.Alerting.Selector)}
	windows := cfg.Alerting.BurnWindows
	if len(windows) == 0 {
		var err error
		if windows, err = DefaultBurnWindows(); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Pipelines {
		p := &cfg.Pipelines[i]
		interval, err := canaryInterval(p.Canary.Schedule)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: canary.schedule: %w", p.Name, err)
		}
		family, ok := p.Database.DeclaredFamily()
		if !ok {
			family = config.KindPostgres
		}
		mp := Pipeline{
			Name:           p.Name,
			CanaryInterval: interval,
			LostAfter:      time.Duration(p.Canary.LostAfter),
			EndToEndBudget: time.Duration(p.Budgets[config.SegmentEndToEnd]),
			RelayKind:      p.Relay.Kind,
			Family:         family,
			Slot:           p.Watch.Slot,
			Segments:       append([]string{config.SegmentInsertToCommit}, p.Segments()...),
			Owners:         map[string]string{},
			DefaultOwner:   p.Owner("default"),
			Scope:          m.Scope,
			Brokers:        slices.Sorted(slices.Values(p.Kafka.Brokers)),
		}
		for _, seg := range mp.Segments {
			mp.Owners[seg] = p.Owner(seg)
		}
		burn, err := burnAlerts(windows, time.Duration(p.SLO.Window))
		if err != nil {
			// Named by line and field as Load names its problems: the
			// window is wrong in the file, not in the model.
			return nil, cfg.PipelineProblem(i, "slo.window", "%s", err)
		}
		for _, seg := range p.BudgetedSegments() {
			budget, _ := p.Budget(seg)
			owner := p.Owner(seg)
			mp.SLOs = append(mp.SLOs, SLO{
				ID:        p.Name + "-" + seg,
				Pipeline:  p.Name,
				Segment:   seg,
				Objective: p.SLO.Objective,
				Window:    time.Duration(p.SLO.Window),
				Budget:    budget,
				Owner:     owner,
				Burn:      burn,
				Scope:     m.Scope,

				CanaryInterval: interval,
				StallThreshold: mp.StallThreshold(cfg.Alerting.StallIntervals),
			})
		}
		facts := mp.seriesLabels(cfg.Alerting.ProberOwner)
		for i, seg := range mp.StallBlameSegments() {
			for j := range mp.SLOs {
				if mp.SLOs[j].Segment == seg {
					mp.SLOs[j].BlameOrder = i + 1
				}
			}
		}
		for j := range mp.SLOs {
			mp.SLOs[j].PipelineLabels = facts
		}
		m.Pipelines = append(m.Pipelines, mp)
	}
	return m, nil
}

// PipelineSeriesLabels are the labels of a pipeline's facts that every
// objective series of the pipeline carries, so that the rules of every
// pipeline read them where they read one of its SLOs: the relay's kind
// and the database's family (which alerts apply), the watched slot, the
// relay's (first) segment, and who owns it, the inserts, the rest, and
// the prober's own sight.
var PipelineSeriesLabels = []string{LabelRelayKind, LabelDatabaseFamily, LabelSlot, LabelRelaySegment, LabelRelayOwner, LabelInsertOwner, LabelDefaultOwner, LabelProberOwner}

// seriesLabels are the pipeline's PipelineSeriesLabels. proberOwner is
// alerting.prober_owner: the prober's own sight is its team's, else the
// pipeline's default owner's.
func (p Pipeline) seriesLabels(proberOwner string) map[string]string {
	relay := config.SegmentEndToEnd
	if rs := p.RelaySegments(); len(rs) > 0 {
		relay = rs[0]
	}
	if proberOwner == "" {
		proberOwner = p.DefaultOwner
	}
	return map[string]string{
		LabelRelayKind:      p.RelayKind,
		LabelDatabaseFamily: p.Family,
		LabelSlot:           p.Slot,
		LabelRelaySegment:   relay,
		LabelRelayOwner:     p.Owner(relay),
		LabelInsertOwner:    p.Owner(config.SegmentInsertToCommit),
		LabelDefaultOwner:   p.DefaultOwner,
		LabelProberOwner:    proberOwner,
	}
}

// canaryInterval is the longest gap between two consecutive firings of the
// schedule: the pessimistic canary period.
func canaryInterval(spec string) (time.Duration, error) { return config.ScheduleInterval(spec) }

// ObjectiveSeries are the labels and value of the SLO's
// MetricSLOObjective series, which the prober exports: the labels its
// recordings carry (Sloth's identity, the pipeline, segment and owner),
// its objective as Sloth's info labels it and its budget as alerts print
// them, and what picks the rules that read it: its window, the
// pipeline's canary interval and its stall threshold. The rules take the
// labels and the objective from this series when they record, so a
// change of owner or objective needs no new rules.
func (s SLO) ObjectiveSeries() (labels map[string]string, ratio float64) {
	ratio, _ = ObjectiveRatio(s.Objective).Float64()
	labels = maps.Clone(s.PipelineLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, map[string]string{
		LabelSlothID:        s.ID,
		LabelSlothService:   s.Pipeline,
		LabelSlothSLO:       s.Segment,
		LabelPipeline:       s.Pipeline,
		LabelSegment:        s.Segment,
		LabelOwner:          s.Owner,
		LabelSlothObjective: strconv.FormatFloat(s.Objective, 'f', -1, 64),
		LabelSLOWindow:      PromDuration(s.Window),
		LabelSLOBudget:      PromDuration(s.Budget),
		LabelCanaryInterval: PromDuration(s.CanaryInterval),
		LabelStallThreshold: PromDuration(s.StallThreshold),
		LabelBlameOrder:     blameOrder(s.BlameOrder),
	})
	return labels, ratio
}

// blameOrder is BlameOrder as its label's value: "" for a segment a
// stall is never blamed on.
func blameOrder(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
