package main

// Issue 3: "a restart of the prober (SIGTERM or kill -9) loses no canary and
// double-counts none", proven on real processes of the built binary against
// the project's PostgreSQL and Kafka: start the stack with
// `deploy/local/stack.sh up` (or `make test`). Without the stack these tests
// skip (and fail in CI).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

// TestRestartLosesNoCanaryAndCountsNoneTwice kills a running prober while
// canaries are in flight (the relay is paused) and after it has resolved
// some (so a restart that re-read the topic from the start would count them
// again), starts a second process on the same config and state directory,
// resumes the relay, and checks that across both processes every canary
// committed to the outbox table was received once and judged once per
// budgeted segment.
//
// The first process's counters die with it, so its last scrape is taken
// just after it reported a new canary sent, and it is stopped at once. The
// outbox table is the ground truth of how many canaries were committed: a
// canary committed by the first process but not persisted in its state, or
// counted sent by neither process, or by both, leaves the table out of
// step with the sum of the processes' canaries_sent and fails the test, as
// does a loss (never back to zero in flight) or a double count (more
// events than canaries).
//
// canaries_sent moves with the batch that fsyncs a canary, up to
// prober.DefaultCommitDelay after its Sent wrote it. Killed with -9, the
// first process never counts a canary whose batch it did not write; the
// second judges it again and counts it. On SIGTERM the first process
// writes that batch as it stops and counts the canary then, after its last
// scrape: so it sends every 3s, and the scrape that shows a canary counted
// (its batch, 2s after its send) mostly comes with nothing else waiting
// and the next send a second away. On a loaded machine a send can land in
// that second, so after SIGTERM the first process may have counted one
// canary its last scrape did not show, and the outbox table says which.
// With the relay paused and deadlines 20s out nothing else changes its
// counters in between.
func TestRestartLosesNoCanaryAndCountsNoneTwice(t *testing.T) {
	bin := stacktest.BuildCommand(t, "outbox-canary")
	cases := []struct {
		name string
		stop func(p *canaryProcess) error
		// graceful: the first process must exit 0 on its own.
		graceful bool
		// schedule of the first process (see the test's comment).
		schedule string
	}{
		{"kill -9 with canaries in flight loses none and counts none twice.",
			func(p *canaryProcess) error { return p.cmd.Process.Kill() }, false, "@every 1s"},
		{"SIGTERM with canaries in flight loses none and counts none twice.",
			func(p *canaryProcess) error { return p.cmd.Process.Signal(syscall.SIGTERM) }, true, "@every 3s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, faults := stackPipeline(t, "20s")
			pool, err := pgxpool.New(context.Background(), os.Getenv("CHECK_TEST_DSN"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)

			if tc.schedule != "@every 1s" {
				rewriteConfig(t, path, "@every 1s", tc.schedule)
			}
			first := startBinary(t, bin, path)
			// Some canaries resolved before the restart: their events must
			// not be counted again by the second process.
			first.waitFor(t, "a canary received", func(c counts) bool { return c.received >= 1 })
			faults.Pause()
			var last counts
			prev := first.waitFor(t, "the first scrape after pausing the relay", func(counts) bool { return true })
			// Kill just after a send was reported (see the test's comment).
			last = first.waitFor(t, "2 canaries in flight, just after a send", func(c counts) bool {
				justSent := c.sent > prev.sent
				prev = c
				return c.sent >= 2 && c.inFlight >= 2 && justSent
			})
			if err := tc.stop(first); err != nil {
				t.Fatalf("stop the first process: %v", err)
			}
			waitErr := first.waitExit(t)
			if tc.graceful && waitErr != nil {
				t.Errorf("the first process exited with %v after SIGTERM, want 0; stderr:\n%s", waitErr, first.stderr.String())
			}
			t.Logf("first process at its end: %+v", last)

			// Gaps between the second process's canaries longer than the
			// state's group commit: an arrival's effects wait up to
			// prober.DefaultCommitDelay (plus a sweep) for the batch that
			// writes them, and a Sent writes the batch once due, so at one
			// canary a second the previous one is still in flight when
			// the next is sent, and nothing in flight never comes.
			rewriteConfig(t, path, tc.schedule, "@every 5s")
			second := startBinary(t, bin, path)
			second.waitFor(t, "the second process to serve", func(counts) bool { return true })
			faults.Resume()

			// Quiescent: the second process has sent canaries of its own
			// (continuing the first's sequence), nothing is in flight,
			// every row in the outbox table (counted before the scrape: a
			// canary committed after it would already be in c.sent) is a
			// canary some process reported sent, and so on two scrapes in
			// a row with the same counts, as one scrape is not atomic
			// across metric families.
			// The first process's sent, as the table says: its last scrape's,
			// or (SIGTERM) one more, counted as it stopped.
			var rows int
			var firstSent float64
			var quiet *counts
			final := second.waitFor(t, "every committed canary to be resolved", func(c counts) bool {
				if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&rows); err != nil {
					t.Logf("count outbox rows: %v", err)
					return false
				}
				firstSent = float64(rows) - c.sent
				unscraped := tc.graceful && firstSent == last.sent+1
				if c.sent < 1 || c.inFlight != 0 || (firstSent != last.sent && !unscraped) {
					quiet = nil
					return false
				}
				stable := quiet != nil && quiet.String() == c.String()
				quiet = &c
				return stable
			})
			t.Logf("second process: %+v; outbox rows %d", final, rows)

			if firstSent != last.sent {
				t.Logf("the first process counted %v canaries sent after its last scrape, as it stopped", firstSent-last.sent)
			}
			total := firstSent + final.sent
			if last.inFlight < 2 || final.received < last.inFlight {
				t.Errorf("the second process received %v canaries, fewer than the %v the first left in flight", final.received, last.inFlight)
			}
			if got := last.received + final.received; got != total {
				t.Errorf("canaries received across both processes = %v, want %v (one per canary sent)", got, total)
			}
			if len(final.budgeted) == 0 {
				t.Fatal("no budgeted segment on /metrics: nothing to check the SLI events of")
			}
			for _, seg := range final.budgeted {
				if got := last.events[seg] + final.events[seg]; got != total {
					t.Errorf("segment %s: SLI events across both processes = %v (first %v, second %v), want %v (one per canary sent)",
						seg, got, last.events[seg], final.events[seg], total)
				}
			}
			if last.lost+final.lost != 0 {
				t.Errorf("canaries lost = %v + %v, want 0", last.lost, final.lost)
			}
			if last.duplicates+final.duplicates != 0 {
				t.Errorf("duplicates = %v + %v, want 0: the relay sends each row once, so a duplicate is a replay after the restart", last.duplicates, final.duplicates)
			}
			for _, reason := range prober.SkipReasons() {
				if n := last.skipped[reason] + final.skipped[reason]; n != 0 {
					t.Errorf("messages skipped with reason %s = %v, want 0", reason, n)
				}
			}
			if t.Failed() {
				t.Logf("first process stderr:\n%s\nsecond process stderr:\n%s", first.stderr.String(), second.stderr.String())
			}
		})
	}
}

