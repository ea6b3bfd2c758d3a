package e2e

// TestQuietVersusStalledThroughPrometheusAndAlertmanager proves, with real
// servers only, the product's central promise: the rules that `outbox-canary
// rules` generates stay silent on a quiet pipeline (no business traffic,
// canaries flowing) and page the team that owns the stalled stage, once,
// through the Alertmanager configuration that `outbox-canary rules --format
// alertmanager` generates, and once through an Alertmanager configured as
// many teams do beside it (group_by [alertname, pipeline], routes by
// severity, none of our inhibit rules: teamsAlertmanagerConfig); and the
// page does not resolve the moment the pipeline recovers but is held by
// keep_firing_for. A fresh PostgreSQL
// database (seed schema A) and Kafka topic from the local stack, the
// reference relay in-process, the prober binary (`outbox-canary run`), and
// Debian's Prometheus 2.42 and Alertmanager 0.25 started by the test on
// free loopback ports with fresh data directories, loading the generated
// rule file and Alertmanager configuration (its receivers filled in with
// a webhook inside the test, its group_wait shortened to 1s; group_interval
// is Alertmanager's default 5m). The promtool tests in alerts/ prove the
// rules on synthetic series; this one proves them on the series the prober
// really exports, scraped and evaluated by a real server, routed and
// inhibited by a real Alertmanager.
//
// The pipeline's objective is 99.99%, so the burn-rate pages (6 bad
// canaries in the hour at 1s canaries) would be due seconds after the
// stall page; the rules hold them back while the stall is in their short
// windows (issue 26), and the test sees them stay quiet while their bad
// canaries pile up, not merely not contradicted. Recovery
// is checked within keep_firing_for (9m for the stall alert): the stall
// condition clears and the alert keeps firing in Prometheus, so nothing
// could send "resolved"; the test does not wait for it to expire (alerts/
// scenario f proves that).
//
// Run it with the local stack up (`make stack-up`, or `make test`):
//
//	go test -count=1 -v ./e2e/
//
// It takes about a minute. Without the stack it skips (and fails with
// CI=true). The moments of pause, firing, notification, resume and
// clearing are logged with -v. docs/detection.md measures the same chain
// at production settings (`make detect`).

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/alerts"
	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	// pipelineName and proberJob tie the config, the scrape job and the
	// assertions together.
	pipelineName = "orders"
	proberJob    = "outbox-canary-e2e"
	// ownerDefault owns end_to_end (no owner of its own); the relay and
	// broker segments have owners of their own.
	ownerDefault = "team-orders"
	ownerRelay   = "team-relay"
	ownerKafka   = "team-kafka"

	// quietFor is how long the quiet pipeline must stay silent.
	quietFor = 20 * time.Second
	// warmupTimeout bounds the wait until Prometheus has the SLI series.
	warmupTimeout = 60 * time.Second
	// stallTimeout and resolveTimeout bound the waits for the pages and
	// for the stall to clear. They are deadlines for a behaviour, not
	// timing claims: with 1s scrapes and evaluations, a 7s stall
	// threshold and 6 bad canaries for a burn page, both come within
	// seconds on an idle machine. The budgets leave a quiet pipeline
	// seconds of headroom: on a 2-core CI box under stress-ng a healthy
	// canary took over 1s from publish to consume, and the quiet phase
	// asserts no bad event at all.
	stallTimeout   = 90 * time.Second
	resolveTimeout = 60 * time.Second
	// inhibitSettle is how long a suppressed alert is watched for a
	// notification it must not cause: several group_waits of the
	// generated route (set to amGroupWait here).
	inhibitSettle = 5 * time.Second
	amGroupWait   = time.Second
	// heldEvaluations is how many evaluations after the stall cleared the
	// alert must still be firing, held by keep_firing_for.
	heldEvaluations = 3
	pollEvery       = 500 * time.Millisecond
)

