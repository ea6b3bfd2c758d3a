package alerts_test

// These tests check the generated Alertmanager configuration: `amtool
// check-config` on it, and a real Alertmanager (Debian's
// prometheus-alertmanager 0.25) that the test starts on a free loopback
// port with a temporary storage directory, no cluster, and receivers that
// post to a webhook the test serves. The test posts the alerts a relay
// stall produces through the v2 API and counts the notifications. Without
// the binaries they skip, except in CI (CI=true), where they fail;
// AMTOOL and ALERTMANAGER name other binaries.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/alerts"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// lookBinary finds a binary by environment variable or names, or skips
// (fails in CI).
func lookBinary(t *testing.T, env string, names ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("none of %s found on PATH (Debian's prometheus-alertmanager package; deploy/local/stack.sh installs it) and %s unset", strings.Join(names, ", "), env)
	stacktest.Unavailable(t, "%s", msg)
	return ""
}

func TestGeneratedAlertmanagerConfigPassesAmtool(t *testing.T) {
	bin := lookBinary(t, "AMTOOL", "amtool")
	for _, tc := range []struct{ name, config string }{
		{"The example configuration's Alertmanager config is valid.", exampleConfig},
		{"The test configuration's Alertmanager config is valid.", testConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m := loadModel(t, tc.config)
			data, err := alerts.AlertmanagerConfig(m, alerts.AlertmanagerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "alertmanager.yml")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "check-config", path).CombinedOutput()
			t.Logf("amtool check-config:\n%s", out)
			if err != nil {
				t.Errorf("amtool check-config: %v", err)
			}
		})
	}
}

// notification is the part of Alertmanager's webhook payload we check.
type notification struct {
	Receiver string `json:"receiver"`
	Status   string `json:"status"`
	GroupKey string `json:"groupKey"`
	Alerts   []struct {
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

func (n notification) alertNames() []string {
	var out []string
	for _, a := range n.Alerts {
		out = append(out, alertKey(a.Labels))
	}
	slices.Sort(out)
	return out
}

// alertKey names an alert in the tests: alertname/segment/severity.
func alertKey(l map[string]string) string {
	return l["alertname"] + "/" + l["segment"] + "/" + l["severity"]
}

// webhook collects notifications.
type webhook struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []notification
	new chan struct{}
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{new: make(chan struct{}, 100)}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var n notification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			t.Errorf("webhook: %v", err)
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.got = append(w.got, n)
		w.mu.Unlock()
		w.new <- struct{}{}
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) notifications() []notification {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// waitFor waits until a notification to receiver has arrived, or fails at
// the deadline.
func (w *webhook) waitFor(ctx context.Context, t *testing.T, receiver string) notification {
	t.Helper()
	for {
		for _, n := range w.notifications() {
			if n.Receiver == receiver {
				return n
			}
		}
		select {
		case <-w.new:
		case <-ctx.Done():
			t.Fatalf("no notification to %s: %v; got %+v", receiver, ctx.Err(), w.notifications())
		}
	}
}

// alertmanager is a running Alertmanager.
type alertmanager struct {
	url string
	log *bytes.Buffer
}

// startAlertmanager runs Alertmanager on a free loopback port with cfg and
// waits until it is ready.
func startAlertmanager(ctx context.Context, t *testing.T, cfg []byte) *alertmanager {
	t.Helper()
	bin := lookBinary(t, "ALERTMANAGER", "prometheus-alertmanager", "alertmanager")
	dir := t.TempDir()
	path := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// The port is free when asked; another process may take it before
	// Alertmanager binds it, so a failed start is retried.
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		var log bytes.Buffer
		cmd := exec.Command(bin,
			"--config.file="+path,
			"--storage.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr,
			"--cluster.listen-address=", // no gossip port
			"--log.level=debug",
		)
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		am := &alertmanager{url: "http://" + addr, log: &log}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("alertmanager log:\n%s", log.String())
			}
		})
		if err := am.waitReady(ctx, exited); err == nil {
			return am
		} else if attempt == 3 {
			t.Fatalf("alertmanager on %s: %v\n%s", addr, err, log.String())
		}
	}
}

