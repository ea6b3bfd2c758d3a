package statuspage

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober"
)

// t0 is the injected clock's start.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// newService builds a prober service whose servers do not exist: nothing
// here connects, the tracker is driven by hand.
func newService(t *testing.T, extra string, reg *prometheus.Registry, now func() time.Time) *prober.Service {
	t.Helper()
	cfg := stacktest.UnreachableConfig(t, extra)
	svc, err := prober.New(prober.Options{Config: cfg, Registerer: reg, StateDir: "-", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

func newHandler(svc *prober.Service, reg *prometheus.Registry, now func() time.Time) http.Handler {
	return NewHandler(svc, reg, slog.New(slog.DiscardHandler), now)
}

// TestStatusShowsBurnRatesPerBudgetedSegment drives a service's tracker
// with an injected clock and reads the burn rates back from /api/status and
// the status page.
func TestStatusShowsBurnRatesPerBudgetedSegment(t *testing.T) {
	now := t0
	// canary is one canary of the test: committed ago before now, consumed
	// after (0: still in flight), lost if sweptAt is set.
	type canary struct {
		ago, after time.Duration
		sweptAt    time.Duration // before now; 0: no sweep
	}
	cases := []struct {
		name     string
		extra    string
		canaries []canary
		// want: per segment, per window: "covered events bad rate".
		want     map[string][]string
		wantPage []string
	}{
		{"A pipeline with no canary resolved yet has no burn rate, not a rate of 0.",
			"", nil,
			map[string][]string{
				"end_to_end": {"5m 5m 0 0 null", "1h 10m 0 0 null"},
			},
			[]string{"<th>burn 5m</th>", "<th>burn 1h</th>", ">-", "(last 10m)"}},
		{"Each window counts the canaries resolved in it, good, late and lost, and nothing in flight.",
			"    canary: {lost_after: 1h}\n    slo: {objective: 99}\n",
			[]canary{
				{ago: 70 * time.Minute, sweptAt: 9 * time.Minute}, // lost 10m ago: bad in commit_to_read and end_to_end
				{ago: 50 * time.Minute, after: 100 * time.Millisecond},
				{ago: 30 * time.Minute, after: 100 * time.Millisecond},
				{ago: 2 * time.Minute, after: 3 * time.Second}, // late: bad end to end only
				{ago: time.Minute, after: 100 * time.Millisecond},
				{ago: 10 * time.Second}, // in flight
			},
			map[string][]string{
				// 5m: 1 bad of 2 at 99% is 0.5/0.01; 1h: 2 of 5, 1 of 5.
				"end_to_end":     {"5m 5m 2 1 50", "1h 1h 5 2 40"},
				"commit_to_read": {"5m 5m 2 0 0", "1h 1h 5 1 20"},
			},
			[]string{`title="1 bad of 2 events" class="bad">50.00</td>`, `title="0 bad of 2 events">0.00</td>`, "against a 99% objective"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			clock := func() time.Time { return now }
			svc := newService(t, tc.extra, reg, clock)
			tr, err := svc.Tracker("orders")
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range tc.canaries {
				committed := t0.Add(-c.ago)
				id := fmt.Sprintf("c%d", i)
				if err := tr.Sent(prober.Canary{ID: id, Seq: uint64(i + 1), Pipeline: "orders", Key: "k", RowID: "1",
					InsertStarted: committed.Add(-5 * time.Millisecond), Committed: committed}); err != nil {
					t.Fatal(err)
				}
				switch {
				case c.sweptAt > 0:
					now = t0.Add(-c.sweptAt)
					tr.Sweep(t.Context())
					now = t0
				case c.after > 0:
					if k := tr.Arrived(prober.Arrival{CanaryID: id, Seq: uint64(i + 1), Key: "k", Partition: 0, Offset: int64(i),
						Consumed: committed.Add(c.after),
						Stamps:   map[string]time.Time{"read": committed.Add(50 * time.Millisecond), "publish": committed.Add(70 * time.Millisecond)},
					}).Kind; k != prober.KindFirst {
						t.Fatalf("canary %s arrived as %v", id, k)
					}
				}
			}
			srv := httptest.NewServer(newHandler(svc, reg, clock))
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
					got[seg.Name] = append(got[seg.Name], fmt.Sprintf("%s %s %d %d %s", br.Window, br.Covered, br.Events, br.Bad, rate))
				}
			}
			for seg, want := range tc.want {
				if fmt.Sprint(got[seg]) != fmt.Sprint(want) {
					t.Errorf("segment %s burn rates = %q, want %q", seg, got[seg], want)
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
	svc := newService(t, "", reg, time.Now)
	srv := httptest.NewServer(newHandler(svc, reg, time.Now))
	defer srv.Close()
	cases := []struct {
		name     string
		path     string
		wantCode int
		want     []string
		notWant  []string
	}{
		{"Liveness does not depend on the servers.", "/healthz", 200, []string{"ok"}, nil},
		{"Readiness names the parts not working yet.", "/readyz", 503,
			[]string{`pipeline "orders": database: database not reached yet`, `pipeline "orders": kafka: not connected to Kafka yet`}, []string{"hunter2"}},
		{"Metrics include the build info and the budgets.", "/metrics", 200,
			[]string{"outbox_canary_build_info{", `outbox_canary_segment_budget_seconds{pipeline="orders",segment="end_to_end"} 2`}, nil},
		{"The JSON status lists budgets and owners per segment.", "/api/status", 200,
			[]string{`"name": "orders"`, `"name": "commit_to_read"`, `"budget_seconds": 1`, `"ready": false`}, []string{"hunter2"}},
		{"The status page is an HTML table.", "/", 200, []string{"<table>", "commit_to_read", "budget 1s", "no canary yet"}, nil},
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
