package e2e

// TestBenchRuleEvaluation measures what the generated rules cost a real
// Prometheus at 300 pipelines (issue 27, deliverable 2: rule-group
// evaluation under 1 s per 15 s cycle). It is a benchmark, not a test:
// it asserts nothing about the figures, and runs only when asked:
//
//	OUTBOX_CANARY_BENCH_RULES=1 go test -tags nethttpomithttp2,nopgxregisterdefaulttypes \
//	    -count=1 -v -timeout 0 -run '^TestBenchRuleEvaluation$' ./e2e/
//
// (make bench-rules). The pipelines are the example configuration's four
// repeated (orders-000, payments-000, ..., invoices-074), the rules are
// alerts.Generate's for them, and the series are the prober's and the
// watchers' own metrics (prober.NewMetrics, watch.NewMetrics) for those
// pipelines, served by prober.MetricsHandler and advanced every few
// seconds as canaries would, so every rate is non-zero. Prometheus
// (Debian's, from PATH) scrapes them and evaluates the rules every 15 s;
// after a warm-up, its own /metrics is read at every cycle of the
// measured window. BENCH_RULES_HISTORY backfills that much history of
// the series the long windows read (promtool tsdb create-blocks-from
// openmetrics) so that 1d, 3d and 30d windows scan data. Writes its
// figures to docs/benchmarks.json and re-renders docs/benchmarks.md.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/watch"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

const benchRulesEnv = "OUTBOX_CANARY_BENCH_RULES"

// ruleEvalInterval is the production scrape and evaluation interval
// (docs/detection.md's settings).
const ruleEvalInterval = 15 * time.Second