func TestQuietVersusStalledThroughPrometheusAndAlertmanager(t *testing.T) {
	t.Parallel()
	s := stacktest.Load(t)
	if s.PrometheusPath == "" || s.AlertmanagerPath == "" {
		msg := "the stack env names no prometheus or alertmanager binary (OUTBOX_CANARY_PROMETHEUS, OUTBOX_CANARY_ALERTMANAGER)"
		stacktest.Unavailable(t, "%s", msg)
	}
	ctx := context.Background()
	start := time.Now()
	// moment logs an event with its wall-clock time and the time since the
	// test started, so the lead can quote the sequence.
	moment := func(format string, args ...any) {
		t.Helper()
		now := time.Now()
		t.Logf("[%s +%5.1fs] %s", now.Format("15:04:05.000"), now.Sub(start).Seconds(), fmt.Sprintf(format, args...))
	}

	// 1. The pipeline: schema A, the reference relay, the prober.
	faults, cfg, cfgPath := startPipeline(t, s)
	proberAddr, proberLog := startProber(t, cfgPath)
	moment("pipeline up: relay polling every 20ms, prober on %s sending a canary every 1s", proberAddr)

	// 2. The generated rules and Alertmanager configuration, Alertmanager
	// and Prometheus.
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "outbox-canary.rules.yml")
	gen := writeRules(t, cfg, rulesPath)
	hook := newWebhook(t)
	amConfig, err := alerts.AlertmanagerConfig(gen.model, alerts.AlertmanagerOptions{GroupWait: amGroupWait, WebhookURL: hook.url})
	if err != nil {
		t.Fatal(err)
	}
	am := startAlertmanager(t, s.AlertmanagerPath, amConfig)
	// Beside it, an Alertmanager configured as many teams do (grouped by
	// alert name and pipeline, no inhibit rules of ours): the rules alone
	// must keep the stall to one page there too.
	teamsHook := newWebhook(t)
	teamsAM := startAlertmanager(t, s.AlertmanagerPath, teamsAlertmanagerConfig(teamsHook, amGroupWait, amGroupIntervalLoop))
	prom := startPrometheus(t, s.PrometheusPath, promConfig{
		scrape: time.Second, eval: time.Second, ruleFiles: []string{rulesPath},
		job: proberJob, targets: []string{proberAddr}, alertmanager: am.addr, moreAlertmanagers: []string{teamsAM.addr},
	})
	am.waitReady(t)
	teamsAM.waitReady(t)
	prom.waitReady(t)
	moment("Prometheus (%s) and Alertmanager (%s) ready", prom.addr, am.addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prober log:\n%s", proberLog.String())
		}
	})

	// Warm-up: Prometheus has scraped the prober and evaluated the SLI
	// recordings for every budgeted segment. Alerts seen before that are
	// logged, not failed: the quiet phase starts once the start-up is over.
	segments := cfg.Pipelines[0].BudgetedSegments() // commit_to_publish, publish_to_consume, end_to_end
	sliQuery := fmt.Sprintf(`slo:sli_error:ratio_rate5m{sloth_service=%q}`, pipelineName)
	seenAtStart := map[string]bool{}
	deadline := time.Now().Add(warmupTimeout)
	for {
		sli, err := promQuery(ctx, prom.addr, sliQuery)
		as, aerr := promAlerts(ctx, prom.addr)
		for _, a := range as {
			if k := alertKey(a.Labels); !seenAtStart[k] {
				seenAtStart[k] = true
				moment("start-up: %s is %s (before the quiet phase; not a failure)", k, a.State)
			}
		}
		if err == nil && aerr == nil && len(sli) == len(segments) && len(as) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has not got the SLI recordings of %v with no alert active within %s: %d series of %s (err %v), alerts %v (err %v)",
				segments, warmupTimeout, len(sli), sliQuery, err, describeAlerts(as), aerr)
		}
		time.Sleep(pollEvery)
	}
	moment("warm: Prometheus records %s for %d segments and holds no alert", sliQuery, len(segments))

	// 3. Quiet: no business traffic, canaries flowing. Nothing may be
	// pending or firing, and nothing may be sent to a receiver.
	quietStart := time.Now()
	moment("quiet phase: %s with no business traffic", quietFor)
	reported := map[string]bool{}
	for time.Since(quietStart) < quietFor {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("quiet phase: %v", err)
		}
		for _, a := range as {
			if k := alertKey(a.Labels) + " " + a.State; !reported[k] {
				reported[k] = true
				t.Errorf("quiet phase: %s is %s (active since %s, value %s) on a quiet pipeline whose canaries flow",
					alertKey(a.Labels), a.State, a.ActiveAt.Format("15:04:05.000"), a.Value)
			}
		}
		time.Sleep(pollEvery)
	}
	ns, bad := hook.notifications()
	for _, n := range ns {
		if seenAtStart[alertKey(n.Labels)] {
			moment("start-up: %s was sent %s %s at %s", n.Receiver, alertKey(n.Labels), n.Status, n.Received.Format("15:04:05.000"))
			continue
		}
		if n.Status == "firing" {
			t.Errorf("quiet phase: %s was sent %s firing (at %s)", n.Receiver, alertKey(n.Labels), n.Received.Format("15:04:05.000"))
		}
	}
	for _, b := range bad {
		t.Errorf("webhook: undecodable notification: %s", b)
	}
	// The SLI series exist and say zero errors: a quiet pipeline is
	// measured (0), not unmeasured (no series, or NaN from 0/0).
	sli, err := promQuery(ctx, prom.addr, sliQuery)
	if err != nil {
		t.Fatal(err)
	}
	gotSegs := map[string]float64{}
	for _, smp := range sli {
		gotSegs[smp.Metric[slo.LabelSegment]] = smp.Value
	}
	for _, seg := range segments {
		v, ok := gotSegs[seg]
		if !ok || v != 0 {
			t.Errorf("quiet phase: %s for segment %s = %v (present %v), want 0", sliQuery, seg, v, ok)
		}
	}
	good, err := promQuery(ctx, prom.addr, fmt.Sprintf(`sum by (segment) (increase(%s{pipeline=%q, outcome="good"}[%s]))`,
		slo.MetricSLIEvents, pipelineName, slo.PromDuration(quietFor)))
	if err != nil {
		t.Fatal(err)
	}
	if len(good) != len(segments) {
		t.Errorf("quiet phase: good SLI events over the quiet phase in %d segments, want %d: %v", len(good), len(segments), good)
	}
	for _, smp := range good {
		if smp.Value < 5 {
			t.Errorf("quiet phase: segment %s had %.1f good canaries in %s, want a canary about every second", smp.Metric[slo.LabelSegment], smp.Value, quietFor)
		}
	}
	moment("quiet phase over: no alert pending or firing, nothing sent; %s = 0 for %v; good events %s", sliQuery, segments, describeSamples(good))
	if t.Failed() {
		t.FailNow()
	}

	// 4. Stall: pause the relay. The stall alert blamed on the relay's
	// segment fires in Prometheus and reaches the relay's team. The burn
	// pages' counts are reached seconds later (the stall's bad canaries
	// keep coming), and they stay quiet: the stall is the incident's one
	// page.
	relayStall := gen.stall[gen.relaySegment]
	pausedAt := time.Now()
	faults.Pause()
	moment("relay paused")
	watch := newAlertWatch(moment)
	var notified *time.Time
	var stallNote notification
	burnDue := fmt.Sprintf(`sum(increase(%s{pipeline=%q, segment=%q, outcome="bad"}[1m])) > 6`, slo.MetricSLIEvents, pipelineName, gen.relaySegment)
	var burnDueAt time.Time
	deadline = time.Now().Add(stallTimeout)
	for {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("stall: %v", err)
		}
		watch.observe(as, pausedAt)
		if notified == nil {
			ns, _ := hook.notifications()
			for _, n := range ns {
				if n.Labels["alertname"] == alerts.AlertStalled && n.Status == "firing" && n.Received.After(pausedAt) {
					stallNote, notified = n, &n.Received
					moment("webhook: %s was sent %s firing (+%.1fs after the pause)", n.Receiver, alertKey(n.Labels), n.Received.Sub(pausedAt).Seconds())
					break
				}
			}
		}
		if burnDueAt.IsZero() {
			if due, err := promQuery(ctx, prom.addr, burnDue); err == nil && len(due) > 0 {
				burnDueAt = time.Now()
				moment("Prometheus holds more than 6 bad canaries of %s in the last minute: its burn page is due, and held back", gen.relaySegment)
			}
		}
		if notified != nil && !burnDueAt.IsZero() && isFiring(as, relayStall) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stall: within %s of pausing the relay: %s notified %v; firing in Prometheus: %s %v; the burn page's count reached: %v; alerts now: %s",
				stallTimeout, alerts.AlertStalled, notified != nil, alertKey(relayStall), isFiring(as, relayStall), !burnDueAt.IsZero(), describeAlerts(as))
		}
		time.Sleep(pollEvery)
	}
	// What is held back must stay unsent: several group_waits pass while
	// it is watched.
	for end := time.Now().Add(inhibitSettle); time.Now().Before(end); time.Sleep(pollEvery) {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("stall: %v", err)
		}
		watch.observe(as, pausedAt)
	}
	for k, at := range watch.firstFiring {
		if k != alertKey(relayStall) {
			t.Errorf("stall: %s fired (+%.1fs after the pause): the stall page is the incident's only alert", k, at.Sub(pausedAt).Seconds())
		}
	}
	moment("summary: %s firing in Prometheus +%.1fs, notified +%.1fs after the pause",
		alertKey(relayStall), watch.firstFiring[alertKey(relayStall)].Sub(pausedAt).Seconds(), notified.Sub(pausedAt).Seconds())

	// One notification, to the relay team's page receiver, for the whole
	// stall: nothing to anyone else.
	wantReceiver := alerts.ReceiverName(ownerRelay, config.SeverityPage)
	ds, _ := hook.deliveries()
	var stallDeliveries []delivery
	for _, d := range ds {
		if d.Received.After(pausedAt) {
			stallDeliveries = append(stallDeliveries, d)
		}
	}
	if len(stallDeliveries) != 1 || stallDeliveries[0].Receiver != wantReceiver || stallDeliveries[0].Status != "firing" {
		t.Errorf("stall: the receivers were sent %s, want one firing notification to %s", describeDeliveries(stallDeliveries, pausedAt), wantReceiver)
	}
	teamsDs, _ := teamsHook.deliveries()
	var teamsStall []delivery
	for _, d := range teamsDs {
		if d.Received.After(pausedAt) {
			teamsStall = append(teamsStall, d)
		}
	}
	moment("the Alertmanager configured as many teams do was sent %s", describeDeliveries(teamsStall, pausedAt))
	if len(teamsStall) != 1 || teamsStall[0].Receiver != "pager" || teamsStall[0].Status != "firing" || len(teamsStall[0].Alerts) != 1 || teamsStall[0].Alerts[0].Labels["alertname"] != alerts.AlertStalled {
		t.Errorf("stall: the Alertmanager configured as many teams do sent %s, want one firing notification to pager with %s alone", describeDeliveries(teamsStall, pausedAt), alerts.AlertStalled)
	}

	// The stall alert carries exactly the generated rule's labels and the
	// alert's name: no target label (job, instance), since the rule
	// aggregates across prober replicas. The page names the stalled
	// stage's owner.
	wantNote := maps.Clone(relayStall)
	gotNote := maps.Clone(stallNote.Labels)
	if since, err := time.Parse(time.RFC3339, gotNote[alerts.LabelStalledSince]); err != nil || since.After(pausedAt) {
		t.Errorf("stall notification label %s = %q, want the last delivery before the pause (%s), RFC 3339: %v", alerts.LabelStalledSince, gotNote[alerts.LabelStalledSince], pausedAt.UTC().Format(time.RFC3339), err)
	}
	delete(gotNote, alerts.LabelStalledSince)
	if !maps.Equal(gotNote, wantNote) {
		t.Errorf("stall notification labels = %v, want exactly %v", sortedLabels(stallNote.Labels), sortedLabels(wantNote))
	}
	for k, v := range map[string]string{slo.LabelPipeline: pipelineName, "severity": config.SeverityPage, slo.LabelOwner: ownerRelay, slo.LabelSegment: gen.relaySegment} {
		if stallNote.Labels[k] != v {
			t.Errorf("stall notification label %s = %q, want %q", k, stallNote.Labels[k], v)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// 5. Resume: the stall condition clears, and keep_firing_for holds the
	// alert: it keeps firing (so no "resolved" can be sent) for as long as
	// the dead man would need to explain a prober that went away. The
	// test watches a few evaluations of that, not the 9 minutes.
	resumedAt := time.Now()
	faults.Resume()
	moment("relay resumed")
	group := gen.stallGroup
	var clearedAt time.Time
	deadline = time.Now().Add(resolveTimeout)
	for {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("resume: %v", err)
		}
		watch.observe(as, pausedAt)
		if clearedAt.IsZero() {
			cond, err := promQuery(ctx, prom.addr, strings.Join(gen.stallRules, " or "))
			if err == nil && len(cond) == 0 {
				clearedAt = time.Now()
				moment("the stall condition is false in Prometheus (+%.1fs after the resume)", clearedAt.Sub(resumedAt).Seconds())
			}
		}
		if !clearedAt.IsZero() {
			evals, err := promRuleGroups(ctx, prom.addr)
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			if evals[group].After(clearedAt.Add(time.Duration(heldEvaluations) * time.Second)) {
				if !isFiring(as, relayStall) {
					t.Errorf("resume: %d evaluations after the stall condition cleared, %s is no longer firing; keep_firing_for %s should hold it: alerts now %s",
						heldEvaluations, alertKey(relayStall), gen.keepFiringFor, describeAlerts(as))
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("resume: within %s of resuming the relay, the stall condition cleared: %v; alerts now: %s",
				resolveTimeout, !clearedAt.IsZero(), describeAlerts(as))
		}
		time.Sleep(pollEvery)
	}
	// keep_firing_for is proven above, in Prometheus. A group notified
	// already cannot be notified again within group_interval (5m here, far
	// longer than this phase), so this check only catches a group the
	// recovery would newly open, such as a page to another team.
	ds, _ = hook.deliveries()
	teamsDs, _ = teamsHook.deliveries()
	for _, d := range append(ds, teamsDs...) {
		if d.Received.After(resumedAt) {
			t.Errorf("resume: %s was sent a %s notification (+%.1fs after the resume) while keep_firing_for holds the alerts: %s",
				d.Receiver, d.Status, d.Received.Sub(resumedAt).Seconds(), describeDeliveries([]delivery{d}, resumedAt))
		}
	}
	moment("summary: the stall cleared, %s still firing in Prometheus (keep_firing_for %s), no new notification", alertKey(relayStall), gen.keepFiringFor)
}

// generated is what the test reads from the generated rules.
type generated struct {
	model *slo.Model
	// relaySegment is the segment a relay stall is blamed on.
	relaySegment string
	// stall and burnPage are by segment: the labels (with alertname) of
	// the stall and burn page alerts that segment's blame raises.
	stall, burnPage map[string]map[string]string
	// stallRules are the stall alert's expressions (of every pipeline of
	// a class), and stallGroup the group that holds them.
	stallRules    []string
	stallGroup    string
	keepFiringFor string
	// deadManFor is the for of the dead man (the prober absent alert).
	deadManFor string
}

// startPipeline creates a schema A database and a canary topic, runs the
// reference relay on them, and returns its fault switches and the prober's
// configuration for the pipeline. The configuration names the database by
// a file (the tests run in parallel, so none may t.Setenv).
func startPipeline(t *testing.T, s stacktest.Stack) (*relay.Faults, *config.Config, string) {
	t.Helper()
	return startPipelineWith(t, s, pipelineOptions{})
}

// pipelineOptions vary startPipeline's configuration.
type pipelineOptions struct {
	// alerting is YAML added under the configuration's alerting key, each
	// line indented by two spaces, e.g. "  prober_absent_for: 5s\n".
	alerting string
}

func startPipelineWith(t *testing.T, s stacktest.Stack, o pipelineOptions) (*relay.Faults, *config.Config, string) {
	t.Helper()
	ctx := context.Background()
	dsn, topic := s.NewDatabase(t), s.NewTopic(t, 1, nil)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, outboxsql.SchemaA); err != nil {
		t.Fatalf("schema A: %v", err)
	}
	w := relay.NewKafkaWriter(s.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.New(relay.Config{TopicTemplate: topic, PollInterval: 20 * time.Millisecond}, pool, w, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })

	dsnPath := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(dsnPath, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf(`instance_id: e2e
state_dir: %s
signing_key: {value: e2e-signing-key}
alerting:
  stall_intervals: 2
  prober_job: %s
%spipelines:
  - name: %s
    database: {dsn: {file: %q}}
    canary: {schedule: "@every 1s"}
    kafka: {brokers: [%s], topic: %s}
    budgets: {end_to_end: 5s, commit_to_publish: 3s, publish_to_consume: 3s}
    slo: {objective: 99.99}
    owners: {default: %s, commit_to_publish: %s, publish_to_consume: %s}
`, filepath.Join(t.TempDir(), "state"), proberJob, o.alerting, pipelineName, dsnPath, strings.Join(s.KafkaBrokers, ","), topic,
		ownerDefault, ownerRelay, ownerKafka)
	cfg, err := config.Load([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	path := filepath.Join(t.TempDir(), "outbox-canary.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return r.Faults(), cfg, path
}

// startProber runs `outbox-canary run` (the binary users run: prober,
// watchers and HTTP server) on the configuration file at path, on a free
// loopback port. It returns the address and the prober's log.
func startProber(t *testing.T, path string) (string, *stacktest.SyncBuffer) {
	t.Helper()
	p := runProber(t, path, stacktest.FreeAddr(t))
	return p.addr, p.logs
}

// proberProcess is one `outbox-canary run` started by a test.
type proberProcess struct {
	addr string
	logs *stacktest.SyncBuffer
	cmd  *exec.Cmd
	// exited receives the process's exit once; killed says kill took it.
	exited chan error
	killed bool
}

// runProber starts `outbox-canary run` on the configuration file at path,
// listening on addr, with more flags in args (--instance.id, --state.dir),
// and waits until it serves /healthz. At the test's end it is stopped
// with SIGTERM and must exit cleanly, unless kill took it first.
func runProber(t *testing.T, path, addr string, args ...string) *proberProcess {
	t.Helper()
	bin := stacktest.BuildCommand(t, "outbox-canary")
	p := &proberProcess{addr: addr, logs: &stacktest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"run", "--config.file", path, "--web.listen-address", addr}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the prober: %v", err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.killed {
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.exited:
			if err != nil {
				t.Errorf("prober %s: %v\n%s", addr, err, p.logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("prober %s did not stop within 30s of SIGTERM", addr)
		}
	})
	stacktest.Eventually(t, time.Minute, "the prober to serve /healthz", func() (bool, string) {
		res, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false, err.Error() + "\n" + p.logs.String()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
	return p
}

// kill ends the prober with SIGKILL, as a crash or a node's loss does:
// no shutdown, no last state write.
func (p *proberProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill the prober on %s: %v", p.addr, err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the prober on %s did not exit within 30s of SIGKILL", p.addr)
	}
	p.killed = true
}

// writeRules generates the rule file of cfg with the alerts package and
// returns what the test reads from it about pipelineName.
// generateRules is what `outbox-canary rules` generates for cfg, and the
// model it generates from.
func generateRules(t *testing.T, cfg *config.Config) (*slo.Model, *alerts.RuleFile) {
	t.Helper()
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, rf
}

func writeRules(t *testing.T, cfg *config.Config, path string) generated {
	t.Helper()
	m, rf := generateRules(t, cfg)
	var buf bytes.Buffer
	if err := alerts.Write(&buf, rf, alerts.FormatRules, cfg.Alerting.Labels); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	g := generated{model: m, stall: map[string]map[string]string{}, burnPage: map[string]map[string]string{}}
	for _, p := range m.Pipelines {
		if p.Name == pipelineName {
			g.relaySegment = p.RelaySegments()[0]
		}
	}
	// The stall alert is a rule of every pipeline of a class too: its
	// labels are the pipeline's, the blamed segment's and its owner's,
	// from the series, and the rule's severity.
	for _, grp := range rf.Groups {
		for _, r := range grp.Rules {
			switch r.Alert {
			case alerts.AlertProberAbsent:
				g.deadManFor = r.For
			case alerts.AlertStalled:
				if g.stallGroup != "" && g.stallGroup != grp.Name {
					t.Fatalf("%s rules in groups %s and %s", alerts.AlertStalled, g.stallGroup, grp.Name)
				}
				g.stallGroup, g.keepFiringFor = grp.Name, r.KeepFiringFor
				g.stallRules = append(g.stallRules, r.Expr)
			}
		}
	}
	for _, p := range m.Pipelines {
		if p.Name != pipelineName || g.stallGroup == "" {
			continue
		}
		for _, seg := range append(p.StallBlameSegments(), config.SegmentEndToEnd) {
			l := maps.Clone(cfg.Alerting.Labels)
			if l == nil {
				l = map[string]string{}
			}
			l["alertname"], l["severity"] = alerts.AlertStalled, config.SeverityPage
			l[slo.LabelPipeline], l[slo.LabelSegment], l[slo.LabelOwner] = p.Name, seg, p.Owner(seg)
			g.stall[seg] = l
		}
	}
	// The burn pages are rules of every pipeline of a class: their
	// labels are the SLO's, from its objective series (its
	// recordings'), and the rule's severity.
	pages := 0
	for _, grp := range rf.Groups {
		for _, r := range grp.Rules {
			if r.Alert == alerts.AlertErrorBudgetBurn && r.Labels["severity"] == config.SeverityPage {
				pages++
			}
		}
	}
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			if p.Name != pipelineName || pages == 0 {
				continue
			}
			l, _ := s.ObjectiveSeries()
			page := maps.Clone(cfg.Alerting.Labels)
			if page == nil {
				page = map[string]string{}
			}
			for _, name := range []string{"sloth_id", "sloth_service", "sloth_slo", slo.LabelPipeline, slo.LabelSegment, slo.LabelOwner} {
				page[name] = l[name]
			}
			page["severity"], page["sloth_severity"], page["alertname"] = config.SeverityPage, config.SeverityPage, alerts.AlertErrorBudgetBurn
			g.burnPage[s.Segment] = page
		}
	}
	for _, seg := range []string{g.relaySegment, config.SegmentEndToEnd} {
		if g.stall[seg] == nil || g.burnPage[seg] == nil {
			t.Fatalf("the generated rules lack the %s or %s page of pipeline %s segment %s", alerts.AlertStalled, alerts.AlertErrorBudgetBurn, pipelineName, seg)
		}
	}
	t.Logf("generated %s: %s of the relay's segment carries %v", filepath.Base(path), alerts.AlertStalled, sortedLabels(g.stall[g.relaySegment]))
	return g
}

// isFiring says whether Prometheus lists an alert with every label of
// want as firing.
func isFiring(as []promAlert, want map[string]string) bool {
	for _, a := range as {
		if a.State == "firing" && hasLabels(a.Labels, want) {
			return true
		}
	}
	return false
}

func hasLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// describeDeliveries lists webhook calls: when, to whom, which alerts.
func describeDeliveries(ds []delivery, since time.Time) string {
	var out []string
	for _, d := range ds {
		var names []string
		for _, a := range d.Alerts {
			names = append(names, alertKey(a.Labels)+" "+a.Status)
		}
		sort.Strings(names)
		out = append(out, fmt.Sprintf("%s %s at +%.1fs [%s]", d.Receiver, d.Status, d.Received.Sub(since).Seconds(), strings.Join(names, "; ")))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// alertWatch logs the first moment each alert is seen pending and firing.
type alertWatch struct {
	moment       func(format string, args ...any)
	firstPending map[string]time.Time // by alertKey
	firstFiring  map[string]time.Time
	logged       map[string]bool // by alertKey and state
}

func newAlertWatch(moment func(string, ...any)) *alertWatch {
	return &alertWatch{moment: moment, firstPending: map[string]time.Time{}, firstFiring: map[string]time.Time{}, logged: map[string]bool{}}
}

func (w *alertWatch) observe(as []promAlert, since time.Time) {
	now := time.Now()
	for _, a := range as {
		name := alertKey(a.Labels)
		first := w.firstPending
		if a.State == "firing" {
			first = w.firstFiring
		}
		if _, ok := first[name]; !ok {
			first[name] = now
		}
		if k := alertKey(a.Labels) + " " + a.State; !w.logged[k] {
			w.logged[k] = true
			w.moment("Prometheus: %s %s (owner %s, activeAt +%.1fs, seen +%.1fs after the pause)",
				alertKey(a.Labels), a.State, a.Labels[slo.LabelOwner], a.ActiveAt.Sub(since).Seconds(), now.Sub(since).Seconds())
		}
	}
}

// alertKey names an alert by what tells its instances apart here.
func alertKey(l map[string]string) string {
	k := l["alertname"]
	for _, name := range []string{slo.LabelSegment, "severity"} {
		if v := l[name]; v != "" {
			k += " " + name + "=" + v
		}
	}
	return k
}

func describeAlerts(as []promAlert) string {
	var out []string
	for _, a := range as {
		out = append(out, alertKey(a.Labels)+" "+a.State)
	}
	sort.Strings(out)
	return "[" + strings.Join(out, "; ") + "]"
}

func describeSamples(ss []promSample) string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s=%.0f", s.Metric[slo.LabelSegment], s.Value))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func sortedLabels(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	var out []string
	for _, k := range keys {
		out = append(out, k+"="+l[k])
	}
	return "{" + strings.Join(out, ", ") + "}"
}
