// Package statuspage serves the prober's HTTP surface: /metrics, /healthz,
// /readyz, /api/status (JSON) and the status page for the person on call.
// It reads the prober through a narrow Source and writes nothing.
package statuspage

import (
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/version"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

// statusCanaries is how many recent canaries the status page shows per
// pipeline.
const statusCanaries = 20

// statusBurnWindows are the windows of the burn rates on the status page:
// the current burn (the rules' slo:current_burn_rate:ratio window) and the
// page alert's long window.
var statusBurnWindows = []time.Duration{slo.CurrentBurnWindow, time.Hour}

// Status is what /api/status returns: per pipeline, its budgets, owners,
// current burn rates, readiness and its most recent canaries with their
// segment breakdown.
type Status struct {
	Instance  string           `json:"instance"`
	Version   string           `json:"version"`
	Ready     bool             `json:"ready"`
	Reasons   []string         `json:"not_ready_reasons,omitempty"`
	Pipelines []PipelineStatus `json:"pipelines"`
}

// PipelineStatus is one pipeline in Status.
type PipelineStatus struct {
	Name     string `json:"name"`
	Topic    string `json:"topic"`
	Table    string `json:"table"`
	Relay    string `json:"relay"`
	Schedule string `json:"schedule"`
	// Segments lists every segment in pipeline order (insert_to_commit
	// first), with its budget, owner and burn rates where configured.
	Segments []SegmentStatus `json:"segments"`
	// ObjectivePercent is the SLO objective the burn rates are against.
	ObjectivePercent float64 `json:"objective_percent"`
	InFlight         int     `json:"in_flight"`
	// DBClockOffsetSeconds is the database clock minus the prober clock.
	DBClockOffsetSeconds      *float64        `json:"db_clock_offset_seconds,omitempty"`
	DBClockOffsetErrorSeconds *float64        `json:"db_clock_offset_error_seconds,omitempty"`
	Recent                    []prober.Report `json:"recent"`
}

// SegmentStatus is a segment's budget and owner, and for a budgeted segment
// its burn rates.
type SegmentStatus struct {
	Name          string           `json:"name"`
	BudgetSeconds float64          `json:"budget_seconds,omitempty"`
	Budgeted      bool             `json:"budgeted"`
	Owner         string           `json:"owner,omitempty"`
	BurnRates     []BurnRateStatus `json:"burn_rates,omitempty"`
}

// BurnRateStatus is a segment's burn rate over the canaries that became
// final (arrived and judged, or lost: Tracker.Recent) in the last Window:
// bad over all their SLI events, divided by the error budget
// (slo.BurnRate). Canaries still in flight are not in it, even past a
// deadline that already counted them bad on /metrics, and the tracker
// remembers canaries for 2 x canary.lost_after only: Covered says how much
// of Window that is.
type BurnRateStatus struct {
	Window  string `json:"window"`  // "5m", "1h"
	Covered string `json:"covered"` // Window, or less when the tracker forgets sooner
	Events  int    `json:"events"`
	Bad     int    `json:"bad"`
	// BurnRate is null when the window holds no event: no rate, not 0.
	BurnRate *float64 `json:"burn_rate"`
}

// Source is what the status page reads of the prober.
type Source interface {
	Instance() string
	Ready() (bool, []string)
	Views() []prober.PipelineView
}

// status gathers the status of every pipeline.
func status(src Source, now time.Time) Status {
	ready, reasons := src.Ready()
	st := Status{Instance: src.Instance(), Version: version.Version, Ready: ready, Reasons: reasons}
	for _, v := range src.Views() {
		p := v.Pipeline
		ps := PipelineStatus{
			Name: p.Name, Topic: p.Kafka.Topic, Table: p.Outbox.Table, Relay: p.Relay.Kind,
			Schedule: p.Canary.Schedule, InFlight: len(v.InFlight), ObjectivePercent: p.SLO.Objective,
			Recent: v.Resolved[:min(statusCanaries, len(v.Resolved))],
		}
		for _, seg := range append([]string{config.SegmentInsertToCommit}, p.Segments()...) {
			b, ok := p.Budget(seg)
			ss := SegmentStatus{Name: seg, Budgeted: ok, BudgetSeconds: b.Seconds(), Owner: p.Owner(seg)}
			if ok {
				ss.BurnRates = burnRates(p, v.Memory, seg, v.Resolved, now)
			}
			ps.Segments = append(ps.Segments, ss)
		}
		if off := v.ClockOffset; off != nil {
			o, e := off.Offset.Seconds(), off.Error.Seconds()
			ps.DBClockOffsetSeconds, ps.DBClockOffsetErrorSeconds = &o, &e
		}
		st.Pipelines = append(st.Pipelines, ps)
	}
	return st
}

// burnRates is one segment's burn rate per statusBurnWindows over the
// resolved canaries, each at the time it resolved: its arrival, or for a
// lost one its commit plus lost_after (when the sweep declared it lost).
// memory is how long the tracker remembers a canary after its commit.
func burnRates(p *config.Pipeline, memory time.Duration, segment string, resolved []prober.Report, now time.Time) []BurnRateStatus {
	lostAfter := time.Duration(p.Canary.LostAfter)
	out := make([]BurnRateStatus, 0, len(statusBurnWindows))
	for _, w := range statusBurnWindows {
		br := BurnRateStatus{Window: slo.PromDuration(w), Covered: slo.PromDuration(min(w, memory))}
		from := now.Add(-w)
		for _, r := range resolved {
			at := r.Consumed
			if r.State == prober.StateLost {
				at = r.Committed.Add(lostAfter)
			}
			if at.Before(from) || at.After(now) {
				continue
			}
			switch r.Segments[segment].Outcome {
			case slo.OutcomeBad:
				br.Bad++
				br.Events++
			case slo.OutcomeGood:
				br.Events++
			}
		}
		if rate, ok := slo.BurnRate(br.Bad, br.Events, p.SLO.Objective); ok {
			br.BurnRate = &rate
		}
		out = append(out, br)
	}
	return out
}

// NewHandler serves /metrics from g (OpenMetrics negotiated, so exemplars
// and native histograms reach a scraper that asks), /healthz (liveness: the
// process answers; no dependency is checked, so a database outage does not
// get the prober restarted), /readyz (200 only when every pipeline has a
// working database pool and consumer, else 503 with the reasons), /api/status
// (JSON) and / (the same as an HTML table).
func NewHandler(src Source, g prometheus.Gatherer, log *slog.Logger, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ready, reasons := src.Ready()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, r := range reasons {
				_, _ = w.Write([]byte(r + "\n"))
			}
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status(src, now()))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := statusPage.Execute(w, status(src, now())); err != nil {
			log.Warn("render status page", "err", err)
		}
	})
	return mux
}