// ruleEval is the last TestBenchRuleEvaluation, in docs/benchmarks.json.
type ruleEval struct {
	Date     time.Time `json:"date"`
	Revision string    `json:"revision"`
	Machine  string    `json:"machine"`
	Command  string    `json:"command"`
	// Prometheus is its --version line.
	Prometheus string `json:"prometheus"`

	Pipelines   int     `json:"pipelines"`
	Shape       string  `json:"shape"`
	Groups      int     `json:"groups"`
	Rules       int     `json:"rules"`
	RuleBytes   int     `json:"rule_file_bytes"`
	HeadSeries  float64 `json:"head_series"`
	ScrapeBytes int     `json:"scrape_bytes"`

	// History is how much data the window functions could read at the
	// measurement: the backfilled span (History, at HistoryStep) plus
	// the live run's minutes.
	History        string  `json:"history_backfilled,omitempty"`
	HistoryStep    string  `json:"history_step,omitempty"`
	HistorySeries  int     `json:"history_series,omitempty"`
	HistorySamples int     `json:"history_samples,omitempty"`
	LiveMinutes    float64 `json:"live_minutes"`
	WarmupCycles   int     `json:"warmup_cycles"`

	// Per measured cycle (Prometheus's /metrics read every 15 s): the sum
	// over groups of prometheus_rule_group_last_duration_seconds, and the
	// largest group's.
	Cycles          int       `json:"cycles"`
	SumSeconds      []float64 `json:"sum_seconds"`
	MaxGroupSeconds []float64 `json:"max_group_seconds"`
	MaxGroup        string    `json:"max_group"`
	// Over the window.
	MissedIterations float64 `json:"iterations_missed"`
	Iterations       float64 `json:"iterations"`
	EvalFailures     float64 `json:"evaluation_failures"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	WindowSeconds    float64 `json:"window_seconds"`
	RSSMaxBytes      float64 `json:"rss_max_bytes"`
	// Compactions of the TSDB during the window (in its CPU).
	Compactions float64  `json:"compactions"`
	LoadBefore  float64  `json:"load_before"`
	LoadMax     float64  `json:"load_max"`
	Notes       []string `json:"notes,omitempty"`
	// RuleRevision is the revision whose `outbox-canary rules` wrote the
	// rules measured (empty in runs before the baseline was measured
	// beside: then Revision's).
	RuleRevision string `json:"rule_revision,omitempty"`
	// Baseline is the same run's measurement of a baseline revision's
	// rules (BENCH_RULES_BEFORE) on the same series, by a Prometheus of
	// its own, in the same window.
	Baseline *ruleEval `json:"baseline,omitempty"`
	// ByRule is the last evaluation time of every rule (/api/v1/rules
	// at the window's end), summed by the name it records or alerts,
	// largest first.
	ByRule []ruleCost `json:"by_rule,omitempty"`
}

// shareRun copies what the run's rule sets have in common.
func (r *ruleEval) shareRun(run *ruleEval) {
	r.Date, r.Revision, r.Machine, r.Command, r.Prometheus = run.Date, run.Revision, run.Machine, run.Command, run.Prometheus
	r.Pipelines, r.Shape, r.ScrapeBytes, r.WarmupCycles, r.LoadBefore = run.Pipelines, run.Shape, run.ScrapeBytes, run.WarmupCycles, run.LoadBefore
	r.History, r.HistoryStep, r.HistorySeries, r.HistorySamples, r.LiveMinutes = run.History, run.HistoryStep, run.HistorySeries, run.HistorySamples, run.LiveMinutes
}

type ruleCost struct {
	Name    string  `json:"name"`
	Rules   int     `json:"rules"`
	Seconds float64 `json:"seconds"`
}

func TestBenchRuleEvaluation(t *testing.T) {
	if os.Getenv(benchRulesEnv) == "" {
		t.Skipf("a benchmark of about 10 minutes: set %s=1 to run it (make bench-rules)", benchRulesEnv)
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus (Debian's package) not on PATH: %v", err)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not on PATH: %v", err)
	}
	n := envInt(t, "BENCH_RULES_PIPELINES", 300)
	warmup := envInt(t, "BENCH_RULES_WARMUP_CYCLES", 6)
	cycles := envInt(t, "BENCH_RULES_CYCLES", 12)
	history := envDuration(t, "BENCH_RULES_HISTORY", 0)
	step := envDuration(t, "BENCH_RULES_HISTORY_STEP", ruleEvalInterval)

	res := &ruleEval{Date: time.Now().UTC(), Machine: machine(), Pipelines: n, WarmupCycles: warmup, LoadBefore: loadAvg(),
		Command: envString("OUTBOX_CANARY_BENCH_RULES_COMMAND", fmt.Sprintf("%s=1 go test -count=1 -v -timeout 0 -run '^TestBenchRuleEvaluation$' ./e2e/", benchRulesEnv))}
	if out, err := exec.Command(promBin, "--version").Output(); err == nil {
		res.Prometheus = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	res.Shape = "examples/outbox-canary.yml's four pipelines (orders: polling, 4 budgets and a read stamp; payments: polling, 3 budgets; shipments: Debezium on PostgreSQL with a slot and a connector; invoices: Debezium on MariaDB) repeated"

	// The rules: what each revision's `outbox-canary rules` writes for
	// the same configuration file. The baseline first, its measurement
	// a copy of res filled in beside it.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "outbox-canary.yml")
	cfgData := repeatedExampleConfig(t, n)
	if err := os.WriteFile(cfgPath, cfgData, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgData)
	if err != nil {
		t.Fatal(err)
	}
	model, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	before := &ruleEval{}
	res.Baseline = before
	sets := []*ruleEval{before, res}
	bins := []rulesBinary{
		buildRulesBinary(t, dir, envString("BENCH_RULES_BEFORE", benchRulesBefore)),
		buildRulesBinary(t, dir, ""),
	}
	res.Revision = bins[1].Revision
	ruleFiles := make([]*alerts.RuleFile, len(sets))
	rulePaths := make([]string, len(sets))
	for i, r := range sets {
		r.RuleRevision = bins[i].Revision
		run, err := bins[i].rules(context.Background(), cfgPath, "rules")
		if err != nil {
			t.Fatal(err)
		}
		if ruleFiles[i], err = parseRuleFile(run.Output); err != nil {
			t.Fatalf("%s's rules: %v", bins[i].Revision, err)
		}
		r.Groups, r.Rules, r.RuleBytes = len(ruleFiles[i].Groups), countRules(ruleFiles[i]), len(run.Output)
		rulePaths[i] = filepath.Join(dir, fmt.Sprintf("rules-%d.yml", i))
		if err := os.WriteFile(rulePaths[i], run.Output, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d pipelines, the rules of %s: %d groups, %d rules, %d bytes", n, r.RuleRevision, r.Groups, r.Rules, r.RuleBytes)
	}

	// The prober's series, served as the service serves them, to both.
	series := newRuleBenchSeries(t, cfg.Pipelines, model)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: prober.MetricsHandler(series.reg), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	target := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go series.advance(ctx, 5*time.Second)
	if resp, err := http.Get("http://" + target + "/metrics"); err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.ScrapeBytes = len(data)
	}

	// The same history for both, each Prometheus in a data directory of
	// its own.
	historyDir := filepath.Join(dir, "history")
	if history > 0 {
		start := time.Now()
		res.History, res.HistoryStep = history.String(), step.String()
		res.HistorySeries, res.HistorySamples = backfillHistory(t, promtool, dir, historyDir, model, ruleFiles, target, time.Now().Add(-history), time.Now().Add(-time.Minute), step)
		t.Logf("backfilled %s at %s: %d series, %d samples, in %s", history, step, res.HistorySeries, res.HistorySamples, time.Since(start).Round(time.Second))
	}
	proms := make([]*server, len(sets))
	urls := make([]string, len(sets))
	for i := range sets {
		dataDir := filepath.Join(dir, fmt.Sprintf("data-%d", i))
		if history > 0 {
			if out, err := exec.Command("cp", "-a", historyDir, dataDir).CombinedOutput(); err != nil {
				t.Fatalf("copying the backfilled blocks: %v\n%s", err, out)
			}
		}
		promDir := filepath.Join(dir, fmt.Sprintf("prometheus-%d", i))
		if err := os.MkdirAll(promDir, 0o755); err != nil {
			t.Fatal(err)
		}
		proms[i] = startRuleBenchPrometheus(t, promBin, promDir, dataDir, rulePaths[i], target)
		urls[i] = "http://" + proms[i].addr + "/metrics"
	}
	for _, p := range proms {
		p.waitReady(t)
	}
	live := time.Now()

	// Warm-up: every group of both evaluated warmup times, and no
	// compaction of the backfilled blocks in either for a minute and a
	// half (the TSDB compacts on a one-minute tick): the window measures
	// the rules, not the start.
	compactions := make([]float64, len(sets))
	settled := time.Now()
	for {
		ready := true
		var states []promSelf
		for i, r := range sets {
			s, err := readPromSelf(urls[i])
			if err == nil && s.compactions != compactions[i] {
				compactions[i], settled = s.compactions, time.Now()
			}
			ready = ready && err == nil && s.groups == r.Groups && s.minIterations >= float64(warmup)
			states = append(states, s)
		}
		if ready && time.Since(settled) > 90*time.Second {
			break
		}
		if time.Since(live) > time.Duration(warmup+40)*ruleEvalInterval {
			t.Fatalf("the Prometheuses did not evaluate every group %d times within %s: %+v", warmup, time.Since(live), states)
		}
		time.Sleep(time.Second)
	}
	first := make([]promSelf, len(sets))
	for i := range sets {
		if first[i], err = readPromSelf(urls[i]); err != nil {
			t.Fatal(err)
		}
	}
	last := slices.Clone(first)
	rssMax := make([]float64, len(sets))
	for c := 0; c < cycles; c++ {
		time.Sleep(ruleEvalInterval)
		load := loadAvg()
		for i, r := range sets {
			s, err := readPromSelf(urls[i])
			if err != nil {
				t.Fatal(err)
			}
			r.SumSeconds = append(r.SumSeconds, s.sumDuration)
			r.MaxGroupSeconds = append(r.MaxGroupSeconds, s.maxDuration)
			if s.maxDuration >= slices.Max(r.MaxGroupSeconds) {
				r.MaxGroup = s.maxGroup
			}
			rssMax[i] = max(rssMax[i], s.rss)
			r.LoadMax = max(r.LoadMax, load)
			t.Logf("cycle %d, rules of %s: groups %d, rules %.0f, sum of last durations %.3f s, largest group %.3f s (%s), missed %.0f, CPU %.1f s, RSS %.1f MiB",
				c+1, r.RuleRevision, s.groups, s.rules, s.sumDuration, s.maxDuration, s.maxGroup, s.missed, s.cpu-first[i].cpu, s.rss/(1<<20))
			last[i] = s
		}
	}
	for i, r := range sets {
		r.Cycles = cycles
		r.HeadSeries = last[i].headSeries
		r.MissedIterations = last[i].missed - first[i].missed
		r.Iterations = last[i].iterations - first[i].iterations
		r.EvalFailures = last[i].failures
		r.CPUSeconds = last[i].cpu - first[i].cpu
		r.WindowSeconds = last[i].at.Sub(first[i].at).Seconds()
		r.RSSMaxBytes = rssMax[i]
		r.Compactions = last[i].compactions - first[i].compactions
		if r.ByRule, err = ruleCosts(context.Background(), proms[i].addr); err != nil {
			t.Errorf("rule costs of %s: %v", r.RuleRevision, err)
		}
		if float64(r.Rules) != last[i].rules {
			t.Errorf("Prometheus loaded %.0f rules of %s, the file holds %d", last[i].rules, r.RuleRevision, r.Rules)
		}
		if last[i].failures > 0 {
			t.Errorf("%.0f evaluations of the rules of %s failed: %s", last[i].failures, r.RuleRevision, proms[i].logPath)
		}
		t.Logf("rules of %s, window %.0f s: CPU %.2f s (%.1f %% of a core), missed iterations %.0f of %.0f, RSS max %.1f MiB, head series %.0f",
			r.RuleRevision, r.WindowSeconds, r.CPUSeconds, 100*r.CPUSeconds/r.WindowSeconds, r.MissedIterations, r.Iterations, rssMax[i]/(1<<20), r.HeadSeries)
	}
	res.LiveMinutes = roundTenth(time.Since(live).Minutes())
	before.shareRun(res)

	d, err := readBenchDoc(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	d.mergeRuleEval(res)
	if err := writeBenchDoc(benchJSON, d); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(benchMD, renderBench(d), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ruleBenchSeries are the prober's and the watchers' metrics of the
// pipelines, advanced as canaries and samples would.
type ruleBenchSeries struct {
	reg       *compactvec.Registry
	pipelines []config.Pipeline
	m         *prober.Metrics
	w         *watch.Metrics
	tick      int
}

func newRuleBenchSeries(t *testing.T, pipelines []config.Pipeline, model *slo.Model) *ruleBenchSeries {
	t.Helper()
	s := &ruleBenchSeries{reg: compactvec.NewRegistry(), pipelines: pipelines}
	var err error
	if s.m, err = prober.NewMetrics(s.reg, pipelines); err != nil {
		t.Fatal(err)
	}
	s.m.ExportObjectives(model, pipelines)
	if s.w, err = watch.NewMetrics(s.reg); err != nil {
		t.Fatal(err)
	}
	s.step(time.Now())
	return s
}

// watchersOf are the watchers a pipeline of the example runs.
func watchersOf(p *config.Pipeline) []string {
	ws := []string{slo.WatcherBacklog, slo.WatcherTransactions}
	if p.Relay.Kind == config.RelayCDC {
		if p.Database.Kind == config.KindMySQL {
			ws = append(ws, slo.WatcherBinlog)
			if p.Watch.Connector != "" {
				ws = append(ws, slo.WatcherBinlogConnector)
			}
		} else {
			ws = append(ws, slo.WatcherReplicationSlots)
		}
	}
	if p.Watch.Connector != "" {
		ws = append(ws, slo.WatcherConnector)
	}
	if len(p.Watch.ConsumerGroups) > 0 {
		ws = append(ws, slo.WatcherConsumerLag)
	}
	return ws
}

// step is one canary per pipeline arriving, good in every budgeted
// segment but one in a thousand, and one sample of every watcher.
func (s *ruleBenchSeries) step(now time.Time) {
	s.tick++
	unix := float64(now.UnixNano()) / 1e9
	for i := range s.pipelines {
		p := &s.pipelines[i]
		n := p.Name
		s.m.CanariesSent.WithLabelValues(n).Inc()
		s.m.CanariesReceived.WithLabelValues(n).Inc()
		s.m.LastSent.WithLabelValues(n).Set(unix)
		s.m.LastReceived.WithLabelValues(n).Set(unix)
		s.m.LastSuccess.WithLabelValues(n).Set(unix)
		for _, dep := range []string{slo.DependencyDatabase, slo.DependencyKafka} {
			s.m.DependencyUp.WithLabelValues(n, dep).Set(1)
		}
		s.m.DBClockOffset.WithLabelValues(n).Set(0.0004)
		s.m.DBClockOffsetError.WithLabelValues(n).Set(0.0002)
		for j, seg := range p.BudgetedSegments() {
			outcome := slo.OutcomeGood
			if (s.tick*7+i*13+j)%1000 == 0 {
				outcome = slo.OutcomeBad
			}
			s.m.SLIEvents.WithLabelValues(n, seg, outcome).Inc()
		}
		for j, seg := range append(p.Segments(), config.SegmentInsertToCommit) {
			s.m.ObserveLatency(n, seg, time.Duration(1+(s.tick+i+j)%200)*time.Millisecond)
		}
		for _, w := range watchersOf(p) {
			s.w.Up.WithLabelValues(n, w).Set(1)
			s.w.LastSuccess.WithLabelValues(n, w).Set(unix)
		}
		s.w.BacklogRows.WithLabelValues(n).Set(float64(s.tick % 3))
		s.w.OldestUnpublishedAge.WithLabelValues(n).Set(0.05)
		s.w.OldestTransactionAge.WithLabelValues(n).Set(0.2)
		s.w.LongTransactions.WithLabelValues(n).Set(0)
		if p.Relay.Kind != config.RelayCDC {
			continue
		}
		if p.Database.Kind == config.KindMySQL {
			written := float64(s.tick) * 4096
			s.w.BinlogWritten.WithLabelValues(n).Set(written)
			s.w.BinlogRetainedBytes.WithLabelValues(n).Set(64 << 20)
			s.w.BinlogRetainedFiles.WithLabelValues(n).Set(3)
			s.w.BinlogExpiry.WithLabelValues(n).Set(7 * 86400)
			if c := p.Watch.Connector; c != "" {
				s.w.BinlogConnectorPosition.WithLabelValues(n, c).Set(written - 512)
				s.w.BinlogConnectorBehindBytes.WithLabelValues(n, c).Set(512)
				s.w.BinlogConnectorBehindFiles.WithLabelValues(n, c).Set(0)
				s.w.BinlogConnectorFilePurged.WithLabelValues(n, c).Set(0)
			}
		} else if slot := p.Watch.Slot; slot != "" {
			s.w.SlotRetainedWAL.WithLabelValues(n, slot).Set(1 << 20)
			s.w.SlotUnconfirmedWAL.WithLabelValues(n, slot).Set(4096)
			s.w.SlotActive.WithLabelValues(n, slot).Set(1)
			for _, st := range []string{"reserved", "extended", "unreserved", "lost"} {
				v := 0.0
				if st == "reserved" {
					v = 1
				}
				s.w.SlotWALStatus.WithLabelValues(n, slot, st).Set(v)
			}
		}
		if c := p.Watch.Connector; c != "" {
			s.w.ConnectorRunning.WithLabelValues(n, c).Set(1)
			s.w.ConnectorTaskFailures.WithLabelValues(n, c).Set(0)
			s.w.ConnectorRestarts.WithLabelValues(n, c)
		}
	}
}

func (s *ruleBenchSeries) advance(ctx context.Context, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			s.step(now)
		}
	}
}

// startRuleBenchPrometheus starts Prometheus on a free loopback port with
// dataDir (backfilled blocks in it, if any), scraping target under the
// prober's job and evaluating rulePath every 15 s; no Alertmanager (the
// alerts are evaluated, not sent).
func startRuleBenchPrometheus(t *testing.T, bin, dir, dataDir, rulePath, target string) *server {
	t.Helper()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: 10s
  evaluation_interval: %[1]s
rule_files: [%[2]q]
scrape_configs:
  - job_name: %[3]q
    static_configs:
      - targets: [%[4]q]
`, ruleEvalInterval, rulePath, config.DefaultProberJob, target)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	return startServer(t, "prometheus", bin, addr,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+dataDir,
		"--storage.tsdb.retention.time=60d",
		"--web.listen-address="+addr,
		"--log.level=info")
}

