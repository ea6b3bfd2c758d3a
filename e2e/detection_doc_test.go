package e2e

// docs/detection.md is generated from docs/detection.json, the raw
// measurements of `make detect` (TestDetect in detect_test.go). This file
// holds their types, the rendering, and the drift test that keeps the two
// files in step in `make test` (it needs no server).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// detectionJSON and detectionMD are the measurement file and the document
// rendered from it, relative to this package.
var (
	detectionJSON = filepath.Join("..", "docs", "detection.json")
	detectionMD   = filepath.Join("..", "docs", "detection.md")
)

// detection is docs/detection.json: the last measurement of every
// scenario, in scenario order. A run of some scenarios replaces theirs and
// keeps the others'.
type detection struct {
	// Settings describes what every scenario ran with.
	Settings  detectSettings    `json:"settings"`
	Scenarios []*scenarioResult `json:"scenarios"`
}

// detectSettings are the production settings the scenarios ran at, and
// the configuration's figures the document explains the results with.
type detectSettings struct {
	ScrapeInterval     string `json:"scrape_interval"`
	EvaluationInterval string `json:"evaluation_interval"`
	GroupWait          string `json:"group_wait"`
	GroupInterval      string `json:"group_interval"`
	RepeatInterval     string `json:"repeat_interval"`
	// GroupBy is the generated route's group_by.
	GroupBy           []string          `json:"group_by,omitempty"`
	CanaryInterval    string            `json:"canary_interval"`
	StallIntervals    int               `json:"stall_intervals"`
	RelayPollInterval string            `json:"relay_poll_interval"`
	NaiveAlert        string            `json:"naive_alert"`
	Pipelines         []pipelineSummary `json:"pipelines"`
}

// pipelineSummary is one pipeline of the adapted example configuration.
type pipelineSummary struct {
	Name  string `json:"name"`
	Relay string `json:"relay"`
	// Budgets are "segment budget (owner)" in pipeline order.
	Budgets         []string `json:"budgets"`
	Objective       float64  `json:"objective"`
	StallThreshold  string   `json:"stall_threshold"`
	StallTolerance  string   `json:"stall_tolerance"`
	DefaultOwner    string   `json:"default_owner"`
	KeepFiringFor   string   `json:"keep_firing_for"`
	BurnPageMinimum string   `json:"burn_page_min_bad"`
}

// scenarioResult is what one scenario measured. Times are seconds from
// the fault (negative: before it).
type scenarioResult struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Fault says what was done, Pipeline to which pipeline ("" when
	// nothing was), Target what issue 10 asks of the alerts.
	Fault    string `json:"fault"`
	Pipeline string `json:"pipeline,omitempty"`
	Target   string `json:"target"`

	Run runInfo `json:"run"`
	// PrometheusDataSeconds is how much data the fresh Prometheus held at
	// the fault; ObservedSeconds how long after the fault it was watched.
	PrometheusDataSeconds float64 `json:"prometheus_data_seconds"`
	ObservedSeconds       float64 `json:"observed_seconds"`
	// LastArrival is when the faulted pipeline's last canary before the
	// fault arrived (the stall alert counts from there).
	LastArrival *float64 `json:"last_arrival,omitempty"`
	// Steps are the moments of the fault itself (resumed, stopped, ...).
	Steps      []step           `json:"steps"`
	FirstBad   []badEvent       `json:"first_bad"`
	Alerts     []alertTimeline  `json:"alerts"`
	Deliveries []deliveryRecord `json:"deliveries"`
	// TeamsDeliveries are the notifications of the second Alertmanager,
	// configured as many teams configure theirs (grouped by alertname and
	// pipeline, routed by severity, none of our inhibit rules);
	// TeamsMeasured says it ran (runs before it had none).
	TeamsDeliveries []deliveryRecord `json:"teams_deliveries,omitempty"`
	TeamsMeasured   bool             `json:"teams_measured,omitempty"`
	// IncidentEnd is when the fault was last undone (the relay resumed,
	// the broker started), so how long pages outlive an incident shows.
	IncidentEnd *float64 `json:"incident_end,omitempty"`
	Load        loadInfo `json:"load"`
	// Second is the second stall of the second-stall scenario.
	Second *secondStallResult `json:"second_stall,omitempty"`
}

// secondStallResult is what the second-stall scenario measured of its
// second stall, in seconds from the first stall (the scenario's fault).
type secondStallResult struct {
	// RecoveredAt: the relay resumed, the first stall's end.
	RecoveredAt *float64 `json:"recovered_at,omitempty"`
	// ShortWindowsClearAt: the first stall's short windows were seen
	// clear; StillFiring the pipeline's alerts firing then.
	ShortWindowsClearAt *float64 `json:"short_windows_clear_at,omitempty"`
	StillFiring         []string `json:"still_firing,omitempty"`
	// StartAt: the relay paused again.
	StartAt *float64 `json:"start_at,omitempty"`
	// Page is the first page alert of the pipeline that began firing in
	// Prometheus at or after StartAt.
	Page *alertTimeline `json:"page,omitempty"`
	// NotifiedAt is the first webhook call after StartAt carrying a page
	// of the pipeline that fired after StartAt.
	NotifiedAt       *float64 `json:"notified_at,omitempty"`
	NotifiedReceiver string   `json:"notified_receiver,omitempty"`
	NotifiedAlerts   []string `json:"notified_alerts,omitempty"`
}

// runInfo says when, where and how a scenario ran.
type runInfo struct {
	Date     string    `json:"date"` // the fault, RFC 3339 UTC
	Machine  string    `json:"machine"`
	Versions []version `json:"versions"`
	Command  string    `json:"command"`
	// RulesHash names the rules and Alertmanager configuration the run
	// measured (detectRulesHash); a row whose hash is not today's is
	// flagged stale in the doc. Rows from before it was recorded have none.
	RulesHash string `json:"rules_hash,omitempty"`
}

