// Package statuspage serves the prober's HTTP surface: /metrics, /healthz,
// /readyz, /api/status (JSON) and the status page for the person on call.
// It reads the prober through a narrow Source and writes nothing.
package statuspage

import (
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/version"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

// statusCanaries is how many recent final canaries the status page shows
// per pipeline (every canary in flight is shown).
const statusCanaries = 20

// refreshEvery is how often the status page reloads itself.
const refreshEvery = 10 * time.Second

// statusBurnWindows are the windows of the burn rates on the status page:
// the current burn (the rules' slo:current_burn_rate:ratio window) and the
// page alert's long window, each cut to what the tracker remembers.
var statusBurnWindows = []time.Duration{slo.CurrentBurnWindow, time.Hour}

// Status is what /api/status returns, and what the status page shows: per
// pipeline whether it is stalled, its canaries in flight and where they
// are stuck, its budgets, owners and burn rates, and its recent canaries
// with their segment breakdown. Times are UTC.
type Status struct {
	Instance string    `json:"instance"`
	Version  string    `json:"version"`
	At       time.Time `json:"generated_at"`
	// Ready is /readyz: this process works (see Source.Ready). Whether
	// the pipelines' servers answer is each pipeline's DependenciesDown.
	Ready     bool             `json:"ready"`
	Reasons   []string         `json:"not_ready_reasons,omitempty"`
	Pipelines []PipelineStatus `json:"pipelines"`
	// RefreshSeconds is how often the status page reloads itself.
	RefreshSeconds int `json:"-"`
}

// PipelineStatus is one pipeline in Status.
type PipelineStatus struct {
	Name     string `json:"name"`
	Topic    string `json:"topic"`
	Table    string `json:"table"`
	Relay    string `json:"relay"`
	Schedule string `json:"schedule"`
	// Stall says whether no canary arrived for longer than the stall
	// threshold; nil when the threshold is not known.
	Stall *StallStatus `json:"stall"`
	// DependenciesDown holds the pipeline's servers that the prober
	// cannot reach ("database", "kafka"), with why.
	DependenciesDown map[string]string `json:"dependencies_down,omitempty"`
	// Segments lists every segment in pipeline order (insert_to_commit
	// first), with its budget, owner and burn rates where configured.
	Segments []SegmentStatus `json:"segments"`
	// ObjectivePercent is the SLO objective the burn rates are against.
	ObjectivePercent float64 `json:"objective_percent"`
	// VerdictsRemembered is how far back the prober still holds every
	// SLI verdict: no burn rate here covers more (Prometheus has the
	// longer windows).
	VerdictsRemembered string `json:"verdicts_remembered"`
	// BurnWindows are the windows of every segment's BurnRates, in order.
	BurnWindows []BurnWindow `json:"burn_windows"`
	InFlight    int          `json:"in_flight"`
	// InFlightCanaries are the canaries sent that have neither arrived
	// nor been declared lost, oldest first.
	InFlightCanaries []InFlightCanary `json:"in_flight_canaries"`
	// DBClockOffsetSeconds is the database clock minus the prober clock.
	DBClockOffsetSeconds      *float64 `json:"db_clock_offset_seconds,omitempty"`
	DBClockOffsetErrorSeconds *float64 `json:"db_clock_offset_error_seconds,omitempty"`
	// Recent are the most recent final canaries (arrived, late or lost),
	// newest first.
	Recent []prober.Report `json:"recent"`
}

// StallStatus is a pipeline's stall verdict, derived as the generated
// OutboxCanaryStalled alert derives it: no canary arrived for longer than
// the end-to-end budget plus alerting.stall_intervals canary intervals
// (slo.Pipeline.StallThreshold).
type StallStatus struct {
	Stalled          bool    `json:"stalled"`
	ThresholdSeconds float64 `json:"threshold_seconds"`
	// Threshold says how the threshold is made up.
	Threshold string `json:"threshold"`
	// LastReceived is when a canary last arrived; absent before the first.
	LastReceived time.Time `json:"last_received,omitzero"`
	// SecondsWithoutArrival is the time since LastReceived or, before the
	// first arrival, since the oldest canary in flight was committed;
	// null when there is neither.
	SecondsWithoutArrival *float64 `json:"seconds_without_arrival"`
	// Message is the status page's banner while Stalled.
	Message string `json:"message,omitempty"`
}

// InFlightCanary is a canary in flight: its report, how old it is, and
// where it is stuck as far as the evidence goes.
type InFlightCanary struct {
	prober.Report
	AgeSeconds float64 `json:"age_seconds"`
	// PastDeadlineSeconds is how long ago the deadline of the segment it
	// waits in passed (negative: how long is left); absent when that
	// segment has no budget.
	PastDeadlineSeconds *float64 `json:"past_deadline_seconds,omitempty"`
	// WhereOwner owns the segment it waits in.
	WhereOwner string `json:"where_owner,omitempty"`
	// Stuck says it in words: "past the commit_to_read deadline by 12 s".
	Stuck string `json:"stuck"`
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

// BurnWindow is a burn-rate window: what it covers, and the window asked
// for when the tracker's memory cut it shorter.
type BurnWindow struct {
	Window string `json:"window"`
	Cut    string `json:"cut_from,omitempty"`
	d      time.Duration
}

// BurnRateStatus is a segment's burn rate over the SLI verdicts counted in
// the last Window, each at the moment /metrics counted it (its JudgedAt:
// an arrival, or a deadline that passed, so canaries still in flight that
// are already bad are in it): bad over all of them, divided by the error
// budget (slo.BurnRate).
type BurnRateStatus struct {
	BurnWindow
	Events int `json:"events"`
	Bad    int `json:"bad"`
	// BurnRate is null when the window holds no event: no rate, not 0.
	BurnRate *float64 `json:"burn_rate"`
}

// Source is what the status page reads of the prober.
type Source interface {
	Instance() string
	// Ready reports whether this process works: configuration loaded and
	// canary schedules running. Not whether the pipelines' servers answer
	// (each PipelineView's Down says that).
	Ready() (bool, []string)
	Views() []prober.PipelineView
}

// status gathers the status of every pipeline. model gives the stall
// thresholds; a pipeline missing from it has no stall verdict.
func status(src Source, model *slo.Model, now time.Time) Status {
	now = now.UTC()
	ready, reasons := src.Ready()
	st := Status{Instance: src.Instance(), Version: version.Version, At: now, Ready: ready, Reasons: reasons,
		RefreshSeconds: int(refreshEvery / time.Second)}
	for _, v := range src.Views() {
		p := v.Pipeline
		lostAfter := time.Duration(p.Canary.LostAfter)
		remembered := verdictsRemembered(v.Memory, lostAfter)
		ps := PipelineStatus{
			Name: p.Name, Topic: p.Kafka.Topic, Table: p.Outbox.Table, Relay: p.Relay.Kind,
			Schedule: p.Canary.Schedule, InFlight: len(v.InFlight), ObjectivePercent: p.SLO.Objective,
			VerdictsRemembered: slo.PromDuration(remembered),
			BurnWindows:        burnWindows(remembered),
			InFlightCanaries:   make([]InFlightCanary, 0, len(v.InFlight)),
			Recent:             make([]prober.Report, 0, min(statusCanaries, len(v.Resolved))),
		}
		if len(v.Down) > 0 {
			ps.DependenciesDown = maps.Clone(v.Down)
		}
		for _, r := range v.InFlight {
			ps.InFlightCanaries = append(ps.InFlightCanaries, inFlight(p, r, now))
		}
		for _, r := range v.Resolved[:min(statusCanaries, len(v.Resolved))] {
			ps.Recent = append(ps.Recent, utcReport(r))
		}
		judged := append(slices.Clone(v.InFlight), v.Resolved...)
		for _, seg := range append([]string{config.SegmentInsertToCommit}, p.Segments()...) {
			b, ok := p.Budget(seg)
			ss := SegmentStatus{Name: seg, Budgeted: ok, BudgetSeconds: b.Seconds(), Owner: p.Owner(seg)}
			if ok {
				ss.BurnRates = burnRates(p, ps.BurnWindows, seg, judged, now)
			}
			ps.Segments = append(ps.Segments, ss)
		}
		if sp, ok := modelPipeline(model, p.Name); ok {
			ps.Stall = stall(sp, model.Alerting.StallIntervals, v.LastReceived, ps.InFlightCanaries, now)
		}
		if off := v.ClockOffset; off != nil {
			o, e := off.Offset.Seconds(), off.Error.Seconds()
			ps.DBClockOffsetSeconds, ps.DBClockOffsetErrorSeconds = &o, &e
		}
		st.Pipelines = append(st.Pipelines, ps)
	}
	return st
}

func modelPipeline(m *slo.Model, name string) (slo.Pipeline, bool) {
	if m == nil {
		return slo.Pipeline{}, false
	}
	for _, p := range m.Pipelines {
		if p.Name == name {
			return p, true
		}
	}
	return slo.Pipeline{}, false
}

// stall judges a pipeline stalled as the generated stall alert does: no
// canary arrived for longer than StallThreshold(stall_intervals). Before
// the first arrival the oldest canary in flight stands in for it.
//
// The alert also wants proof that canaries kept being sent and went bad;
// the banner names the canaries in flight and where the oldest is stuck
// instead, and says so when none is in flight.
func stall(p slo.Pipeline, intervals int, lastReceived time.Time, inFlight []InFlightCanary, now time.Time) *StallStatus {
	thr := p.StallThreshold(intervals)
	st := &StallStatus{
		ThresholdSeconds: thr.Seconds(),
		Threshold: fmt.Sprintf("%s end_to_end budget + %d × %s canary interval",
			slo.PromDuration(p.EndToEndBudget), intervals, slo.PromDuration(p.CanaryInterval)),
	}
	var since time.Duration
	var lead string
	switch {
	case !lastReceived.IsZero():
		st.LastReceived = lastReceived.UTC()
		since = now.Sub(lastReceived)
		lead = fmt.Sprintf("No canary has arrived for %s (the last at %s)", human(since), clock(lastReceived))
	case len(inFlight) > 0:
		since = now.Sub(inFlight[0].Committed)
		lead = fmt.Sprintf("No canary has arrived yet; the oldest in flight was committed %s ago", human(since))
	default:
		return st
	}
	secs := since.Seconds()
	st.SecondsWithoutArrival = &secs
	if since <= thr {
		return st
	}
	st.Stalled = true
	var b strings.Builder
	fmt.Fprintf(&b, "Stalled: %s, longer than the stall threshold of %s (%s).", lead, human(thr), st.Threshold)
	switch len(inFlight) {
	case 0:
		b.WriteString(" No canary is in flight: none was sent since, or all were declared lost.")
	case 1:
		fmt.Fprintf(&b, " 1 canary in flight: %s.", inFlight[0].Stuck)
	default:
		fmt.Fprintf(&b, " %d canaries in flight; the oldest is %s.", len(inFlight), inFlight[0].Stuck)
	}
	st.Message = b.String()
	return st
}

// inFlight describes a canary in flight: its age, and the segment it is
// waiting in against that segment's deadline.
func inFlight(p *config.Pipeline, r prober.Report, now time.Time) InFlightCanary {
	c := InFlightCanary{Report: utcReport(r), AgeSeconds: now.Sub(r.Committed).Seconds()}
	if r.Where == "" {
		c.Stuck = "waiting, segment unknown (the brokers were out of reach: the record may be in the relay's producer)"
		return c
	}
	c.WhereOwner = p.Owner(r.Where)
	if r.Deadline.IsZero() {
		c.Stuck = fmt.Sprintf("in %s, which has no budget", r.Where)
		return c
	}
	past := now.Sub(r.Deadline)
	secs := past.Seconds()
	c.PastDeadlineSeconds = &secs
	if past > 0 {
		c.Stuck = fmt.Sprintf("past the %s deadline by %s", r.Where, human(past))
	} else {
		c.Stuck = fmt.Sprintf("in %s, %s before its deadline", r.Where, human(-past))
	}
	return c
}

// verdictsRemembered is how far back the tracker holds every SLI verdict:
// it forgets a canary memory after its commit, and judges none later than
// lost_after after its commit (a lost canary is not judged again; give or
// take the seconds a published_at lookup takes after a late arrival). So
// a verdict older than memory - lost_after may belong to a canary already
// forgotten, most likely a slow one: counting that far back would flatter
// the burn rate.
func verdictsRemembered(memory, lostAfter time.Duration) time.Duration {
	return max(0, memory-lostAfter)
}

// burnWindows are statusBurnWindows cut to what the tracker remembers,
// without a window that covers no more than the one before it.
func burnWindows(remembered time.Duration) []BurnWindow {
	var out []BurnWindow
	covered := time.Duration(0)
	for _, w := range statusBurnWindows {
		c := min(w, remembered)
		if c <= covered {
			continue
		}
		covered = c
		bw := BurnWindow{Window: slo.PromDuration(c), d: c}
		if c < w {
			bw.Cut = slo.PromDuration(w)
		}
		out = append(out, bw)
	}
	return out
}

// burnRates is one segment's burn rate per window over the verdicts of
// the canaries the tracker remembers (in flight and final), each counted
// when it was judged, as the SLI counters count it. Outcomes other than
// good and bad are not SLI events.
func burnRates(p *config.Pipeline, windows []BurnWindow, segment string, canaries []prober.Report, now time.Time) []BurnRateStatus {
	out := make([]BurnRateStatus, 0, len(windows))
	for _, w := range windows {
		br := BurnRateStatus{BurnWindow: w}
		from := now.Add(-w.d)
		for _, r := range canaries {
			s := r.Segments[segment]
			if s.JudgedAt.IsZero() || !s.JudgedAt.After(from) || s.JudgedAt.After(now) {
				continue
			}
			switch s.Outcome {
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

// utcReport is r with its times in UTC, so that the JSON and the page say
// Z whatever the machine's zone.
func utcReport(r prober.Report) prober.Report {
	r.Committed, r.Consumed, r.Deadline = utc(r.Committed), utc(r.Consumed), utc(r.Deadline)
	segs := make(map[string]prober.SegmentResult, len(r.Segments))
	for k, s := range r.Segments {
		s.JudgedAt = utc(s.JudgedAt)
		segs[k] = s
	}
	r.Segments = segs
	return r
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// NewHandler serves /metrics from g (prober.MetricsHandler), /healthz (liveness: the
// process answers), /readyz (readiness: this process works, src.Ready; it
// answers at all only when HTTP is serving; never whether the pipelines'
// servers answer, so a downstream outage neither restarts nor unreadies the
// prober), /api/status (JSON) and / (the status page, which reloads itself).
// model gives each pipeline's stall threshold.
func NewHandler(src Source, model *slo.Model, g prometheus.Gatherer, log *slog.Logger, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prober.MetricsHandler(g))
	handleProbes(mux, src)
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status(src, model, now()))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := statusPage.Execute(w, status(src, model, now())); err != nil {
			log.Warn("render status page", "err", err)
		}
	})
	return mux
}

// NewProbeHandler serves /healthz and /readyz alone, as NewHandler does,
// for a listener without TLS or auth: a kubelet probes without
// credentials. Neither says anything of the pipelines.
func NewProbeHandler(src Source) http.Handler {
	mux := http.NewServeMux()
	handleProbes(mux, src)
	return mux
}

func handleProbes(mux *http.ServeMux, src Source) {
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
}

// human writes a duration for a person: "0.4 s", "12 s", "4 min 12 s",
// "2 h 5 min".
func human(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%d min %d s", int(d/time.Minute), int(d%time.Minute/time.Second))
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
}

// clock writes a time of day in UTC, the zone shown.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000 UTC") }

func seconds(d time.Duration) string { return d.Round(time.Microsecond).String() }

func deref(f *float64) float64 { return *f }

// breakable lets a segment name wrap after its underscores, so that a
// pipeline with many segments keeps its tables within the page.
func breakable(name string) template.HTML {
	return template.HTML(strings.ReplaceAll(template.HTMLEscapeString(name), "_", "_<wbr>"))
}

// outcomeClass maps an SLI outcome to a CSS class: only good is green,
// only bad red; anything else (an outcome this page does not know) is
// neutral.
func outcomeClass(o string) string {
	switch o {
	case slo.OutcomeGood, slo.OutcomeBad:
		return o
	case "":
		return ""
	}
	return "other"
}

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"dur": seconds, "deref": deref, "outcomeClass": outcomeClass, "clock": clock, "breakable": breakable,
	"human":   func(s float64) string { return human(time.Duration(s * float64(time.Second))) },
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
}).Parse(statusHTML))

const statusHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{{if .RefreshSeconds}}<meta http-equiv="refresh" content="{{.RefreshSeconds}}">{{end}}
<title>{{range .Pipelines}}{{if .Stall}}{{if .Stall.Stalled}}STALLED {{.Name}} · {{end}}{{end}}{{end}}outbox-canary {{.Instance}}</title>
<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}th{background:#eee;white-space:normal}
.scroll{max-width:100%;overflow-x:auto}.bad{color:#b00}.good{color:#070}.other{color:#555;font-style:italic}
.stall{background:#fdd;border:2px solid #b00;color:#600;padding:.6em;margin:.6em 0;font-weight:bold}
.down{color:#b00}td.stuck{text-align:left;white-space:normal;min-width:14em}td.id{font-family:monospace;font-size:85%;white-space:normal;min-width:10em}small{color:#555}</style>
</head><body>
<h1>outbox-canary <small>{{.Instance}} ({{.Version}})</small></h1>
<p>{{if .Ready}}<span class="good">ready</span>{{else}}<span class="bad">not ready</span>: {{range .Reasons}}{{.}}; {{end}}{{end}}
&middot; as of <time datetime="{{rfc3339 .At}}">{{.At.Format "2006-01-02 15:04:05 UTC"}}</time>{{if .RefreshSeconds}}, reloads every {{.RefreshSeconds}} s{{end}}
&middot; <a href="/metrics">metrics</a> &middot; <a href="/api/status">JSON</a></p>
{{range .Pipelines}}{{$p := .}}
<section id="pipeline-{{.Name}}">
<h2>{{.Name}}</h2>
{{with .Stall}}{{if .Stalled}}<div class="stall" role="alert">{{.Message}}</div>{{end}}{{end}}
<p>table {{.Table}} &rarr; {{.Relay}} relay &rarr; topic {{.Topic}}; schedule {{.Schedule}}
{{- with .Stall}}; {{if .LastReceived.IsZero}}no canary arrived yet{{else}}last canary arrived <time datetime="{{rfc3339 .LastReceived}}">{{clock .LastReceived}}</time>{{with .SecondsWithoutArrival}} ({{human (deref .)}} ago){{end}}{{end}}; stall threshold {{human .ThresholdSeconds}} ({{.Threshold}}){{end}}
{{- if .DBClockOffsetSeconds}}; DB clock offset {{printf "%.6f" (deref .DBClockOffsetSeconds)}}s &plusmn; {{printf "%.6f" (deref .DBClockOffsetErrorSeconds)}}s{{end}}</p>
<p class="dependencies">{{if .DependenciesDown}}{{range $dep, $why := .DependenciesDown}}<span class="down">{{$dep}} unreachable: {{$why}}</span>; {{end}}canaries cannot be sent or read while it lasts{{else}}<span class="good">database and Kafka answer</span>{{end}}</p>

<h3>In flight ({{.InFlight}})</h3>
<div class="scroll"><table class="in-flight"><tr><th>canary</th><th>committed</th><th>age</th><th>where</th><th>owner</th>{{range .Segments}}{{if .Budgeted}}<th>{{breakable .Name}}<br><small>budget {{.BudgetSeconds}}s</small></th>{{end}}{{end}}</tr>
{{range .InFlightCanaries}}{{$r := .}}<tr><td class="id">{{.ID}}</td><td><time datetime="{{rfc3339 .Committed}}">{{clock .Committed}}</time></td><td>{{human .AgeSeconds}}</td><td class="stuck{{with .PastDeadlineSeconds}}{{if gt (deref .) 0.0}} bad{{end}}{{end}}">{{.Stuck}}</td><td>{{.WhereOwner}}</td>{{range $p.Segments}}{{if .Budgeted}}{{template "cell" (index $r.Segments .Name)}}{{end}}{{end}}</tr>
{{else}}<tr><td colspan="99">none</td></tr>{{end}}
</table></div>

<h3>Burn rates</h3>
<div class="scroll"><table class="burn"><tr><th>segment</th><th>budget</th><th>owner</th>{{range .BurnWindows}}<th>burn, last {{.Window}}{{if .Cut}}<br><small>of the {{.Cut}} window</small>{{end}}</th>{{end}}</tr>
{{range .Segments}}{{if .Budgeted}}<tr><td>{{.Name}}</td><td>{{.BudgetSeconds}}s</td><td>{{.Owner}}</td>{{range .BurnRates}}<td title="{{.Bad}} bad of {{.Events}} events"{{if .BurnRate}}{{if gt (deref .BurnRate) 1.0}} class="bad"{{end}}{{end}}>{{if .BurnRate}}{{printf "%.2f" (deref .BurnRate)}}{{else}}-{{end}} <small>({{.Bad}}/{{.Events}})</small></td>{{end}}</tr>
{{end}}{{end}}</table></div>
<p><small>Burn rates against a {{.ObjectivePercent}}% objective: bad over all SLI verdicts of the window (shown as bad/all), counted as /metrics counts them, when a canary arrived or a deadline passed, canaries still in flight included. The prober remembers the verdicts of the last {{.VerdictsRemembered}}; Prometheus has the longer windows.</small></p>

<h3>Recent canaries</h3>
<div class="scroll"><table class="recent"><tr><th>canary</th><th>committed</th><th>status</th>{{range .Segments}}<th>{{breakable .Name}}{{if .Budgeted}}<br><small>budget {{.BudgetSeconds}}s</small>{{end}}</th>{{end}}</tr>
{{range .Recent}}{{$r := .}}<tr><td class="id">{{.ID}}</td><td><time datetime="{{rfc3339 .Committed}}">{{clock .Committed}}</time></td><td>{{.State}}</td>{{range $p.Segments}}{{template "cell" (index $r.Segments .Name)}}{{end}}</tr>
{{else}}<tr><td colspan="99">no canary yet</td></tr>{{end}}
</table></div>
</section>
{{end}}
</body></html>
{{define "cell"}}<td class="{{outcomeClass .Outcome}}">{{if .StampOrder}}negative (stamp order){{else if .Measured}}{{if .Bound}}&le; {{end}}{{dur .Duration}}{{else if .Skew}}negative (clock skew?){{else if .MissingStamp}}no {{.MissingStamp}} stamp{{else if eq .Outcome "bad"}}over budget{{else}}&ndash;{{end}}{{with outcomeClass .Outcome}}{{if eq . "other"}} <small>({{$.Outcome}})</small>{{end}}{{end}}</td>{{end}}
`
