package e2e

// TestQuietVersusStalledThroughPrometheusAndAlertmanager proves, with real
// servers only, the product's central promise: the rules that `outbox-canary
// rules` generates stay silent on a quiet pipeline (no business traffic,
// canaries flowing) and page the right owner when the pipeline stalls, and
// the page resolves when it recovers. A fresh PostgreSQL database (seed
// schema A) and Kafka topic from the local stack, the reference relay and
// the prober in-process, and Debian's Prometheus 2.42 and Alertmanager 0.25
// started by the test on free loopback ports, loading the generated rule
// file and notifying a webhook inside the test. The promtool unit tests in
// alerts/ prove the rules on synthetic series; this one proves them on the
// series the prober really exports, scraped and evaluated by a real server,
// routed by a real Alertmanager.
//
// Run it with the local stack up (`make stack-up`, or `make test`):
//
//	go test -count=1 -v ./e2e/
//
// It takes about 40 seconds. Without the stack it skips (and fails with
// CI=true). The moments of pause, firing, notification, resume and
// resolution are logged with -v.

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
	// ownerDefault owns end_to_end (no owner of its own), hence the stall
	// alert; the relay and broker segments have owners of their own.
	ownerDefault = "team-orders"
	ownerRelay   = "team-relay"
	ownerKafka   = "team-kafka"

	// quietFor is how long the quiet pipeline must stay silent.
	quietFor = 20 * time.Second
	// warmupTimeout bounds the wait until Prometheus has the SLI series.
	warmupTimeout = 60 * time.Second
	// stallTimeout and resolveTimeout bound the waits for the page and its
	// resolution. They are deadlines for a behaviour, not timing claims:
	// with 1s scrapes and evaluations and a 2s stall threshold the page
	// comes within seconds on an idle machine.
	stallTimeout   = 60 * time.Second
	resolveTimeout = 60 * time.Second
	pollEvery      = 500 * time.Millisecond
)

