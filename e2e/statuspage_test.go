package e2e

// TestStatusPageShowsAStallInARealBrowser is the status page as the person
// on call sees it during a stall, in a real browser: Debian's Chromium,
// headless, loading the page that `outbox-canary run` serves for a real
// pipeline (a schema A outbox in the local stack's PostgreSQL, the
// reference relay, Kafka). The relay is paused; once /api/status says the
// pipeline is stalled, Chromium loads the page and the test asserts, in the
// DOM the browser built, the stall banner and the oldest canary in flight
// "past the commit_to_publish deadline". A screenshot and the DOM are
// saved; after the relay resumes, the banner is gone.
//
// Run it with the local stack up (`make stack-up` installs chromium too):
//
//	go test -count=1 -v -run TestStatusPageShowsAStallInARealBrowser -outputdir $PWD/test-output ./e2e/
//
// The screenshot goes to the -outputdir directory (`make test` passes
// test-output/) as status-page-stalled.png, beside the DOM
// (status-page-stalled.html); without -outputdir, to the test's artifact
// directory, which `go test -artifacts` keeps. The path is logged. Without
// chromium or the stack it skips, and with CI=true it fails.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/internal/statuspage"
)

// browserTimeout bounds one Chromium run; a load takes about a second.
const browserTimeout = 2 * time.Minute

// stallWait bounds the waits for the stall to show and to clear: with a
// canary every second and a stall threshold of the end_to_end budget plus
// two intervals, both take seconds.
const stallWait = 90 * time.Second

func TestStatusPageShowsAStallInARealBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	s := stacktest.Load(t)
	start := time.Now()
	moment := func(format string, args ...any) {
		t.Helper()
		t.Logf("[+%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	faults, cfg, cfgPath := startPipeline(t, s)
	// The banner and the burn table speak in the configuration's terms.
	pipe := cfg.Pipelines[0]
	e2eBudget := time.Duration(pipe.Budgets[config.SegmentEndToEnd])
	relayBudget := time.Duration(pipe.Budgets["commit_to_publish"])
	stallIntervals := cfg.Alerting.StallIntervals
	threshold := e2eBudget + time.Duration(stallIntervals)*time.Second // a canary every second
	addr, proberLog := startProber(t, cfgPath)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prober log:\n%s", proberLog.String())
		}
	})
	pageURL := "http://" + addr + "/"

	// The pipeline works: a canary arrived and nothing is stalled.
	waitStatus(t, addr, "a canary to arrive", func(p statuspage.PipelineStatus) bool {
		return p.Stall != nil && !p.Stall.LastReceived.IsZero() && !p.Stall.Stalled
	})
	moment("a canary arrived; pausing the relay")

	faults.Pause()
	st := waitStatus(t, addr, "the stall and a canary past its deadline", func(p statuspage.PipelineStatus) bool {
		return p.Stall != nil && p.Stall.Stalled && len(p.InFlightCanaries) > 0 &&
			p.InFlightCanaries[0].PastDeadlineSeconds != nil && *p.InFlightCanaries[0].PastDeadlineSeconds > 0
	})
	moment("/api/status: %s", st.Stall.Message)

	dom := browse(t, browser, "--dump-dom", pageURL)
	out := outputDir(t)
	domPath := filepath.Join(out, "status-page-stalled.html")
	if err := os.WriteFile(domPath, dom, 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(out, "status-page-stalled.png")
	browse(t, browser, "--screenshot="+shot, "--window-size=1600,1200", "--hide-scrollbars", pageURL)
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	}
	moment("Chromium loaded the page: DOM %s, screenshot %s", domPath, shot)

	page := string(dom)
	// The page must fit a laptop's browser window: wide tables scroll
	// within themselves rather than push the page past the window.
	if over := overflow(t, browser, page, 1024); over > 0 {
		t.Errorf("at 1024 px the page is %d px wider than the window", over)
	} else {
		moment("at 1024 px the page fits the window")
	}
	banner := regexp.MustCompile(`(?s)<div class="stall" role="alert">(.*?)</div>`).FindStringSubmatch(page)
	if banner == nil {
		t.Fatalf("the DOM has no stall banner:\n%s", page)
	}
	moment("banner in the DOM: %s", banner[1])
	for _, want := range []string{"Stalled: No canary has arrived for ", fmt.Sprintf("longer than the stall threshold of %.1f s (%s end_to_end budget + %d × 1s canary interval)", threshold.Seconds(), e2eBudget, stallIntervals), "the oldest is past the commit_to_publish deadline by "} {
		if !strings.Contains(banner[1], want) {
			t.Errorf("the banner lacks %q: %s", want, banner[1])
		}
	}
	stuck := regexp.MustCompile(`<td class="stuck bad">(past the (\w+) deadline by [^<]+)</td><td>([^<]*)</td>`).FindStringSubmatch(page)
	switch {
	case stuck == nil:
		t.Errorf("the DOM has no canary in flight past a deadline:\n%s", page)
	case stuck[2] != "commit_to_publish" || stuck[3] != ownerRelay:
		t.Errorf("the stuck canary is %q, owner %q; want past the commit_to_publish deadline, owner %s", stuck[1], stuck[3], ownerRelay)
	default:
		moment("stuck canary in the DOM: %s (owner %s)", stuck[1], stuck[3])
	}
	if !strings.Contains(page, "<title>STALLED "+pipelineName+" · ") {
		t.Errorf("the page title does not say the pipeline is stalled:\n%.400s", page)
	}
	if i, j := strings.Index(page, `class="in-flight"`), strings.Index(page, `class="burn"`); i < 0 || j < 0 || i > j {
		t.Errorf("the canaries in flight are not shown before the burn rates")
	}
	if !regexp.MustCompile(`<meta http-equiv="refresh" content="\d+">`).MatchString(page) {
		t.Errorf("the page does not reload itself")
	}
	// Deadline verdicts count as soon as /metrics counts them: the
	// relay's segment burns while its canaries are still in flight.
	if burn := regexp.MustCompile(`<tr><td>commit_to_publish</td><td>` + relayBudget.String() + `</td><td>` + ownerRelay + `</td><td title="(\d+) bad of`).FindStringSubmatch(page); burn == nil || burn[1] == "0" {
		t.Errorf("commit_to_publish shows no bad verdict during the stall: %v", burn)
	}

	faults.Resume()
	waitStatus(t, addr, "the stall to clear", func(p statuspage.PipelineStatus) bool {
		return p.Stall != nil && !p.Stall.Stalled
	})
	if dom := browse(t, browser, "--dump-dom", pageURL); bytes.Contains(dom, []byte(`class="stall"`)) {
		t.Errorf("the stall banner is still shown after the relay resumed:\n%s", dom)
	}
	moment("relay resumed: the banner is gone")
}

