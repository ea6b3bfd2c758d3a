package e2e

// docs/benchmarks.md is generated from docs/benchmarks.json, the raw
// measurements of `make bench-service` (TestBenchService in
// benchservice_test.go). This file holds the rendering, the targets of
// issue 14 shown beside the figures, and the drift test that keeps the two
// files in step in `make test` (it needs no server).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	benchJSON = filepath.Join("..", "docs", "benchmarks.json")
	benchMD   = filepath.Join("..", "docs", "benchmarks.md")
)

// benchDoc is docs/benchmarks.json: the last run of every scenario, in
// scenario order. A run of some scenarios replaces theirs, keeps the others.
type benchDoc struct {
	Scenarios []*benchResult `json:"scenarios"`
	// Compare is the last TestBenchCompare: two runs side by side.
	Compare *benchCompare `json:"compare,omitempty"`
	// Series is issue 27's count of the series per pipeline (benchseries_test.go).
	Series *seriesCount `json:"series,omitempty"`
	// RuleEval is the last TestBenchRuleEvaluation of each history
	// backfilled (benchrules_test.go), shortest first.
	RuleEval []*ruleEval `json:"rule_evaluation,omitempty"`
	// RuleSize is the last TestBenchRuleSize (benchrulesets_test.go).
	RuleSize *ruleSize `json:"rule_size,omitempty"`
}