func TestQuietVersusStalledThroughPrometheusAndAlertmanager(t *testing.T) {
	s := stacktest.Load(t)
	if s.PrometheusPath == "" || s.AlertmanagerPath == "" {
		msg := "the stack env names no prometheus or alertmanager binary (OUTBOX_CANARY_PROMETHEUS, OUTBOX_CANARY_ALERTMANAGER)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
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

	// 2. The generated rules, Alertmanager and Prometheus.
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "outbox-canary.rules.yml")
	wantStallLabels := writeRules(t, cfg, rulesPath)
	hook := newWebhook(t)
	am := startAlertmanager(t, s.AlertmanagerPath, hook.srv.URL)
	prom := startPrometheus(t, s.PrometheusPath, rulesPath, proberAddr, am.addr)
	am.waitReady(t)
	prom.waitReady(t)
	moment("Prometheus (%s) and Alertmanager (%s) ready", prom.addr, am.addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prober log:\n%s", proberLog.String())
		}
	})

	// Warm-up: Prometheus has scraped the prober and evaluated the SLI
	// recordings for every budgeted segment. Alerts seen before that (a
	// fresh Prometheus evaluates the dead man before its first scrape) are
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
	// pending or firing, and nothing new may be sent to the receiver.
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
			moment("start-up: the receiver was sent %s %s at %s", alertKey(n.Labels), n.Status, n.Received.Format("15:04:05.000"))
			continue
		}
		if n.Status == "firing" {
			t.Errorf("quiet phase: the receiver was sent %s firing (at %s)", alertKey(n.Labels), n.Received.Format("15:04:05.000"))
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
	moment("quiet phase over: no alert pending or firing; %s = 0 for %v; good events %s", sliQuery, segments, describeSamples(good))
	if t.Failed() {
		t.FailNow()
	}

	// 4. Stall: pause the relay. The stall alert must fire in Prometheus
	// and reach the receiver with the labels of the generated rule.
	pausedAt := time.Now()
	faults.Pause()
	moment("relay paused")
	watch := newAlertWatch(moment)
	var firing, notified *time.Time
	var stallNote notification
	deadline = time.Now().Add(stallTimeout)
	for firing == nil || notified == nil {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("stall: %v", err)
		}
		watch.observe(as, pausedAt)
		if firing == nil {
			if a, ok := findAlert(as, alerts.AlertStalled); ok && a.State == "firing" {
				now := time.Now()
				firing = &now
			}
		}
		if notified == nil {
			ns, _ := hook.notifications()
			for _, n := range ns {
				if n.Labels["alertname"] == alerts.AlertStalled && n.Status == "firing" && n.Received.After(pausedAt) {
					stallNote, notified = n, &n.Received
					moment("webhook: %s firing notification received (+%.1fs after the pause)", alertKey(n.Labels), n.Received.Sub(pausedAt).Seconds())
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stall: within %s of pausing the relay, %s firing in Prometheus: %v, notified: %v; alerts now: %s",
				stallTimeout, alerts.AlertStalled, firing != nil, notified != nil, describeAlerts(as))
		}
		time.Sleep(pollEvery)
	}
	if p, ok := watch.firstPending[alerts.AlertStalled]; ok {
		moment("summary: %s first pending +%.1fs", alerts.AlertStalled, p.Sub(pausedAt).Seconds())
	} else {
		moment("summary: %s was never seen pending: its rule has no `for`, so it fires at the first evaluation that sees the stall", alerts.AlertStalled)
	}
	moment("summary: %s firing in Prometheus +%.1fs, notified +%.1fs after the pause",
		alerts.AlertStalled, watch.firstFiring[alerts.AlertStalled].Sub(pausedAt).Seconds(), notified.Sub(pausedAt).Seconds())

	// The notification carries exactly the generated rule's labels, the
	// alert's name, and the target labels that the rule's expression keeps
	// (it does not aggregate): the page is routed to the stalled stage's
	// owner.
	wantNote := maps.Clone(wantStallLabels)
	wantNote["alertname"] = alerts.AlertStalled
	wantNote["job"] = proberJob
	wantNote["instance"] = proberAddr
	if !maps.Equal(stallNote.Labels, wantNote) {
		t.Errorf("stall notification labels = %v, want exactly %v", sortedLabels(stallNote.Labels), sortedLabels(wantNote))
	}
	for k, v := range map[string]string{slo.LabelPipeline: pipelineName, "severity": config.SeverityPage, slo.LabelOwner: ownerDefault} {
		if stallNote.Labels[k] != v {
			t.Errorf("stall notification label %s = %q, want %q", k, stallNote.Labels[k], v)
		}
	}

	// 5. Resume: the alert resolves in Prometheus and the receiver is told.
	resumedAt := time.Now()
	faults.Resume()
	moment("relay resumed")
	var cleared, resolved *time.Time
	deadline = time.Now().Add(resolveTimeout)
	for cleared == nil || resolved == nil {
		as, err := promAlerts(ctx, prom.addr)
		if err != nil {
			t.Fatalf("resume: %v", err)
		}
		watch.observe(as, pausedAt)
		if _, ok := findAlert(as, alerts.AlertStalled); !ok && cleared == nil {
			now := time.Now()
			cleared = &now
			moment("Prometheus no longer lists %s (+%.1fs after the resume)", alerts.AlertStalled, now.Sub(resumedAt).Seconds())
		}
		if resolved == nil {
			ns, _ := hook.notifications()
			for _, n := range ns {
				if n.Labels["alertname"] == alerts.AlertStalled && n.Status == "resolved" && n.Received.After(resumedAt) {
					resolved = &n.Received
					moment("webhook: %s resolved notification received (+%.1fs after the resume)", alertKey(n.Labels), n.Received.Sub(resumedAt).Seconds())
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("resume: within %s of resuming the relay, %s cleared in Prometheus: %v, resolved notification: %v; alerts now: %s",
				resolveTimeout, alerts.AlertStalled, cleared != nil, resolved != nil, describeAlerts(as))
		}
		time.Sleep(pollEvery)
	}

	// What else the stall set off, for the record: the burn-rate pages of
	// the relay's segment are expected to follow the stall page.
	ns, _ = hook.notifications()
	for _, n := range ns {
		if n.Received.After(pausedAt) && n.Labels["alertname"] != alerts.AlertStalled {
			moment("also notified: %s %s (owner %s, received +%.1fs after the pause)", alertKey(n.Labels), n.Status, n.Labels[slo.LabelOwner], n.Received.Sub(pausedAt).Seconds())
		}
	}
}

// startPipeline creates a schema A database and a canary topic, runs the
// reference relay on them, and returns its fault switches and the prober's
// configuration for the pipeline.
func startPipeline(t *testing.T, s stacktest.Stack) (*relay.Faults, *config.Config, string) {
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

	t.Setenv("E2E_PG_DSN", dsn)
	yml := fmt.Sprintf(`instance_id: e2e
state_dir: %s
signing_key: {value: e2e-signing-key}
alerting:
  stall_intervals: 2
  prober_job: %s
pipelines:
  - name: %s
    database: {dsn: {env: E2E_PG_DSN}}
    canary: {schedule: "@every 1s"}
    kafka: {brokers: [%s], topic: %s}
    budgets: {end_to_end: 2s, commit_to_publish: 1s, publish_to_consume: 1s}
    owners: {default: %s, commit_to_publish: %s, publish_to_consume: %s}
`, filepath.Join(t.TempDir(), "state"), proberJob, pipelineName, strings.Join(s.KafkaBrokers, ","), topic,
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
	bin := stacktest.BuildCommand(t, "outbox-canary")
	addr := stacktest.FreeAddr(t)
	logs := &stacktest.SyncBuffer{}
	cmd := exec.Command(bin, "run", "--config.file", path, "--web.listen-address", addr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the prober: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("prober: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("prober did not stop within 30s of SIGTERM")
		}
	})
	stacktest.Eventually(t, time.Minute, "the prober to serve /healthz", func() (bool, string) {
		res, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false, err.Error() + "\n" + logs.String()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
	return addr, logs
}

// writeRules generates the rule file of cfg with the alerts package and
// returns the labels of the pipeline's stall rule.
func writeRules(t *testing.T, cfg *config.Config, path string) map[string]string {
	t.Helper()
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := alerts.Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := alerts.Write(&buf, rf, alerts.FormatRules, cfg.Alerting.Labels); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var stall map[string]string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == alerts.AlertStalled && r.Labels[slo.LabelPipeline] == pipelineName {
				if stall != nil {
					t.Fatalf("two %s rules for pipeline %s", alerts.AlertStalled, pipelineName)
				}
				stall = r.Labels
			}
		}
	}
	if stall == nil {
		t.Fatalf("the generated rules have no %s rule for pipeline %s", alerts.AlertStalled, pipelineName)
	}
	t.Logf("generated %s: %s carries %v", filepath.Base(path), alerts.AlertStalled, sortedLabels(stall))
	return stall
}

// startAlertmanager starts Alertmanager with one route to the webhook:
// every alert is its own group (group_by: ['...']), notified after 1s and
// re-notified only after hours, so each notification is a state change.
func startAlertmanager(t *testing.T, bin, webhookURL string) *server {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	cfg := fmt.Sprintf(`route:
  receiver: test
  group_by: ['...']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 4h
receivers:
  - name: test
    webhook_configs:
      - url: %q
        send_resolved: true
`, webhookURL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	return startServer(t, "alertmanager", bin, addr,
		"--config.file="+cfgPath,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=", // no gossip: a single instance
		"--log.level=info")
}

// startPrometheus starts Prometheus scraping the prober every second under
// proberJob, evaluating the rule file every second and sending alerts to
// Alertmanager.
func startPrometheus(t *testing.T, bin, rulesPath, proberAddr, amAddr string) *server {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
scrape_configs:
  - job_name: %q
    static_configs:
      - targets: [%q]
`, rulesPath, amAddr, proberJob, proberAddr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	return startServer(t, "prometheus", bin, addr,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info")
}

// alertWatch logs the first moment each alert is seen pending and firing.
type alertWatch struct {
	moment       func(format string, args ...any)
	firstPending map[string]time.Time // by alertname
	firstFiring  map[string]time.Time
	logged       map[string]bool // by alertKey and state
}

func newAlertWatch(moment func(string, ...any)) *alertWatch {
	return &alertWatch{moment: moment, firstPending: map[string]time.Time{}, firstFiring: map[string]time.Time{}, logged: map[string]bool{}}
}

func (w *alertWatch) observe(as []promAlert, since time.Time) {
	now := time.Now()
	for _, a := range as {
		name := a.Labels["alertname"]
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

// findAlert returns the alert named name, if Prometheus lists it.
func findAlert(as []promAlert, name string) (promAlert, bool) {
	for _, a := range as {
		if a.Labels["alertname"] == name {
			return a, true
		}
	}
	return promAlert{}, false
}

// alertKey names an alert by what tells its instances apart here.
func alertKey(l map[string]string) string {
	k := l["alertname"]
	for _, name := range []string{slo.LabelSegment, "burn_window"} {
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