// canaryProcess is one `outbox-canary run` process.
type canaryProcess struct {
	cmd    *exec.Cmd
	addr   string
	stderr *stacktest.SyncBuffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startBinary starts `outbox-canary run` on a free loopback port; the
// process is killed when the test ends if it is still running.
func startBinary(t *testing.T, bin, configPath string) *canaryProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &canaryProcess{addr: ln.Addr().String(), stderr: &stacktest.SyncBuffer{}, exited: make(chan struct{})}
	ln.Close()
	p.cmd = exec.Command(bin, "run", "--config.file", configPath, "--web.listen-address", p.addr, "--log.level", "warn")
	p.cmd.Stdout, p.cmd.Stderr = &stacktest.SyncBuffer{}, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitExit waits (30s at most) for the process to exit and returns Wait's
// error.
func (p *canaryProcess) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(30 * time.Second):
		t.Fatalf("the process did not exit within 30s; stderr:\n%s", p.stderr.String())
		return nil
	}
}

// waitFor scrapes /metrics until cond holds of the counts and returns
// them; it fails the test after 30s, or if the process exits.
func (p *canaryProcess) waitFor(t *testing.T, what string, cond func(counts) bool) counts {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var lastErr error
	var last counts
	for {
		select {
		case <-p.exited:
			t.Fatalf("waiting for %s: the process exited: %v; stderr:\n%s", what, p.err, p.stderr.String())
		default:
		}
		c, err := scrapeCounts(p.addr, "orders")
		if err == nil && cond(c) {
			return c
		}
		if err == nil {
			last = c
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within 30s; last counts %+v (err %v); stderr:\n%s", what, last, lastErr, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts is what the restart test reads of one pipeline on /metrics.
type counts struct {
	sent, received, lost, duplicates, inFlight float64
	lastSent                                   float64            // unix seconds of the last commit
	skipped                                    map[string]float64 // by reason
	events                                     map[string]float64 // SLI events (good and bad) by segment
	budgeted                                   []string           // segments with a budget gauge
}

// scrapeCounts reads /metrics and sums the series of pipeline.
func scrapeCounts(addr, pipeline string) (counts, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return counts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counts{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return counts{}, fmt.Errorf("parse /metrics: %w", err)
	}
	c := counts{skipped: map[string]float64{}, events: map[string]float64{}}
	each := func(name string, f func(labels map[string]string, v float64)) {
		fam, ok := fams[name]
		if !ok {
			return
		}
		for _, m := range fam.GetMetric() {
			labels := labelMap(m)
			if labels[slo.LabelPipeline] != pipeline {
				continue
			}
			f(labels, metricValue(m))
		}
	}
	sum := func(name string) (total float64) {
		each(name, func(_ map[string]string, v float64) { total += v })
		return total
	}
	c.sent = sum(slo.MetricCanariesSent)
	c.received = sum(slo.MetricCanariesReceived)
	c.lost = sum(slo.MetricCanariesLost)
	c.duplicates = sum(slo.MetricCanariesDuplicate)
	c.inFlight = sum(slo.MetricCanariesInFlight)
	c.lastSent = sum(slo.MetricLastSentTimestamp)
	each(slo.MetricMessagesSkipped, func(l map[string]string, v float64) { c.skipped[l[slo.LabelReason]] += v })
	each(slo.MetricSLIEvents, func(l map[string]string, v float64) { c.events[l[slo.LabelSegment]] += v })
	each(slo.MetricSegmentBudget, func(l map[string]string, _ float64) { c.budgeted = append(c.budgeted, l[slo.LabelSegment]) })
	if _, ok := fams[slo.MetricCanariesSent]; !ok {
		return counts{}, fmt.Errorf("/metrics has no %s", slo.MetricCanariesSent)
	}
	return c, nil
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// String keeps test logs short: the budgeted segments and maps inline.
func (c counts) String() string {
	return fmt.Sprintf("sent=%v received=%v in_flight=%v lost=%v duplicates=%v events=%v skipped=%v budgeted=%s",
		c.sent, c.received, c.inFlight, c.lost, c.duplicates, c.events, c.skipped, strings.Join(c.budgeted, ","))
}