// promSelf is what Prometheus's own /metrics says of its rules and
// process at one moment.
type promSelf struct {
	at                        time.Time
	groups                    int
	rules                     float64
	sumDuration, maxDuration  float64
	maxGroup                  string
	minIterations, iterations float64
	missed, failures          float64
	cpu, rss, headSeries      float64
	compactions               float64
}

func readPromSelf(url string) (promSelf, error) {
	s := promSelf{at: time.Now()}
	resp, err := http.Get(url)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bufio.NewReader(resp.Body))
	if err != nil {
		return s, fmt.Errorf("%s: %w", url, err)
	}
	value := func(name string) float64 {
		var v float64
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				switch {
				case m.GetGauge() != nil:
					v += m.GetGauge().GetValue()
				case m.GetCounter() != nil:
					v += m.GetCounter().GetValue()
				case m.GetUntyped() != nil:
					v += m.GetUntyped().GetValue()
				}
			}
		}
		return v
	}
	if mf := mfs["prometheus_rule_group_last_duration_seconds"]; mf != nil {
		for _, m := range mf.GetMetric() {
			s.groups++
			v := m.GetGauge().GetValue()
			s.sumDuration += v
			if v > s.maxDuration {
				s.maxDuration = v
				for _, l := range m.GetLabel() {
					if l.GetName() == "rule_group" {
						_, s.maxGroup, _ = strings.Cut(l.GetValue(), ";")
					}
				}
			}
		}
	}
	s.minIterations = -1
	if mf := mfs["prometheus_rule_group_iterations_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			s.iterations += v
			if s.minIterations < 0 || v < s.minIterations {
				s.minIterations = v
			}
		}
	}
	s.rules = value("prometheus_rule_group_rules")
	s.missed = value("prometheus_rule_group_iterations_missed_total")
	s.failures = value("prometheus_rule_evaluation_failures_total")
	s.cpu = value("process_cpu_seconds_total")
	s.rss = value("process_resident_memory_bytes")
	s.headSeries = value("prometheus_tsdb_head_series")
	s.compactions = value("prometheus_tsdb_compactions_total")
	return s, nil
}

