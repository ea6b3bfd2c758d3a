package e2e

// TestCrashLoopPagesOncePerIncident proves issue 26's promise with real
// servers: a relay that crash-loops is one incident, one notification to
// its owner, through the Alertmanager configuration that `outbox-canary
// rules --format alertmanager` generates and through one configured "as
// many teams do" beside it (group_by [alertname, pipeline], routes by
// severity, none of our inhibit rules), both fed by one Prometheus 2.42
// evaluating the generated rules. The pipeline is the quiet-versus-stalled
// test's (1s canaries, a 5s end-to-end budget, stall_intervals 2: a stall
// is 7s without a delivery), so the crash loop is compressed: the
// reference relay is paused for crashDown and resumed for crashUp,
// crashCycles times, every pause a stall. The rules' own timings (a stall
// incident lasts until 5 minutes without a stall; the stall page keeps
// firing 9 minutes) are those of production, so the loop is one incident
// whatever its period. Both Alertmanagers' group_interval is short
// (amGroupIntervalLoop), so a second alert in a group, or a resolve,
// would be notified within the test, not 5 minutes later.
//
// Run it with the local stack up: go test -count=1 -v -run TestCrashLoop ./e2e/
// It takes about four minutes (logged at the end).

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

const (
	crashCycles = 10
	crashDown   = 12 * time.Second
	crashUp     = 3 * time.Second
	// amGroupIntervalLoop is both Alertmanagers' group_interval: a change
	// of a group already notified is sent this long after it.
	amGroupIntervalLoop = 5 * time.Second
	// loopSettle is how long the notifications are watched after the
	// last resume: several group_intervals.
	loopSettle = 4 * amGroupIntervalLoop
)

// teamsAlertmanagerConfig is an Alertmanager configured as many teams
// configure theirs: grouped by alert name and pipeline, pages to the pager
// and tickets to a queue by severity, everything else to a default
// receiver, and no inhibit rules of ours. groupWait and groupInterval are
// its timings (production keeps Alertmanager's defaults).
func teamsAlertmanagerConfig(hook *webhook, groupWait, groupInterval time.Duration) []byte {
	return fmt.Appendf(nil, `route:
  receiver: default
  group_by: [alertname, pipeline]
  group_wait: %s
  group_interval: %s
  repeat_interval: 4h
  routes:
    - receiver: pager
      matchers: ['severity="page"']
    - receiver: tickets
      matchers: ['severity="ticket"']
receivers:
  - name: default
    webhook_configs: [{url: %q, send_resolved: true}]
  - name: pager
    webhook_configs: [{url: %q, send_resolved: true}]
  - name: tickets
    webhook_configs: [{url: %q, send_resolved: true}]
`, model.Duration(groupWait), model.Duration(groupInterval), hook.url("default"), hook.url("pager"), hook.url("tickets"))
}

