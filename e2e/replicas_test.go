package e2e

// TestTwoProberReplicasOneKilledStalledBothKilled proves issue 27's
// redundant probers with real servers only: two `outbox-canary run`
// processes, each with its own instance id, listening port and state
// directory, measure one pipeline of the local stack (the quiet-versus-
// stalled test's: schema A, the reference relay in-process, 1s canaries,
// a 5s end-to-end budget, stall_intervals 2), both scraped under one job by
// one Prometheus evaluating the generated rules and sending to the
// Alertmanager `outbox-canary rules --format alertmanager` configures
// (receivers filled in with a webhook; group_wait 1s, group_interval 5s so
// a second notification of a group would come within the test). In turn:
//
//  1. One replica is killed (SIGKILL): no page, for as long as a page about
//     a missing prober would take (prober_absent_for plus the dead man's
//     for); the pipeline's SLI events keep growing at every step and every
//     burn-rate recording has a value at every evaluation. The replica is
//     restarted on its state directory, and the same holds through the
//     restart, and no bad event is counted. The rules know two replicas
//     run (alerting.replicas), so the loss is one ticket to the prober's
//     owner (OutboxCanaryRedundancyLost).
//  2. With both up, the relay is paused: the relay's owner is paged, with
//     the stall alone, and no one else; exactly once, one stall alert in
//     one webhook call.
//  3. Both are killed: the dead man pages the prober's owner.
//
// The assertions read notifications at the webhook and series in
// Prometheus, not rule text.
//
// Run it with the local stack up:
//
//	go test -count=1 -v -run TestTwoProberReplicas ./e2e/
//
// It takes about three minutes, most of it two dead-man windows: the
// generated dead man's for is 1m whatever prober_absent_for is, and the
// loss of one replica is watched for as long as a page about it would
// take.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	proberReplicas = 2
	// replicasAlerting tells the rules how many replicas run, so that the
	// loss of one is a ticket (OutboxCanaryRedundancyLost).
	replicasAlerting = "  replicas: 2\n"
	// ownerProber owns the alerts about the prober itself.
	ownerProber = "team-canary"
	// replicasAbsentFor is alerting.prober_absent_for: a few 1s scrapes,
	// so one slow scrape is no absence.
	replicasAbsentFor = 5 * time.Second
	// replicasGroupInterval is the generated route's group_interval: a
	// second notification of a group already notified comes this long
	// after the first.
	replicasGroupInterval = 5 * time.Second
	// stallThreshold is startPipeline's stall: the 5s end-to-end budget
	// plus 2 canary intervals of 1s without a delivery.
	stallThreshold = 7 * time.Second
	// sliStepWindow is the window of "the SLI events grew": ten canary
	// intervals. A step of a replica's restart or loss with no event in
	// it is a hole in the pipeline's SLI.
	sliStepWindow = 10 * time.Second
	// alertRoom is what the deadlines of the alerts add to the rules'
	// own delays: evaluations, scrapes and a webhook call on a loaded
	// 2-core machine. A deadline, not a timing claim.
	alertRoom = 60 * time.Second
	// evaluationsRoom is what a watch for an alert that must not come
	// adds to the rules' own delays: a few 1s evaluations and scrapes.
	evaluationsRoom = 10 * time.Second
)