// backfillHistory writes, from from to to at step, the series the rules'
// windows read: the SLI event counters as Prometheus would have scraped
// them from target (a canary every 10 s, all good), and the two
// recordings the 30d rules read (slo:sli_error:ratio_rate5m, 0, and
// slo:sli_data:timestamp) for every SLO of the model, with the labels
// every one of the rule files gives them; then turns them into blocks in
// dataDir with promtool. It returns the series and samples written.
func backfillHistory(t *testing.T, promtool, dir, dataDir string, model *slo.Model, ruleFiles []*alerts.RuleFile, target string, from, to time.Time, step time.Duration) (int, int) {
	t.Helper()
	path := filepath.Join(dir, "history.om")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	type hseries struct {
		name   string
		labels string
		value  func(sec float64) float64
	}
	var all []hseries
	start := float64(from.Unix())
	for _, p := range model.Pipelines {
		for _, s := range p.SLOs {
			for _, record := range []string{"slo:sli_error:ratio_rate5m", "slo:sli_data:timestamp"} {
				ls := recordedLabels(t, ruleFiles, s, record)
				if record == "slo:sli_data:timestamp" {
					all = append(all, hseries{record, ls, func(sec float64) float64 { return sec }})
					continue
				}
				all = append(all, hseries{record, ls, func(float64) float64 { return 0 }})
			}
			// The counters this SLO's ratios read.
			lab := map[string]string{"job": config.DefaultProberJob, "instance": target,
				slo.LabelPipeline: s.Pipeline, slo.LabelSegment: s.Segment}
			good, bad := maps.Clone(lab), maps.Clone(lab)
			good[slo.LabelOutcome], bad[slo.LabelOutcome] = slo.OutcomeGood, slo.OutcomeBad
			all = append(all,
				hseries{slo.MetricSLIEvents, labelString(good), func(sec float64) float64 { return float64(int((sec - start) / 10)) }},
				hseries{slo.MetricSLIEvents, labelString(bad), func(float64) float64 { return 0 }})
		}
	}
	// Families must not interleave: by name, then series, each in time order.
	sort.SliceStable(all, func(i, j int) bool { return all[i].name < all[j].name })
	samples := 0
	for _, s := range all {
		for ts := from.Truncate(step); !ts.After(to); ts = ts.Add(step) {
			sec := float64(ts.Unix())
			fmt.Fprintf(w, "%s%s %s %d\n", s.name, s.labels, strconv.FormatFloat(s.value(sec), 'f', -1, 64), ts.Unix())
			samples++
		}
	}
	fmt.Fprintln(w, "# EOF")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", path, dataDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	_ = os.Remove(path)
	return len(all), samples
}