func TestCrashLoopPagesOncePerIncident(t *testing.T) {
	// Beside the two-prober test: both spend minutes waiting on alert
	// windows, not CPU.
	t.Parallel()
	s := stacktest.Load(t)
	if s.PrometheusPath == "" || s.AlertmanagerPath == "" {
		stacktest.Unavailable(t, "the stack env names no prometheus or alertmanager binary (OUTBOX_CANARY_PROMETHEUS, OUTBOX_CANARY_ALERTMANAGER)")
	}
	ctx := context.Background()
	start := time.Now()
	moment := func(format string, args ...any) {
		t.Helper()
		now := time.Now()
		t.Logf("[%s +%5.1fs] %s", now.Format("15:04:05.000"), now.Sub(start).Seconds(), fmt.Sprintf(format, args...))
	}
	defer func() { moment("run time %s", time.Since(start).Round(time.Second)) }()

	faults, cfg, cfgPath := startPipeline(t, s)
	proberAddr, proberLog := startProber(t, cfgPath)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prober log:\n%s", proberLog.String())
		}
	})
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "outbox-canary.rules.yml")
	gen := writeRules(t, cfg, rulesPath)
	generatedHook, teamsHook := newWebhook(t), newWebhook(t)
	amConfig, err := alerts.AlertmanagerConfig(gen.model, alerts.AlertmanagerOptions{
		GroupWait: amGroupWait, GroupInterval: amGroupIntervalLoop, WebhookURL: generatedHook.url,
	})
	if err != nil {
		t.Fatal(err)
	}
	generatedAM := startAlertmanager(t, s.AlertmanagerPath, amConfig)
	teamsAM := startAlertmanager(t, s.AlertmanagerPath, teamsAlertmanagerConfig(teamsHook, amGroupWait, amGroupIntervalLoop))
	prom := startPrometheus(t, s.PrometheusPath, promConfig{
		scrape: time.Second, eval: time.Second, ruleFiles: []string{rulesPath},
		job: proberJob, targets: []string{proberAddr},
		alertmanager: generatedAM.addr, moreAlertmanagers: []string{teamsAM.addr},
	})
	generatedAM.waitReady(t)
	teamsAM.waitReady(t)
	prom.waitReady(t)

	// Warm: the SLI recordings of every budgeted segment, no alert active.
	segments := cfg.Pipelines[0].BudgetedSegments()
	sliQuery := fmt.Sprintf(`slo:sli_error:ratio_rate5m{sloth_service=%q}`, pipelineName)
	stacktest.Eventually(t, warmupTimeout, "Prometheus to record the SLIs with no alert active", func() (bool, string) {
		sli, err := promQuery(ctx, prom.addr, sliQuery)
		as, aerr := promAlerts(ctx, prom.addr)
		return err == nil && aerr == nil && len(sli) == len(segments) && len(as) == 0,
			fmt.Sprintf("%d of %d SLI series (%v), alerts %s (%v)", len(sli), len(segments), err, describeAlerts(as), aerr)
	})
	moment("warm: Prometheus records the SLIs of %v, no alert active; two Alertmanagers: generated (%s), as many teams run theirs (%s)", segments, generatedAM.addr, teamsAM.addr)

	// The crash loop. Every state of the stall alert Prometheus shows is
	// recorded: its incidents are told apart by stalled_since.
	relayStall := gen.stall[gen.relaySegment]
	loopStart := time.Now()
	incidents := map[string]time.Time{}
	otherFiring := map[string]time.Time{}
	// stalls are the distinct last deliveries the stall recording held:
	// one per crash that lasted past the stall threshold. Without them
	// the loop would prove nothing.
	stalls := map[float64]bool{}
	stallQuery := fmt.Sprintf(`%s{pipeline=%q}`, alerts.RecordStall, pipelineName)
	observe := func() {
		if ss, err := promQuery(ctx, prom.addr, stallQuery); err == nil {
			for _, smp := range ss {
				stalls[smp.Value] = true
			}
		}
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("crash loop: %v", err)
		}
		for _, a := range as {
			if a.State != "firing" {
				continue
			}
			if hasLabels(a.Labels, relayStall) {
				since := a.Labels[alerts.LabelStalledSince]
				if _, ok := incidents[since]; !ok {
					incidents[since] = time.Now()
					moment("Prometheus: %s firing, stalled_since %s", alertKey(a.Labels), since)
				}
				continue
			}
			if k := alertKey(a.Labels); otherFiring[k].IsZero() {
				otherFiring[k] = time.Now()
				moment("Prometheus: %s firing", k)
			}
		}
	}
	watchFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(pollEvery) {
			observe()
		}
	}
	for i := range crashCycles {
		faults.Pause()
		watchFor(crashDown)
		faults.Resume()
		watchFor(crashUp)
		if i == 0 && len(incidents) == 0 {
			// The first pause must have paged, or the loop proves nothing.
			stacktest.Eventually(t, stallTimeout, "the first crash to fire "+alerts.AlertStalled, func() (bool, string) {
				observe()
				return len(incidents) > 0, fmt.Sprintf("incidents %v", incidents)
			})
		}
	}
	loopEnd := time.Now()
	moment("crash loop over: %d cycles of %s down, %s up, in %s", crashCycles, crashDown, crashUp, loopEnd.Sub(loopStart).Round(time.Second))
	watchFor(loopSettle)

	moment("Prometheus saw %d stalls (distinct last deliveries of %s) and %d incident(s)", len(stalls), alerts.RecordStall, len(incidents))
	if len(stalls) < crashCycles/2 {
		t.Errorf("only %d of the %d crashes were stalls in Prometheus: the loop does not test what it says", len(stalls), crashCycles)
	}
	if len(incidents) != 1 {
		t.Errorf("the crash loop was %d stall incidents in Prometheus (by stalled_since: %v), want 1", len(incidents), incidents)
	}
	for k, at := range otherFiring {
		t.Errorf("%s fired during the crash loop (+%.1fs): the stall page is the incident's only alert", k, at.Sub(loopStart).Seconds())
	}
	for _, tc := range []struct {
		name     string
		hook     *webhook
		receiver string
	}{
		{"generated", generatedHook, alerts.ReceiverName(ownerRelay, config.SeverityPage)},
		{"as many teams do", teamsHook, "pager"},
	} {
		ds, bad := tc.hook.deliveries()
		for _, b := range bad {
			t.Errorf("%s Alertmanager: undecodable notification: %s", tc.name, b)
		}
		var during []delivery
		for _, d := range ds {
			if d.Received.After(loopStart) {
				during = append(during, d)
			}
		}
		moment("%s Alertmanager: %d notification(s) from the first crash to %s after the last: %s", tc.name, len(during), loopSettle, describeDeliveries(during, loopStart))
		if len(during) != 1 {
			t.Errorf("%s Alertmanager: %d notifications over the crash loop, want exactly 1, to %s: %s", tc.name, len(during), tc.receiver, describeDeliveries(during, loopStart))
			continue
		}
		d := during[0]
		var names []string
		for _, a := range d.Alerts {
			names = append(names, a.Labels["alertname"])
		}
		if d.Receiver != tc.receiver || d.Status != "firing" || !slices.Equal(names, []string{alerts.AlertStalled}) {
			t.Errorf("%s Alertmanager: the notification went to %s (%s) with [%s], want %s firing with [%s]",
				tc.name, d.Receiver, d.Status, strings.Join(names, ", "), tc.receiver, alerts.AlertStalled)
		}
	}
}
