package main

// The prober's own downtime is nobody's segment (issue 9), proven on real
// processes of the built binary against the project's PostgreSQL and
// Kafka: start the stack with `deploy/local/stack.sh up` (or `make test`).
// Without the stack these tests skip (and fail in CI).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/internal/statuspage"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

// verdicts are one process's verdicts of one pipeline on /metrics: per
// segment, SLI events by outcome and unjudged canaries by reason.
type verdicts map[string]map[string]float64

// scrapeVerdicts reads the SLI events and the unjudged canaries of a
// pipeline from /metrics, keyed "good", "bad" or "unjudged/<reason>".
func scrapeVerdicts(addr, pipeline string) (verdicts, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := verdicts{}
	add := func(name string, key func(map[string]string) string) {
		for _, m := range fams[name].GetMetric() {
			l := labelMap(m)
			if l[slo.LabelPipeline] != pipeline || metricValue(m) == 0 {
				continue
			}
			if out[l[slo.LabelSegment]] == nil {
				out[l[slo.LabelSegment]] = map[string]float64{}
			}
			out[l[slo.LabelSegment]][key(l)] += metricValue(m)
		}
	}
	add(slo.MetricSLIEvents, func(l map[string]string) string { return l[slo.LabelOutcome] })
	add(slo.MetricCanariesUnjudged, func(l map[string]string) string { return "unjudged/" + l[slo.LabelReason] })
	return out, nil
}

// total is every outcome of a segment: one per canary that entered it.
func (v verdicts) total(segment string) float64 {
	n := 0.0
	for _, x := range v[segment] {
		n += x
	}
	return n
}

// apiStatus reads /api/status and returns the pipeline's status.
func apiStatus(addr, pipeline string) (statuspage.PipelineStatus, error) {
	resp, err := http.Get("http://" + addr + "/api/status")
	if err != nil {
		return statuspage.PipelineStatus{}, err
	}
	defer resp.Body.Close()
	var st statuspage.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return statuspage.PipelineStatus{}, fmt.Errorf("/api/status: %w", err)
	}
	for _, p := range st.Pipelines {
		if p.Name == pipeline {
			return p, nil
		}
	}
	return statuspage.PipelineStatus{}, fmt.Errorf("/api/status: no pipeline %q", pipeline)
}