// recordedLabels are the labels of the series a rule file records as
// record for SLO s: a rule per SLO names them all (the baseline's shape);
// a rule written once for all SLOs (of a window) takes the SLO's own from
// its objective series
// (sloth_id, sloth_service, sloth_slo, pipeline, segment, owner) and adds
// its static labels. Every rule file must agree, since the history is
// shared.
func recordedLabels(t *testing.T, ruleFiles []*alerts.RuleFile, s slo.SLO, record string) string {
	t.Helper()
	objective, _ := s.ObjectiveSeries()
	identity := map[string]string{}
	for _, k := range []string{slo.LabelSlothID, slo.LabelSlothService, slo.LabelSlothSLO, slo.LabelPipeline, slo.LabelSegment, slo.LabelOwner} {
		identity[k] = objective[k]
	}
	var want string
	for i, rf := range ruleFiles {
		var got string
	rules:
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Record != record {
					continue
				}
				if id, ok := r.Labels[slo.LabelSlothID]; ok {
					if id == s.ID {
						got = labelString(r.Labels)
						break rules
					}
					continue
				}
				// The SLO rules' group: one, or one per SLO window.
				if g.Name != "outbox-canary-slo" && g.Name != "outbox-canary-slo-"+objective[slo.LabelSLOWindow] {
					continue
				}
				ls := maps.Clone(identity)
				maps.Copy(ls, r.Labels)
				got = labelString(ls)
				break rules
			}
		}
		if got == "" {
			t.Fatalf("rule file %d records no %s for the SLO %s", i, record, s.ID)
		}
		if i > 0 && got != want {
			t.Fatalf("the rule files record %s of %s with different labels, so cannot share a history: %s and %s", record, s.ID, want, got)
		}
		want = got
	}
	return want
}

