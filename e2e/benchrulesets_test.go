package e2e

// The rule sets the rule benchmarks compare: what `outbox-canary rules`
// writes at this revision and at a baseline revision (BENCH_RULES_BEFORE),
// each built from its own source, for the same configuration file.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/alerts"
)

// benchRulesBefore is the last revision whose rules were written once per
// SLO (issue 27 part 2 writes them once per SLO window).
const benchRulesBefore = "6360987"

// benchTags are the Makefile's TAGS.
const benchTags = "nethttpomithttp2,nopgxregisterdefaulttypes"

// rulesBinary is an outbox-canary built at one revision.
type rulesBinary struct {
	// Revision is the commit built ("" and the work tree's describe for
	// this revision's source as it is).
	Revision string
	Path     string
}

// buildRulesBinary builds cmd/outbox-canary into dir: this work tree's
// source when rev is empty, else rev's, from a detached worktree that is
// removed again.
func buildRulesBinary(t *testing.T, dir, rev string) rulesBinary {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	b := rulesBinary{Revision: rev, Path: filepath.Join(dir, "outbox-canary-current")}
	src := root
	if rev != "" {
		out, err := exec.Command("git", "-C", root, "rev-parse", "--short", rev+"^{commit}").Output()
		if err != nil {
			t.Fatalf("BENCH_RULES_BEFORE=%s: not a commit: %v", rev, err)
		}
		b.Revision = strings.TrimSpace(string(out))
		b.Path = filepath.Join(dir, "outbox-canary-"+b.Revision)
		src = filepath.Join(dir, "src-"+b.Revision)
		if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", src, b.Revision).CombinedOutput(); err != nil {
			t.Fatalf("git worktree add %s: %v\n%s", b.Revision, err, out)
		}
		defer func() {
			if out, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", src).CombinedOutput(); err != nil {
				t.Errorf("git worktree remove %s: %v\n%s", src, err, out)
			}
		}()
	} else {
		b.Revision = sourceRevision(t, root)
	}
	cmd := exec.Command("go", "build", "-tags", benchTags, "-o", b.Path, "./cmd/outbox-canary")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building outbox-canary at %s: %v\n%s", b.Revision, err, out)
	}
	return b
}

// sourceRevision describes the work tree's commit, -dirty when anything
// but docs/ differs from it: the benchmarks write docs/ themselves, and
// the rules are built from the rest.
func sourceRevision(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	rev := strings.TrimSpace(string(out))
	if out, err := exec.Command("git", "-C", root, "status", "--porcelain", "--", ".", ":(exclude)docs").Output(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		rev += "-dirty"
	}
	return rev
}

// rulesRun is one `outbox-canary rules`: its output and what it cost,
// as /usr/bin/time -v reports it. (The rusage of a child the test
// starts itself would not do: Go starts it sharing the test's memory
// until exec, and Linux keeps that high-water mark in the child's peak.)
type rulesRun struct {
	Output     []byte
	Seconds    float64
	MaxRSS     int64
	CPUSeconds float64
}

func (b rulesBinary) rules(ctx context.Context, cfgPath, format string) (rulesRun, error) {
	timing, err := os.CreateTemp("", "rules-time-*")
	if err != nil {
		return rulesRun{}, err
	}
	timing.Close()
	defer os.Remove(timing.Name())
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/usr/bin/time", "-v", "-o", timing.Name(), b.Path, "rules", "--config.file", cfgPath, "--format", format)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A timeout kills the command with time, its parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	err = cmd.Run()
	r := rulesRun{Output: stdout.Bytes(), Seconds: time.Since(start).Seconds()}
	if report, rerr := os.ReadFile(timing.Name()); rerr == nil {
		for _, line := range strings.Split(string(report), "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
			if !ok {
				continue
			}
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			switch k {
			case "Maximum resident set size (kbytes)":
				r.MaxRSS = int64(f) * 1024
			case "User time (seconds)", "System time (seconds)":
				r.CPUSeconds += f
			}
		}
	}
	if err != nil {
		return r, fmt.Errorf("%s rules --format %s: %w\n%s", b.Revision, format, err, lastLines(stderr.String(), 5))
	}
	return r, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// parseRuleFile reads a rule file as Prometheus would.
func parseRuleFile(data []byte) (*alerts.RuleFile, error) {
	var rf alerts.RuleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		return nil, err
	}
	return &rf, nil
}

func countRules(rf *alerts.RuleFile) int {
	n := 0
	for _, g := range rf.Groups {
		n += len(g.Rules)
	}
	return n
}

// prometheusRuleSizes are the objects of a --format prometheusrule
// output and the largest one's JSON (what a client-side kubectl apply
// stores in its last-applied annotation, limited to 256 KiB).
func prometheusRuleSizes(data []byte) (objects, maxJSON int, maxName string, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, 0, "", err
		}
		if obj == nil {
			continue
		}
		js, err := json.Marshal(obj)
		if err != nil {
			return 0, 0, "", err
		}
		objects++
		if len(js) > maxJSON {
			maxJSON = len(js)
			if md, ok := obj["metadata"].(map[string]any); ok {
				maxName, _ = md["name"].(string)
			}
		}
	}
	return objects, maxJSON, maxName, nil
}