func TestTwoProberReplicasOneKilledStalledBothKilled(t *testing.T) {
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

	faults, cfg, cfgPath := startPipelineWith(t, s, pipelineOptions{
		alerting: fmt.Sprintf("  prober_absent_for: %s\n  prober_owner: %s\n%s", model.Duration(replicasAbsentFor), ownerProber, replicasAlerting),
	})

	// The replicas: the chart's way, one configuration file, each its own
	// --instance.id and --state.dir.
	type replica struct {
		id, addr, stateDir string
		p                  *proberProcess
	}
	var replicas []*replica
	var targets []string
	for i := range proberReplicas {
		r := &replica{id: fmt.Sprintf("e2e-replica-%d", i), addr: stacktest.FreeAddr(t), stateDir: filepath.Join(t.TempDir(), "state")}
		r.p = runProber(t, cfgPath, r.addr, "--instance.id", r.id, "--state.dir", r.stateDir)
		replicas = append(replicas, r)
		targets = append(targets, r.addr)
	}
	var runs []*proberProcess // every process, restarts too, for the logs
	for _, r := range replicas {
		runs = append(runs, r.p)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range runs {
				t.Logf("prober %s log:\n%s", p.addr, p.logs.String())
			}
		}
	})

	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "outbox-canary.rules.yml")
	gen := writeRules(t, cfg, rulesPath)
	md, err := model.ParseDuration(cmp.Or(gen.deadManFor, "0s"))
	if err != nil {
		t.Fatalf("the dead man's for %q: %v", gen.deadManFor, err)
	}
	deadManFor := time.Duration(md)
	hook := newWebhook(t)
	amConfig, err := alerts.AlertmanagerConfig(gen.model, alerts.AlertmanagerOptions{
		GroupWait: amGroupWait, GroupInterval: replicasGroupInterval, WebhookURL: hook.url,
	})
	if err != nil {
		t.Fatal(err)
	}
	am := startAlertmanager(t, s.AlertmanagerPath, amConfig)
	prom := startPrometheus(t, s.PrometheusPath, promConfig{
		scrape: time.Second, eval: time.Second, ruleFiles: []string{rulesPath},
		job: proberJob, targets: targets, alertmanager: am.addr,
	})
	am.waitReady(t)
	prom.waitReady(t)
	moment("%d probers (%s) on pipeline %s; Prometheus %s, Alertmanager %s", proberReplicas, strings.Join(targets, ", "), pipelineName, prom.addr, am.addr)

	// contributing lists the instances whose end-to-end SLI events grew
	// in the last sliStepWindow.
	contributing := func() ([]string, error) {
		ss, err := promQuery(ctx, prom.addr, fmt.Sprintf(`sum by (instance) (increase(%s{pipeline=%q, segment=%q}[%s])) > 0`,
			slo.MetricSLIEvents, pipelineName, config.SegmentEndToEnd, model.Duration(sliStepWindow)))
		var out []string
		for _, smp := range ss {
			out = append(out, smp.Metric["instance"])
		}
		sort.Strings(out)
		return out, err
	}

	// Warm: both replicas' events reach Prometheus, the SLI recordings of
	// every budgeted segment exist, no alert is active.
	segments := cfg.Pipelines[0].BudgetedSegments()
	sliQuery := fmt.Sprintf(`slo:sli_error:ratio_rate5m{sloth_service=%q}`, pipelineName)
	stacktest.EventuallyEvery(t, warmupTimeout, pollEvery, "both replicas' SLI events in Prometheus, its SLI recordings, no alert active", func() (bool, string) {
		in, err := contributing()
		sli, serr := promQuery(ctx, prom.addr, sliQuery)
		as, aerr := promAlerts(ctx, prom.addr)
		return err == nil && serr == nil && aerr == nil && len(in) == proberReplicas && len(sli) == len(segments) && len(as) == 0,
			fmt.Sprintf("events from %v (%v); %d of %d SLI series (%v); alerts %s (%v)", in, err, len(sli), len(segments), serr, describeAlerts(as), aerr)
	})
	// The burn-rate recordings that must stay continuous: every one the
	// rules record for the pipeline, as they are now.
	recordings := fmt.Sprintf(`count by (__name__, sloth_slo) ({__name__=~"slo:sli_error:ratio_rate.+", sloth_service=%q})`, pipelineName)
	rs, err := promQuery(ctx, prom.addr, recordings)
	if err != nil || len(rs) < len(segments) {
		t.Fatalf("the burn-rate recordings of %s: %d series (%v), want at least one per segment %v", pipelineName, len(rs), err, segments)
	}
	moment("warm: both replicas' events in Prometheus, %d burn-rate recordings, no alert active", len(rs))

	// 1. One replica lost, then back.
	lost := replicas[1]
	killedAt := time.Now()
	lost.p.kill(t)
	moment("SIGKILL %s (%s)", lost.id, lost.addr)
	// A page about a missing prober would be due once it has been absent
	// for prober_absent_for and the dead man's for has passed.
	oneDownWatch := replicasAbsentFor + deadManFor + amGroupWait + evaluationsRoom
	var ticket *delivery
	for watchEnd, deadline := time.Now().Add(oneDownWatch), time.Now().Add(oneDownWatch+alertRoom); ; time.Sleep(pollEvery) {
		ds, _ := hook.deliveries()
		if pages := pagesSince(ds, killedAt); len(pages) > 0 {
			t.Fatalf("one of two replicas lost: paged %s", describeDeliveries(pages, killedAt))
		}
		if ticket == nil {
			if d := firstFiring(ds, killedAt, alerts.AlertRedundancyLost); d != nil {
				ticket = d
				moment("%s sent to %s (+%.1fs after the kill)", alerts.AlertRedundancyLost, d.Receiver, d.Received.Sub(killedAt).Seconds())
			}
		}
		if time.Now().After(watchEnd) && ticket != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("one of two replicas lost: no %s notification within %s of the kill; notifications: %s",
				alerts.AlertRedundancyLost, oneDownWatch+alertRoom, describeDeliveries(since(ds, killedAt), killedAt))
		}
	}
	ds, _ := hook.deliveries()
	moment("one replica down for %s: no page; notifications since the kill: %s", time.Since(killedAt).Round(time.Second), describeDeliveries(since(ds, killedAt), killedAt))
	if want := alerts.ReceiverName(ownerProber, config.SeverityTicket); ticket.Receiver != want {
		t.Errorf("%s went to %s, want %s", alerts.AlertRedundancyLost, ticket.Receiver, want)
	}

	// The lost replica comes back on its own state directory and address.
	restartedAt := time.Now()
	lost.p = runProber(t, cfgPath, lost.addr, "--instance.id", lost.id, "--state.dir", lost.stateDir)
	runs = append(runs, lost.p)
	stacktest.EventuallyEvery(t, warmupTimeout, pollEvery, "both replicas' events in Prometheus again, no page firing", func() (bool, string) {
		in, err := contributing()
		as, aerr := promAlerts(ctx, prom.addr)
		return err == nil && aerr == nil && len(in) == proberReplicas && !anyFiringPage(as),
			fmt.Sprintf("events from %v (%v); alerts %s (%v)", in, err, describeAlerts(as), aerr)
	})
	bothBack := time.Now()
	moment("%s restarted: both replicas' events in Prometheus again +%.1fs after the restart", lost.id, bothBack.Sub(restartedAt).Seconds())
	ds, _ = hook.deliveries()
	if pages := pagesSince(ds, killedAt); len(pages) > 0 {
		t.Errorf("one of two replicas lost and restarted: paged %s", describeDeliveries(pages, killedAt))
	}
	// Nor did it cost budget: the canaries in flight at the kill are the
	// lost replica's downtime, charged to no segment.
	badQuery := fmt.Sprintf(`sum by (segment) (increase(%s{pipeline=%q, outcome="bad"}[%s]))`,
		slo.MetricSLIEvents, pipelineName, model.Duration(bothBack.Sub(killedAt).Round(time.Second)+sliStepWindow))
	bad, err := promQuery(ctx, prom.addr, badQuery)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		if b.Value > 0 {
			t.Errorf("one of two replicas lost and restarted: %.0f bad SLI events of segment %s (%s)", b.Value, b.Metric[slo.LabelSegment], describeSamples(bad))
			break
		}
	}

	// Continuity over the loss and the restart, at every evaluation: each
	// budgeted segment's events grew within sliStepWindow, and each
	// burn-rate recording had a value.
	step := time.Second
	events := fmt.Sprintf(`sum by (segment) (increase(%s{pipeline=%q, segment=~%q}[%s])) > 0`,
		slo.MetricSLIEvents, pipelineName, strings.Join(segments, "|"), model.Duration(sliStepWindow))
	for _, c := range []struct {
		what, query string
		want        []map[string]string
	}{
		{"the SLI events of each segment grew", events, segmentLabels(segments)},
		{"the burn-rate recording had a value", recordings, metrics(rs)},
	} {
		got, err := promQueryRange(ctx, prom.addr, c.query, killedAt, bothBack, step)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			holes := holesIn(got, want, killedAt, bothBack, step)
			if len(holes) > 0 {
				t.Errorf("from the kill to both replicas back, %s %v not at every %s step: missing %s", c.what, sortedLabels(want), step, strings.Join(holes, ", "))
			}
		}
	}
	moment("from the kill to both back (%s): every step has events of %v and a value of the %d burn-rate recordings", bothBack.Sub(killedAt).Round(time.Second), segments, len(rs))
	if t.Failed() {
		t.FailNow()
	}

	// 2. Both up, the relay stalled: one page, to the relay's owner.
	pausedAt := time.Now()
	faults.Pause()
	moment("relay paused")
	var page *delivery
	stacktest.EventuallyEvery(t, stallTimeout, pollEvery, alerts.AlertStalled+" notified", func() (bool, string) {
		ds, _ := hook.deliveries()
		page = firstFiring(ds, pausedAt, alerts.AlertStalled)
		return page != nil, describeDeliveries(since(ds, pausedAt), pausedAt)
	})
	moment("%s sent to %s (+%.1fs after the pause)", alerts.AlertStalled, page.Receiver, page.Received.Sub(pausedAt).Seconds())
	// The replicas see the stall at most a canary interval and a scrape
	// apart; a second page of either would come within a group_interval.
	settle := stallThreshold + amGroupWait + 2*replicasGroupInterval
	stalledIn := map[string]bool{} // firing stall alerts by their labels
	for end := time.Now().Add(settle); time.Now().Before(end); time.Sleep(pollEvery) {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("stall: %v", err)
		}
		for _, a := range as {
			if a.State == "firing" && a.Labels["alertname"] == alerts.AlertStalled {
				stalledIn[sortedLabels(a.Labels)] = true
			}
		}
	}
	ds, _ = hook.deliveries()
	pages := pagesSince(ds, pausedAt)
	moment("stall: Prometheus fired %d %s alert(s) %v; %s after the first page the receivers were sent %s",
		len(stalledIn), alerts.AlertStalled, slices.Sorted(maps.Keys(stalledIn)), settle, describeDeliveries(since(ds, pausedAt), pausedAt))
	// Whatever the rules, the stall pages its owner and no one else, and
	// with nothing but the stall.
	wantReceiver := alerts.ReceiverName(ownerRelay, config.SeverityPage)
	for _, d := range pages {
		for _, a := range d.Alerts {
			if d.Receiver != wantReceiver || (a.Status == "firing" && a.Labels["alertname"] != alerts.AlertStalled) {
				t.Errorf("stall with both replicas up: paged %s, want pages to %s with %s alone", describeDeliveries(pages, pausedAt), wantReceiver, alerts.AlertStalled)
				break
			}
		}
	}
	// One page is one webhook call carrying one firing stall alert: not
	// one per replica, whether Alertmanager batches them or not.
	stallNotes := 0
	for _, d := range pages {
		for _, a := range d.Alerts {
			if a.Status == "firing" && a.Labels["alertname"] == alerts.AlertStalled {
				stallNotes++
			}
		}
	}
	if len(pages) != 1 || stallNotes != 1 {
		t.Errorf("stall with both replicas up: %d page calls with %d firing %s notifications %s, want exactly one of each", len(pages), stallNotes, alerts.AlertStalled, describeDeliveries(pages, pausedAt))
	}
	faults.Resume()
	moment("relay resumed")

	// 3. Both lost: the dead man pages the prober's owner.
	bothKilledAt := time.Now()
	for _, r := range replicas {
		r.p.kill(t)
	}
	moment("SIGKILL both replicas")
	var deadMan *delivery
	stacktest.EventuallyEvery(t, replicasAbsentFor+deadManFor+amGroupWait+alertRoom, pollEvery, alerts.AlertProberAbsent+" notified", func() (bool, string) {
		ds, _ := hook.deliveries()
		deadMan = firstFiring(ds, bothKilledAt, alerts.AlertProberAbsent)
		return deadMan != nil, describeDeliveries(since(ds, bothKilledAt), bothKilledAt)
	})
	moment("%s sent to %s (+%.1fs after the kill)", alerts.AlertProberAbsent, deadMan.Receiver, deadMan.Received.Sub(bothKilledAt).Seconds())
	if want := alerts.ReceiverName(ownerProber, config.SeverityPage); deadMan.Receiver != want {
		t.Errorf("%s went to %s, want %s", alerts.AlertProberAbsent, deadMan.Receiver, want)
	}
	_, undecodable := hook.deliveries()
	for _, b := range undecodable {
		t.Errorf("webhook: undecodable notification: %s", b)
	}
}