// labelString renders labels as an exposition's {a="b",...}, sorted.
func labelString(ls map[string]string) string {
	keys := make([]string, 0, len(ls))
	for k := range ls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%s", k, strconv.Quote(ls[k]))
	}
	b.WriteString("}")
	return b.String()
}

// ruleEvalTarget is issue 27's: the groups' evaluation, summed, under 1 s
// of every 15 s cycle.
const ruleEvalTarget = 1.0

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// historyOf says how much data the rules' windows had to read.
func historyOf(r *ruleEval) string {
	live := fmt.Sprintf("%g minutes of live scrapes and evaluations", r.LiveMinutes)
	if r.History == "" {
		return live + ", nothing backfilled"
	}
	return fmt.Sprintf("%s backfilled at one sample per %s (%d series: the SLI event counters and the two recordings the 30d rules read, %d samples), then %s", r.History, r.HistoryStep, r.HistorySeries, r.HistorySamples, live)
}

// ruleCosts sums the last evaluation time of the rules by name.
func ruleCosts(ctx context.Context, addr string) ([]ruleCost, error) {
	var out struct {
		Groups []struct {
			Rules []struct {
				Name           string  `json:"name"`
				EvaluationTime float64 `json:"evaluationTime"`
			} `json:"rules"`
		} `json:"groups"`
	}
	// A Prometheus short of CPU can take longer than the API timeout to
	// list 20,000 rules: try again before giving up on the table.
	var err error
	for try := 0; try < 3; try++ {
		if err = promAPI(ctx, addr, "/api/v1/rules", &out); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	byName := map[string]*ruleCost{}
	for _, g := range out.Groups {
		for _, r := range g.Rules {
			c := byName[r.Name]
			if c == nil {
				c = &ruleCost{Name: r.Name}
				byName[r.Name] = c
			}
			c.Rules++
			c.Seconds += r.EvaluationTime
		}
	}
	var costs []ruleCost
	for _, c := range byName {
		costs = append(costs, *c)
	}
	sort.Slice(costs, func(i, j int) bool { return costs[i].Seconds > costs[j].Seconds })
	return costs, nil
}

// mergeRuleEval keeps r in place of an earlier run with the same
// history, the runs ordered by the history backfilled.
func (d *benchDoc) mergeRuleEval(r *ruleEval) {
	d.RuleEval = slices.DeleteFunc(d.RuleEval, func(o *ruleEval) bool { return o.History == r.History })
	d.RuleEval = append(d.RuleEval, r)
	sort.SliceStable(d.RuleEval, func(i, j int) bool {
		a, _ := time.ParseDuration(d.RuleEval[i].History)
		b, _ := time.ParseDuration(d.RuleEval[j].History)
		return a < b
	})
}

// executed is the group iterations Prometheus ran in the window
// (prometheus_rule_group_iterations_total counts the missed ones too).
func (r *ruleEval) executed() float64 { return r.Iterations - r.MissedIterations }

// cpuPerCycle is what every group's evaluation once costs Prometheus in
// CPU seconds (its scrapes included), from the CPU per group iteration
// it did run: when it misses iterations, its CPU shows only the part it
// got through.
func (r *ruleEval) cpuPerCycle() float64 {
	if r.executed() <= 0 {
		return 0
	}
	return r.CPUSeconds / r.executed() * float64(r.Groups)
}

// renderRuleEvalTarget is the row of "Against the targets".
func renderRuleEvalTarget(p func(string, ...any), runs []*ruleEval) {
	var parts []string
	ok := true
	var r *ruleEval
	for _, r = range runs {
		if len(r.SumSeconds) == 0 {
			continue
		}
		worst := slices.Max(r.SumSeconds)
		ok = ok && worst < ruleEvalTarget && r.MissedIterations == 0
		part := fmt.Sprintf("%s, rules of %s: summed %.0f s at most (median %.0f s), %.0f of %.0f group iterations missed, about %.1f CPU s per cycle",
			historyShort(r), r.ruleRevision(), worst, median(r.SumSeconds), r.MissedIterations, r.Iterations, r.cpuPerCycle())
		if b := r.Baseline; b != nil && len(b.SumSeconds) > 0 {
			part += fmt.Sprintf(" (%s's rules, same run: summed %.0f s at most, %.0f of %.0f missed, about %.1f CPU s per cycle)",
				b.ruleRevision(), slices.Max(b.SumSeconds), b.MissedIterations, b.Iterations, b.cpuPerCycle())
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return
	}
	p("| rule-group evaluation, %d pipelines (%d groups, %d rules): `prometheus_rule_group_last_duration_seconds` summed over groups | < %g s per %s cycle (issue 27) | %s%s |\n",
		r.Pipelines, r.Groups, r.Rules, ruleEvalTarget, ruleEvalInterval, mark(ok), strings.Join(parts, "; "))
}

// ruleRevision is the revision whose rules r measured.
func (r *ruleEval) ruleRevision() string {
	if r.RuleRevision != "" {
		return r.RuleRevision
	}
	return r.Revision
}

// ruleEvalColumns are the measurements of runs, each run's baseline
// before its own.
func ruleEvalColumns(runs []*ruleEval) []*ruleEval {
	var cols []*ruleEval
	for _, r := range runs {
		if r.Baseline != nil {
			cols = append(cols, r.Baseline)
		}
		cols = append(cols, r)
	}
	return cols
}

func columnName(r *ruleEval) string {
	return fmt.Sprintf("%s, rules of %s", historyShort(r), r.ruleRevision())
}

func historyShort(r *ruleEval) string {
	if r.History == "" {
		return fmt.Sprintf("%g min of live data", r.LiveMinutes)
	}
	return fmt.Sprintf("%s backfilled + %g min live", strings.TrimSuffix(strings.TrimSuffix(r.History, "0s"), "0m"), r.LiveMinutes)
}

func renderRuleEval(p func(string, ...any), runs []*ruleEval) {
	// The newest run describes the method.
	r := runs[0]
	for _, o := range runs {
		if o.Date.After(r.Date) {
			r = o
		}
	}
	p("## Rule evaluation at %d pipelines\n\n", r.Pipelines)
	p("The pipelines: %s to %d, one configuration file. ", r.Shape, r.Pipelines)
	if r.Baseline != nil {
		p("The rules: what `outbox-canary rules --format rules` writes for that file, built at each column's revision: %s's (the baseline, `BENCH_RULES_BEFORE`) and this revision's, each evaluated by a Prometheus of its own; both scrape the same series in the same window, so the two columns of a run share its load. ", r.Baseline.ruleRevision())
		for _, o := range runs {
			if o.Baseline == nil {
				p("(The run of %s measured only the rules of its own revision, %s.) ", o.Date.Format("2006-01-02 15:04 UTC"), o.ruleRevision())
			}
		}
	} else {
		p("The rules: `alerts.Generate` for them (what `outbox-canary rules --format rules` writes). ")
	}
	p("The series: the prober's and the watchers' own metrics for those pipelines (`prober.NewMetrics`, `watch.NewMetrics`, and the SLOs' objective series, `ExportObjectives`, which rules written once per SLO read and rules written per SLO ignore), served by `prober.MetricsHandler` (%.1f MB a text scrape) and advanced every 5 s as a canary per pipeline and a sample of each watcher would (one SLI event in a thousand bad), so every rate is non-zero; about %.0f series in Prometheus's head. ", float64(r.ScrapeBytes)/1e6, r.HeadSeries)
	p("Prometheus (%s) scrapes them and evaluates the rules every %s (no Alertmanager: alerts are evaluated, not sent); once every group had been evaluated %d times and the TSDB had not compacted for 90 s, its own `/metrics` was read at each of %d cycles. ", r.Prometheus, ruleEvalInterval, r.WarmupCycles, r.Cycles)
	p("Groups run concurrently, each at its own offset in the interval, so the sum of their durations is work, not wall time; when they are slower than the machine can serve, each group's duration includes its wait for a CPU, and the CPU per cycle (below) is the figure that does not depend on the machine's other load.\n\n")
	cols := ruleEvalColumns(runs)
	p("| |")
	for _, r := range cols {
		p(" %s |", columnName(r))
	}
	p("\n|---|%s\n", strings.Repeat("---|", len(cols)))
	row := func(name string, f func(r *ruleEval) string) {
		p("| %s |", name)
		for _, r := range cols {
			p(" %s |", f(r))
		}
		p("\n")
	}
	row("run", func(r *ruleEval) string {
		return fmt.Sprintf("%s at %s, load average (1 min) %.1f before, %.1f at most during", r.Date.Format("2006-01-02 15:04 UTC"), r.Revision, r.LoadBefore, r.LoadMax)
	})
	row("command", func(r *ruleEval) string { return "`" + r.Command + "`" })
	row("history the windows could read", historyOf)
	row("rules (`outbox-canary rules --format rules`)", func(r *ruleEval) string {
		return fmt.Sprintf("%d groups, %d rules, %.1f MB", r.Groups, r.Rules, float64(r.RuleBytes)/1e6)
	})
	row("`prometheus_rule_group_last_duration_seconds` summed over the groups, per cycle (target < 1 s)", func(r *ruleEval) string {
		return fmt.Sprintf("%smedian %.1f s, largest %.1f s", mark(slices.Max(r.SumSeconds) < ruleEvalTarget), median(r.SumSeconds), slices.Max(r.SumSeconds))
	})
	row("the largest group's, per cycle", func(r *ruleEval) string {
		return fmt.Sprintf("median %.2f s, largest %.2f s (`%s`)", median(r.MaxGroupSeconds), slices.Max(r.MaxGroupSeconds), r.MaxGroup)
	})
	row("`prometheus_rule_group_iterations_missed_total` over the window", func(r *ruleEval) string {
		return fmt.Sprintf("%.0f of %.0f group iterations due (%.0f run)", r.MissedIterations, r.Iterations, r.executed())
	})
	row("`prometheus_rule_evaluation_failures_total`", func(r *ruleEval) string { return fmt.Sprintf("%.0f", r.EvalFailures) })
	row("Prometheus's CPU (`process_cpu_seconds_total`) over the window", func(r *ruleEval) string {
		return fmt.Sprintf("%.1f s over %.0f s: %.0f %% of one core; %.0f TSDB compactions in it", r.CPUSeconds, r.WindowSeconds, 100*r.CPUSeconds/r.WindowSeconds, r.Compactions)
	})
	row("CPU per group iteration run, and per full cycle of every group", func(r *ruleEval) string {
		if r.executed() <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f ms; %.1f CPU s per %s cycle (%.1f cores)", 1000*r.CPUSeconds/r.executed(), r.cpuPerCycle(), ruleEvalInterval, r.cpuPerCycle()/ruleEvalInterval.Seconds())
	})
	row("Prometheus's RSS (`process_resident_memory_bytes`), largest sample", func(r *ruleEval) string { return fmt.Sprintf("%.0f MiB", r.RSSMaxBytes/(1<<20)) })
	p("\n")
	for _, r := range cols {
		if len(r.ByRule) == 0 {
			continue
		}
		var total float64
		for _, c := range r.ByRule {
			total += c.Seconds
		}
		p("Where the time goes, %s: each rule's last evaluation time (`/api/v1/rules` at the window's end, a wall time, so it includes waits for a CPU as the durations above do), summed by the series it records or the alert it raises, the largest first:\n\n", columnName(r))
		p("| rule | rules | seconds | share |\n|---|---:|---:|---:|\n")
		for i, c := range r.ByRule {
			if i == 12 {
				break
			}
			p("| `%s` | %d | %.2f | %.0f %% |\n", c.Name, c.Rules, c.Seconds, 100*c.Seconds/total)
		}
		p("\n")
	}
	for _, r := range runs {
		for _, n := range r.Notes {
			p("%s\n\n", n)
		}
	}
}
