package statuspage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

// t0 is the injected clock's start. It is in a zone other than UTC so a
// time shown without conversion would be caught.
var t0 = time.Date(2025, 3, 1, 13, 0, 0, 0, time.FixedZone("CET", 3600))

// newService builds a prober service whose servers do not exist: nothing
// here connects, the tracker is driven by hand. It returns the SLO model of
// its configuration too, for the stall threshold.
func newService(t *testing.T, extra string, reg *prometheus.Registry, now func() time.Time) (*prober.Service, *slo.Model) {
	t.Helper()
	cfg := stacktest.UnreachableConfig(t, extra)
	svc, err := prober.New(prober.Options{Config: cfg, Registerer: reg, StateDir: "-", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	model, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc, model
}

func newHandler(svc *prober.Service, model *slo.Model, reg *prometheus.Registry, now func() time.Time) http.Handler {
	return NewHandler(svc, model, reg, slog.New(slog.DiscardHandler), now)
}

// canary is one canary driven through a tracker by hand: committed ago
// before t0, arrived after its commit (0: not arrived); every canary not
// arrived is swept at sweptAt before t0 (0: at t0 only).
type canary struct {
	ago, after time.Duration
	sweptAt    time.Duration
}

// drive sends the canaries through the tracker of pipeline orders with the
// clock set to each event's time, then sweeps at t0 and leaves the clock
// there: deadlines that passed are judged when the sweep sees them, as in
// the service.
func drive(t *testing.T, svc *prober.Service, now *time.Time, canaries []canary) {
	t.Helper()
	tr, err := svc.Tracker("orders")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range canaries {
		committed := t0.Add(-c.ago)
		id := fmt.Sprintf("c%d", i)
		*now = committed
		if err := tr.Sent(prober.Canary{ID: id, Seq: uint64(i + 1), Pipeline: "orders", Key: "k", RowID: "1",
			InsertStarted: committed.Add(-5 * time.Millisecond), CommitSent: committed, Committed: committed}); err != nil {
			t.Fatal(err)
		}
		switch {
		case c.sweptAt > 0:
			*now = t0.Add(-c.sweptAt)
			// The readers were caught up: the canary is on the publish side.
			tr.Position(prober.Position{At: *now, CaughtUp: true})
			tr.Sweep()
		case c.after > 0:
			*now = committed.Add(c.after)
			token, _ := tr.BeginArrival(time.Time{})
			if k := tr.Arrived(token, prober.Arrival{CanaryID: id, Seq: uint64(i + 1), Key: "k", Partition: 0, Offset: int64(i),
				Consumed: committed.Add(c.after),
				Stamps:   map[string]time.Time{"read": committed.Add(50 * time.Millisecond), "publish": committed.Add(70 * time.Millisecond)},
			}).Kind; k != prober.KindFirst {
				t.Fatalf("canary %s arrived as %v", id, k)
			}
		}
	}
	*now = t0
	tr.Position(prober.Position{At: t0, CaughtUp: true})
	tr.Sweep()
}

// TestStatusShowsBurnRatesPerBudgetedSegment drives a service's tracker
// with an injected clock and reads the burn rates back from /api/status and
// the status page.
func TestStatusShowsBurnRatesPerBudgetedSegment(t *testing.T) {
	cases := []struct {
		name     string
		extra    string
		canaries []canary
		// want: per segment, per window: "window cut events bad rate".
		want     map[string][]string
		wantPage []string
		// allCounted names the window that holds every verdict given:
		// its totals must be the SLI counters' on /metrics.
		allCounted string
	}{
		{"A pipeline with no verdict yet has no burn rate, not a rate of 0, and a window longer than the tracker's memory is not shown as if it were covered.",
			"", nil,
			// lost_after 5m, memory 10m: verdicts of the last 5m only;
			// the 1h window would cover no more than the 5m one.
			map[string][]string{
				"end_to_end": {"5m - 0 0 null"},
			},
			[]string{"<th>burn, last 5m</th>", ">- <small>(0/0)</small>", "remembers the verdicts of the last 5m"}, ""},
		{"Each window counts the verdicts given in it, at arrival or at a deadline, canaries still in flight included.",
			"    canary: {lost_after: 1h}\n    slo: {objective: 99}\n",
			[]canary{
				{ago: 70 * time.Minute, sweptAt: 9 * time.Minute}, // judged bad at its deadlines by a sweep 9m ago, and lost then
				{ago: 50 * time.Minute, after: 100 * time.Millisecond},
				{ago: 30 * time.Minute, after: 100 * time.Millisecond},
				{ago: 2 * time.Minute, after: 3 * time.Second}, // late: bad end to end only
				{ago: time.Minute, after: 100 * time.Millisecond},
				{ago: 10 * time.Second}, // in flight, past both deadlines at the sweep at t0
			},
			map[string][]string{
				// 5m: 2 bad of 3 at 99% is 0.667/0.01; 1h: 3 of 6, 2 of 6.
				"end_to_end":     {"5m - 3 2 66.66666666666667", "1h - 6 3 50"},
				"commit_to_read": {"5m - 3 1 33.333333333333336", "1h - 6 2 33.333333333333336"},
			},
			[]string{`title="2 bad of 3 events" class="bad">66.67 <small>(2/3)</small></td>`, "<th>burn, last 1h</th>", "against a 99% objective"},
			"1h"},
		{"A memory shorter than the windows cuts them, and says from what.",
			"    canary: {lost_after: 2m}\n",
			nil,
			map[string][]string{"end_to_end": {"2m 5m 0 0 null"}},
			[]string{"<th>burn, last 2m<br><small>of the 5m window</small></th>"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			now := t0
			clock := func() time.Time { return now }
			svc, model := newService(t, tc.extra, reg, clock)
			drive(t, svc, &now, tc.canaries)
			srv := httptest.NewServer(newHandler(svc, model, reg, clock))
			defer srv.Close()

			body := get(t, srv.URL+"/api/status")
			var st Status
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("status is not JSON: %v\n%s", err, body)
			}
			got := map[string][]string{}
			for _, seg := range st.Pipelines[0].Segments {
				if !seg.Budgeted && len(seg.BurnRates) > 0 {
					t.Errorf("segment %s has no budget but burn rates %+v", seg.Name, seg.BurnRates)
				}
				for _, br := range seg.BurnRates {
					rate := "null"
					if br.BurnRate != nil {
						rate = fmt.Sprint(*br.BurnRate)
					}
					got[seg.Name] = append(got[seg.Name], fmt.Sprintf("%s %s %d %d %s", br.Window, cmp.Or(br.Cut, "-"), br.Events, br.Bad, rate))
				}
			}
			for seg, want := range tc.want {
				if fmt.Sprint(got[seg]) != fmt.Sprint(want) {
					t.Errorf("segment %s burn rates = %q, want %q", seg, got[seg], want)
				}
			}
			if tc.allCounted != "" {
				sli := svc.Metrics().SLIEvents
				for _, seg := range st.Pipelines[0].Segments {
					for _, br := range seg.BurnRates {
						if br.Window != tc.allCounted {
							continue
						}
						bad := testutil.ToFloat64(sli.WithLabelValues("orders", seg.Name, slo.OutcomeBad))
						good := testutil.ToFloat64(sli.WithLabelValues("orders", seg.Name, slo.OutcomeGood))
						if float64(br.Bad) != bad || float64(br.Events) != bad+good {
							t.Errorf("segment %s over %s: %d bad of %d, but the SLI counters say %v bad of %v", seg.Name, br.Window, br.Bad, br.Events, bad, bad+good)
						}
					}
				}
			}
			if len(tc.canaries) == 0 && !strings.Contains(body, `"burn_rate": null`) {
				t.Errorf("a window without events must show burn_rate null, not omit it or show 0:\n%s", body)
			}

			page := get(t, srv.URL+"/")
			for _, w := range tc.wantPage {
				if !strings.Contains(page, w) {
					t.Errorf("status page lacks %q:\n%s", w, page)
				}
			}
		})
	}
}

// TestStatusShowsAStallAndWhereCanariesAreStuck drives the tracker into
// the states a person on call must tell apart and reads the banner and the
// in-flight canaries back from the page and the JSON.
func TestStatusShowsAStallAndWhereCanariesAreStuck(t *testing.T) {
	// A canary every 5s, end_to_end 2s, commit_to_read 1s, stall_intervals
	// 2 (the default): the threshold is 2s + 2 x 5s = 12s.
	const extra = "    canary: {schedule: \"@every 5s\"}\n"
	cases := []struct {
		name        string
		canaries    []canary
		wantStalled bool
		wantJSON    []string
		wantPage    []string
		notWantPage []string
	}{
		{"A pipeline whose canaries arrive is not stalled, and its canary in flight is shown before its deadline.",
			[]canary{{ago: 6 * time.Second, after: 100 * time.Millisecond}, {ago: 500 * time.Millisecond}},
			false,
			[]string{`"stalled": false`, `"threshold_seconds": 12`, `"seconds_without_arrival": 5.9`, `"stuck": "in commit_to_read, 0.5 s before its deadline"`},
			[]string{"<h3>In flight (1)</h3>", "in commit_to_read, 0.5 s before its deadline", "last canary arrived <time datetime=\"2025-03-01T11:59:54.1Z\">11:59:54.100 UTC</time> (5.9 s ago)",
				"stall threshold 12 s (2s end_to_end budget &#43; 2 × 5s canary interval)", `<meta http-equiv="refresh" content="10">`},
			[]string{`class="stall"`, "STALLED"}},
		{"No arrival for longer than the threshold is a stall: a banner names the oldest canary in flight and how far past its deadline it is.",
			[]canary{
				{ago: 30 * time.Second, after: 100 * time.Millisecond},
				{ago: 25 * time.Second},
				{ago: 20 * time.Second},
				{ago: 500 * time.Millisecond},
			},
			true,
			[]string{`"stalled": true`, `"stuck": "past the commit_to_read deadline by 24 s"`, `"past_deadline_seconds": 24`, `"where": "commit_to_read"`, `"age_seconds": 25`,
				`"message": "Stalled: No canary has arrived for 30 s (the last at 11:59:30.100 UTC), longer than the stall threshold of 12 s (2s end_to_end budget + 2 × 5s canary interval). 3 canaries in flight; the oldest is past the commit_to_read deadline by 24 s."`},
			[]string{`<div class="stall" role="alert">Stalled: No canary has arrived for 30 s`, "<title>STALLED orders · outbox-canary unit</title>",
				`<td class="stuck bad">past the commit_to_read deadline by 24 s</td>`, `<td class="stuck">in commit_to_read, 0.5 s before its deadline</td>`,
				`<td class="bad">over budget</td>`, "<h3>In flight (3)</h3>"},
			nil},
		{"Before the first arrival the oldest canary in flight stands in for the last arrival.",
			[]canary{{ago: 40 * time.Second}},
			true,
			[]string{`"message": "Stalled: No canary has arrived yet; the oldest in flight was committed 40 s ago, longer than the stall threshold of 12 s (2s end_to_end budget + 2 × 5s canary interval). 1 canary in flight: past the commit_to_read deadline by 39 s."`},
			[]string{"no canary arrived yet"},
			nil},
		{"A stall with no canary in flight says so rather than naming none.",
			[]canary{{ago: 30 * time.Second, after: 100 * time.Millisecond}},
			true,
			[]string{`"message": "Stalled: No canary has arrived for 30 s (the last at 11:59:30.100 UTC), longer than the stall threshold of 12 s (2s end_to_end budget + 2 × 5s canary interval). No canary is in flight: none was sent since, or all were declared lost."`},
			[]string{`<div class="stall" role="alert">`, "<h3>In flight (0)</h3>"},
			nil},
		{"A pipeline that has neither received nor sent a canary has no stall verdict to give.",
			nil,
			false,
			[]string{`"stalled": false`, `"seconds_without_arrival": null`},
			[]string{"no canary arrived yet", "<tr><td colspan=\"99\">none</td></tr>"},
			[]string{`class="stall"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			now := t0
			clock := func() time.Time { return now }
			svc, model := newService(t, extra, reg, clock)
			drive(t, svc, &now, tc.canaries)
			srv := httptest.NewServer(newHandler(svc, model, reg, clock))
			defer srv.Close()

			body := get(t, srv.URL+"/api/status")
			var st Status
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("status is not JSON: %v\n%s", err, body)
			}
			if s := st.Pipelines[0].Stall; s == nil || s.Stalled != tc.wantStalled {
				t.Errorf("stall = %+v, want stalled %v", s, tc.wantStalled)
			}
			for _, w := range tc.wantJSON {
				if !strings.Contains(body, w) {
					t.Errorf("/api/status lacks %s:\n%s", w, body)
				}
			}
			page := get(t, srv.URL+"/")
			for _, w := range tc.wantPage {
				if !strings.Contains(page, w) {
					t.Errorf("status page lacks %q:\n%s", w, page)
				}
			}
			for _, w := range tc.notWantPage {
				if strings.Contains(page, w) {
					t.Errorf("status page shows %q:\n%s", w, page)
				}
			}
			// In-flight canaries come first: their table precedes the
			// burn rates and the recent canaries.
			if i, j := strings.Index(page, `class="in-flight"`), strings.Index(page, `class="burn"`); i < 0 || j < 0 || i > j {
				t.Errorf("the in-flight table is not before the burn rates (at %d and %d)", i, j)
			}
			if strings.Contains(page, "CET") || strings.Contains(body, "+01:00") {
				t.Errorf("a time is shown in the clock's zone, not UTC:\n%s\n%s", body, page)
			}
		})
	}
}

func TestHumanDurations(t *testing.T) {
	cases := []struct {
		name string
		d    time.Duration
		want string
	}{
		{"Under ten seconds keeps a tenth.", 430 * time.Millisecond, "0.4 s"},
		{"Under a minute is whole seconds.", 12400 * time.Millisecond, "12 s"},
		{"Under an hour is minutes and seconds.", 4*time.Minute + 12*time.Second, "4 min 12 s"},
		{"Longer is hours and minutes.", 2*time.Hour + 5*time.Minute + 10*time.Second, "2 h 5 min"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := human(tc.d); got != tc.want {
				t.Errorf("human(%s) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}

func TestOutcomesThisPageDoesNotKnowAreNeutral(t *testing.T) {
	cases := []struct {
		name, outcome, want string
	}{
		{"Good is green.", "good", "good"},
		{"Bad is red.", "bad", "bad"},
		{"Not judged is plain.", "", ""},
		{"An outcome a newer judge adds is neutral, never green.", "unjudged_prober_down", "other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomeClass(tc.outcome); got != tc.want {
				t.Errorf("outcomeClass(%q) = %q, want %q", tc.outcome, got, tc.want)
			}
		})
	}
	var b strings.Builder
	if err := statusPage.ExecuteTemplate(&b, "cell", prober.SegmentResult{Outcome: "unjudged_prober_down"}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `<td class="other">&ndash; <small>(unjudged_prober_down)</small></td>`; got != want {
		t.Errorf("cell = %s, want %s", got, want)
	}
}

func TestACellSaysWhatKindOfFigureItHolds(t *testing.T) {
	cases := []struct {
		name string
		seg  prober.SegmentResult
		want string
	}{
		{"A measured segment shows its duration.", prober.SegmentResult{Measured: true, Duration: 412 * time.Millisecond, Outcome: "good"}, "412ms"},
		{"A published_at marked after consumption bounds the segment: shown as an upper bound.",
			prober.SegmentResult{Measured: true, Bound: true, Duration: 40 * time.Millisecond}, "&le; 40ms"},
		{"A segment whose clocks disagree is no latency, and says so.", prober.SegmentResult{Skew: true}, "negative (clock skew?)"},
		{"A stamp taken after its event is stamp order, not skew.", prober.SegmentResult{StampOrder: true}, "negative (stamp order)"},
		{"A stamp taken after its event within the tolerance, measured as 0, is stamp order, not 0s.",
			prober.SegmentResult{Measured: true, StampOrder: true, Outcome: "good"}, "negative (stamp order)"},
		{"A stamp the relay never wrote is named.", prober.SegmentResult{MissingStamp: "publish"}, "no publish stamp"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := statusPage.ExecuteTemplate(&b, "cell", tc.seg); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), ">"+tc.want+"<") {
				t.Errorf("cell = %s, want %q in it", b.String(), tc.want)
			}
		})
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func TestHTTPEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, model := newService(t, "", reg, time.Now)
	srv := httptest.NewServer(newHandler(svc, model, reg, time.Now))
	defer srv.Close()
	cases := []struct {
		name     string
		path     string
		wantCode int
		want     []string
		notWant  []string
	}{
		{"Liveness does not depend on the servers.", "/healthz", 200, []string{"ok"}, nil},
		{"Readiness says the schedules are not running before Run.", "/readyz", 503,
			[]string{"the canary schedules are not running"}, []string{"database", "hunter2"}},
		{"Metrics include the build info and the budgets.", "/metrics", 200,
			[]string{"outbox_canary_build_info{", `outbox_canary_segment_budget_seconds{pipeline="orders",segment="end_to_end"} 2`}, nil},
		{"The JSON status lists budgets and owners per segment, and the servers not reached.", "/api/status", 200,
			[]string{`"name": "orders"`, `"name": "commit_to_read"`, `"budget_seconds": 1`, `"ready": false`, `"database": "database not reached yet"`}, []string{"hunter2"}},
		{"The status page is an HTML table.", "/", 200, []string{"<table", "commit_to_read", "budget 1s", "no canary yet", "database unreachable: database not reached yet"}, []string{"hunter2"}},
		{"Unknown paths are not the status page.", "/nope", 404, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body := string(b)
			if resp.StatusCode != tc.wantCode {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.wantCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q:\n%.800s", w, body)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(body, w) {
					t.Errorf("body shows %q", w)
				}
			}
			if tc.path == "/api/status" {
				var st Status
				if err := json.Unmarshal(b, &st); err != nil {
					t.Errorf("status is not JSON: %v", err)
				}
			}
		})
	}
}

// TestReadinessIsThisProcessNotItsServers runs a service whose database and
// Kafka do not exist: /readyz is 200 once it runs (a downstream outage
// must not take the prober out of service), while /api/status and the page
// say which servers are not reached, and /readyz is 503 again once it stops.
func TestReadinessIsThisProcessNotItsServers(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, model := newService(t, "", reg, time.Now)
	srv := httptest.NewServer(newHandler(svc, model, reg, time.Now))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	defer stop()

	readyz := func() (int, string) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	stacktest.Eventually(t, time.Minute, "/readyz to answer 200 while the servers are unreachable", func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if up, reasons := svc.Dependencies(); up {
		t.Errorf("dependencies up against servers that do not exist: %v", reasons)
	}
	body := get(t, srv.URL+"/api/status")
	for _, w := range []string{`"ready": true`, `"dependencies_down": {`, `"kafka": `} {
		if !strings.Contains(body, w) {
			t.Errorf("/api/status lacks %s:\n%s", w, body)
		}
	}
	if page := get(t, srv.URL+"/"); !strings.Contains(page, `<span class="good">ready</span>`) || !strings.Contains(page, "kafka unreachable: ") {
		t.Errorf("the page does not show ready with kafka unreachable:\n%s", page)
	}

	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after Run returned = %d %s, want 503", code, body)
	}
}