type version struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type step struct {
	At   float64 `json:"at"`
	What string  `json:"what"`
}

// badEvent is the first bad SLI event of a pipeline's segment after the
// fault, read from the prober's /metrics (polled every second), and how
// many bad events the segment had by the end.
type badEvent struct {
	Pipeline string  `json:"pipeline"`
	Segment  string  `json:"segment"`
	At       float64 `json:"at"`
	Count    float64 `json:"count"`
}

// alertTimeline is one alert instance as Prometheus evaluated it: the
// first evaluation that held it pending and firing, from its ALERTS
// series (exact evaluation times).
type alertTimeline struct {
	Alert     string   `json:"alert"`
	Pipeline  string   `json:"pipeline,omitempty"`
	Segment   string   `json:"segment,omitempty"`
	Severity  string   `json:"severity,omitempty"`
	Owner     string   `json:"owner,omitempty"`
	PendingAt *float64 `json:"pending_at,omitempty"`
	FiringAt  *float64 `json:"firing_at,omitempty"`
	// LastActiveAt is the last evaluation that held it pending or firing.
	LastActiveAt float64 `json:"last_active_at"`
	// Notified is the first notification that carried it firing.
	Notified *float64 `json:"notified,omitempty"`
	Receiver string   `json:"receiver,omitempty"`
	// Suppressed: Alertmanager held it inhibited (the last time the
	// harness looked while it was there).
	Suppressed bool `json:"suppressed,omitempty"`
}

// deliveryRecord is one webhook call: one notification.
type deliveryRecord struct {
	At       float64 `json:"at"`
	Receiver string  `json:"receiver"`
	// Group is Alertmanager's group key: notifications of one group are
	// one incident to a pager that deduplicates by it (PagerDuty's
	// dedup_key), later ones updates of the first.
	Group     string   `json:"group"`
	Status    string   `json:"status"`
	Pipelines []string `json:"pipelines,omitempty"`
	// Owners are the owner labels of its alerts.
	Owners []string `json:"owners,omitempty"`
	Alerts []string `json:"alerts"`
}

// inhibitOnlyReceiver received OutboxCanaryStallAftermath until issue 26
// removed it; runs recorded before then hold calls to it.
const inhibitOnlyReceiver = "outbox-canary-inhibit-only"

// about says whether a notification concerns the faulted pipeline (any
// pipeline when none was faulted) and came after the fault. Alerts with no
// pipeline label concern every pipeline: a Kafka cluster's page (one for
// all the pipelines on its brokers), the dead man, the unmeasured
// pipelines. A call to the inhibit-only receiver is none: it has no
// integration in production, so Alertmanager sends nothing (runs before
// the harness left it empty recorded the call).
func (r *scenarioResult) about(d deliveryRecord) bool {
	return d.At >= 0 && (r.Pipeline == "" || len(d.Pipelines) == 0 || slices.Contains(d.Pipelines, r.Pipeline)) && d.Receiver != inhibitOnlyReceiver
}

// causedByFault says whether an alert started after the fault: alerts the
// healthy pipelines already had are shown, not counted.
func causedByFault(a alertTimeline) bool { return firstActive(a) >= 0 }

// loadInfo is the machine's 1-minute load average over the scenario.
type loadInfo struct {
	Start float64 `json:"start"`
	Max   float64 `json:"max"`
	End   float64 `json:"end"`
	CPUs  int     `json:"cpus"`
}

// naiveAlertName is the comparison alert: what a team without canaries
// alerts on.
const naiveAlertName = "NaiveOldestUnpublishedOver5m"

