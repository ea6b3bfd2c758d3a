package e2e

// TestBenchCompare puts two runs of `make bench-service` side by side in
// docs/benchmarks.json and docs/benchmarks.md: the same scenarios measured
// at the same time on the same stack, one with the binary of an earlier
// revision (before), one with today's (after), as issue 27 asks its
// footprint targets to be measured. It runs only when
// OUTBOX_CANARY_BENCH_COMPARE names the runs' benchmarks.json files, as
// pairs: "before.json,after.json;before2.json,after2.json". The after
// file of the first pair also replaces the doc's scenarios, so the rest
// of the page is the after run's.

import (
	"cmp"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

const (
	benchCompareEnv        = "OUTBOX_CANARY_BENCH_COMPARE"
	benchCompareCommandEnv = "OUTBOX_CANARY_BENCH_COMPARE_COMMAND"
	benchCompareNoteEnv    = "OUTBOX_CANARY_BENCH_COMPARE_NOTE" // paragraphs under the tables
	// kminionIdleCPU is KMinion's end-to-end probe at one message a
	// second, in per cent of one core, as issue 27 measured it on this
	// machine and Kafka (KMinion is in none of the registries this
	// workplace reaches, so it is not measured again here).
	kminionIdleCPU = 0.30
)

// benchCompare is two runs of the same scenarios, side by side.
type benchCompare struct {
	Date     time.Time         `json:"date"`
	Machine  string            `json:"machine"`
	Command  string            `json:"command"`
	Before   string            `json:"before_revision"`
	After    string            `json:"after_revision"`
	Cases    []benchCompareRun `json:"cases"`
	Comments []string          `json:"comments,omitempty"`
}

// benchCompareRun is one scenario in both runs.
type benchCompareRun struct {
	Before *benchResult `json:"before"`
	After  *benchResult `json:"after"`
}

func TestBenchCompare(t *testing.T) {
	spec := os.Getenv(benchCompareEnv)
	if spec == "" {
		t.Skipf("puts two bench-service runs side by side: set %s=before.json,after.json[;...]", benchCompareEnv)
	}
	doc, err := readBenchDoc(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	c := &benchCompare{Date: time.Now().UTC(), Machine: machine(), Command: os.Getenv(benchCompareCommandEnv)}
	if note := os.Getenv(benchCompareNoteEnv); note != "" {
		c.Comments = strings.Split(note, "\n\n")
	}
	for i, pair := range strings.Split(spec, ";") {
		files := strings.Split(pair, ",")
		if len(files) != 2 {
			t.Fatalf("%s: %q is not before.json,after.json", benchCompareEnv, pair)
		}
		before, err := readBenchDoc(strings.TrimSpace(files[0]))
		if err != nil {
			t.Fatal(err)
		}
		after, err := readBenchDoc(strings.TrimSpace(files[1]))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range after.Scenarios {
			b := before.scenario(a.Scenario)
			if b == nil || len(a.Windows) == 0 || len(b.Windows) == 0 {
				continue
			}
			if a.Date.Equal(b.Date) && a.Revision == b.Revision {
				continue // the same run in both files: nothing compared
			}
			if a.Pipelines != b.Pipelines || a.Schedule != b.Schedule {
				t.Fatalf("scenario %s: before %d at %s, after %d at %s: not the same", a.Scenario, b.Pipelines, b.Schedule, a.Pipelines, a.Schedule)
			}
			c.Cases = append(c.Cases, benchCompareRun{Before: b, After: a})
			c.Before, c.After = b.Revision, a.Revision
			if i == 0 {
				doc.merge(a, benchScenarioOrder)
			}
		}
	}
	if len(c.Cases) == 0 {
		t.Fatalf("%s: no scenario measured in both runs of a pair", benchCompareEnv)
	}
	doc.Compare = c
	if err := writeBenchDoc(benchJSON, doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(benchMD, renderBench(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cpuSeconds is the CPU a run's windows took with the scrapes left out
// (cpuUnscraped), and their seconds.
func cpuSeconds(r *benchResult) (cpu, secs, sent float64) {
	for _, w := range r.Windows {
		s := (w.ToMinute - w.FromMinute) * 60
		cpu += cpuUnscraped(r, w) / 100 * s
		secs += s
		sent += w.Sent
	}
	return cpu, secs, sent
}

// comparedFigures are the rows of one case: name, target, and the
// figure of a run.
func comparedFigures(r *benchResult) [][3]string {
	cpu, secs, sent := cpuSeconds(r)
	last := r.Windows[len(r.Windows)-1]
	var rows [][3]string
	row := func(name, target, value string) { rows = append(rows, [3]string{name, target, value}) }
	pct := cpu / secs * 100
	load := 0.0
	for _, l := range r.LoadDuring {
		load = max(load, l)
	}
	var share float64 // a scrape every 15 s, in per cent of a core
	if sc := r.Scrapes; sc != nil && sc.Count > 0 {
		share = sc.CoreShare()
	}
	switch {
	case r.Pipelines >= 100:
		row("CPU per canary with a scrape every 15s", "half of before", fmt.Sprintf("%.2f ms", (cpu+share/100*secs)/sent*1000))
		row("CPU per canary, scrapes left out", "half of before", fmt.Sprintf("%.2f ms", cpu/sent*1000))
		row("CPU with a scrape every 15s, % of one core", "", fmt.Sprintf("%.2f %%", pct+share))
		row("CPU, scrapes left out, % of one core", "", fmt.Sprintf("%.2f %%", pct))
	case r.Pipelines == 1:
		row("CPU with a scrape every 15s, % of one core", fmt.Sprintf("≤ %.2f %% (KMinion's end-to-end probe at 1 msg/s, issue 27)", kminionIdleCPU), fmt.Sprintf("%.2f %%", pct+share))
		row("CPU, scrapes left out, % of one core", "", fmt.Sprintf("%.2f %%", pct))
	default:
		row("CPU with a scrape every 15s, % of one core", "≤ 2 %", fmt.Sprintf("%.2f %%", pct+share))
		row("CPU, scrapes left out, % of one core", "≤ 2 %", fmt.Sprintf("%.2f %%", pct))
	}
	if sc := r.Scrapes; sc != nil && sc.Count > 0 {
		row("a scrape of /metrics (CPU)", "", fmt.Sprintf("%.0f ms", sc.PerScrape()*1000))
	}
	hwmTarget, anonTarget := "", ""
	if r.Pipelines >= 100 {
		hwmTarget = "< 100 MiB"
	} else if r.Pipelines > 1 {
		anonTarget = "≤ 25 MiB"
	}
	row("peak RSS (VmHWM) at the end", hwmTarget, fmt.Sprintf("%.1f MiB", mib(last.HWMBytes)))
	row("RssAnon, largest sample of the last window", anonTarget, fmt.Sprintf("%.1f MiB", mib(last.RSSAnonBytes)))
	row("Go heap in use at the end", "", fmt.Sprintf("%.1f MiB", last.HeapInuseBytes/(1<<20)))
	row("canaries sent (measured windows)", "", fmt.Sprintf("%.0f over %.1f min", sent, secs/60))
	if r.ScrapeEvery != "" {
		row("/metrics scraped through the windows", "", "every "+r.ScrapeEvery+" (in the memory above; its CPU is the rows with a scrape)")
	}
	row("load average (1 min), largest", "", fmt.Sprintf("%.1f", load))
	return rows
}

// compareMet says whether after meets a row's target, for the ✓ or ✗.
func compareMet(target, before, after string) string {
	var b, a float64
	fmt.Sscan(before, &b)
	fmt.Sscan(after, &a)
	switch {
	case target == "":
		return ""
	case target == "half of before":
		return mark(a <= b/2)
	case strings.HasPrefix(target, "< "):
		var lim float64
		fmt.Sscan(strings.TrimPrefix(target, "< "), &lim)
		return mark(a < lim)
	case strings.HasPrefix(target, "≤ "):
		var lim float64
		fmt.Sscan(strings.TrimPrefix(target, "≤ "), &lim)
		return mark(a <= lim)
	}
	return ""
}

func renderCompare(p func(string, ...any), c *benchCompare) {
	p("## Issue 27: before and after, in one run\n\n")
	p("Run %s on %s: each scenario twice at the same time on the same stack, with the binary of %s (before) and of %s (after), so both saw the same load. CPU is utime + stime from `/proc`, so it holds on a loaded machine; the load is in the last row of each case. Where `/metrics` was scraped through the windows (a row says), the memory figures include the scrapes and the CPU is given both with them and with them left out (less what one scrape at a window's end cost, once per 15 s); otherwise with a scrape every 15 s is the CPU plus that.\n\n",
		c.Date.Format("2006-01-02 15:04 UTC"), c.Machine, c.Before, c.After)
	if c.Command != "" {
		p("Commands: %s\n\n", c.Command)
	}
	for _, k := range c.Cases {
		p("### %d pipeline%s at `%s`, %s\n\n", k.After.Pipelines, plural(k.After.Pipelines), k.After.Schedule, fmtMinutes(k.After))
		p("| figure | target | before (%s) | after (%s) |\n|---|---|---|---|\n", k.Before.Revision, k.After.Revision)
		before := map[string]string{}
		for _, r := range comparedFigures(k.Before) {
			before[r[0]] = r[2]
		}
		for _, r := range comparedFigures(k.After) {
			b := cmp.Or(before[r[0]], "–")
			p("| %s | %s | %s | %s%s |\n", r[0], r[1], b, compareMet(r[1], b, r[2]), r[2])
		}
		p("\n")
	}
	for _, s := range c.Comments {
		p("%s\n\n", s)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func fmtMinutes(r *benchResult) string {
	_, secs, _ := cpuSeconds(r)
	return fmt.Sprintf("%.1f minutes measured", secs/60)
}