func seconds(d time.Duration) string { return d.Round(time.Microsecond).String() }

func deref(f *float64) float64 { return *f }

// burnWindowNames heads the status page's burn rate columns.
func burnWindowNames() []string {
	out := make([]string, 0, len(statusBurnWindows))
	for _, w := range statusBurnWindows {
		out = append(out, slo.PromDuration(w))
	}
	return out
}

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"dur": seconds, "deref": deref, "burnWindows": burnWindowNames,
}).Parse(statusHTML))

const statusHTML = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>outbox-canary {{.Instance}}</title>
<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}.bad{color:#b00}.good{color:#070}</style>
</head><body>
<h1>outbox-canary <small>{{.Instance}} ({{.Version}})</small></h1>
<p>{{if .Ready}}<span class="good">ready</span>{{else}}<span class="bad">not ready</span>: {{range .Reasons}}{{.}}; {{end}}{{end}}
&middot; <a href="/metrics">metrics</a> &middot; <a href="/api/status">JSON</a></p>
{{range .Pipelines}}{{$p := .}}
<h2>{{.Name}}</h2>
<p>table {{.Table}} &rarr; {{.Relay}} relay &rarr; topic {{.Topic}}; schedule {{.Schedule}}; in flight {{.InFlight}}{{if .DBClockOffsetSeconds}}; DB clock offset {{printf "%.6f" (deref .DBClockOffsetSeconds)}}s &plusmn; {{printf "%.6f" (deref .DBClockOffsetErrorSeconds)}}s{{end}}</p>
<table><tr><th>segment</th><th>budget</th><th>owner</th>{{range burnWindows}}<th>burn {{.}}</th>{{end}}</tr>
{{range .Segments}}{{if .Budgeted}}<tr><td>{{.Name}}</td><td>{{.BudgetSeconds}}s</td><td>{{.Owner}}</td>{{range .BurnRates}}<td title="{{.Bad}} bad of {{.Events}} events{{if ne .Covered .Window}}; only the last {{.Covered}} is remembered{{end}}"{{if .BurnRate}}{{if gt (deref .BurnRate) 1.0}} class="bad"{{end}}{{end}}>{{if .BurnRate}}{{printf "%.2f" (deref .BurnRate)}}{{else}}-{{end}}{{if ne .Covered .Window}} <small>(last {{.Covered}})</small>{{end}}</td>{{end}}</tr>
{{end}}{{end}}</table>
<p>burn rates against a {{.ObjectivePercent}}% objective, over the canaries resolved in each window</p>
<table><tr><th>canary</th><th>committed</th><th>status</th>{{range .Segments}}<th>{{.Name}}{{if .Budgeted}}<br><small>budget {{.BudgetSeconds}}s</small>{{end}}</th>{{end}}</tr>
{{range .Recent}}{{$r := .}}<tr><td>{{.ID}}</td><td>{{.Committed.Format "15:04:05.000"}}</td><td>{{.State}}</td>{{range $p.Segments}}{{with index $r.Segments .Name}}<td class="{{.Outcome}}">{{if .Measured}}{{dur .Duration}}{{if .Skew}} (skew?){{end}}{{else if .MissingStamp}}no {{.MissingStamp}} stamp{{else}}&ndash;{{end}}</td>{{else}}<td>&ndash;</td>{{end}}{{end}}</tr>
{{else}}<tr><td colspan="99">no canary yet</td></tr>{{end}}
</table>
{{end}}
</body></html>
`