func readBenchDoc(path string) (*benchDoc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d benchDoc
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

func writeBenchDoc(path string, d *benchDoc) error {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func (d *benchDoc) merge(r *benchResult, order []string) {
	d.Scenarios = slices.DeleteFunc(d.Scenarios, func(s *benchResult) bool { return s.Scenario == r.Scenario })
	d.Scenarios = append(d.Scenarios, r)
	sort.SliceStable(d.Scenarios, func(i, j int) bool {
		return slices.Index(order, d.Scenarios[i].Scenario) < slices.Index(order, d.Scenarios[j].Scenario)
	})
}

func (d *benchDoc) scenario(name string) *benchResult {
	for _, s := range d.Scenarios {
		if s.Scenario == name {
			return s
		}
	}
	return nil
}

// TestBenchmarksDocIsRenderedFromItsMeasurements keeps docs/benchmarks.md
// what `make bench-service` rendered from docs/benchmarks.json.
func TestBenchmarksDocIsRenderedFromItsMeasurements(t *testing.T) {
	d, err := readBenchDoc(benchJSON)
	if err != nil {
		t.Fatalf("%v (written by `make bench-service`)", err)
	}
	want := renderBench(d)
	got, err := os.ReadFile(benchMD)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what %s renders: run `go test ./e2e/ -run TestBenchmarksDocIsRenderedFromItsMeasurements -update`, or `make bench-service` to measure again", benchMD, benchJSON)
		if *update {
			if err := os.WriteFile(benchMD, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// steadyCPUTarget is the steady scenario's CPU target, in per cent of one
// core: issue 14 asked 1 %, issue 27 revised it to 2 %.
const steadyCPUTarget = 2.0

// insertCommitCeiling is the insert→commit p99 above which the scale
// scenario's deadline row is marked missed.
const insertCommitCeiling = 0.1

func mark(ok bool) string {
	if ok {
		return "✓ "
	}
	return "✗ "
}

// rssSplit says how much of the largest RSS sample was the process's own
// memory and how much the binary's pages mapped from the page cache.
func rssSplit(w benchWindow) string {
	if w.RSSAnonBytes == 0 && w.RSSFileBytes == 0 {
		return ""
	}
	return fmt.Sprintf(" (largest sample of the last window: %.1f MiB anonymous, %.1f MiB file-backed)", mib(w.RSSAnonBytes), mib(w.RSSFileBytes))
}

func renderBench(d *benchDoc) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("<!-- DO NOT EDIT: rendered from docs/benchmarks.json by `make bench-service` (e2e/benchservice_test.go). -->\n\n")
	p("# Benchmarks\n\n")
	p("What the whole service costs, measured from outside the process on the local stack (PostgreSQL 15, Kafka 4.4, the reference relay), and the Go micro-benchmarks. ")
	p("`make bench-service` runs the real `outbox-canary run` with N pipelines in one database, behind reference relays (`outbox-relay`, one per outbox table, the pipelines spread over the tables), and writes this page; `make bench` runs the micro-benchmarks and writes [benchmarks.txt](benchmarks.txt). ")
	p("How each figure is taken is at the end, and in e2e/benchservice_test.go. The machine is shared and small: every figure is one run, noisy, with the load average noted; a ✗ means the figure missed its target on that run (issue 14's, as issue 27 revised them: at 10 pipelines `@every 1s` ≤ %g %% of one core and anonymous RSS ≤ 25 MiB, the binary's clean file pages being the kernel's to reclaim; at 300 a peak RSS under 100 MiB).\n\n", steadyCPUTarget)

	steady, scale, foreign := d.scenario(benchSteady), d.scenario(benchScale), d.scenario(benchForeign)
	p("## Against the targets\n\n")
	p("| figure | target | measured |\n|---|---|---|\n")
	if steady != nil && len(steady.Windows) > 0 {
		label := fmt.Sprintf("%d pipelines at `%s`", steady.Pipelines, steady.Schedule)
		var cpu, rss, wr []string
		okCPU, okRSS, okWr := true, true, true
		for _, w := range steady.Windows {
			span := fmt.Sprintf("min %g–%g", w.FromMinute, w.ToMinute)
			cpu = append(cpu, fmt.Sprintf("%.2f %% (%s)", cpuUnscraped(steady, w), span))
			rss = append(rss, fmt.Sprintf("%.1f MiB (%s)", mib(w.RSSMaxBytes), span))
			wr = append(wr, fmt.Sprintf("%.1f KB/s (%s)", w.WriteBytesPerSec/1000, span))
			okCPU = okCPU && cpuUnscraped(steady, w) <= steadyCPUTarget
			okRSS = okRSS && mib(w.RSSAnonBytes) <= 25
			okWr = okWr && w.WriteBytesPerSec <= 50_000
		}
		last := steady.Windows[len(steady.Windows)-1]
		p("| CPU, %s | ≤ %g %% of one core, steady | %s%s |\n", label, steadyCPUTarget, mark(okCPU), strings.Join(cpu, "; "))
		p("| memory (VmRSS, largest sample), same | RssAnon ≤ 25 MiB, steady | %s%s; VmHWM %.1f MiB at the end%s |\n", mark(okRSS), strings.Join(rss, "; "), mib(last.HWMBytes), rssSplit(last))
		p("| disk writes (write_bytes), same | ≤ 50 KB/s | %s%s |\n", mark(okWr), strings.Join(wr, "; "))
		if steady.Fsync != nil {
			p("| fsyncs, same | (one per batch) | %.1f /s (%s over %g s, %.0f canaries sent) |\n", steady.Fsync.PerSecond, fmtCalls(steady.Fsync.Calls), steady.Fsync.Seconds, steady.Fsync.CanariesSent)
		}
		if sc := steady.Scrapes; sc != nil {
			p("| a scrape of `/metrics`, same (left out of the CPU above) | (none set) | %s |\n", fmtScrapes(sc))
			p("| CPU with a scrape every %s, same | ≤ %g %% of one core, steady | %s |\n", scrapeInterval, steadyCPUTarget, scrapedCPU(steady, sc, steadyCPUTarget))
		}
		if steady.Statements != nil {
			p("| SQL statements per canary, same | ≤ 3 | %s%.2f (every statement of the prober's role over %.0f canaries; breakdown below) |\n",
				mark(steady.Statements.PerCanary <= 3), steady.Statements.PerCanary, steady.Statements.Canaries)
		}
	}
	if scale != nil && len(scale.Windows) > 0 {
		label := fmt.Sprintf("%d pipelines at `%s`, one database", scale.Pipelines, scale.Schedule)
		var pg, kc, cpu, rss, late []string
		okPG, okK, okCPU, okRSS, okLate := true, true, true, true, true
		for _, w := range scale.Windows {
			span := fmt.Sprintf("min %g–%g", w.FromMinute, w.ToMinute)
			pg = append(pg, fmt.Sprintf("%d sockets, %d sessions (%s)", w.PGSocketsMax, w.PGSessionsMax, span))
			kc = append(kc, fmt.Sprintf("%d (%s)", w.KafkaPerBrokerMax, span))
			cpu = append(cpu, fmt.Sprintf("%.2f %% (%s)", cpuUnscraped(scale, w), span))
			rss = append(rss, fmt.Sprintf("%.1f MiB (%s)", mib(w.RSSMaxBytes), span))
			late = append(late, fmt.Sprintf("insert→commit p99 %s, %.0f prober_lag, %.0f late, %.0f insert failures of %.0f sent (%s)",
				fmtSeconds(w.InsertCommitP99), w.ProberLag, w.Late, w.InsertFailures, w.Sent, span))
			okPG = okPG && max(w.PGSocketsMax, w.PGSessionsMax) <= 10
			okK = okK && w.KafkaPerBrokerMax <= 3
			okCPU = okCPU && cpuUnscraped(scale, w) <= 5
			okRSS = okRSS && mib(w.RSSMaxBytes) <= 100 && mib(w.HWMBytes) < 100
			okLate = okLate && w.ProberLag == 0 && w.InsertFailures == 0 && w.InsertCommitP99 <= insertCommitCeiling
		}
		p("| deadlines, %s | none missed by the prober's doing | %s%s |\n", label, mark(okLate), strings.Join(late, "; "))
		p("| PostgreSQL connections, same | ≤ 10 | %s%s |\n", mark(okPG), strings.Join(pg, "; "))
		p("| Kafka connections per broker, same | ≤ 3 | %s%s |\n", mark(okK), strings.Join(kc, "; "))
		p("| CPU, same | ≤ 5 %% of one core | %s%s |\n", mark(okCPU), strings.Join(cpu, "; "))
		p("| memory (VmRSS, and the peak VmHWM), same | ≤ 100 MiB, VmHWM < 100 MiB | %s%s; VmHWM %.1f MiB at the end%s |\n", mark(okRSS), strings.Join(rss, "; "), mib(scale.Windows[len(scale.Windows)-1].HWMBytes), rssSplit(scale.Windows[len(scale.Windows)-1]))
		if sc := scale.Scrapes; sc != nil {
			p("| a scrape of `/metrics`, same (left out of the CPU above) | (none set) | %s |\n", fmtScrapes(sc))
			p("| CPU with a scrape every %s, same | ≤ 5 %% of one core | %s |\n", scrapeInterval, scrapedCPU(scale, sc, 5))
		}
		if scale.Statements != nil {
			p("| SQL statements per canary, same | ≤ 3 | %s%.2f |\n", mark(scale.Statements.PerCanary <= 3), scale.Statements.PerCanary)
		}
		if scale.Fsync != nil {
			p("| new connections (`connect` calls), same | no new TCP connection per metadata refresh | %s over %g s (%s) |\n",
				perSecond(scale.Fsync.Connects, scale.Fsync.Seconds), scale.Fsync.Seconds, fmtCalls(scale.Fsync.Connects))
		}
	}
	if foreign != nil && foreign.Foreign != nil {
		f := foreign.Foreign
		p("| foreign messages skipped | ≥ 400 k msg/s | %s%.0f k msg/s (%d messages in %.2f s) |\n", mark(f.ProberRate >= 400_000), f.ProberRate/1000, f.Messages, f.ProberSeconds)
		p("| CPU per foreign message vs `kcat -C` | ≤ 1.5× | %s%.2f× (prober %.2f CPU s, kcat %.2f CPU s for %d messages at %.0f k msg/s) |\n",
			mark(f.CPURatio > 0 && f.CPURatio <= 1.5), f.CPURatio, f.ProberCPUSeconds, f.KcatCPUSeconds, f.KcatMessages, f.KcatRate/1000)
	}
	if consume := d.scenario(benchConsume); consume != nil && consume.Consume != nil {
		renderConsumeTargets(p, consume)
	}
	if d.Series != nil {
		renderSeriesTarget(p, d.Series)
	}
	if len(d.RuleEval) > 0 {
		renderRuleEvalTarget(p, d.RuleEval)
	}
	p("\n")

	if d.Compare != nil {
		renderCompare(p, d.Compare)
	}
	if d.Series != nil {
		renderSeries(p, d.Series)
	}
	for _, r := range d.Scenarios {
		renderBenchScenario(p, r)
	}
	if len(d.RuleEval) > 0 {
		renderRuleEval(p, d.RuleEval)
	}
	if d.RuleSize != nil {
		renderRuleSize(p, d.RuleSize)
	}

	p("## How the figures are taken\n\n")
	p("- **CPU %% of one core**: utime + stime of `/proc/<pid>/stat` (in USER_HZ, 100/s) over the window, divided by its wall time. The windows start after every pipeline has received a canary and a further warm-up. The harness scrapes `/metrics` at each window's end (protobuf); that scrape is left out of both windows and reported on its own, its CPU from the samples just before and after it, and its share of a core at a %s scrape interval, as Prometheus would scrape.\n", scrapeInterval)
	p("- **VmRSS**: the largest of the samples (every 5 s) in the window, split into RssAnon (the process's own memory: Go heap, stacks, runtime) and RssFile (pages of the binary mapped from the page cache, shared and reclaimable, which grows with the binary's size rather than the work); **VmHWM** the process's peak at the window's end (`/proc/<pid>/status`). Go heap in use and goroutines are `go_memstats_heap_inuse_bytes` and `go_goroutines` from `/metrics` at the window's end.\n")
	p("- **Disk writes**: `write_bytes` of `/proc/<pid>/io` over the window (bytes the process caused to be sent to storage; not socket writes).\n")
	p("- **fsyncs and new connections**: `strace -f -e trace=fsync,fdatasync,sync_file_range,syncfs,connect -p <pid>` for a window of its own after the measured ones (tracing stops the process at every traced call), each call counted, each `connect` by its destination port.\n")
	p("- **PostgreSQL connections**: the prober's ESTABLISHED sockets to the PostgreSQL port (its fds matched against `/proc/net/tcp`), and the sessions of its role (`bench_prober_…`, one per run; the relays connect as another) in `pg_stat_activity`, largest sample, with the application names seen.\n")
	p("- **Kafka connections per broker**: the prober's ESTABLISHED sockets to each broker port, largest sample.\n")
	p("- **Statements per canary**: `pg_stat_statements` of the prober's role (reset when the measurement starts; BEGIN and COMMIT included, and the watchers' queries) over the canaries sent in the same span.\n")
	p("- **Deadlines missed by the prober's doing**: the p99 of `insert_to_commit` from the prober's native histogram (the upper bound of the bucket, within 10 %%), the segments unjudged with reason `prober_lag` (the prober's own backlog), late canaries, and failed inserts, all from `/metrics` at the window's ends. *Late* counts every late arrival, whoever's doing; the ✓ of the deadline row asks for no `prober_lag`, no failed insert and an insert→commit p99 within %s (this harness's reading of \"by the prober's doing\": issue 14 saw 0.9 ms alone and 164–579 ms when a hundred schedules fired together).\n", fmtSeconds(insertCommitCeiling))
	p("- **Consume stamp against kcat**: pipelines behind reference relays on canary topics with `message.timestamp.type=LogAppendTime` and `relay.published_stamp: record_timestamp`; `kcat -G` (a group of its own, from the latest offsets, `-u`) reads the measured pipelines' topics beside the prober, and the harness stamps each of its lines when it reads it. Per canary (matched by its id), the prober's latency is its consume stamp (`/api/status`) minus the broker's append time, kcat's its receive time minus the same; the target asks the per-canary difference, prober − kcat, to be within 5 ms at p99.\n")
	p("- **Foreign messages**: one pipeline on a topic of its own; once it has received a canary, the prober is stopped (SIGSTOP), the business events (~200 bytes of JSON, not canaries) are produced with kcat, and the prober is continued (SIGCONT); its rate is the messages over the time until `/metrics` counts them all skipped (scraped every ~150 ms), its CPU seconds from `/proc/<pid>/stat`. `kcat -C -o beginning -e -q` then reads the same topic, and its user + system seconds are the comparison.\n")
	p("\n## Micro-benchmarks\n\n")
	p("`make bench` runs the Go benchmarks (the judge per canary, state persistence, decoding) and writes [benchmarks.txt](benchmarks.txt): ns/op, B/op and allocs/op on the machine named in that file.\n")
	return b.Bytes()
}

func renderBenchScenario(p func(string, ...any), r *benchResult) {
	switch r.Scenario {
	case benchSteady:
		p("## %d pipelines at `%s` for %g minutes\n\n", r.Pipelines, r.Schedule, r.Minutes)
	case benchScale:
		p("## %d pipelines at `%s` against one database for %g minutes\n\n", r.Pipelines, r.Schedule, r.Minutes)
	case benchForeign:
		p("## Foreign messages on the canary topic\n\n")
	case benchConsume:
		p("## The prober's consume stamp against kcat\n\n")
	}
	p("Run %s at %s (`%s`) on %s. Load average (1 min) %.2f before", r.Date.Format("2006-01-02 15:04 UTC"), r.Revision, r.Command, r.Machine, r.LoadBefore)
	if len(r.LoadDuring) > 0 {
		var ls []string
		for _, l := range r.LoadDuring {
			ls = append(ls, fmt.Sprintf("%.2f", l))
		}
		during := "(largest per window)"
		if r.Scenario == benchConsume {
			during = "(at the end of each case)"
		}
		p(", %s during %s", strings.Join(ls, ", "), during)
	}
	p(".")
	if r.Scenario != benchForeign && r.Scenario != benchConsume {
		p(" %d relays (one outbox table each, the pipelines spread over them), %d partitions per canary topic, warm-up %s; %s.", r.Relays, r.Partitions, r.Warmup, r.FirstCanary)
		if r.ScrapeEvery != "" {
			p(" `/metrics` was scraped every %s through the windows, as Prometheus would (protobuf, gzip): their CPU and memory include those scrapes.", r.ScrapeEvery)
		}
	}
	p("\n\n")
	if len(r.Windows) > 0 {
		p("| minutes | CPU %% (of it kernel) | VmRSS max (anon + file) | VmHWM | Go heap in use, goroutines | writes | PG sockets / sessions | Kafka per broker | sent | received | insert→commit p99 | prober_lag | late | lost | insert failures |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, w := range r.Windows {
			p("| %g–%g | %.2f (%s) | %.1f MiB (%.1f + %.1f) | %.1f MiB | %.1f MiB, %.0f | %.1f KB/s | %d / %d | %d | %.0f | %.0f | %s | %.0f | %.0f | %.0f | %.0f |\n",
				w.FromMinute, w.ToMinute, w.CPUPercent, kernelShare(w), mib(w.RSSMaxBytes), mib(w.RSSAnonBytes), mib(w.RSSFileBytes), mib(w.HWMBytes),
				w.HeapInuseBytes/(1<<20), w.Goroutines, w.WriteBytesPerSec/1000,
				w.PGSocketsMax, w.PGSessionsMax, w.KafkaPerBrokerMax, w.Sent, w.Received,
				fmtSeconds(w.InsertCommitP99), w.ProberLag, w.Late, w.Lost, w.InsertFailures)
		}
		p("\nApplication names of the prober's sessions: %s.\n\n", r.Windows[len(r.Windows)-1].PGAppNames)
		if g := r.Windows[len(r.Windows)-1].GOGC; g > 0 {
			p("The garbage collector's target (`go_gc_gogc_percent`): GOGC=%.0f.\n\n", g)
		}
	}
	if r.Fsync != nil {
		p("fsyncs: %.1f per second (%s in %g s, %.0f canaries sent meanwhile). New connections: %s (%s). Traced with %s.\n\n",
			r.Fsync.PerSecond, fmtCalls(r.Fsync.Calls), r.Fsync.Seconds, r.Fsync.CanariesSent,
			perSecond(r.Fsync.Connects, r.Fsync.Seconds), fmtCalls(r.Fsync.Connects), r.Fsync.Method)
	}
	if s := r.Statements; s != nil {
		p("Statements of the prober's role: %.0f over %.0f canaries, %.2f per canary. The most frequent:\n\n", s.Total, s.Canaries, s.PerCanary)
		p("| per canary | calls | statement |\n|---|---|---|\n")
		for _, l := range s.Top {
			p("| %.2f | %.0f | `%s` |\n", l.PerCanary, l.Calls, strings.ReplaceAll(l.Query, "|", "\\|"))
		}
		p("\n")
	}
	if r.Consume != nil {
		renderConsumeCases(p, r)
	}
	if f := r.Foreign; f != nil {
		p("| | messages | seconds | msg/s | CPU seconds |\n|---|---|---|---|---|\n")
		p("| prober (skipping) | %d | %.2f | %.0f | %.2f |\n", f.Messages, f.ProberSeconds, f.ProberRate, f.ProberCPUSeconds)
		p("| `kcat -C` (same topic, start to end) | %d | %.2f | %.0f | %.2f |\n\n", f.KcatMessages, f.KcatSeconds, f.KcatRate, f.KcatCPUSeconds)
		var reasons []string
		for k, v := range f.SkipReasons {
			reasons = append(reasons, fmt.Sprintf("%s %.0f", k, v))
		}
		sort.Strings(reasons)
		p("Produced in %.1f s while the prober was stopped. Skipped by reason (whole run): %s.\n\n", f.ProduceSeconds, strings.Join(reasons, ", "))
	}
	if len(r.ProberLog) > 0 {
		var lv []string
		for k, v := range r.ProberLog {
			lv = append(lv, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(lv)
		p("The prober's log lines by level over the scenario (at --log.level warn): %s.\n\n", strings.Join(lv, ", "))
	}
	if len(r.ProberMsgs) > 0 {
		p("Its most frequent warnings and errors:\n\n")
		for _, m := range r.ProberMsgs {
			p("- %s\n", m)
		}
		p("\n")
	}
	for _, n := range r.Notes {
		p("%s\n\n", n)
	}
}

// perSecond is the total of c per second of secs.
func perSecond(c map[string]int, secs float64) string {
	total := 0
	for _, v := range c {
		total += v
	}
	if secs <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f /s", float64(total)/secs)
}

func fmtCalls(c map[string]int) string {
	if len(c) == 0 {
		return "no calls"
	}
	var out []string
	for k, v := range c {
		out = append(out, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// kernelShare is a window's CPU in the kernel, or "n/a" for runs taken
// before the benchmark split it out.
func kernelShare(w benchWindow) string {
	if w.CPUSystemPercent == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", w.CPUSystemPercent)
}

// scrapedCPU is each window's CPU with the share of a core that scrapes
// every scrapeInterval would add, against target (per cent of a core): a
// prober in service is scraped, and at 300 pipelines a scrape is not
// negligible.
func scrapedCPU(r *benchResult, s *benchScrapes, target float64) string {
	share := s.CoreShare()
	ok := true
	var out []string
	for _, w := range r.Windows {
		with := cpuUnscraped(r, w) + share
		ok = ok && with <= target
		out = append(out, fmt.Sprintf("%.2f %% (min %g–%g)", with, w.FromMinute, w.ToMinute))
	}
	return mark(ok) + strings.Join(out, "; ")
}

// scrapedIn is the share of a core that the scrapes through the windows
// (BENCH_SCRAPE_EVERY) took, from what one scrape at a window's end cost;
// 0 when only the harness's own scraped.
func scrapedIn(r *benchResult) float64 {
	every, err := time.ParseDuration(r.ScrapeEvery)
	if r.ScrapeEvery == "" || err != nil || every <= 0 || r.Scrapes == nil || r.Scrapes.Count == 0 {
		return 0
	}
	return r.Scrapes.PerScrape() / every.Seconds() * 100
}

// cpuUnscraped is a window's CPU with the scrapes left out: as measured
// when only the harness scraped (at the window ends, which are outside
// it), less the scrapes' share when they ran through it.
func cpuUnscraped(r *benchResult, w benchWindow) float64 {
	return max(w.CPUPercent-scrapedIn(r), 0)
}

// fmtScrapes says what a scrape cost and its share of a core at
// scrapeInterval.
func fmtScrapes(s *benchScrapes) string {
	return fmt.Sprintf("%.0f ms of CPU each (%.2f CPU s over %d scrapes at the window ends); %.2f %% of one core at a %s scrape interval",
		s.PerScrape()*1000, s.CPUSeconds, s.Count, s.CoreShare(), scrapeInterval)
}