// repeatedExampleConfig is examples/outbox-canary.yml with its pipelines
// repeated to n, each copy renamed NAME-NNN, its slot NAME_NNN and its
// connector NAME-NNN: the file both revisions' `rules` read.
func repeatedExampleConfig(t *testing.T, n int) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "outbox-canary.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	examples, _ := doc["pipelines"].([]any)
	if len(examples) == 0 {
		t.Fatal("examples/outbox-canary.yml: no pipelines")
	}
	pipelines := make([]any, 0, n)
	for i := 0; len(pipelines) < n; i++ {
		p := deepCopyYAML(examples[i%len(examples)]).(map[string]any)
		copyNo := i / len(examples)
		p["name"] = fmt.Sprintf("%s-%03d", p["name"], copyNo)
		if w, ok := p["watch"].(map[string]any); ok {
			if s, ok := w["slot"].(string); ok && s != "" {
				w["slot"] = fmt.Sprintf("%s_%03d", s, copyNo)
			}
			if c, ok := w["connector"].(string); ok && c != "" {
				w["connector"] = fmt.Sprintf("%s-%03d", c, copyNo)
			}
		}
		pipelines = append(pipelines, p)
	}
	doc["pipelines"] = pipelines
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func deepCopyYAML(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopyYAML(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = deepCopyYAML(x)
		}
		return s
	default:
		return v
	}
}

// ruleSize is the last TestBenchRuleSize, in docs/benchmarks.json: the
// rules `outbox-canary rules` writes for the example's pipelines repeated
// to each count, at the baseline revision and at this one.
type ruleSize struct {
	Date     time.Time     `json:"date"`
	Revision string        `json:"revision"`
	Machine  string        `json:"machine"`
	Command  string        `json:"command"`
	Rows     []ruleSizeRow `json:"rows"`
	Notes    []string      `json:"notes,omitempty"`
}

type ruleSizeRow struct {
	Pipelines int `json:"pipelines"`
	// Set is "before" (the baseline revision's binary) or "after".
	Set      string `json:"set"`
	Revision string `json:"revision"`
	Groups   int    `json:"groups"`
	Rules    int    `json:"rules"`
	// RuleBytes is the length of --format rules.
	RuleBytes int `json:"rule_file_bytes"`
	// Of --format prometheusrule: the objects, and the largest one's JSON.
	PrometheusRules     int    `json:"prometheusrules"`
	PrometheusRuleMax   int    `json:"prometheusrule_max_json_bytes"`
	PrometheusRuleLarge string `json:"prometheusrule_max_name"`
	// Of `rules --format rules`: wall time, CPU and peak RSS.
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	MaxRSS     int64   `json:"max_rss_bytes"`
	// Error says what could not be measured, and why.
	Error string `json:"error,omitempty"`
}

// kubectlLastAppliedLimit is the annotations' limit a client-side kubectl
// apply's last-applied-configuration has to fit in.
const kubectlLastAppliedLimit = 256 << 10

// TestBenchRuleSize counts the rules of 3, 300 and 3,000 pipelines
// (BENCH_RULES_SIZES) before and after: groups, rules, bytes, the largest
// PrometheusRule, and what generating them costs. Part of make
// bench-rules; BENCH_RULES_SIZES=none skips it.
func TestBenchRuleSize(t *testing.T) {
	if os.Getenv(benchRulesEnv) == "" {
		t.Skipf("a benchmark: set %s=1 to run it (make bench-rules)", benchRulesEnv)
	}
	sizes := envString("BENCH_RULES_SIZES", "3,300,3000")
	if sizes == "none" {
		t.Skip("BENCH_RULES_SIZES=none")
	}
	timeout := envDuration(t, "BENCH_RULES_SIZE_TIMEOUT", 15*time.Minute)
	dir := t.TempDir()
	sets := []struct {
		name string
		bin  rulesBinary
	}{
		{"before", buildRulesBinary(t, dir, envString("BENCH_RULES_BEFORE", benchRulesBefore))},
		{"after", buildRulesBinary(t, dir, "")},
	}
	res := &ruleSize{Date: time.Now().UTC(), Revision: sets[1].bin.Revision, Machine: machine(),
		Command: envString("OUTBOX_CANARY_BENCH_RULES_COMMAND", fmt.Sprintf("%s=1 go test -count=1 -v -timeout 0 -run '^TestBenchRuleSize$' ./e2e/", benchRulesEnv))}
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("BENCH_RULES_SIZES=%q: want pipeline counts, comma-separated", sizes)
		}
		cfgPath := filepath.Join(dir, fmt.Sprintf("outbox-canary-%d.yml", n))
		if err := os.WriteFile(cfgPath, repeatedExampleConfig(t, n), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			row := ruleSizeRow{Pipelines: n, Set: s.name, Revision: s.bin.Revision}
			measureRuleSize(t, &row, s.bin, cfgPath, timeout)
			t.Logf("%d pipelines, %s (%s): %d groups, %d rules, %d bytes; %d PrometheusRules, the largest %d bytes of JSON (%s); %.1f s, %.1f CPU s, %.0f MiB peak RSS %s",
				n, s.name, s.bin.Revision, row.Groups, row.Rules, row.RuleBytes, row.PrometheusRules, row.PrometheusRuleMax, row.PrometheusRuleLarge, row.Seconds, row.CPUSeconds, float64(row.MaxRSS)/(1<<20), row.Error)
			res.Rows = append(res.Rows, row)
		}
	}
	d, err := readBenchDoc(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	d.RuleSize = res
	if err := writeBenchDoc(benchJSON, d); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(benchMD, renderBench(d), 0o644); err != nil {
		t.Fatal(err)
	}
}