// since returns the deliveries received after from.
func since(ds []delivery, from time.Time) []delivery {
	var out []delivery
	for _, d := range ds {
		if d.Received.After(from) {
			out = append(out, d)
		}
	}
	return out
}

// pagesSince returns the deliveries received after from that carry a
// firing page.
func pagesSince(ds []delivery, from time.Time) []delivery {
	var out []delivery
	for _, d := range since(ds, from) {
		for _, a := range d.Alerts {
			if a.Status == "firing" && a.Labels["severity"] == config.SeverityPage {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// firstFiring returns the first delivery received after from that carries
// the alert alertname firing, or nil.
func firstFiring(ds []delivery, from time.Time, alertname string) *delivery {
	for _, d := range since(ds, from) {
		for _, a := range d.Alerts {
			if a.Status == "firing" && a.Labels["alertname"] == alertname {
				return &d
			}
		}
	}
	return nil
}

func anyFiringPage(as []promAlert) bool {
	for _, a := range as {
		if a.State == "firing" && a.Labels["severity"] == config.SeverityPage {
			return true
		}
	}
	return false
}

func segmentLabels(segments []string) []map[string]string {
	var out []map[string]string
	for _, s := range segments {
		out = append(out, map[string]string{slo.LabelSegment: s})
	}
	return out
}

func metrics(ss []promSample) []map[string]string {
	var out []map[string]string
	for _, s := range ss {
		out = append(out, s.Metric)
	}
	return out
}

// holesIn returns the steps from start to end at which the series with
// exactly the labels want has no value (or, if it is missing, "all").
func holesIn(got []promSeries, want map[string]string, start, end time.Time, step time.Duration) []string {
	for _, s := range got {
		if !maps.Equal(s.Metric, want) {
			continue
		}
		have := map[int64]bool{}
		for _, v := range s.Values {
			have[v.T.UnixMilli()] = true
		}
		var holes []string
		for at := time.UnixMilli(start.UnixMilli()); !at.After(end); at = at.Add(step) {
			if !have[at.UnixMilli()] {
				holes = append(holes, fmt.Sprintf("+%.0fs", at.Sub(start).Seconds()))
			}
		}
		return holes
	}
	return []string{"all"}
}
