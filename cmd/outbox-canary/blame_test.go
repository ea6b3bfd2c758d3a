package main

// The prober's own downtime is nobody's segment (issue 9), proven on real
// processes of the built binary against the project's PostgreSQL and
// Kafka: start the stack with `deploy/local/stack.sh up` (or `make test`).
// Without the stack these tests skip (and fail in CI).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/relay"
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
	// The last commit the first process reported, or a later one it had
	// written and not yet counted: last_sent moves with the batch that
	// fsyncs a canary, up to prober.DefaultCommitDelay after its Sent,
	// and kill -9 may fall in between. Every commit was before the kill.
	if reported := time.Unix(0, int64(last.lastSent*1e9)); reported.After(killed) {
		t.Fatalf("the first process reported a commit at %s, after it was killed at %s", reported, killed)
	}
	lastCommit := killed
	deadline := lastCommit.Add(e2eBudget)
	if d := lastPublished.Add(p2cBudget); d.After(deadline) {
		deadline = d
	}
	t.Logf("killed with %v in flight; last commit %s, last published_at %s: restarting after %s",
		last.inFlight, lastCommit.Format(time.RFC3339Nano), lastPublished.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
	time.Sleep(time.Until(deadline) + time.Second)

	// The second process only resolves what the first left: a schedule
	// that fires once a day sends nothing more in practice, so "every
	// canary resolved" is an event the test can wait for, not a race
	// against the next send.
	rewriteConfig(t, path, "@every 1s", "@every 24h")
	second := startBinary(t, bin, path)
	restarted := time.Now()
	second.waitFor(t, "the second process to serve", func(counts) bool { return true })
	var rows int
	final := second.waitFor(t, "every canary in flight across the kill to be final on /api/status", func(c counts) bool {
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&rows); err != nil {
			return false
		}
		return c.inFlight == 0 && float64(rows) == last.sent+c.sent && crossedTheKill(second.addr, pipeline, killed, restarted) >= int(last.inFlight)
	})
	// A verdict final on /api/status reaches /metrics with the batch that
	// writes it: group commit, up to prober.DefaultCommitDelay later.
	second.waitFor(t, "every segment of every canary to be counted on /metrics", func(c counts) bool {
		return everySegmentCounted(second.addr, pipeline, c, firstVerdicts, rows)
	})
	secondVerdicts, err := scrapeVerdicts(second.addr, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("down %s; first process %v, second %v; outbox rows %d", restarted.Sub(killed).Round(time.Millisecond), firstVerdicts, secondVerdicts, rows)

	total := last.sent + final.sent - final.inFlight
	for _, seg := range final.budgeted {
		if got := firstVerdicts.total(seg) + secondVerdicts.total(seg); got != total {
			t.Errorf("%s: %v outcomes across both processes (first %v, second %v), want %v: one per canary", seg, got, firstVerdicts[seg], secondVerdicts[seg], total)
		}
	}
	// In flight at the kill: every canary the first process committed
	// (the second sends none) and had not received. Its last scrape may
	// miss the last of them: a canary is counted sent, and in flight, with
	// the batch that fsyncs it, and the kill may come between its Sent's
	// write and that batch; the second process then judges it.
	inFlightAtKill := float64(rows) - last.received
	if inFlightAtKill < last.inFlight || inFlightAtKill > last.inFlight+1 {
		t.Errorf("%v canaries in flight at the kill by the outbox table, %v by the first process's last scrape: want as many, or one more sent since its last batch",
			inFlightAtKill, last.inFlight)
	}
	for _, seg := range []string{"publish_to_consume", "end_to_end"} {
		// The second process judges only the canaries that waited for it.
		// The first judged its own on a live stack, where a loaded machine
		// may make one late, and a paused relay may pass a deadline
		// before the kill: those verdicts are right, and not the subject.
		if bad := secondVerdicts[seg]["bad"]; bad != 0 {
			t.Errorf("%s: %v bad events in the second process, want 0: the canaries waited for the prober, not for Kafka (first process: %v)", seg, bad, firstVerdicts[seg]["bad"])
		}
		if down := secondVerdicts[seg]["unjudged/"+"prober_down"]; down < inFlightAtKill {
			t.Errorf("%s: %v unjudged (prober_down), want at least the %v canaries in flight at the kill", seg, down, inFlightAtKill)
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
			continue // resolved by the first process
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
	if float64(across) != inFlightAtKill {
		t.Errorf("%d canaries on /api/status were in flight across the kill, want %v", across, inFlightAtKill)
	}
	if t.Failed() {
		t.Logf("first process stderr:\n%s\nsecond process stderr:\n%s", first.stderr.String(), second.stderr.String())
	}
}

// rewriteConfig replaces the first from in a config file with to: a
// schedule, a budget.
func rewriteConfig(t *testing.T, path, from, to string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), from) {
		t.Fatalf("%s has no %q to replace", path, from)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), from, to, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// crossedTheKill counts the final canaries on /api/status committed before
// the kill and consumed after the restart; -1 when the page cannot be read.
func crossedTheKill(addr, pipeline string, killed, restarted time.Time) int {
	st, err := apiStatus(addr, pipeline)
	if err != nil {
		return -1
	}
	n := 0
	for _, rep := range st.Recent {
		if rep.Committed.Before(killed) && !rep.Consumed.Before(restarted) {
			n++
		}
	}
	return n
}

// markingRelayPipeline is a schema A outbox whose reference relay marks
// published_at markDelay after each batch's ack, a fresh topic, and a
// config file with the budgets' YAML; published_at is the publish stamp.
func markingRelayPipeline(t *testing.T, markDelay time.Duration, budgets string) (string, *relay.Faults, *config.Config) {
	t.Helper()
	path, faults := stackPipelineWith(t, budgets, "")
	if err := faults.SetMarkDelay(markDelay); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pipelines[0].Relay.PublishedStamp != config.PublishedFromColumn {
		t.Fatalf("publish stamp %s, want published_at", cfg.Pipelines[0].Relay.PublishedStamp)
	}
	return path, faults, cfg
}

// verdictOf is the key of verdicts a segment's outcome is counted under.
func verdictOf(s prober.SegmentResult) string {
	if s.Outcome == "unjudged" {
		return "unjudged/" + s.Reason
	}
	return s.Outcome
}

// checkVerdict is what check prints for a verdict key.
func checkVerdict(key string) string {
	switch {
	case key == "good":
		return "ok"
	case key == "bad":
		return "OVER BUDGET"
	case strings.HasPrefix(key, "unjudged/"):
		return "not judged (" + strings.TrimPrefix(key, "unjudged/") + ")"
	}
	return "unmeasured"
}

// TestOneCanarysVerdictsAreTheSameOnMetricsStatusAndCheck sends canaries
// one at a time through a relay that marks published_at late (stamp
// order), the second also delayed past its deadlines, and checks for each
// that what /metrics counted for it (one outcome per budgeted segment),
// what /api/status shows of it and what check prints of its report are the
// same verdicts; that /api/status shows no negative duration; and that
// check, run for real, recommends a better publish stamp.
func TestOneCanarysVerdictsAreTheSameOnMetricsStatusAndCheck(t *testing.T) {
	path, faults, cfg := markingRelayPipeline(t, 600*time.Millisecond,
		"{commit_to_publish: 1ms, publish_to_consume: 1500ms, end_to_end: 2s}")
	p := &cfg.Pipelines[0]
	reg := prometheus.NewRegistry()
	svc, err := prober.New(prober.Options{Config: cfg, Registerer: reg, NoSchedule: true, StateDir: "-"})
	if err != nil {
		t.Fatal(err)
	}
	model, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(statuspage.NewHandler(svc, model, reg, slog.New(slog.DiscardHandler), time.Now))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "the prober's database and Kafka", func() (bool, error) { ok, why := svc.Dependencies(); return ok, fmt.Errorf("%v", why) })
	tr, err := svc.Tracker(p.Name)
	if err != nil {
		t.Fatal(err)
	}

	for i, delay := range []time.Duration{0, 2500 * time.Millisecond} {
		if err := faults.SetPublishDelay(delay); err != nil {
			t.Fatal(err)
		}
		before, err := scrapeVerdicts(addr, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := svc.Send(context.Background(), p.Name)
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(context.Background(), 45*time.Second)
		rep, err := tr.Await(actx, c.ID)
		acancel()
		if err != nil {
			t.Fatal(err)
		}
		// The counters move once the verdicts' effects are applied, just
		// after the report is final.
		var after verdicts
		waitUntil(t, "one outcome per budgeted segment on /metrics", func() (bool, error) {
			after, err = scrapeVerdicts(addr, p.Name)
			for _, seg := range p.BudgetedSegments() {
				if err != nil || after.total(seg)-before.total(seg) != 1 {
					return false, err
				}
			}
			return true, nil
		})
		st, err := apiStatus(addr, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		var shown *prober.Report
		for i := range st.Recent {
			for _, sr := range st.Recent[i].Segments {
				if sr.Duration < 0 {
					t.Errorf("/api/status: canary %s %s has a negative duration %s", st.Recent[i].ID, sr.Segment, sr.Duration)
				}
			}
			if st.Recent[i].ID == c.ID {
				shown = &st.Recent[i]
			}
		}
		if shown == nil {
			t.Fatalf("canary %s is not on /api/status", c.ID)
		}
		var out strings.Builder
		printCheck(&out, p, checkResult{report: rep})
		t.Logf("canary %d (publish delay %s), as check prints it:\n%s", i+1, delay, out.String())
		lines := strings.Split(out.String(), "\n")
		for _, seg := range p.BudgetedSegments() {
			counted := ""
			for key, n := range after[seg] {
				if n-before[seg][key] == 1 {
					counted = key
				}
			}
			if got := verdictOf(shown.Segments[seg]); got != counted {
				t.Errorf("canary %s %s: /api/status says %s, /metrics counted %s", c.ID, seg, got, counted)
			}
			var line string
			for _, l := range lines {
				if f := strings.Fields(l); len(f) > 0 && f[0] == seg {
					line = l
				}
			}
			if !strings.HasSuffix(strings.TrimSpace(line), checkVerdict(counted)) {
				t.Errorf("canary %s %s: check prints %q, /metrics counted %s (%q)", c.ID, seg, line, counted, checkVerdict(counted))
			}
		}
		if shown.Segments["publish_to_consume"].StampOrder && !strings.Contains(out.String(), "A better publish stamp") {
			t.Errorf("canary %s in stamp order: check recommends no better publish stamp", c.ID)
		}
	}
	if err := faults.SetPublishDelay(0); err != nil {
		t.Fatal(err)
	}

	// check itself, on the same pipeline: its canary is in stamp order too.
	// What is asserted is how check reports stamp order, not how fast the
	// stack is: the budgets a canary must keep get room a loaded machine
	// keeps (end to end took 4.3 s once, against 2 s, with every package's
	// tests on the stack), and the relay marks its rows 3 s after sending
	// them, so that the canary is consumed before its published_at however
	// slow the consumer.
	// The running prober read its config already; check reads the file.
	rewriteConfig(t, path, "end_to_end: 2s", "end_to_end: 60s")
	rewriteConfig(t, path, "publish_to_consume: 1500ms", "publish_to_consume: 60s")
	if err := faults.SetMarkDelay(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = Run(context.Background(), []string{"check", "--config.file", path, "--timeout", "30s"}, &stdout, &stderr)
	t.Logf("outbox-canary check (exit %d):\n%s", exitCode(err), stdout.String())
	if code := exitCode(err); code != 0 {
		t.Errorf("check exit %d (%v), want 0: nothing is over budget\n%s", code, err, stderr.String())
	}
	for _, want := range []string{"negative (stamp order)", "not judged (stamp_order)", "A better publish stamp", "relay.published_stamp: header", "PASS: no segment over budget (1 not judged)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check output lacks %q", want)
		}
	}
	// lint says it before any canary is sent.
	stdout.Reset()
	err = Run(context.Background(), []string{"lint", "--config.file", path}, &stdout, &stderr)
	if code := exitCode(err); code != 0 || !strings.Contains(stdout.String(), "WARN  publish stamp") {
		t.Errorf("lint (exit %d) does not warn about the publish stamp:\n%s", code, stdout.String())
	}
}

// everySegmentCounted reports whether /metrics holds an outcome for every
// budgeted segment of rows canaries, over both processes.
func everySegmentCounted(addr, pipeline string, c counts, first verdicts, rows int) bool {
	second, err := scrapeVerdicts(addr, pipeline)
	if err != nil || len(c.budgeted) == 0 {
		return false
	}
	for _, seg := range c.budgeted {
		if first.total(seg)+second.total(seg) < float64(rows) {
			return false
		}
	}
	return true
}