// chromium returns the path of Debian's chromium, or skips the test (fails
// it with CI=true) when it is not installed.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		msg := fmt.Sprintf("Debian's chromium is not installed (`make stack-up` installs it): %v", err)
		stacktest.Unavailable(t, "%s", msg)
	}
	return path
}

// browse runs headless Chromium with a fresh profile and returns its
// standard output. The flags keep it off the network (the machine's is
// closed, and Chromium's background connections would be refused) and let
// it run as root; its process group is killed if it outlives
// browserTimeout.
func browse(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
		"--user-data-dir=" + t.TempDir(),
	}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// overflow loads a copy of page in Chromium at width px and returns by how
// many px the document is wider than the window. The copy carries a
// script that writes the figure into the DOM; the page itself has none.
func overflow(t *testing.T, bin, page string, width int) int {
	t.Helper()
	const probe = `<script>document.body.setAttribute("data-overflow", document.documentElement.scrollWidth - document.documentElement.clientWidth)</script></body>`
	path := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(path, []byte(strings.Replace(page, "</body>", probe, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	dom := browse(t, bin, "--dump-dom", fmt.Sprintf("--window-size=%d,900", width), "file://"+path)
	m := regexp.MustCompile(`data-overflow="(-?\d+)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the probe did not run in Chromium:\n%.600s", dom)
	}
	over, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return over
}

// waitStatus polls /api/status until the pipeline's status satisfies cond
// and returns it.
func waitStatus(t *testing.T, addr, what string, cond func(statuspage.PipelineStatus) bool) statuspage.PipelineStatus {
	t.Helper()
	var last statuspage.PipelineStatus
	stacktest.Eventually(t, stallWait, what, func() (bool, string) {
		p, err := pipelineStatus(addr)
		if err != nil {
			return false, err.Error()
		}
		last = p
		b, _ := json.Marshal(p.Stall)
		return cond(p), fmt.Sprintf("stall %s, %d in flight", b, len(p.InFlightCanaries))
	})
	return last
}

func pipelineStatus(addr string) (statuspage.PipelineStatus, error) {
	res, err := http.Get("http://" + addr + "/api/status")
	if err != nil {
		return statuspage.PipelineStatus{}, err
	}
	defer res.Body.Close()
	var st statuspage.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return statuspage.PipelineStatus{}, fmt.Errorf("/api/status: %w", err)
	}
	for _, p := range st.Pipelines {
		if p.Name == pipelineName {
			return p, nil
		}
	}
	return statuspage.PipelineStatus{}, errors.New("/api/status: no pipeline " + pipelineName)
}

// outputDir is where the test keeps what it saves: go test's -outputdir
// when given (a path that outlives the test), else the test's artifact
// directory (kept with -artifacts).
func outputDir(t *testing.T) string {
	t.Helper()
	if f := flag.Lookup("test.outputdir"); f != nil && f.Value.String() != "" {
		dir := f.Value.String()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}