func readDetection(path string) (*detection, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d detection
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

func writeDetection(path string, d *detection) error {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// merge puts r in place of the scenario of the same name, keeping the
// order of names.
func (d *detection) merge(r *scenarioResult, order []string) {
	d.Scenarios = slices.DeleteFunc(d.Scenarios, func(s *scenarioResult) bool { return s.Name == r.Name })
	d.Scenarios = append(d.Scenarios, r)
	rank := func(name string) int {
		if i := slices.Index(order, name); i >= 0 {
			return i
		}
		return len(order)
	}
	sort.SliceStable(d.Scenarios, func(i, j int) bool { return rank(d.Scenarios[i].Name) < rank(d.Scenarios[j].Name) })
}

// detectSecretEnv are the secrets the example configuration reads from
// the environment; config.Load wants them set.
var detectSecretEnv = []string{"OUTBOX_CANARY_SIGNING_KEY", "OUTBOX_CANARY_PG_DSN", "OUTBOX_CANARY_PG_DSN_PAYMENTS", "OUTBOX_CANARY_PG_DSN_SHIPMENTS"}

// detectRulesHash names what a detection run measures: the first 16 hex
// digits of a SHA-256 of the rules and the Alertmanager configuration that
// the code generates today from the example configuration as TestDetect
// adapts it, with fixed names for what each run makes afresh (topics,
// brokers, connector, slot, state directory), so that runs of one
// generator on one example hash alike and a change to either shows.
func detectRulesHash(t *testing.T) string {
	t.Helper()
	for _, k := range detectSecretEnv {
		if os.Getenv(k) == "" {
			t.Setenv(k, "placeholder-"+strings.ToLower(k))
		}
	}
	yml := adaptExample(t, map[string]string{"orders": "orders-canaries", "payments": "payments-canaries", "shipments": "shipments-canaries"},
		[]string{"kafka:9092"}, "http://connect:8083", "shipments-outbox", "shipments_slot", "/var/lib/outbox-canary")
	cfg, err := config.Load(yml)
	if err != nil {
		t.Fatalf("adapted example: %v", err)
	}
	model, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, format := range []string{alerts.FormatRules, alerts.FormatAlertmanager} {
		out, err := alerts.Render(model, format)
		if err != nil {
			t.Fatalf("render %s: %v", format, err)
		}
		h.Write(out)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// TestDetectionDocIsRenderedFromItsMeasurements keeps docs/detection.md
// what `make detect` rendered from docs/detection.json: neither may be
// edited by hand. The doc flags the scenarios measured on other rules than
// today's: a change to the rules makes it drift (until rendered again) only
// where a scenario was measured on today's rules, and names no hash of
// today's, so rows already stale stay as they are.
func TestDetectionDocIsRenderedFromItsMeasurements(t *testing.T) {
	d, err := readDetection(detectionJSON)
	if err != nil {
		t.Fatalf("%v (written by `make detect`)", err)
	}
	want := renderDetection(d, detectRulesHash(t))
	got, err := os.ReadFile(detectionMD)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what %s renders: run `go test ./e2e/ -run TestDetectionDocIsRenderedFromItsMeasurements -update`, or `make detect` to measure again", detectionMD, detectionJSON)
		if *update {
			if err := os.WriteFile(detectionMD, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// secs prints seconds from the fault.
func secs(v float64) string {
	if v < 0 {
		return fmt.Sprintf("−%.1f", -v)
	}
	return fmt.Sprintf("+%.1f", v)
}

func optSecs(v *float64) string {
	if v == nil {
		return "—"
	}
	return secs(*v)
}

// pages are the firing notifications carrying a page of ours: the naive
// comparison alert is counted apart.
func (r *scenarioResult) pages() []deliveryRecord {
	var out []deliveryRecord
	for _, d := range r.Deliveries {
		if !r.about(d) || d.Status != "firing" || !strings.HasSuffix(d.Receiver, "-page") && d.Receiver != "outbox-canary" {
			continue
		}
		if len(d.Alerts) > 0 && !naiveOnlyRecord(d) {
			out = append(out, d)
		}
	}
	return out
}

// firstPage is the earliest alert of severity page (ours) that fired.
func (r *scenarioResult) firstPage() *alertTimeline {
	var first *alertTimeline
	for i := range r.Alerts {
		a := &r.Alerts[i]
		if a.Alert == naiveAlertName || a.Severity != "page" || a.FiringAt == nil || !causedByFault(*a) {
			continue
		}
		if first == nil || *a.FiringAt < *first.FiringAt {
			first = a
		}
	}
	return first
}

func (r *scenarioResult) naive() *alertTimeline {
	for i := range r.Alerts {
		if r.Alerts[i].Alert == naiveAlertName {
			return &r.Alerts[i]
		}
	}
	return nil
}

// firstBad is the earliest bad SLI event of the faulted pipeline.
func (r *scenarioResult) firstBad() *badEvent {
	var first *badEvent
	for i := range r.FirstBad {
		b := &r.FirstBad[i]
		if r.Pipeline != "" && b.Pipeline != r.Pipeline {
			continue
		}
		if first == nil || b.At < first.At {
			first = b
		}
	}
	return first
}

func alertName(a alertTimeline) string {
	s := a.Alert
	var parts []string
	if a.Pipeline != "" {
		parts = append(parts, a.Pipeline)
	}
	if a.Segment != "" {
		parts = append(parts, a.Segment)
	}
	if a.Severity != "" {
		parts = append(parts, a.Severity)
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// renderDetection writes docs/detection.md.
func renderDetection(d *detection, rulesHash string) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	st := d.Settings
	p("<!-- Code generated by `make detect` (e2e/detect_test.go) from docs/detection.json. DO NOT EDIT. -->\n\n")
	p("# Detection measured at production settings\n\n")
	p("How fast the generated alerts page for a stalled pipeline, whom they page, how often, and that blips and quiet pipelines stay silent, measured on real servers: the local stack's PostgreSQL 15, Kafka 4.4 and Kafka Connect 4.3 with Debezium, the reference polling relays, the `outbox-canary run` binary, and Debian's Prometheus and Alertmanager evaluating and routing the rules and the Alertmanager configuration that `outbox-canary rules` generates. Each scenario starts a fresh Prometheus and Alertmanager (new data directories) against a prober that has been running; the pipelines are healthy before every fault.\n\n")
	p("| setting | value |\n|---|---|\n")
	p("| scrape and evaluation interval | %s, %s |\n", st.ScrapeInterval, st.EvaluationInterval)
	p("| Alertmanager group_wait, group_interval, repeat_interval | %s, %s, %s (its defaults: the generated route sets none) |\n", st.GroupWait, st.GroupInterval, st.RepeatInterval)
	if len(st.GroupBy) > 0 {
		p("| Alertmanager group_by (the generated route) | %s |\n", strings.Join(st.GroupBy, ", "))
	}
	p("| canaries | every %s on every pipeline (examples/outbox-canary.yml, schedules changed to 10 s) |\n", st.CanaryInterval)
	p("| alerting.stall_intervals | %d (the example has 2; see below) |\n", st.StallIntervals)
	p("| reference relays' poll interval | %s |\n", st.RelayPollInterval)
	p("| comparison alert | `%s` |\n\n", st.NaiveAlert)
	p("| pipeline | relay | budgets (owner) | objective | stall threshold | longest pause ignored | first burn page needs | keep_firing_for |\n|---|---|---|---|---|---|---|---|\n")
	for _, pl := range st.Pipelines {
		p("| %s | %s | %s | %g%% | %s | %s | %s bad canaries | %s |\n", pl.Name, pl.Relay, strings.Join(pl.Budgets, ", "), pl.Objective, pl.StallThreshold, pl.StallTolerance, pl.BurnPageMinimum, pl.KeepFiringFor)
	}
	p("\n`alerting.stall_intervals: %d`, as docs/alerts.md recommends for 10 s canaries: the stall alert's threshold is the end-to-end budget plus %d canary intervals, so a relay pause shorter than the budget plus %d intervals (a 20 s relay restart) never pages, and a real stall still pages within about a minute. The example's 2 would page for a 13 s pause of `orders`.\n\n", st.StallIntervals, st.StallIntervals, st.StallIntervals-1)
	var bounds []string
	scrape, _ := time.ParseDuration(st.ScrapeInterval)
	eval, _ := time.ParseDuration(st.EvaluationInterval)
	wait, _ := time.ParseDuration(st.GroupWait)
	for _, pl := range st.Pipelines {
		thr, _ := time.ParseDuration(pl.StallThreshold)
		bounds = append(bounds, fmt.Sprintf("%s %.0f s", pl.Name, (thr+scrape+eval).Seconds()))
	}
	p("The stall alert fires at the first evaluation after the first scrape that sees the last delivery older than the threshold: at most threshold + one scrape + one evaluation interval after the last delivery (%s), and the last delivery is at or before the fault, up to a canary interval before it; where the scrape and the evaluation fall in that window is luck, so single runs scatter over a %s range. Alertmanager adds group_wait (%s) before the first notification of a group, and sends a group again only when it changes, at group_interval.\n\n",
		strings.Join(bounds, ", "), (scrape + eval).String(), wait)
	p("How each figure is taken: the fault's moment is the harness's clock just before it acts. *First bad event* is the first poll of the prober's `/metrics` (every second) that shows a new bad SLI event of the faulted pipeline. *Pending* and *firing* are the first evaluations that held the alert so, read from Prometheus's `ALERTS` series (exact evaluation times). *Notified* is when the webhook receiver got the notification. *Notifications* counts the webhook calls about the faulted pipeline from the fault to the end of the observation: pages (and in how many Alertmanager groups: a pager that deduplicates by group key, as PagerDuty does, opens one incident per group and takes later notifications of the group as updates) and tickets. The last column is the comparison alert, evaluated by the same Prometheus.\n\n")

	var stale []string
	for _, r := range d.Scenarios {
		if r.Run.RulesHash != rulesHash {
			stale = append(stale, r.Name)
		}
	}
	if len(stale) > 0 {
		p("**Stale:** %d of %d scenarios were measured on other rules or Alertmanager configuration than the code generates today (each scenario's section says): their figures say what those rules did. Measure them again with `make detect DETECT_SCENARIOS=%s` on a stack of your own.\n\n",
			len(stale), len(d.Scenarios), strings.Join(stale, ","))
	}

	p("## Summary\n\n")
	p("| scenario | first bad event | first page: alert, owner | pending | firing | notified | notifications (page / ticket) | naive alert firing, notified |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range d.Scenarios {
		fb := "none"
		if x := r.firstBad(); x != nil {
			fb = fmt.Sprintf("%s (%s)", secs(x.At), x.Segment)
		}
		alert, pend, fire, note := "none", "—", "—", "—"
		if a := r.firstPage(); a != nil {
			alert = fmt.Sprintf("%s, %s", alertName(*a), a.Owner)
			pend, fire, note = optSecs(a.PendingAt), optSecs(a.FiringAt), optSecs(a.Notified)
			if a.PendingAt == nil {
				pend = "— (no for:)"
			}
		}
		pages, tickets, groups := 0, 0, map[string]bool{}
		for _, dl := range r.Deliveries {
			if dl.Status != "firing" || !r.about(dl) {
				continue
			}
			switch {
			case strings.HasSuffix(dl.Receiver, "-ticket"):
				tickets++
			default:
				if !naiveOnlyRecord(dl) {
					pages++
					groups[dl.Receiver+" "+dl.Group] = true
				}
			}
		}
		naive := "did not fire"
		if n := r.naive(); n != nil && n.FiringAt != nil {
			naive = fmt.Sprintf("%s, %s", optSecs(n.FiringAt), optSecs(n.Notified))
		} else if n := r.naive(); n != nil {
			naive = "pending only"
		}
		title := fmt.Sprintf("[%s](#%s)", r.Title, anchor(r.Title))
		if r.Run.RulesHash != rulesHash {
			title += " (stale)"
		}
		p("| %s | %s | %s | %s | %s | %s | %d in %d group(s) / %d | %s |\n", title, fb, alert, pend, fire, note, pages, len(groups), tickets, naive)
	}
	p("\nSeconds from the fault; observation windows and the load each ran under are in the scenario's section.\n\n")

	p("### Notifications per team and per Alertmanager setup\n\n")
	p("Every scenario's Prometheus sends to two fresh Alertmanagers: the one `outbox-canary rules --format alertmanager` configures, and one configured as many teams configure theirs (`group_by: [alertname, pipeline]`, pages to a pager and tickets to a queue by `severity`, everything else to a default receiver, none of our inhibit rules), both at Alertmanager's default timings. Counted: notifications about the faulted pipeline (any, where none was faulted) from the fault to the end of the observation, by owner (the `owner` label of the alerts in them) and by what they are (a page, a ticket, anything else); resolves in brackets. The naive comparison alert is left out.\n\n")
	p("| scenario | generated configuration | grouped by alertname and pipeline, none of our inhibit rules |\n|---|---|---|\n")
	for _, r := range d.Scenarios {
		teams := "not measured (run before the second Alertmanager)"
		if r.TeamsMeasured {
			teams = perTeam(r, r.TeamsDeliveries)
		}
		p("| [%s](#%s) | %s | %s |\n", r.Title, anchor(r.Title), perTeam(r, r.Deliveries), teams)
	}
	p("\n")

	p("### Against the targets of issues 10 and 15\n\n")
	for _, r := range d.Scenarios {
		p("- **%s**: %s. %s\n", r.Title, r.Target, verdict(r))
	}
	p("\n")

	for _, r := range d.Scenarios {
		renderScenario(&b, r, rulesHash)
	}
	return b.Bytes()
}

// verdict says whether a scenario met its target.
func verdict(r *scenarioResult) string {
	pages := r.pages()
	switch r.Name {
	case scenarioRelayStall, scenarioConnectStopped:
		a := r.firstPage()
		if a == nil || a.FiringAt == nil {
			return fmt.Sprintf("**Missed**: no page fired within %.0f s.", r.ObservedSeconds)
		}
		groups, receivers := map[string]bool{}, map[string]bool{}
		for _, d := range pages {
			groups[d.Receiver+" "+d.Group] = true
			receivers[d.Receiver] = true
		}
		ok := *a.FiringAt <= 60 && a.Notified != nil && *a.Notified <= 90 && len(groups) == 1
		word := "Met"
		if !ok {
			word = "**Missed**"
		}
		return fmt.Sprintf("%s: firing %s s, notified %s s; %d page notification(s) in %d group(s), to %s, in %.0f s of stall.",
			word, optSecs(a.FiringAt), optSecs(a.Notified), len(pages), len(groups), strings.Join(slices.Sorted(maps.Keys(receivers)), ", "), r.ObservedSeconds)
	case scenarioPause:
		var paged, other []string
		for _, a := range r.Alerts {
			switch {
			case a.Alert == naiveAlertName || !causedByFault(a):
			case a.Severity == "page" || a.Pipeline == r.Pipeline:
				paged = append(paged, alertName(a))
			default:
				other = append(other, alertName(a))
			}
		}
		also := ""
		if len(other) > 0 {
			also = " Unrelated to the pause: " + strings.Join(other, "; ") + "."
		}
		if len(paged) == 0 && len(pages) == 0 {
			return fmt.Sprintf("Met: no page, and nothing about %s, pending, firing or notified in %.0f s.%s", r.Pipeline, r.ObservedSeconds, also)
		}
		return fmt.Sprintf("**Missed**: %s; %d page notification(s).%s", strings.Join(paged, "; "), len(pages), also)
	case scenarioQuiet:
		var active []string
		for _, a := range r.Alerts {
			if a.Alert != naiveAlertName {
				active = append(active, alertName(a))
			}
		}
		n := 0
		for _, d := range r.Deliveries {
			if r.about(d) {
				n++
			}
		}
		bad := 0.0
		for _, b := range r.FirstBad {
			bad += b.Count
		}
		from := "from the fault"
		if r.PrometheusDataSeconds == 0 {
			from = "from the fresh Prometheus's start"
		}
		if len(active) == 0 && n == 0 {
			return fmt.Sprintf("Met: 0 notifications, and nothing pending or firing, in %.0f s %s, with %.0f bad SLI event(s).", r.ObservedSeconds, from, bad)
		}
		return fmt.Sprintf("**Missed**: %d notification(s) in %.0f s %s, with %.0f bad SLI event(s); pending or firing: %s.", n, r.ObservedSeconds, from, bad, strings.Join(active, "; "))
	case scenarioSecondStall:
		return secondStallVerdict(r)
	case scenarioKafkaDown, scenarioConnectorPause:
		return outageVerdict(r)
	case scenarioFlapping:
		return flappingVerdict(r)
	default:
		a := r.firstPage()
		if a == nil {
			return fmt.Sprintf("No page in %.0f s.", r.ObservedSeconds)
		}
		return fmt.Sprintf("%s to %s, firing %s s, notified %s s.", alertName(*a), a.Owner, optSecs(a.FiringAt), optSecs(a.Notified))
	}
}

func renderScenario(b *bytes.Buffer, r *scenarioResult, rulesHash string) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## %s\n\n", r.Title)
	p("%s\n\n", r.Fault)
	p("Measured %s on %s; load average %.2f at the start, %.2f at most, %.2f at the end, on %d CPUs%s. Prometheus held %.0f s of data at the fault; watched for %.0f s after it.\n\n",
		r.Run.Date, r.Run.Machine, r.Load.Start, r.Load.Max, r.Load.End, r.Load.CPUs, loadNote(r.Load), r.PrometheusDataSeconds, r.ObservedSeconds)
	p("Versions: ")
	var vs []string
	for _, v := range r.Run.Versions {
		vs = append(vs, v.Name+" "+v.Version)
	}
	p("%s.\n\nCommand: `%s`\n\n", strings.Join(vs, ", "), r.Run.Command)
	switch r.Run.RulesHash {
	case rulesHash:
		p("Rules: %s, what the code generates today.\n\n", rulesHash)
	case "":
		p("Rules: **stale**, not recorded (measured before the rules' hash was kept).\n\n")
	default:
		p("Rules: **stale**, measured on %s, not what the code generates today.\n\n", r.Run.RulesHash)
	}

	type row struct {
		at   float64
		what string
	}
	var rows []row
	rows = append(rows, row{0, "fault: " + firstLine(r.Fault)})
	if r.LastArrival != nil {
		rows = append(rows, row{*r.LastArrival, fmt.Sprintf("last canary of %s arrived before the fault", r.Pipeline)})
	}
	for _, s := range r.Steps {
		rows = append(rows, row{s.At, s.What})
	}
	for _, e := range r.FirstBad {
		rows = append(rows, row{e.At, fmt.Sprintf("first bad SLI event: %s %s (%.0f bad by the end)", e.Pipeline, e.Segment, e.Count)})
	}
	for _, a := range r.Alerts {
		if a.PendingAt != nil && (a.FiringAt == nil || *a.PendingAt < *a.FiringAt) {
			rows = append(rows, row{*a.PendingAt, fmt.Sprintf("pending: %s, owner %s", alertName(a), orDash(a.Owner))})
		}
		if a.FiringAt != nil {
			what := fmt.Sprintf("firing: %s, owner %s", alertName(a), orDash(a.Owner))
			if a.Suppressed {
				what += "; inhibited in Alertmanager"
			}
			rows = append(rows, row{*a.FiringAt, what})
		}
		if a.FiringAt == nil && a.PendingAt != nil {
			rows = append(rows, row{a.LastActiveAt, fmt.Sprintf("last pending: %s (never fired)", alertName(a))})
		}
	}
	firstOfGroup := map[string]float64{}
	for _, dl := range r.Deliveries {
		what := fmt.Sprintf("**notification** to `%s` (%s): %s", dl.Receiver, dl.Status, strings.Join(dl.Alerts, "; "))
		if dl.Receiver == inhibitOnlyReceiver {
			what = fmt.Sprintf("routed to `%s` (%s), which has no integration, so nothing is sent: %s", dl.Receiver, dl.Status, strings.Join(dl.Alerts, "; "))
		}
		if first, ok := firstOfGroup[dl.Receiver+" "+dl.Group]; ok {
			what += fmt.Sprintf(" (an update of the group notified at %s)", secs(first))
		} else {
			firstOfGroup[dl.Receiver+" "+dl.Group] = dl.At
		}
		rows = append(rows, row{dl.At, what})
	}
	for _, dl := range r.TeamsDeliveries {
		rows = append(rows, row{dl.At, fmt.Sprintf("**notification**, Alertmanager grouped by alertname and pipeline, to `%s` (%s): %s", dl.Receiver, dl.Status, strings.Join(dl.Alerts, "; "))})
	}
	if s := r.Second; s != nil && s.Page != nil && s.Page.FiringAt != nil {
		rows = append(rows, row{*s.Page.FiringAt, fmt.Sprintf("firing again, the second stall's first page: %s, owner %s", alertName(*s.Page), orDash(s.Page.Owner))})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].at < rows[j].at })
	renderSecondStall(b, r)
	if life := pageLifetime(r); life != "" {
		p("%s\n\n", life)
	}
	p("| s from the fault | event |\n|---|---|\n")
	for _, rw := range rows {
		p("| %s | %s |\n", secs(rw.at), rw.what)
	}
	p("| %s | end of the observation |\n\n", secs(r.ObservedSeconds))
	if len(r.Alerts) == 0 {
		p("No alert was pending or firing in Prometheus at any evaluation.\n\n")
	}
}

// Alertmanager sends a new group's first notification group_wait after
// its first alert arrives, and Prometheus sends an alert at the
// evaluation that fires it: a notification later than this after the
// alert fired waited for a group that was already there.
const newGroupSlack = amGroupWaitDefault + prodEval

// secondStallVerdict says whether the second stall paged as a first one
// does (secondStallTarget).
func secondStallVerdict(r *scenarioResult) string {
	s := r.Second
	first := r.firstPage()
	switch {
	case first == nil || first.FiringAt == nil:
		return fmt.Sprintf("**Missed**: the first stall did not page within %.0f s.", r.ObservedSeconds)
	case s == nil || s.StartAt == nil || s.RecoveredAt == nil:
		return "**Missed**: no second stall: the first's short windows did not clear (see the timeline)."
	case s.Page == nil || s.Page.FiringAt == nil:
		return fmt.Sprintf("**Missed**: no page fired anew in the %.0f s the second stall was watched.", r.ObservedSeconds-*s.StartAt)
	}
	fire := *s.Page.FiringAt - *s.StartAt
	still := "nothing of the first still firing"
	if len(s.StillFiring) > 0 {
		still = "the first's " + strings.Join(s.StillFiring, "; ") + " still firing"
	}
	if s.NotifiedAt == nil {
		return fmt.Sprintf("**Missed**: the second stall (%s) fired %s %s s after its start, and no notification followed in the %.0f s it was watched.", still, alertName(*s.Page), secs(fire), r.ObservedSeconds-*s.StartAt)
	}
	held := *s.NotifiedAt - *s.Page.FiringAt
	word := "Met"
	if fire > 60 || held > newGroupSlack.Seconds() {
		word = "**Missed**"
	}
	return fmt.Sprintf("%s: the second stall began %s s after the first's recovery, with %s; its first page, %s to %s, fired %s s after its start and was notified %s s after its start, %s s after firing (group_wait %s), %s s after the first's recovery. The first stall was notified %s s after it began.",
		word, secs(*s.StartAt-*s.RecoveredAt), still, alertName(*s.Page), orDash(s.Page.Owner), secs(fire), secs(*s.NotifiedAt-*s.StartAt), secs(held), amGroupWaitDefault, secs(*s.NotifiedAt-*s.RecoveredAt), optSecs(first.Notified))
}

// renderSecondStall writes the second stall's figures, from its start and
// from the first's recovery, above the scenario's timeline.
func renderSecondStall(b *bytes.Buffer, r *scenarioResult) {
	s := r.Second
	if s == nil || s.StartAt == nil || s.RecoveredAt == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	rel := func(v *float64) (string, string) {
		if v == nil {
			return "—", "—"
		}
		return secs(*v - *s.StartAt), secs(*v - *s.RecoveredAt)
	}
	p("| the second stall | s from its start | s from the first's recovery (relay resumed) |\n|---|---|---|\n")
	a, b2 := rel(s.ShortWindowsClearAt)
	p("| the first's short windows seen clear | %s | %s |\n", a, b2)
	a, b2 = rel(s.StartAt)
	p("| relay paused again | %s | %s |\n", a, b2)
	page := "no page fired anew"
	var fired *float64
	if s.Page != nil {
		page, fired = "page firing: "+alertName(*s.Page)+", owner "+orDash(s.Page.Owner), s.Page.FiringAt
	}
	a, b2 = rel(fired)
	p("| %s | %s | %s |\n", page, a, b2)
	note := "no notification"
	if s.NotifiedAt != nil {
		note = fmt.Sprintf("notified, to `%s`: %s", s.NotifiedReceiver, strings.Join(s.NotifiedAlerts, "; "))
	}
	a, b2 = rel(s.NotifiedAt)
	p("| %s | %s | %s |\n\n", note, a, b2)
}

func loadNote(l loadInfo) string {
	if l.CPUs > 0 && l.Max > float64(l.CPUs) {
		return fmt.Sprintf(": **under load** (more runnable tasks than CPUs), figures are upper bounds of an idle machine's")
	}
	return ""
}

// firstLine is the first sentence of a fault's description.
func firstLine(s string) string {
	end := len(s)
	for _, sep := range []string{". ", ": ", "\n"} {
		if i := strings.Index(s, sep); i > 0 && i < end {
			end = i
		}
	}
	return strings.TrimSuffix(s[:end], ".")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// anchor is GitHub's heading anchor: lower case, spaces to dashes, other
// punctuation dropped.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// round1 keeps a tenth of a second: the harness's precision is coarser.
func round1(d time.Duration) float64 { return math.Round(d.Seconds()*10) / 10 }

// The doc must tell a scenario measured on today's rules from one measured
// on others.
func TestDetectionDocFlagsScenariosMeasuredOnOtherRules(t *testing.T) {
	d, err := readDetection(detectionJSON)
	if err != nil || len(d.Scenarios) < 2 {
		t.Fatalf("%v: want at least two scenarios", err)
	}
	today := detectRulesHash(t)
	d.Scenarios[0].Run.RulesHash = today
	d.Scenarios[1].Run.RulesHash = "0123456789abcdef"
	doc := string(renderDetection(d, today))
	current := fmt.Sprintf("[%s](#%s) |", d.Scenarios[0].Title, anchor(d.Scenarios[0].Title))
	stale := fmt.Sprintf("[%s](#%s) (stale) |", d.Scenarios[1].Title, anchor(d.Scenarios[1].Title))
	for _, want := range []string{current, stale, "Rules: " + today + ", what the code generates today.",
		"Rules: **stale**, measured on 0123456789abcdef, not what the code generates today."} {
		if !strings.Contains(doc, want) {
			t.Errorf("the doc lacks %q", want)
		}
	}
}

// outageVerdict says who was paged for an outage, against the owner its
// target names (the word before ", the owner of" in it): one page group,
// to that owner's page receiver, and no other.
func outageVerdict(r *scenarioResult) string {
	want := r.Target
	if i := strings.Index(want, "("); i >= 0 {
		want = want[i+1:]
	}
	if i := strings.Index(want, ","); i >= 0 {
		want = want[:i]
	}
	groups, receivers := map[string]bool{}, map[string]bool{}
	for _, d := range r.pages() {
		groups[d.Receiver+" "+d.Group] = true
		receivers[d.Receiver] = true
	}
	paged := slices.Sorted(maps.Keys(receivers))
	who := "nobody"
	if len(paged) > 0 {
		who = strings.Join(paged, ", ")
	}
	word := "Met"
	if len(groups) != 1 || !receivers[alerts.ReceiverName(want, "page")] {
		word = "**Missed**"
	}
	first := ""
	if a := r.firstPage(); a != nil {
		first = fmt.Sprintf(" First page: %s to %s, firing %s s, notified %s s.", alertName(*a), a.Owner, optSecs(a.FiringAt), optSecs(a.Notified))
	}
	return fmt.Sprintf("%s: paged %s; %d page notification(s) in %d group(s) in %.0f s.%s", word, who, len(r.pages()), len(groups), r.ObservedSeconds, first)
}

// notificationKind is what a notification is to its receiver: a page, a
// ticket, or (any other receiver) the receiver's name.
func notificationKind(receiver string) string {
	switch {
	case receiver == "pager" || strings.HasSuffix(receiver, "-page"):
		return "page"
	case receiver == "tickets" || strings.HasSuffix(receiver, "-ticket"):
		return "ticket"
	}
	return "to receiver " + receiver
}

// perTeam counts a scenario's notifications by owner and kind, firing
// ones with their resolves in brackets.
func perTeam(r *scenarioResult, ds []deliveryRecord) string {
	type key struct{ owner, kind string }
	firing, resolved := map[key]int{}, map[key]int{}
	for _, d := range ds {
		if !r.about(d) || naiveOnlyRecord(d) {
			continue
		}
		k := key{strings.Join(d.Owners, "+"), notificationKind(d.Receiver)}
		if k.owner == "" {
			// Runs before owners were kept: the generated receivers
			// are named after the owner.
			k.owner = strings.TrimSuffix(strings.TrimSuffix(d.Receiver, "-page"), "-ticket")
		}
		if d.Status == "firing" {
			firing[k]++
		} else {
			resolved[k]++
		}
	}
	keys := slices.Collect(maps.Keys(firing))
	for k := range resolved {
		if _, ok := firing[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].owner < keys[j].owner || keys[i].owner == keys[j].owner && keys[i].kind < keys[j].kind
	})
	var out []string
	for _, k := range keys {
		kind := k.kind
		if firing[k] != 1 && (kind == "page" || kind == "ticket") {
			kind += "s"
		}
		s := fmt.Sprintf("%s: %d %s", k.owner, firing[k], kind)
		if n := resolved[k]; n > 0 {
			s += fmt.Sprintf(" (%d resolved)", n)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// naiveOnlyRecord says whether a notification carries only the naive
// comparison alert.
func naiveOnlyRecord(d deliveryRecord) bool {
	for _, a := range d.Alerts {
		if !strings.HasPrefix(a, naiveAlertName) {
			return false
		}
	}
	return len(d.Alerts) > 0
}

// lastPageActive is the last evaluation that held a page alert of ours
// about the scenario's pipeline pending or firing, if any did.
func lastPageActive(r *scenarioResult) (float64, bool) {
	last, ok := 0.0, false
	for _, a := range r.Alerts {
		if a.Alert == naiveAlertName || a.Severity != "page" || a.FiringAt == nil || (r.Pipeline != "" && a.Pipeline != r.Pipeline) {
			continue
		}
		last, ok = max(last, a.LastActiveAt), true
	}
	return last, ok
}

// lastResolve is the last resolved notification about the scenario's
// pipeline that one receiver setup sent.
func lastResolve(r *scenarioResult, ds []deliveryRecord) (float64, bool) {
	last, ok := 0.0, false
	for _, d := range ds {
		if r.about(d) && d.Status == "resolved" && !naiveOnlyRecord(d) {
			last, ok = max(last, d.At), true
		}
	}
	return last, ok
}

// pageLifetime says how long the pages outlived the incident, where the
// fault was undone within the observation.
func pageLifetime(r *scenarioResult) string {
	if r.IncidentEnd == nil || *r.IncidentEnd >= r.ObservedSeconds {
		return ""
	}
	end := *r.IncidentEnd
	last, ok := lastPageActive(r)
	if !ok {
		return fmt.Sprintf("The incident ended at %s (the fault undone); no page alert fired.", secs(end))
	}
	s := fmt.Sprintf("The incident ended at %s (the fault undone). The last evaluation holding a page alert of %s firing was at %s, %.0f s after.", secs(end), r.Pipeline, secs(last), last-end)
	if v, ok := lastResolve(r, r.Deliveries); ok {
		s += fmt.Sprintf(" Resolved notifications: generated configuration %s", secs(v))
		if w, ok := lastResolve(r, r.TeamsDeliveries); ok {
			s += fmt.Sprintf(", grouped by alertname and pipeline %s", secs(w))
		}
		s += "."
	}
	return s
}

// flappingVerdict says whether a crash loop was one incident on both
// Alertmanager setups, and whether its page resolved.
func flappingVerdict(r *scenarioResult) string {
	count := func(ds []deliveryRecord) (pages, other int, to []string) {
		for _, d := range ds {
			if !r.about(d) || d.Status != "firing" || naiveOnlyRecord(d) {
				continue
			}
			if notificationKind(d.Receiver) == "page" {
				pages++
				if !slices.Contains(to, d.Receiver) {
					to = append(to, d.Receiver)
				}
			} else {
				other++
			}
		}
		return pages, other, to
	}
	want := r.Target
	if i := strings.Index(want, "("); i >= 0 {
		want = want[i+1:]
	}
	if i := strings.Index(want, ")"); i >= 0 {
		want = want[:i]
	}
	genPages, genOther, genTo := count(r.Deliveries)
	teamPages, teamOther, _ := count(r.TeamsDeliveries)
	var defaults int
	for _, d := range r.TeamsDeliveries {
		if r.about(d) && d.Receiver == "default" && !naiveOnlyRecord(d) {
			defaults++
		}
	}
	_, genResolved := lastResolve(r, r.Deliveries)
	_, teamResolved := lastResolve(r, r.TeamsDeliveries)
	ok := genPages == 1 && slices.Equal(genTo, []string{alerts.ReceiverName(want, "page")}) && teamPages == 1 && defaults == 0 &&
		r.TeamsMeasured && genResolved && teamResolved
	word := "Met"
	if !ok {
		word = "**Missed**"
	}
	life := "no page alert fired"
	if last, fired := lastPageActive(r); fired && r.IncidentEnd != nil {
		life = fmt.Sprintf("the page was last firing %.0f s after the loop ended", last-*r.IncidentEnd)
	}
	return fmt.Sprintf("%s: generated configuration %d page notification(s) (to %s) and %d other; grouped by alertname and pipeline %d page notification(s), %d other, %d to its default receiver; resolved: generated %t, grouped %t; %s; watched %.0f s.",
		word, genPages, strings.Join(genTo, ", "), genOther, teamPages, teamOther, defaults, genResolved, teamResolved, life, r.ObservedSeconds)
}

// TestAPageWithoutAPipelineLabelConcernsTheFaultedPipeline: a Kafka
// cluster's page names no pipeline (it is one for every pipeline on the
// brokers), and the kafka-down scenario must count it; another pipeline's
// page is not the faulted one's.
func TestAPageWithoutAPipelineLabelConcernsTheFaultedPipeline(t *testing.T) {
	r := &scenarioResult{Pipeline: "orders", Deliveries: []deliveryRecord{
		{At: 174.5, Receiver: "team-kafka-page", Status: "firing", Owners: []string{"team-kafka"}, Alerts: []string{"OutboxCanaryDependencyDown (page) firing"}},
		{At: 180, Receiver: "team-payments-page", Status: "firing", Pipelines: []string{"payments"}, Owners: []string{"team-payments"}, Alerts: []string{"OutboxCanaryStalled (payments, end_to_end, page) firing"}},
	}}
	pages := r.pages()
	if len(pages) != 1 || pages[0].Receiver != "team-kafka-page" {
		t.Errorf("pages about orders = %+v, want the Kafka cluster's page alone", pages)
	}
}