// TestProberKilledAcrossADeadlineChargesNoSegmentOfKafkas kills a running
// prober (SIGKILL) with canaries in flight, lets the relay publish them
// while it is down, and starts it again on the same state directory only
// once their publish_to_consume and end_to_end deadlines have passed (as
// measured: the relay's published_at and the commit time the first process
// last reported). Kafka and the relay were healthy throughout: the canaries
// waited for the prober, which no pipeline owner is paged for. Their
// publish_to_consume and end_to_end come out unjudged (prober_down), never
// bad, commit_to_publish keeps the verdict its stamps give, and across both
// processes every canary gets exactly one outcome per budgeted segment.
func TestProberKilledAcrossADeadlineChargesNoSegmentOfKafkas(t *testing.T) {
	bin := stacktest.BuildCommand(t, "outbox-canary")
	const (
		c2pBudget = 5 * time.Second
		p2cBudget = 2 * time.Second
		e2eBudget = 6 * time.Second
	)
	path, faults := stackPipelineWith(t, fmt.Sprintf("{commit_to_publish: %s, publish_to_consume: %s, end_to_end: %s}", c2pBudget, p2cBudget, e2eBudget), "")
	pool, err := pgxpool.New(context.Background(), os.Getenv("CHECK_TEST_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const pipeline = "orders"

	first := startBinary(t, bin, path)
	first.waitFor(t, "a canary received", func(c counts) bool { return c.received >= 1 })
	// With the relay paused nothing resolves between the last scrape and
	// the kill, so that scrape holds the first process's final counts.
	faults.Pause()
	prev := first.waitFor(t, "the first scrape after pausing the relay", func(counts) bool { return true })
	last := first.waitFor(t, "2 canaries in flight, just after a send", func(c counts) bool {
		justSent := c.sent > prev.sent
		prev = c
		return c.inFlight >= 2 && justSent
	})
	firstVerdicts, err := scrapeVerdicts(first.addr, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.waitExit(t)
	killed := time.Now()
	faults.Resume()

	// The relay publishes what the prober left in flight while it is
	// down. Its deadlines are then derived from what happened: the last
	// commit and the last published_at, plus their budgets.
	var lastPublished time.Time
	waitUntil(t, "the relay to publish every canary while the prober is down", func() (bool, error) {
		var unpublished int
		err := pool.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE published_at IS NULL), coalesce(max(published_at), 'epoch') FROM outbox").
			Scan(&unpublished, &lastPublished)
		return err == nil && unpublished == 0, err
	})
	if last.lastSent == 0 {
		t.Fatalf("the first process reported no commit time: %+v", last)
	}
	lastCommit := time.Unix(0, int64(last.lastSent*1e9))
	deadline := lastCommit.Add(e2eBudget)
	if d := lastPublished.Add(p2cBudget); d.After(deadline) {
		deadline = d
	}
	t.Logf("killed with %v in flight; last commit %s, last published_at %s: restarting after %s",
		last.inFlight, lastCommit.Format(time.RFC3339Nano), lastPublished.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
	time.Sleep(time.Until(deadline) + time.Second)

	second := startBinary(t, bin, path)
	restarted := time.Now()
	second.waitFor(t, "the second process to serve", func(counts) bool { return true })
	var rows int
	var quiet *counts
	final := second.waitFor(t, "every committed canary to be resolved", func(c counts) bool {
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&rows); err != nil {
			return false
		}
		if c.inFlight != 0 || float64(rows) != last.sent+c.sent {
			quiet = nil
			return false
		}
		stable := quiet != nil && quiet.String() == c.String()
		quiet = &c
		return stable
	})
	secondVerdicts, err := scrapeVerdicts(second.addr, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("down %s; first process %v, second %v; outbox rows %d", restarted.Sub(killed).Round(time.Millisecond), firstVerdicts, secondVerdicts, rows)

	total := last.sent + final.sent
	for _, seg := range final.budgeted {
		if got := firstVerdicts.total(seg) + secondVerdicts.total(seg); got != total {
			t.Errorf("%s: %v outcomes across both processes (first %v, second %v), want %v: one per canary", seg, got, firstVerdicts[seg], secondVerdicts[seg], total)
		}
	}
	for _, seg := range []string{"publish_to_consume", "end_to_end"} {
		if bad := firstVerdicts[seg]["bad"] + secondVerdicts[seg]["bad"]; bad != 0 {
			t.Errorf("%s: %v bad events, want 0: the canaries waited for the prober, not for Kafka", seg, bad)
		}
		if down := secondVerdicts[seg]["unjudged/"+"prober_down"]; down < last.inFlight {
			t.Errorf("%s: %v unjudged (prober_down), want at least the %v canaries in flight at the kill", seg, down, last.inFlight)
		}
	}
	if n := last.lost + final.lost + last.duplicates + final.duplicates; n != 0 {
		t.Errorf("lost + duplicates = %v, want 0", n)
	}

	// The status page of the second process says the same per canary.
	st, err := apiStatus(second.addr, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	across := 0
	for _, rep := range st.Recent {
		if !rep.Committed.Before(killed) || rep.Consumed.Before(restarted) {
			continue // resolved by the first process, or sent by the second
		}
		across++
		c2p, p2c, e2e := rep.Segments["commit_to_publish"], rep.Segments["publish_to_consume"], rep.Segments["end_to_end"]
		t.Logf("canary %s across the kill: commit_to_publish %s %s, publish_to_consume %s %s(%s), end_to_end %s %s(%s)",
			rep.ID, c2p.Duration, c2p.Outcome, p2c.Duration, p2c.Outcome, p2c.Reason, e2e.Duration, e2e.Outcome, e2e.Reason)
		for _, sr := range []prober.SegmentResult{p2c, e2e} {
			if sr.Outcome != "unjudged" || sr.Reason != "prober_down" {
				t.Errorf("canary %s: %s %+v, want unjudged (prober_down)", rep.ID, sr.Segment, sr)
			}
		}
		if want := map[bool]string{true: "good", false: "bad"}[c2p.Duration <= c2pBudget]; !c2p.Measured || c2p.Outcome != want {
			t.Errorf("canary %s: commit_to_publish %+v, want %s by its stamps", rep.ID, c2p, want)
		}
	}
	if float64(across) != last.inFlight {
		t.Errorf("%d canaries on /api/status were in flight across the kill, want %v", across, last.inFlight)
	}
	if t.Failed() {
		t.Logf("first process stderr:\n%s\nsecond process stderr:\n%s", first.stderr.String(), second.stderr.String())
	}
}