func (am *alertmanager) waitReady(ctx context.Context, exited <-chan error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(am.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// post sends alerts, firing, through the v2 API.
func (am *alertmanager) post(t *testing.T, labels ...map[string]string) {
	t.Helper()
	var body []map[string]any
	for _, l := range labels {
		body = append(body, map[string]any{"labels": l, "startsAt": time.Now().UTC().Format(time.RFC3339)})
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(am.url+"/api/v2/alerts", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("post alerts: %s: %s", resp.Status, msg)
	}
}

// apiAlert is the part of a v2 API alert we check.
type apiAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State       string   `json:"state"`
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status"`
}

// waitForStates polls the v2 API until every alert named by want (alertname
// and segment) is there in the wanted state ("active" or "suppressed").
func (am *alertmanager) waitForStates(ctx context.Context, t *testing.T, want map[string]string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last map[string]string
	for {
		resp, err := http.Get(am.url + "/api/v2/alerts")
		if err != nil {
			t.Fatal(err)
		}
		var got []apiAlert
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		last = map[string]string{}
		for _, a := range got {
			last[alertKey(a.Labels)] = a.Status.State
		}
		ok := true
		for k, v := range want {
			if last[k] != v {
				ok = false
			}
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("alert states: got %v, want %v: %v", last, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// stallSince is the stalled_since of the stall relayStall raises.
const stallSince = "2026-12-01T00:10:05Z"

// relayStall are the alerts a relay stall of pipeline orders sends to
// Alertmanager: the stall page (scenarios b and f prove its labels; the
// rules hold back the stall's own burn, backlog and slot alerts), then,
// as rules generated before issue 26 raised them and an Alertmanager
// must still keep them from paging, the end-to-end owner's burn page and
// ticket.
func relayStall() []map[string]string { return relayStallSince(stallSince) }

// redundancyLost is the redundancy ticket as the rules label it with
// alerting.prober_owner: no pipeline, one per job and scope.
var redundancyLost = map[string]string{"alertname": alerts.AlertRedundancyLost, "severity": "ticket", "owner": "team-platform", "job": "outbox-canary"}

// pipelinesUnmeasured is the page for pipelines no prober measures (a
// shard whose replicas are all gone), labelled as the rules label it.
var pipelinesUnmeasured = map[string]string{"alertname": alerts.AlertPipelinesUnmeasured, "severity": "page", "owner": "team-platform", "job": "outbox-canary"}

func relayStallSince(since string) []map[string]string {
	burn := func(segment, owner, severity string) map[string]string {
		return map[string]string{
			"alertname": alerts.AlertErrorBudgetBurn, "severity": severity, "sloth_severity": severity,
			"pipeline": "orders", "segment": segment, "owner": owner,
			"sloth_id": "orders-" + segment, "sloth_service": "orders", "sloth_slo": segment,
		}
	}
	return []map[string]string{
		{"job": "outbox-canary", "instance": "prober:9464", "alertname": alerts.AlertStalled, "severity": "page", "pipeline": "orders", "segment": "commit_to_publish", "owner": "team-relay", alerts.LabelStalledSince: since},
		burn("end_to_end", "team-orders", "page"),
		burn("end_to_end", "team-orders", "ticket"),
	}
}

// kafkaOutage are the alerts of pipeline orders while the prober cannot
// reach Kafka: the dependency page to the brokers' owner (the rules drop
// the burns and the relay's alerts the outage sets off, scenario m), then,
// as rules generated before issue 26 raised them and an Alertmanager must
// still keep them from paging, the end-to-end and relay burns and the
// oldest row.
func kafkaOutage() []map[string]string {
	probe := map[string]string{"job": "outbox-canary", "instance": "prober:9464", "pipeline": "orders"}
	with := func(b map[string]string) map[string]string {
		out := maps.Clone(probe)
		maps.Copy(out, b)
		return out
	}
	burn := func(segment, owner, severity string) map[string]string {
		return map[string]string{
			"alertname": alerts.AlertErrorBudgetBurn, "severity": severity, "sloth_severity": severity,
			"pipeline": "orders", "segment": segment, "owner": owner,
			"sloth_id": "orders-" + segment, "sloth_service": "orders", "sloth_slo": segment,
		}
	}
	return []map[string]string{
		// One per cluster: no pipeline, the brokers instead.
		{"alertname": alerts.AlertDependencyDown, "severity": "page", "owner": "team-kafka", "dependency": "kafka", "brokers": "127.0.0.1:9092"},
		burn("end_to_end", "team-orders", "page"),
		burn("end_to_end", "team-orders", "ticket"),
		burn("commit_to_publish", "team-relay", "page"),
		with(map[string]string{"alertname": alerts.AlertOldestUnpublished, "severity": "page", "segment": "commit_to_publish", "owner": "team-relay"}),
	}
}

const (
	testGroupWait     = 3 * time.Second
	testGroupInterval = 2 * time.Second
)

// TestAlertmanagerPagesOncePerIncident runs the generated routes and
// inhibit rules in a real Alertmanager: a relay stall notifies the relay's
// owner once and no one else, and with the prober gone only the dead man
// notifies.
func TestAlertmanagerPagesOncePerIncident(t *testing.T) {
	// Alertmanager's group_wait and group_interval are real time: the
	// waits overlap the promtool suites instead of adding to them.
	t.Parallel()
	_, m := loadModel(t, testConfig)
	sentinel := map[string]string{"alertname": "OutboxCanaryTestSentinel", "pipeline": "sentinel"}
	for _, tc := range []struct {
		name string
		// first is posted, and seen active, before the rest: Prometheus
		// fires it first.
		first []map[string]string
		rest  []map[string]string
		// states are the states the API must show once all are posted.
		states map[string]string
		// want is the receiver of the one notification, and its alerts
		// ("": nothing is notified).
		wantReceiver string
		wantAlerts   []string
	}{
		{
			name:  "A relay stall notifies the relay's owner once, with the stall page alone, and no one else.",
			first: relayStall()[:1],
			rest:  relayStall()[1:],
			states: map[string]string{
				"OutboxCanaryStalled/commit_to_publish/page": "active",
				// Another team's alerts of the same stall: inhibited.
				"OutboxCanaryErrorBudgetBurn/end_to_end/page":   "suppressed",
				"OutboxCanaryErrorBudgetBurn/end_to_end/ticket": "suppressed",
			},
			wantReceiver: alerts.ReceiverName("team-relay", "page"),
			wantAlerts:   []string{"OutboxCanaryStalled/commit_to_publish/page"},
		},
		{
			name:  "A Kafka outage notifies the brokers' owner once, with the dependency page alone, and nothing to the relay's or the end-to-end owner.",
			first: kafkaOutage()[:1],
			rest:  kafkaOutage()[1:],
			states: map[string]string{
				"OutboxCanaryDependencyDown//page":                     "active",
				"OutboxCanaryErrorBudgetBurn/end_to_end/page":          "suppressed",
				"OutboxCanaryErrorBudgetBurn/end_to_end/ticket":        "suppressed",
				"OutboxCanaryErrorBudgetBurn/commit_to_publish/page":   "suppressed",
				"OutboxOldestUnpublishedTooOld/commit_to_publish/page": "suppressed",
			},
			wantReceiver: alerts.ReceiverName("team-kafka", "page"),
			wantAlerts:   []string{"OutboxCanaryDependencyDown//page"},
		},
		{
			name:  "With the prober absent, the dead man notifies its owner and every alert of the stall is held back.",
			first: []map[string]string{{"alertname": alerts.AlertProberAbsent, "severity": "page", "owner": "team-platform", "job": "outbox-canary"}},
			rest:  relayStall(),
			states: map[string]string{
				"OutboxCanaryProberAbsent//page":                "active",
				"OutboxCanaryStalled/commit_to_publish/page":    "suppressed",
				"OutboxCanaryErrorBudgetBurn/end_to_end/page":   "suppressed",
				"OutboxCanaryErrorBudgetBurn/end_to_end/ticket": "suppressed",
			},
			wantReceiver: alerts.ReceiverName("team-platform", "page"),
			wantAlerts:   []string{"OutboxCanaryProberAbsent//page"},
		},
		{
			name:         "One prober replica down: the redundancy ticket notifies the prober's owner, and no page goes out.",
			first:        []map[string]string{redundancyLost},
			states:       map[string]string{"OutboxCanaryRedundancyLost//ticket": "active"},
			wantReceiver: alerts.ReceiverName("team-platform", "ticket"),
			wantAlerts:   []string{"OutboxCanaryRedundancyLost//ticket"},
		},
		{
			name:  "Every replica gone: the dead man notifies its owner, and the redundancy ticket, kept firing, is held back.",
			first: []map[string]string{{"alertname": alerts.AlertProberAbsent, "severity": "page", "owner": "team-platform", "job": "outbox-canary"}},
			rest:  []map[string]string{redundancyLost},
			states: map[string]string{
				"OutboxCanaryProberAbsent//page":     "active",
				"OutboxCanaryRedundancyLost//ticket": "suppressed",
			},
			wantReceiver: alerts.ReceiverName("team-platform", "page"),
			wantAlerts:   []string{"OutboxCanaryProberAbsent//page"},
		},
		{
			name:  "Every replica of one shard gone: the page for its pipelines notifies the prober's owner, and the redundancy ticket, kept firing, is held back.",
			first: []map[string]string{pipelinesUnmeasured},
			rest:  []map[string]string{redundancyLost},
			states: map[string]string{
				"OutboxCanaryPipelinesUnmeasured//page": "active",
				"OutboxCanaryRedundancyLost//ticket":    "suppressed",
			},
			wantReceiver: alerts.ReceiverName("team-platform", "page"),
			wantAlerts:   []string{"OutboxCanaryPipelinesUnmeasured//page"},
		},
		{
			name:  "The other shards gone too: the dead man notifies, and the shard's page, kept firing, is held back.",
			first: []map[string]string{{"alertname": alerts.AlertProberAbsent, "severity": "page", "owner": "team-platform", "job": "outbox-canary"}},
			rest:  []map[string]string{pipelinesUnmeasured},
			states: map[string]string{
				"OutboxCanaryProberAbsent//page":        "active",
				"OutboxCanaryPipelinesUnmeasured//page": "suppressed",
			},
			wantReceiver: alerts.ReceiverName("team-platform", "page"),
			wantAlerts:   []string{"OutboxCanaryProberAbsent//page"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Generous for a loaded machine; every wait below ends at the
			// event it waits for.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			hook := newWebhook(t)
			cfg, err := alerts.AlertmanagerConfig(m, alerts.AlertmanagerOptions{
				GroupWait:      testGroupWait,
				GroupInterval:  testGroupInterval,
				RepeatInterval: time.Hour,
				WebhookURL:     func(receiver string) string { return hook.srv.URL + "/" + receiver },
			})
			if err != nil {
				t.Fatal(err)
			}
			notes := runIncident(ctx, t, cfg, hook, tc.first, tc.rest, tc.states, sentinel)
			for _, n := range notes {
				if n.Receiver == tc.wantReceiver && !slices.Equal(n.alertNames(), tc.wantAlerts) {
					t.Errorf("notification to %s holds %v, want %v", tc.wantReceiver, n.alertNames(), tc.wantAlerts)
				}
			}

			var others []string
			pages := 0
			for _, n := range notes {
				switch {
				case n.Receiver == alerts.UnownedReceiver && slices.Equal(n.alertNames(), []string{alertKey(sentinel)}):
				case n.Receiver == tc.wantReceiver && n.Status == "firing":
					pages++
				default:
					others = append(others, fmt.Sprintf("%s %s %v", n.Receiver, n.Status, n.alertNames()))
				}
			}
			t.Logf("notifications: %d to %s, others: %v", pages, tc.wantReceiver, others)
			if want := min(len(tc.wantReceiver), 1); pages != want {
				t.Errorf("%d notifications to %s, want exactly %d", pages, tc.wantReceiver, want)
			}
			if len(others) > 0 {
				t.Errorf("notifications to others, want none: %v", others)
			}
		})
	}
}

// runIncident starts Alertmanager with cfg, posts first and waits until
// the API shows it, posts rest and waits for states, then posts a sentinel
// alert (routed to UnownedReceiver) and returns every notification up to
// one group_wait and group_interval after the sentinel's.
//
// The sentinel's group is created after every other group, with the same
// group_wait: when it notifies, every other group has had its first flush.
// The extra group_interval covers a flush that an update to a group would
// make; every other wait ends at the event it waits for.
func runIncident(ctx context.Context, t *testing.T, cfg []byte, hook *webhook, first, rest []map[string]string, states map[string]string, sentinel map[string]string) []notification {
	t.Helper()
	am := startAlertmanager(ctx, t, cfg)
	am.post(t, first...)
	firstStates := map[string]string{}
	for _, a := range first {
		firstStates[alertKey(a)] = "active"
	}
	am.waitForStates(ctx, t, firstStates)
	if len(rest) > 0 {
		am.post(t, rest...)
	}
	am.waitForStates(ctx, t, states)
	am.post(t, sentinel)
	hook.waitFor(ctx, t, alerts.UnownedReceiver)
	quiet, stop := context.WithTimeout(ctx, testGroupInterval+testGroupWait)
	defer stop()
	<-quiet.Done()
	return hook.notifications()
}

// TestAlertmanagerTestCanFail runs the relay stall through the generated
// configuration without its inhibit rules: other teams are notified, so
// TestAlertmanagerPagesOncePerIncident would see it.
func TestAlertmanagerTestCanFail(t *testing.T) {
	// Alertmanager's group_wait and group_interval are real time: the
	// waits overlap the promtool suites instead of adding to them.
	t.Parallel()
	_, m := loadModel(t, testConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hook := newWebhook(t)
	cfg, err := alerts.AlertmanagerConfig(m, alerts.AlertmanagerOptions{
		GroupWait: testGroupWait, GroupInterval: testGroupInterval, RepeatInterval: time.Hour,
		WebhookURL: func(receiver string) string { return hook.srv.URL + "/" + receiver },
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["inhibit_rules"]; !ok {
		t.Fatal("the generated configuration has no inhibit_rules to remove")
	}
	delete(doc, "inhibit_rules")
	if cfg, err = yaml.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	stall := relayStall()
	states := map[string]string{}
	for _, a := range stall {
		states[alertKey(a)] = "active"
	}
	sentinel := map[string]string{"alertname": "OutboxCanaryTestSentinel", "pipeline": "sentinel"}
	receivers := map[string]bool{}
	for _, n := range runIncident(ctx, t, cfg, hook, stall[:1], stall[1:], states, sentinel) {
		receivers[n.Receiver] = true
	}
	t.Logf("receivers notified without inhibit rules: %v", receivers)
	for _, r := range []string{"team-orders-page", "team-orders-ticket"} {
		if !receivers[r] {
			t.Errorf("without inhibit rules %s was not notified: the relay stall's alerts no longer reach other teams, and the test cannot fail", r)
		}
	}
}

// postResolved sends alerts as Prometheus resends a resolved one: ended
// a second ago.
func (am *alertmanager) postResolved(t *testing.T, labels ...map[string]string) {
	t.Helper()
	var body []map[string]any
	now := time.Now().UTC()
	for _, l := range labels {
		body = append(body, map[string]any{"labels": l, "startsAt": now.Add(-10 * time.Minute).Format(time.RFC3339), "endsAt": now.Add(-time.Second).Format(time.RFC3339)})
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(am.url+"/api/v2/alerts", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("post alerts: %s: %s", resp.Status, msg)
	}
}

// TestASecondStallPagesAsANewGroup runs two stalls of one pipeline
// through a real Alertmanager whose group_interval (1h) is far longer
// than the test: the second stall begins while the first one's stall page
// has resolved (Prometheus resends it, resolved, for 15 minutes) and the
// end-to-end owner's burn alerts posted with it still fire. Its page
// must be a notification of a new group, as soon as a group created with
// it (a sentinel's) has had its group_wait; had it joined the first
// stall's group, it would wait for that group's next tick, an hour.
// Without stalled_since in group_by that is what happens, and the test
// says so.
func TestASecondStallPagesAsANewGroup(t *testing.T) {
	// Alertmanager's group_wait and group_interval are real time: the
	// waits overlap the promtool suites instead of adding to them.
	t.Parallel()
	_, m := loadModel(t, testConfig)
	for _, tc := range []struct {
		name       string
		stripLabel bool
		wantPage   bool
	}{
		{"With the generated grouping, the second stall pages the relay's owner in a group of its own.", false, true},
		{"Grouped by pipeline alone, the second stall's page waits for the first stall's group.", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			hook := newWebhook(t)
			cfg, err := alerts.AlertmanagerConfig(m, alerts.AlertmanagerOptions{
				GroupWait: testGroupWait, GroupInterval: time.Hour, RepeatInterval: 4 * time.Hour,
				WebhookURL: func(receiver string) string { return hook.srv.URL + "/" + receiver },
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.stripLabel {
				before := len(cfg)
				cfg = bytes.ReplaceAll(cfg, []byte("        - "+alerts.LabelStalledSince+"\n"), nil)
				if len(cfg) == before {
					t.Fatal("no stalled_since in the generated group_by to remove: the test no longer tests what it says")
				}
			}
			page := alerts.ReceiverName("team-relay", "page")
			am := startAlertmanager(ctx, t, cfg)

			// The first stall, notified.
			first := relayStall()
			am.post(t, first[:1]...)
			am.waitForStates(ctx, t, map[string]string{alertKey(first[0]): "active"})
			am.post(t, first[1:]...)
			firstNote := hook.waitFor(ctx, t, page)

			// It recovers: its stall page resolves (and is resent so);
			// the other alerts posted with it still fire.
			am.postResolved(t, first[0])
			am.post(t, first[1:]...)

			// The second stall, with a sentinel whose new group has the
			// same group_wait.
			second := relayStallSince("2026-12-01T00:30:05Z")
			sentinel := map[string]string{"alertname": "OutboxCanaryTestSentinel", "pipeline": "sentinel"}
			am.post(t, second[0], sentinel)
			hook.waitFor(ctx, t, alerts.UnownedReceiver)
			// Past the sentinel's group_wait by one more: the second
			// stall's group, created with the sentinel's, has flushed.
			settle, stop := context.WithTimeout(ctx, testGroupWait)
			<-settle.Done()
			stop()

			var secondNotes []notification
			for _, n := range hook.notifications() {
				if n.Receiver == page && n.Status == "firing" && n.GroupKey != firstNote.GroupKey {
					secondNotes = append(secondNotes, n)
				}
			}
			t.Logf("first stall's group %s; notifications to %s in other groups: %+v", firstNote.GroupKey, page, secondNotes)
			switch {
			case tc.wantPage && len(secondNotes) != 1:
				t.Fatalf("the second stall notified %d new groups of %s, want 1: %+v", len(secondNotes), page, hook.notifications())
			case tc.wantPage && !slices.Equal(secondNotes[0].alertNames(), []string{"OutboxCanaryStalled/commit_to_publish/page"}):
				t.Errorf("the second stall's notification holds %v, want its stall page alone", secondNotes[0].alertNames())
			case !tc.wantPage && len(secondNotes) != 0:
				t.Errorf("grouped by pipeline alone, the second stall still notified a new group: the test cannot tell the groupings apart: %+v", secondNotes)
			}
		})
	}
}