func measureRuleSize(t *testing.T, row *ruleSizeRow, bin rulesBinary, cfgPath string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	run, err := bin.rules(ctx, cfgPath, "rules")
	row.Seconds, row.CPUSeconds, row.MaxRSS = run.Seconds, run.CPUSeconds, run.MaxRSS
	if err != nil {
		row.Error = fmt.Sprintf("--format rules did not finish: %v", firstErrorLine(err.Error()))
		return
	}
	row.RuleBytes = len(run.Output)
	row.Groups, row.Rules = countRuleLines(run.Output)
	if len(run.Output) < 64<<20 { // parsing 3,000 pipelines' costs the harness gigabytes
		rf, err := parseRuleFile(run.Output)
		if err != nil {
			t.Fatalf("%s's rules: %v", bin.Revision, err)
		}
		if len(rf.Groups) != row.Groups || countRules(rf) != row.Rules {
			t.Fatalf("%s's rules: counted %d groups and %d rules by line, parsed %d and %d", bin.Revision, row.Groups, row.Rules, len(rf.Groups), countRules(rf))
		}
	}
	run.Output = nil
	pr, err := bin.rules(ctx, cfgPath, "prometheusrule")
	if err != nil {
		row.Error = fmt.Sprintf("--format prometheusrule did not finish: %v", firstErrorLine(err.Error()))
		return
	}
	if row.PrometheusRules, row.PrometheusRuleMax, row.PrometheusRuleLarge, err = prometheusRuleSizes(pr.Output); err != nil {
		t.Fatalf("%s's PrometheusRules: %v", bin.Revision, err)
	}
}

// countRuleLines counts the groups and rules of a rule file as
// alerts.Write indents it.
func countRuleLines(data []byte) (groups, rules int) {
	for _, line := range bytes.Split(data, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("  - name: ")):
			groups++
		case bytes.HasPrefix(line, []byte("      - record: ")), bytes.HasPrefix(line, []byte("      - alert: ")):
			rules++
		}
	}
	return groups, rules
}

func firstErrorLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func renderRuleSize(p func(string, ...any), s *ruleSize) {
	p("## Rule count and size\n\n")
	p("What `outbox-canary rules` writes for examples/outbox-canary.yml's four pipelines repeated to each count (the configuration of [Rule evaluation](#rule-evaluation-at-300-pipelines)), before (the baseline revision's binary, rules per SLO) and after (this revision's, rules per SLO window), each built from its own source. ")
	p("Measured %s at %s on %s: `%s`. ", s.Date.Format("2006-01-02 15:04 UTC"), s.Revision, s.Machine, s.Command)
	p("Bytes are `--format rules`'s; the PrometheusRules are `--format prometheusrule`'s objects, the largest one's size as JSON, which a client-side `kubectl apply` stores in its last-applied annotation (limit %d KiB); time, CPU (user + system) and peak RSS are `/usr/bin/time -v`'s of `rules --format rules`.\n\n", kubectlLastAppliedLimit>>10)
	p("| pipelines | rules of | groups | rules | rule file | PrometheusRules | the largest, as JSON | time | CPU | peak RSS |\n")
	p("|---:|---|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, r := range s.Rows {
		if r.Error != "" {
			p("| %d | %s: %s | %s |  |  |  |  | %.1f s | %.1f s | %.0f MiB |\n", r.Pipelines, r.Set, r.Revision, r.Error, r.Seconds, r.CPUSeconds, float64(r.MaxRSS)/(1<<20))
			continue
		}
		p("| %d | %s: %s | %d | %d | %.2f MB | %d | %s%.1f KiB (`%s`) | %.1f s | %.1f s | %.0f MiB |\n",
			r.Pipelines, r.Set, r.Revision, r.Groups, r.Rules, float64(r.RuleBytes)/1e6, r.PrometheusRules,
			mark(r.PrometheusRuleMax < kubectlLastAppliedLimit), float64(r.PrometheusRuleMax)/1024, r.PrometheusRuleLarge,
			r.Seconds, r.CPUSeconds, float64(r.MaxRSS)/(1<<20))
	}
	p("\n")
	for _, n := range s.Notes {
		p("%s\n\n", n)
	}
}
