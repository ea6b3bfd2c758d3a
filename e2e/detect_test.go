package e2e

// TestDetect measures detection at production settings and writes
// docs/detection.json and docs/detection.md: how long from a fault to the
// first bad canary, the alert pending and firing in Prometheus and the
// notification at the receiver; which alert, which owner, how many
// notifications per incident; and the same for the naive "oldest
// unpublished row older than 5 minutes" alert on the same Prometheus.
//
// It is not part of `make test`: it runs only when OUTBOX_CANARY_DETECT
// names scenarios ("all", or a comma-separated list of relay-stall,
// connect-stopped, relay-delay, pause-20s, second-stall, quiet-30m,
// kafka-down, connector-paused), takes about 40 minutes for the four
// incidents, 25 for second-stall, 35 for quiet-30m and 20 for each of the
// outages, and stops and restarts the stack's Kafka Connect worker
// (connect-stopped) and Kafka broker (kafka-down): run it on a stack of
// your own. `make detect` starts
// the stack and runs it:
//
//	STACK_DIR=$PWD/.stack PG_PORT_BASE=55320 KAFKA_PORT_BASE=29092 CONNECT_PORT_BASE=28083 make detect
//	make detect DETECT_SCENARIOS=quiet-30m    # one scenario; the others' results are kept
//
// What it runs, once: the three PostgreSQL pipelines of examples/outbox-canary.yml
// (its schedules set to 10 s, alerting.stall_intervals to 3) in fresh
// databases and topics of the stack; the reference relays (bin
// outbox-relay) of orders and payments; a Debezium connector for
// shipments on the stack's Connect worker; the prober (`outbox-canary
// run`). Per scenario, from a clean start of the alerts: a fresh
// Prometheus (15 s scrape and evaluation) loading the rules of
// `outbox-canary rules --format rules` and the naive alert, a fresh
// Alertmanager loading `outbox-canary rules --format alertmanager` with
// its receivers filled in with a webhook that records every notification
// (Alertmanager's default timings), a second fresh Alertmanager configured
// as many teams configure theirs (teamsAlertmanagerConfig: grouped by
// alertname and pipeline, routed by severity, none of our inhibit rules)
// fed by the same Prometheus, and the pipelines healthy before the
// fault. Every wait is for an event, bounded by a generous deadline; the
// observation windows are the scenario's definition, not a guess.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

var update = flag.Bool("update", false, "rewrite docs/detection.md from docs/detection.json")

const (
	detectEnv        = "OUTBOX_CANARY_DETECT"
	detectCommandEnv = "OUTBOX_CANARY_DETECT_COMMAND"

	scenarioRelayStall     = "relay-stall"
	scenarioConnectStopped = "connect-stopped"
	scenarioRelayDelay     = "relay-delay"
	scenarioPause          = "pause-20s"
	scenarioSecondStall    = "second-stall"
	scenarioQuiet          = "quiet-30m"
	scenarioKafkaDown      = "kafka-down"
	scenarioConnectorPause = "connector-paused"
	scenarioFlapping       = "flapping-relay"
)

var scenarioOrder = []string{scenarioRelayStall, scenarioConnectStopped, scenarioRelayDelay, scenarioPause, scenarioSecondStall, scenarioQuiet,
	scenarioKafkaDown, scenarioConnectorPause, scenarioFlapping}

// Production settings, and Alertmanager's defaults (the generated route
// sets no timing), for the observation windows and the document.
const (
	prodScrape         = 15 * time.Second
	prodEval           = 15 * time.Second
	amGroupWaitDefault = 30 * time.Second
	amGroupIntDefault  = 5 * time.Minute
	amRepeatDefault    = 4 * time.Hour
	prodCanaryEvery    = 10 * time.Second
	prodStallIntervals = 3
	relayPollInterval  = 100 * time.Millisecond
	proberJobDefault   = "outbox-canary"
	naiveThreshold     = 5 * time.Minute
)

// Scenario shapes.
const (
	// pauseFor is the blip: shorter than the end-to-end budget plus
	// stall_intervals-1 canary intervals of every pipeline.
	pauseFor = 20 * time.Second
	// afterPause is how long the blip's aftermath is watched: past the
	// stall threshold, group_wait and several evaluations of the burn
	// pages' short windows.
	afterPause = 5 * time.Minute
	quietFor30 = 30 * time.Minute
	// quietStrays is how many canaries the quiet scenario makes late on
	// one segment in its first minutes: the two that paged a quiet
	// pipeline on a fresh Prometheus in issue 15. It must stay below the
	// smallest count a page needs (checked when the scenario starts).
	quietStrays = 2
	// delayOver is how far over the read_to_publish budget the relay's
	// delay fault is set.
	delayOver = 100 * time.Millisecond
	// afterFirstNotification: an incident is watched until Alertmanager's
	// group_interval has passed after its first notification (plus a
	// margin), so the follow-up notification of the group, if any, is
	// counted.
	afterFirstNotification = amGroupIntDefault + 30*time.Second
	// incidentCap ends an incident that never notifies.
	incidentCap = 15 * time.Minute
	// kafkaDownFor and connectorPausedFor are the outages of issue 25:
	// the broker stopped, the Debezium connector paused.
	kafkaDownFor       = 5 * time.Minute
	connectorPausedFor = 6 * time.Minute
	// afterOutage is how long an outage's aftermath is watched after it
	// ends: the burn pages' short windows still hold its bad canaries,
	// and a page they set off must be seen.
	afterOutage = 10 * time.Minute
	// The flapping relay: issue 26's crash loop, down flapDown and up
	// flapUp for flapFor at production settings, then watched until every
	// notification about the pipeline has resolved on both Alertmanagers,
	// or for flapAftermathCap (the incident's hold, keep_firing_for and
	// group_interval fit well inside it).
	flapDown         = 40 * time.Second
	flapUp           = 5 * time.Second
	flapFor          = 10 * time.Minute
	flapAftermathCap = 30 * time.Minute
)

// Deadlines for events (not durations the harness assumes).
const (
	healthyTimeout = 15 * time.Minute
	warmTimeout    = 5 * time.Minute
	// warmScrapes: Prometheus has scraped the prober this often before a
	// fault, so rate() and increase() have data.
	warmScrapes = 5
	detectPoll  = time.Second
)

func TestDetect(t *testing.T) {
	want := os.Getenv(detectEnv)
	if want == "" {
		t.Skipf("measures detection at production settings for about an hour and stops the stack's Kafka Connect: set %s=all (or some of %s), as `make detect` does", detectEnv, strings.Join(scenarioOrder, ","))
	}
	var run []string
	for _, name := range strings.FieldsFunc(want, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		switch {
		case name == "all":
			run = append(run, scenarioOrder...)
		case slices.Contains(scenarioOrder, name):
			run = append(run, name)
		default:
			t.Fatalf("%s=%q: unknown scenario %q (want all or some of %s, separated by commas or spaces)", detectEnv, want, name, strings.Join(scenarioOrder, ","))
		}
	}
	r := setUpDetect(t)
	specs := r.scenarios(t)
	for _, name := range scenarioOrder {
		if !slices.Contains(run, name) {
			continue
		}
		spec := specs[name]
		t.Run(name, func(t *testing.T) {
			res := r.runScenario(t, spec)
			d, err := readDetection(detectionJSON)
			if errors.Is(err, os.ErrNotExist) {
				d, err = &detection{}, nil
			}
			if err != nil {
				t.Fatal(err)
			}
			d.Settings = r.settings
			d.merge(res, scenarioOrder)
			if err := writeDetection(detectionJSON, d); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(detectionMD, renderDetection(d, r.rulesHash), 0o644); err != nil {
				t.Fatal(err)
			}
			v := verdict(res)
			t.Logf("%s: %s", name, v)
			// The seconds are measurements, written to the doc; silence in
			// a blip or a quiet hour, and a page at all for a stall, are
			// promises, and a broken one fails the run (after the doc says so).
			stallUnpaged := (name == scenarioRelayStall || name == scenarioConnectStopped || name == scenarioSecondStall) && res.firstPage() == nil
			if stallUnpaged || (name == scenarioPause || name == scenarioQuiet || name == scenarioSecondStall) && strings.HasPrefix(v, "**Missed**") {
				t.Errorf("%s: %s", name, v)
			}
		})
	}
}

// detectRun is what every scenario shares: the stack, the pipelines, the
// relays, the connector, the prober and the generated files.
type detectRun struct {
	rulesHash            string // detectRulesHash, stored with each scenario
	s                    stacktest.Stack
	dir                  string
	canaryBin            string
	cfg                  *config.Config
	model                *slo.Model
	rulesPath, naivePath string
	amGenerated          []byte
	proberAddr           string
	relayAdmin           map[string]string // by pipeline
	cdc                  *cdcConnector
	connectScript        string
	settings             detectSettings
	machine, command     string
	versions             []version
}

func setUpDetect(t *testing.T) *detectRun {
	s := stacktest.Load(t)
	connectURL := s.Env["OUTBOX_CANARY_CONNECT_URL"]
	if s.PrometheusPath == "" || s.AlertmanagerPath == "" || connectURL == "" {
		t.Fatalf("the stack names no prometheus, alertmanager or Kafka Connect (OUTBOX_CANARY_PROMETHEUS, OUTBOX_CANARY_ALERTMANAGER, OUTBOX_CANARY_CONNECT_URL): run `make stack-up`")
	}
	r := &detectRun{s: s, relayAdmin: map[string]string{}, connectScript: filepath.Join(filepath.Dir(s.ScriptPath), "connect.sh")}
	r.dir = filepath.Join(s.Dir, "logs", "detect-"+time.Now().UTC().Format("20060102T150405"))
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("logs and generated files in %s", r.dir)
	r.canaryBin = stacktest.BuildCommand(t, "outbox-canary")
	relayBin := stacktest.BuildCommand(t, "outbox-relay")
	ctx := context.Background()

	// One fresh database and canary topic per pipeline.
	type db struct{ dsn, topic string }
	dbs := map[string]db{}
	for _, p := range []struct {
		name, schema string
		partitions   int
	}{{"orders", outboxsql.SchemaA, 3}, {"payments", outboxsql.SchemaB, 3}, {"shipments", outboxsql.DebeziumOutbox, 1}} {
		dsn := s.NewDatabase(t)
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, p.schema); err != nil {
			t.Fatalf("%s: schema: %v", p.name, err)
		}
		pool.Close()
		dbs[p.name] = db{dsn, s.NewTopic(t, p.partitions, nil)}
	}
	r.cdc = newCDCConnector(t, s, connectURL, dbs["shipments"].dsn, dbs["shipments"].topic)

	// The reference relays: seed schema A and B, the default poll
	// interval, each routing its outbox to its pipeline's canary topic.
	for _, p := range []struct{ name, schema string }{{"orders", "a"}, {"payments", "b"}} {
		addr := stacktest.FreeAddr(t)
		startProcess(t, filepath.Join(r.dir, "relay-"+p.name+".log"), []string{"OUTBOX_RELAY_DSN=" + dbs[p.name].dsn},
			relayBin, "--brokers", strings.Join(s.KafkaBrokers, ","), "--schema", p.schema,
			"--topic-template", dbs[p.name].topic, "--poll-interval", relayPollInterval.String(),
			"--admin.listen-address", addr)
		r.relayAdmin[p.name] = addr
		waitHTTP(t, "http://"+addr+"/healthz", "relay "+p.name)
	}

	// The example configuration at 10 s canaries on these servers.
	yml := adaptExample(t, map[string]string{
		"orders": dbs["orders"].topic, "payments": dbs["payments"].topic, "shipments": dbs["shipments"].topic,
	}, s.KafkaBrokers, connectURL, r.cdc.name, r.cdc.slot, filepath.Join(r.dir, "state"))
	cfgPath := filepath.Join(r.dir, "outbox-canary.yml")
	if err := os.WriteFile(cfgPath, yml, 0o600); err != nil {
		t.Fatal(err)
	}
	proberEnv := []string{
		"OUTBOX_CANARY_SIGNING_KEY=detect-signing-key-not-for-production",
		"OUTBOX_CANARY_PG_DSN=" + dbs["orders"].dsn,
		"OUTBOX_CANARY_PG_DSN_PAYMENTS=" + dbs["payments"].dsn,
		"OUTBOX_CANARY_PG_DSN_SHIPMENTS=" + dbs["shipments"].dsn,
	}
	for _, kv := range proberEnv {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // for config.Load's secret checks below
	}
	cfg, err := config.Load(yml)
	if err != nil {
		t.Fatalf("adapted example: %v\n%s", err, yml)
	}
	r.cfg = cfg
	if r.model, err = slo.FromConfig(cfg); err != nil {
		t.Fatal(err)
	}

	// The rules and the Alertmanager configuration, as a user makes them.
	r.rulesPath = filepath.Join(r.dir, "outbox-canary.rules.yml")
	amPath := filepath.Join(r.dir, "outbox-canary.alertmanager.yml")
	runCommand(t, r.canaryBin, "rules", "--config.file", cfgPath, "--format", "rules", "--out", r.rulesPath)
	runCommand(t, r.canaryBin, "rules", "--config.file", cfgPath, "--format", "alertmanager", "--out", amPath)
	if r.amGenerated, err = os.ReadFile(amPath); err != nil {
		t.Fatal(err)
	}
	r.naivePath = filepath.Join(r.dir, "naive.rules.yml")
	if err := os.WriteFile(r.naivePath, []byte(naiveRules()), 0o644); err != nil {
		t.Fatal(err)
	}

	r.proberAddr = stacktest.FreeAddr(t)
	startProcess(t, filepath.Join(r.dir, "prober.log"), proberEnv,
		r.canaryBin, "run", "--config.file", cfgPath, "--web.listen-address", r.proberAddr)
	waitHTTP(t, "http://"+r.proberAddr+"/healthz", "the prober")

	r.settings = r.describeSettings(t)
	r.machine = machine()
	r.versions = r.collectVersions(t)
	r.rulesHash = detectRulesHash(t)
	r.command = os.Getenv(detectCommandEnv)
	if r.command == "" {
		r.command = fmt.Sprintf("OUTBOX_CANARY_STACK_ENV=%s %s=%s go test -count=1 -v -timeout 0 -run '^TestDetect$' ./e2e/", filepath.Join(s.Dir, "env"), detectEnv, os.Getenv(detectEnv))
	}
	return r
}

// naiveRules is the comparison: the alert a team without canaries writes.
func naiveRules() string {
	return fmt.Sprintf(`# The naive backlog alert, for comparison only: not generated, not routed
# to an owner.
groups:
  - name: naive
    rules:
      - alert: %s
        expr: %s > %s
        labels:
          severity: page
`, naiveAlertName, slo.MetricOldestUnpublishedAge, seconds(naiveThreshold))
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// adaptExample is examples/outbox-canary.yml on these servers: canaries
// every 10 s, stall_intervals 3, and the stack's brokers, topics, Connect
// worker, connector and slot.
func adaptExample(t *testing.T, topics map[string]string, brokers []string, connectURL, connector, slot, stateDir string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "outbox-canary.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	setYAML(t, root, "detect", "instance_id")
	setYAML(t, root, stateDir, "state_dir")
	setYAML(t, root, prodStallIntervals, "alerting", "stall_intervals")
	pipelines := mapValue(t, root, "pipelines")
	// The scenarios run on the pipelines they have topics for (the three
	// on PostgreSQL); the example's others (invoices, on MariaDB, for the
	// demo) are left out, so the rules measured, and their hash, stay
	// those of the three.
	kept := pipelines.Content[:0]
	for _, p := range pipelines.Content {
		if _, ok := topics[mapValue(t, p, "name").Value]; ok {
			kept = append(kept, p)
		}
	}
	pipelines.Content = kept
	for _, p := range pipelines.Content {
		name := mapValue(t, p, "name").Value
		setYAML(t, p, "@every "+prodCanaryEvery.String(), "canary", "schedule")
		setYAML(t, p, brokers, "kafka", "brokers")
		setYAML(t, p, topics[name], "kafka", "topic")
		if name == "shipments" {
			setYAML(t, p, connectURL, "watch", "connect_url")
			setYAML(t, p, connector, "watch", "connector")
			setYAML(t, p, slot, "watch", "slot")
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mapValue returns the value of key in a YAML mapping node.
func mapValue(t *testing.T, m *yaml.Node, key string) *yaml.Node {
	t.Helper()
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	t.Fatalf("examples/outbox-canary.yml: no %q at line %d", key, m.Line)
	return nil
}

// setYAML sets the value at path in a mapping, creating mappings on the
// way.
func setYAML(t *testing.T, m *yaml.Node, value any, path ...string) {
	t.Helper()
	for i, key := range path {
		var next *yaml.Node
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == key {
				next = m.Content[j+1]
			}
		}
		last := i == len(path)-1
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, next)
		}
		if last {
			var v yaml.Node
			if err := v.Encode(value); err != nil {
				t.Fatal(err)
			}
			*next = v
			return
		}
		m = next
	}
}

// describeSettings summarises the adapted configuration for the document.
func (r *detectRun) describeSettings(t *testing.T) detectSettings {
	st := detectSettings{
		ScrapeInterval: prodScrape.String(), EvaluationInterval: prodEval.String(),
		GroupWait: amGroupWaitDefault.String(), GroupInterval: model.Duration(amGroupIntDefault).String(), RepeatInterval: model.Duration(amRepeatDefault).String(),
		CanaryInterval: prodCanaryEvery.String(), StallIntervals: r.cfg.Alerting.StallIntervals,
		RelayPollInterval: relayPollInterval.String(),
		NaiveAlert:        fmt.Sprintf("%s > %s (no for:)", slo.MetricOldestUnpublishedAge, seconds(naiveThreshold)),
	}
	var am struct {
		Route struct {
			Routes []struct {
				GroupBy []string `yaml:"group_by"`
			} `yaml:"routes"`
		} `yaml:"route"`
	}
	if err := yaml.Unmarshal(r.amGenerated, &am); err != nil {
		t.Fatal(err)
	}
	if len(am.Route.Routes) > 0 {
		st.GroupBy = am.Route.Routes[0].GroupBy
	}
	rf, err := os.ReadFile(r.rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var keep string // the stall alert's keep_firing_for: one rule for every pipeline
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert         string `yaml:"alert"`
				KeepFiringFor string `yaml:"keep_firing_for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rf, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, rl := range g.Rules {
			if rl.Alert == "OutboxCanaryStalled" {
				keep = rl.KeepFiringFor
			}
		}
	}
	for _, p := range r.model.Pipelines {
		ps := pipelineSummary{
			Name: p.Name, Relay: p.RelayKind, DefaultOwner: p.DefaultOwner,
			StallThreshold: p.StallThreshold(r.cfg.Alerting.StallIntervals).String(),
			StallTolerance: p.StallTolerance(r.cfg.Alerting.StallIntervals).String(),
			KeepFiringFor:  keep,
		}
		for _, s := range p.SLOs {
			ps.Budgets = append(ps.Budgets, fmt.Sprintf("%s %s (%s)", s.Segment, s.Budget, s.Owner))
			ps.Objective = s.Objective
			if s.Segment == config.SegmentEndToEnd {
				for _, a := range s.Burn {
					if a.Severity == config.SeverityPage && ps.BurnPageMinimum == "" {
						f, _ := a.MinBadEvents(s, p.CanaryInterval).Float64()
						ps.BurnPageMinimum = strconv.FormatFloat(math.Floor(f)+1, 'f', 0, 64)
					}
				}
			}
		}
		if r.cdcPipeline(p.Name) {
			ps.Relay = "cdc (Debezium)"
		}
		st.Pipelines = append(st.Pipelines, ps)
	}
	return st
}

func (r *detectRun) cdcPipeline(name string) bool {
	p, ok := r.cfg.Pipeline(name)
	return ok && p.Relay.Kind == config.RelayCDC
}

// scenarioSpec is one scenario: its fault, how it ends and how it is
// undone.
type scenarioSpec struct {
	name, title, target, pipeline, fault string
	// inject applies the fault; heal undoes it (after the observation,
	// or healAfter into it).
	inject, heal func(t *testing.T) []step
	healAfter    time.Duration
	// freshStart: the observation starts when the fresh Prometheus does,
	// before its first scrape, so its first minutes (burn windows holding
	// almost no data) are watched and every notification is counted.
	freshStart bool
	// expectSilence: the target is that nothing pages, so the harness
	// also shows that Prometheus was watching (every scrape up, every
	// rule evaluated without error, an Alertmanager to send to).
	expectSilence bool
	// drive, when set, acts on what the harness has seen, at every poll
	// (after inject): the phases of a scenario that is more than one
	// fault. It records what it did in res.
	drive func(t *testing.T, o *observation, res *scenarioResult, now time.Time)
	// done says whether the observation is over.
	done func(o *observation, now time.Time) bool
}

func (r *detectRun) scenarios(t *testing.T) map[string]scenarioSpec {
	orders, _ := r.cfg.Pipeline("orders")
	shipments, _ := r.cfg.Pipeline("shipments")
	// The relay's delay fault sleeps between reading a batch and sending
	// it: the segment from its read stamp to the publish stamp.
	const delaySeg = "read_to_publish"
	delayBudget := time.Duration(orders.Budgets[delaySeg])
	if delayBudget == 0 {
		t.Fatalf("examples/outbox-canary.yml: pipeline orders has no %s budget for the delay scenario", delaySeg)
	}
	delay := delayBudget + delayOver
	relay := func(pipeline, path string) func(t *testing.T) []step {
		return func(t *testing.T) []step {
			relayAdmin(t, r.relayAdmin[pipeline], path)
			return nil
		}
	}
	// An incident is watched until group_interval after its first
	// notification (and, with naive, until the naive alert was notified
	// too), or until incidentCap when nothing notifies.
	incident := func(naive bool) func(o *observation, now time.Time) bool {
		return func(o *observation, now time.Time) bool {
			if now.Sub(o.faultAt) >= incidentCap {
				return true
			}
			first, ok := o.firstNotification()
			if !ok || now.Sub(first) < afterFirstNotification {
				return false
			}
			if naive {
				n, ok := o.naiveNotified()
				return ok && now.Sub(n) > 15*time.Second
			}
			return true
		}
	}
	return map[string]scenarioSpec{
		scenarioRelayStall: {
			name: scenarioRelayStall, title: "Relay stall", pipeline: "orders",
			fault:  "The orders relay is paused through its admin API (`POST /admin/pause`): it stops claiming rows, which pile up unpublished. It stays paused until the end of the observation.",
			target: "a page firing in Prometheus within 60 s of the relay stopping, at the webhook within 90 s, one page to the owning team",
			inject: relay("orders", "/admin/pause"), heal: relay("orders", "/admin/resume"),
			done: incident(true),
		},
		scenarioConnectStopped: {
			name: scenarioConnectStopped, title: "Kafka Connect stopped", pipeline: "shipments",
			fault:  fmt.Sprintf("The stack's Kafka Connect worker is stopped (`deploy/local/connect.sh stop`: SIGTERM, the worker flushes its offsets and exits): Debezium stops reading the WAL of shipments. Afterwards `connect.sh start` and the connector's configuration PUT again (a standalone worker forgets REST-made connectors); it resumes from its offsets. Shipments has no published_at, so the naive alert cannot see it. Its budgets: commit_to_publish %s, end_to_end %s.", shipments.Budgets[config.SegmentName(config.StampCommit, config.StampPublish)], shipments.Budgets[config.SegmentEndToEnd]),
			target: "a page firing in Prometheus within 60 s of Debezium stopping, at the webhook within 90 s, one page to the owning team",
			inject: func(t *testing.T) []step {
				start := time.Now()
				r.connectScriptRun(t, "stop")
				return []step{{At: round1(time.Since(start)), What: "`connect.sh stop` returned: the worker has exited"}}
			},
			heal: func(t *testing.T) []step { r.connectScriptRun(t, "start"); r.cdc.create(t); return nil },
			done: incident(false),
		},
		scenarioRelayDelay: {
			name: scenarioRelayDelay, title: "Relay delay just over one segment's budget", pipeline: "orders",
			fault:  fmt.Sprintf("The orders relay sleeps %s between reading a batch and sending it (`POST /admin/delay?d=%s`), just over the %s budget of %s, the segment the relay's read stamp and the broker's ack bound; every canary is late on that segment and on time end to end. Cleared after the observation.", delay, delay, delayBudget, delaySeg),
			target: "which alert, when, to which owner",
			inject: relay("orders", "/admin/delay?d="+delay.String()), heal: relay("orders", "/admin/delay?d=0"),
			done: incident(false),
		},
		scenarioPause: {
			name: scenarioPause, title: "A 20 s relay pause", pipeline: "orders",
			fault:  fmt.Sprintf("The orders relay is paused for %s (`POST /admin/pause`, then `POST /admin/resume`), as a relay restart or a rebalance would; watched for %s after the resume.", pauseFor, afterPause),
			target: "a pause shorter than the end-to-end budget plus one interval never pages (nothing pending or firing)",
			inject: relay("orders", "/admin/pause"),
			heal: func(t *testing.T) []step {
				relayAdmin(t, r.relayAdmin["orders"], "/admin/resume")
				return []step{{What: "relay resumed"}}
			},
			healAfter:     pauseFor,
			expectSilence: true,
			done:          func(o *observation, now time.Time) bool { return now.Sub(o.faultAt) >= pauseFor+afterPause },
		},
		scenarioSecondStall: r.secondStallSpec(t),
		scenarioKafkaDown: {
			name: scenarioKafkaDown, title: "Kafka down 5 minutes", pipeline: "orders",
			fault: fmt.Sprintf("The stack's Kafka broker is stopped (`stack.sh stop-kafka`) for %s, then started again (`stack.sh start-kafka`), under every pipeline: the reference relays read each row, fail to send, roll back and read it again once the broker is back; the prober cannot reach the broker either (outbox_canary_dependency_up{dependency=\"kafka\"} 0). Watched for %s after the restart. Owners of orders: %s.",
				kafkaDownFor, afterOutage, ownersOf(orders)),
			target: fmt.Sprintf("one page, to the brokers' owner (%s, the owner of publish_to_consume); none to the relay's", orders.Owner(config.SegmentName(config.StampPublish, config.StampConsume))),
			inject: func(t *testing.T) []step {
				start := time.Now()
				r.s.Script(t, "stop-kafka")
				return []step{{At: round1(time.Since(start)), What: "`stack.sh stop-kafka` returned: the broker has exited"}}
			},
			heal: func(t *testing.T) []step {
				r.s.Script(t, "start-kafka")
				return []step{{What: "`stack.sh start-kafka` called (it returns once the broker answers)"}}
			},
			healAfter: kafkaDownFor,
			done:      func(o *observation, now time.Time) bool { return now.Sub(o.faultAt) >= kafkaDownFor+afterOutage },
		},
		scenarioConnectorPause: {
			name: scenarioConnectorPause, title: "Debezium connector paused 6 minutes", pipeline: "shipments",
			fault: fmt.Sprintf("The shipments connector is paused through Kafka Connect's REST API (`PUT /connectors/<name>/pause`) for %s, then resumed (`PUT .../resume`); Debezium stops polling its queue while paused. Watched for %s after the resume. Owners of shipments: %s.",
				connectorPausedFor, afterOutage, ownersOf(shipments)),
			target: fmt.Sprintf("one page, to the connector's owner (%s, the owner of commit_to_publish); none to the brokers'", shipments.Owner(config.SegmentName(config.StampCommit, config.StampPublish))),
			inject: func(t *testing.T) []step {
				r.cdc.act(t, "pause")
				return []step{{What: "connector paused"}}
			},
			heal: func(t *testing.T) []step {
				r.cdc.act(t, "resume")
				return []step{{What: "connector resumed"}}
			},
			healAfter: connectorPausedFor,
			done:      func(o *observation, now time.Time) bool { return now.Sub(o.faultAt) >= connectorPausedFor+afterOutage },
		},
		scenarioFlapping: r.flappingSpec(t),
		scenarioQuiet: {
			name: scenarioQuiet, title: "30 minutes quiet on a fresh Prometheus",
			fault: fmt.Sprintf("No incident and no business traffic for %s: only canaries flow through the three pipelines. Prometheus and Alertmanager start with the scenario (empty data directories), so every burn window holds at most the minutes since; the observation starts with them and counts every notification Alertmanager sends. Once Prometheus has scraped the prober %d times, %d canaries of orders are made late on %s, as a loaded machine makes a canary late now and then (two such canaries paged a quiet pipeline of a fresh Prometheus in issue 15): the relay sleeps %s between reading a batch and sending it (%s budget + %s) until the prober has judged %d bad, then not at all.",
				quietFor30, warmScrapes, quietStrays, delaySeg, delay, delayBudget, delayOver, quietStrays),
			target:        "no alert pending or firing, and 0 notifications",
			freshStart:    true,
			expectSilence: true,
			drive:         r.strayCanaries("orders", delaySeg, delay, quietStrays),
			done:          func(o *observation, now time.Time) bool { return now.Sub(o.faultAt) >= quietFor30 },
		},
	}
}

// observation is what the harness has seen of one scenario so far.
type observation struct {
	faultAt time.Time
	hook    *webhook
	// teamsHook receives the second Alertmanager's notifications
	// (teamsAlertmanagerConfig).
	teamsHook *webhook
	// suppressed holds the keys of alerts Alertmanager was seen holding
	// inhibited.
	suppressed map[string]bool
	promAddr   string
	// bad is the last count of bad SLI events since the scenario's start,
	// by pipeline and segment, read from the prober.
	bad map[[2]string]float64
	// over is set by a scenario's drive when its last phase has ended.
	over bool
}

func (o *observation) firstNotification() (time.Time, bool) {
	ds, _ := o.hook.deliveries()
	for _, d := range ds {
		if d.Received.After(o.faultAt) && d.Status == "firing" && !naiveOnly(d) {
			return d.Received, true
		}
	}
	return time.Time{}, false
}

func (o *observation) naiveNotified() (time.Time, bool) {
	ds, _ := o.hook.deliveries()
	for _, d := range ds {
		for _, a := range d.Alerts {
			if a.Labels["alertname"] == naiveAlertName && a.Status == "firing" {
				return d.Received, true
			}
		}
	}
	return time.Time{}, false
}

func naiveOnly(d delivery) bool {
	for _, a := range d.Alerts {
		if a.Labels["alertname"] != naiveAlertName {
			return false
		}
	}
	return len(d.Alerts) > 0
}

// runScenario measures one scenario from a clean start of the alerts.
func (r *detectRun) runScenario(t *testing.T, sc scenarioSpec) *scenarioResult {
	ctx := context.Background()
	r.waitHealthy(t)

	// Fresh Alertmanagers and Prometheus, the generated files loaded.
	hook, teamsHook := newWebhook(t), newWebhook(t)
	amCfg := fillReceivers(t, r.amGenerated, hook.url)
	am := startAlertmanager(t, r.s.AlertmanagerPath, amCfg)
	teamsAM := startAlertmanager(t, r.s.AlertmanagerPath, teamsAlertmanagerConfig(teamsHook, amGroupWaitDefault, amGroupIntDefault))
	prom := startPrometheus(t, r.s.PrometheusPath, promConfig{
		scrape: prodScrape, eval: prodEval, ruleFiles: []string{r.rulesPath, r.naivePath},
		job: proberJobDefault, targets: []string{r.proberAddr}, alertmanager: am.addr, moreAlertmanagers: []string{teamsAM.addr},
	})
	am.waitReady(t)
	teamsAM.waitReady(t)
	prom.waitReady(t)
	promStart := time.Now()
	t.Logf("Prometheus %s and Alertmanagers %s (generated) and %s (grouped by alertname and pipeline) started afresh", prom.addr, am.addr, teamsAM.addr)
	o := &observation{hook: hook, teamsHook: teamsHook, suppressed: map[string]bool{}, promAddr: prom.addr, bad: map[[2]string]float64{}}
	res := &scenarioResult{Name: sc.name, Title: sc.title, Fault: sc.fault, Pipeline: sc.pipeline, Target: sc.target}
	res.Load.CPUs = runtime.NumCPU()
	res.Load.Start = loadAvg()
	res.Load.Max = res.Load.Start
	var base proberSample
	observe := func() {
		var err error
		if base, err = scrapeProber(ctx, r.proberAddr); err != nil {
			t.Fatal(err)
		}
		o.faultAt = time.Now()
	}
	if sc.freshStart {
		// The webhook records from here on, so nothing Alertmanager
		// sends while Prometheus warms up escapes the count.
		observe()
	}
	r.waitWarm(t, prom.addr)
	if !sc.freshStart {
		observe()
	}
	res.PrometheusDataSeconds = round1(o.faultAt.Sub(promStart))
	res.Run = runInfo{Date: o.faultAt.UTC().Format(time.RFC3339), Machine: r.machine, Versions: r.versions, Command: r.command,
		RulesHash: r.rulesHash}
	if sc.pipeline != "" {
		if last, ok := base.lastReceived[sc.pipeline]; ok && last > 0 {
			v := round1(time.Unix(0, int64(last*1e9)).Sub(o.faultAt))
			res.LastArrival = &v
		}
	}
	healed := sc.inject == nil
	heal := func() {
		if healed || sc.heal == nil {
			return
		}
		healed = true
		at := time.Since(o.faultAt)
		if res.IncidentEnd == nil { // a drive that undid the fault itself set it
			end := round1(at)
			res.IncidentEnd = &end
		}
		for _, s := range sc.heal(t) {
			s.At = round1(at)
			res.Steps = append(res.Steps, s)
		}
	}
	if sc.inject != nil {
		t.Logf("[+0.0s] fault: %s", firstLine(sc.fault))
		res.Steps = append(res.Steps, sc.inject(t)...)
		defer heal()
	}

	firstBad := map[[2]string]time.Time{}
	lastBad := map[[2]string]float64{}
	seenAlert := map[string]bool{}
	seenDelivery, seenTeams := 0, 0
	for {
		now := time.Now()
		if sc.healAfter > 0 && !healed && now.Sub(o.faultAt) >= sc.healAfter {
			heal()
			t.Logf("[%s] healed", secs(round1(time.Since(o.faultAt))))
		}
		if smp, err := scrapeProber(ctx, r.proberAddr); err == nil {
			for k, v := range smp.bad {
				if v > base.bad[k] {
					if _, ok := firstBad[k]; !ok {
						firstBad[k] = now
						t.Logf("[%s] first bad SLI event: %s %s", secs(round1(now.Sub(o.faultAt))), k[0], k[1])
					}
				}
				lastBad[k] = v - base.bad[k]
				o.bad[k] = v - base.bad[k]
			}
		} else {
			t.Logf("prober /metrics: %v", err)
		}
		if as, err := promAlerts(ctx, prom.addr); err == nil {
			for _, a := range as {
				k := timelineKey(a.Labels) + " " + a.State
				if !seenAlert[k] {
					seenAlert[k] = true
					t.Logf("[%s] Prometheus: %s %s (owner %s)", secs(round1(now.Sub(o.faultAt))), timelineKey(a.Labels), a.State, a.Labels[slo.LabelOwner])
				}
			}
		}
		if as, err := amAlerts(ctx, am.addr); err == nil {
			for _, a := range as {
				if a.Status.State == "suppressed" && len(a.Status.InhibitedBy) > 0 {
					o.suppressed[timelineKey(a.Labels)] = true
				}
			}
		}
		if ds, _ := hook.deliveries(); len(ds) > seenDelivery {
			for _, d := range ds[seenDelivery:] {
				t.Logf("[%s] notification to %s (%s): %s", secs(round1(d.Received.Sub(o.faultAt))), d.Receiver, d.Status, strings.Join(deliveryAlerts(d), "; "))
			}
			seenDelivery = len(ds)
		}
		if ds, _ := teamsHook.deliveries(); len(ds) > seenTeams {
			for _, d := range ds[seenTeams:] {
				t.Logf("[%s] notification (grouped by alertname, pipeline) to %s (%s): %s", secs(round1(d.Received.Sub(o.faultAt))), d.Receiver, d.Status, strings.Join(deliveryAlerts(d), "; "))
			}
			seenTeams = len(ds)
		}
		res.Load.Max = max(res.Load.Max, loadAvg())
		if sc.drive != nil {
			sc.drive(t, o, res, now)
		}
		if sc.done(o, now) {
			break
		}
		time.Sleep(detectPoll)
	}
	end := time.Now()
	res.ObservedSeconds = round1(end.Sub(o.faultAt))
	res.Load.End = loadAvg()
	heal()

	for k, at := range firstBad {
		res.FirstBad = append(res.FirstBad, badEvent{Pipeline: k[0], Segment: k[1], At: round1(at.Sub(o.faultAt)), Count: lastBad[k]})
	}
	sort.Slice(res.FirstBad, func(i, j int) bool {
		return res.FirstBad[i].At < res.FirstBad[j].At ||
			res.FirstBad[i].At == res.FirstBad[j].At && res.FirstBad[i].Pipeline+res.FirstBad[i].Segment < res.FirstBad[j].Pipeline+res.FirstBad[j].Segment
	})
	res.Alerts = r.alertTimelines(t, prom.addr, o, promStart, end)
	if sc.expectSilence {
		res.Steps = append(res.Steps, r.promWatched(t, prom.addr, promStart, end, o.faultAt))
	}
	if sc.name == scenarioSecondStall {
		r.secondPage(t, prom.addr, o, res, promStart, end)
	}
	ds, bad := hook.deliveries()
	teamsDs, teamsBad := teamsHook.deliveries()
	for _, b := range append(bad, teamsBad...) {
		t.Errorf("webhook: undecodable notification: %s", b)
	}
	for _, d := range teamsDs {
		res.TeamsDeliveries = append(res.TeamsDeliveries, recordDelivery(d, o.faultAt))
	}
	res.TeamsMeasured = true
	for _, d := range ds {
		res.Deliveries = append(res.Deliveries, recordDelivery(d, o.faultAt))
		for _, n := range d.Alerts {
			if n.Status != "firing" {
				continue
			}
			for i := range res.Alerts {
				a := &res.Alerts[i]
				if a.Notified == nil && timelineKey(n.Labels) == a.key() {
					v := round1(d.Received.Sub(o.faultAt))
					a.Notified, a.Receiver = &v, d.Receiver
				}
			}
		}
	}
	return res
}

// recordDelivery is a webhook call as docs/detection.json keeps it: the
// pipelines and owners its alerts name.
func recordDelivery(d delivery, faultAt time.Time) deliveryRecord {
	var pipelines, owners []string
	for _, n := range d.Alerts {
		if p := n.Labels[slo.LabelPipeline]; p != "" && !slices.Contains(pipelines, p) {
			pipelines = append(pipelines, p)
		}
		if o := n.Labels[slo.LabelOwner]; o != "" && !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	sort.Strings(pipelines)
	sort.Strings(owners)
	return deliveryRecord{At: round1(d.Received.Sub(faultAt)), Receiver: d.Receiver, Group: d.GroupKey, Status: d.Status, Pipelines: pipelines, Owners: owners, Alerts: deliveryAlerts(d)}
}

// timelineKey names an alert instance: name, pipeline, segment,
// severity, owner.
func timelineKey(l map[string]string) string {
	return strings.Join([]string{l["alertname"], l[slo.LabelPipeline], l[slo.LabelSegment], l["severity"], l[slo.LabelOwner]}, "|")
}

func (a alertTimeline) key() string {
	return strings.Join([]string{a.Alert, a.Pipeline, a.Segment, a.Severity, a.Owner}, "|")
}

func deliveryAlerts(d delivery) []string {
	var out []string
	for _, a := range d.Alerts {
		tl := alertTimeline{Alert: a.Labels["alertname"], Pipeline: a.Labels[slo.LabelPipeline], Segment: a.Labels[slo.LabelSegment], Severity: a.Labels["severity"]}
		out = append(out, alertName(tl)+" "+a.Status)
	}
	sort.Strings(out)
	return out
}

// alertTimelines reads the ALERTS series of the observation: the exact
// evaluations that held each alert pending or firing.
func (r *detectRun) alertTimelines(t *testing.T, promAddr string, o *observation, since, end time.Time) []alertTimeline {
	ctx := context.Background()
	rng := int(math.Ceil(time.Since(since).Seconds()))
	series, err := promMatrix(ctx, promAddr, fmt.Sprintf("ALERTS[%ds]", rng))
	if err != nil {
		t.Fatalf("ALERTS: %v", err)
	}
	byKey := map[string]*alertTimeline{}
	var keys []string
	for _, s := range series {
		k := timelineKey(s.Metric)
		a, ok := byKey[k]
		if !ok {
			a = &alertTimeline{Alert: s.Metric["alertname"], Pipeline: s.Metric[slo.LabelPipeline], Segment: s.Metric[slo.LabelSegment], Severity: s.Metric["severity"], Owner: s.Metric[slo.LabelOwner], Suppressed: o.suppressed[k]}
			byKey[k] = a
			keys = append(keys, k)
		}
		for _, v := range s.Values {
			if v.T.After(end) || v.V != 1 {
				continue
			}
			at := round1(v.T.Sub(o.faultAt))
			switch s.Metric["alertstate"] {
			case "pending":
				if a.PendingAt == nil || at < *a.PendingAt {
					a.PendingAt = &at
				}
			case "firing":
				if a.FiringAt == nil || at < *a.FiringAt {
					a.FiringAt = &at
				}
			}
			a.LastActiveAt = max(a.LastActiveAt, at)
		}
	}
	var out []alertTimeline
	for _, k := range keys {
		if a := byKey[k]; a.PendingAt != nil || a.FiringAt != nil {
			out = append(out, *a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return firstActive(out[i]) < firstActive(out[j]) })
	return out
}

func firstActive(a alertTimeline) float64 {
	switch {
	case a.PendingAt != nil && a.FiringAt != nil:
		return min(*a.PendingAt, *a.FiringAt)
	case a.PendingAt != nil:
		return *a.PendingAt
	case a.FiringAt != nil:
		return *a.FiringAt
	}
	return math.Inf(1)
}

// waitHealthy waits until every pipeline delivers good canaries again and
// none has gone bad for a while: the state a fault starts from.
func (r *detectRun) waitHealthy(t *testing.T) {
	ctx := context.Background()
	deadline := time.Now().Add(healthyTimeout)
	lastChange := map[string]time.Time{}
	lastBad := map[string]float64{}
	var why string
	for {
		now := time.Now()
		smp, err := scrapeProber(ctx, r.proberAddr)
		if err == nil {
			healthy := true
			why = ""
			for _, p := range r.model.Pipelines {
				bad := 0.0
				for k, v := range smp.bad {
					if k[0] == p.Name {
						bad += v
					}
				}
				if _, ok := lastChange[p.Name]; !ok || bad != lastBad[p.Name] {
					lastChange[p.Name], lastBad[p.Name] = now, bad
				}
				fresh := p.EndToEndBudget + 2*p.CanaryInterval
				succ := time.Unix(0, int64(smp.lastSuccess[p.Name]*1e9))
				calm := 2*p.CanaryInterval + p.EndToEndBudget
				if now.Sub(succ) > fresh || now.Sub(lastChange[p.Name]) < calm {
					healthy = false
					why += fmt.Sprintf("%s: last good canary %s ago, last bad event change %s ago; ", p.Name, now.Sub(succ).Round(time.Second), now.Sub(lastChange[p.Name]).Round(time.Second))
				}
			}
			if healthy {
				return
			}
		} else {
			why = err.Error()
		}
		if now.After(deadline) {
			t.Fatalf("the pipelines are not healthy %s after the last fault: %s", healthyTimeout, why)
		}
		time.Sleep(detectPoll)
	}
}

// waitWarm waits until the fresh Prometheus has scraped the prober
// warmScrapes times and recorded every SLO's ratios. Alerts already active
// then are not waited out: they are the healthy pipelines' own (a stale
// verdict cannot be waited for), and the timeline shows them starting
// before the fault.
func (r *detectRun) waitWarm(t *testing.T, promAddr string) {
	ctx := context.Background()
	slos := 0
	for _, p := range r.model.Pipelines {
		slos += len(p.SLOs)
	}
	deadline := time.Now().Add(warmTimeout)
	var last string
	for {
		scrapes, err1 := promQuery(ctx, promAddr, fmt.Sprintf(`count_over_time(%s{job=%q}[10m])`, slo.MetricBuildInfo, proberJobDefault))
		ratios, err2 := promQuery(ctx, promAddr, `slo:sli_error:ratio_rate5m`)
		as, err3 := promAlerts(ctx, promAddr)
		if err := errors.Join(err1, err2, err3); err != nil {
			last = err.Error()
		} else {
			n := 0.0
			if len(scrapes) == 1 {
				n = scrapes[0].Value
			}
			if n >= warmScrapes && len(ratios) == slos {
				if len(as) > 0 {
					t.Logf("active before the fault (kept in the timeline with negative times): %s", describeAlerts(as))
				}
				return
			}
			last = fmt.Sprintf("%.0f scrapes, %d of %d SLO ratios, alerts %s", n, len(ratios), slos, describeAlerts(as))
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus not warm within %s: %s", warmTimeout, last)
		}
		time.Sleep(detectPoll)
	}
}

// fillReceivers gives every receiver of the generated Alertmanager
// configuration a webhook, as a user fills them with PagerDuty or Slack,
// and changes nothing else.
func fillReceivers(t *testing.T, generated []byte, webhookURL func(string) string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(generated, &cfg); err != nil {
		t.Fatal(err)
	}
	recv, _ := cfg["receivers"].([]any)
	if len(recv) == 0 {
		t.Fatalf("the generated Alertmanager configuration has no receivers:\n%s", generated)
	}
	for _, rc := range recv {
		m := rc.(map[string]any)
		if m["name"] == inhibitOnlyReceiver {
			continue // it only feeds inhibit rules; a user leaves it empty too
		}
		m["webhook_configs"] = []any{map[string]any{"url": webhookURL(m["name"].(string)), "send_resolved": true}}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// proberSample is what the harness reads from the prober's /metrics.
type proberSample struct {
	bad          map[[2]string]float64 // pipeline, segment
	lastReceived map[string]float64    // unix seconds
	lastSuccess  map[string]float64
}

func scrapeProber(ctx context.Context, addr string) (proberSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return proberSample{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return proberSample{}, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return proberSample{}, fmt.Errorf("prober /metrics: %w", err)
	}
	s := proberSample{bad: map[[2]string]float64{}, lastReceived: map[string]float64{}, lastSuccess: map[string]float64{}}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			switch name {
			case slo.MetricSLIEvents:
				if l[slo.LabelOutcome] == slo.OutcomeBad {
					s.bad[[2]string{l[slo.LabelPipeline], l[slo.LabelSegment]}] = m.GetCounter().GetValue()
				}
			case slo.MetricLastReceivedTimestamp:
				s.lastReceived[l[slo.LabelPipeline]] = m.GetGauge().GetValue()
			case slo.MetricLastSuccessTimestamp:
				s.lastSuccess[l[slo.LabelPipeline]] = m.GetGauge().GetValue()
			}
		}
	}
	return s, nil
}

// relayAdmin posts to a reference relay's admin API.
func relayAdmin(t *testing.T, addr, path string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "text/plain", nil)
	if err != nil {
		t.Fatalf("relay admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("relay admin %s: %s: %s", path, resp.Status, body)
	}
}

// connectScriptRun runs deploy/local/connect.sh on this stack.
func (r *detectRun) connectScriptRun(t *testing.T, command string) {
	t.Helper()
	cmd := exec.Command("bash", r.connectScript, command)
	cmd.Env = append(os.Environ(), "STACK_DIR="+r.s.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("connect.sh %s: %v\n%s", command, err, out)
	}
	t.Logf("connect.sh %s: %s", command, strings.TrimSpace(string(out)))
}

// startProcess runs a command in a process group of its own, its output
// appended to logPath, and stops it with SIGTERM when the test ends.
func startProcess(t *testing.T, logPath string, env []string, bin string, args ...string) {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logFile.Close()
	})
}

func runCommand(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	if len(out) > 0 {
		t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	}
}

func waitHTTP(t *testing.T, u, what string) {
	t.Helper()
	stacktest.Eventually(t, 2*time.Minute, what+" to answer "+u, func() (bool, string) {
		resp, err := http.Get(u)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return f
}

// machine describes the host: CPU, cores, memory, OS and kernel.
func machine() string {
	read := func(path, key string) string {
		f, err := os.Open(path)
		if err != nil {
			return ""
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == key {
				return strings.TrimSpace(v)
			}
			if k, v, ok := strings.Cut(sc.Text(), "="); ok && k == key {
				return strings.Trim(v, `"`)
			}
		}
		return ""
	}
	parts := []string{fmt.Sprintf("%d CPUs", runtime.NumCPU())}
	if m := read("/proc/cpuinfo", "model name"); m != "" {
		parts[0] += " (" + m + ")"
	}
	if m := read("/proc/meminfo", "MemTotal"); m != "" {
		if kb, err := strconv.ParseFloat(strings.Fields(m)[0], 64); err == nil {
			parts = append(parts, fmt.Sprintf("%.1f GiB RAM", kb/1024/1024))
		}
	}
	if osr := read("/etc/os-release", "PRETTY_NAME"); osr != "" {
		parts = append(parts, osr)
	}
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(k)))
	}
	return strings.Join(parts, ", ")
}

var versionRE = regexp.MustCompile(`version (\S+)`)

// collectVersions asks every server and tool for its version.
func (r *detectRun) collectVersions(t *testing.T) []version {
	ctx := context.Background()
	var vs []version
	add := func(name, v string) {
		if v == "" {
			v = "unknown"
		}
		vs = append(vs, version{name, v})
	}
	// The measurements this run rewrites do not make the tree dirty.
	describe, _ := exec.Command("git", "describe", "--tags", "--always").Output()
	v := strings.TrimSpace(string(describe))
	if changed, _ := exec.Command("git", "status", "--porcelain", "--", "..", ":!../docs/detection.json", ":!../docs/detection.md").Output(); len(changed) > 0 {
		v += " with uncommitted changes"
	}
	add("outbox-canary", v)
	add("Go", runtime.Version())
	for _, b := range []struct{ name, bin string }{{"Prometheus", r.s.PrometheusPath}, {"Alertmanager", r.s.AlertmanagerPath}} {
		out, _ := exec.Command(b.bin, "--version").CombinedOutput()
		v := ""
		if m := versionRE.FindStringSubmatch(string(out)); m != nil {
			v = m[1]
		}
		add(b.name, v)
	}
	var pg string
	if conn, err := pgx.Connect(ctx, r.s.PGDSN); err == nil {
		_ = conn.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&pg)
		conn.Close(ctx)
	}
	add("PostgreSQL", pg)
	add("Kafka", r.s.Env["OUTBOX_CANARY_KAFKA_VERSION"])
	var root struct {
		Version string `json:"version"`
	}
	_ = getJSON(ctx, r.s.Env["OUTBOX_CANARY_CONNECT_URL"]+"/", &root)
	add("Kafka Connect", root.Version)
	var plugins []struct {
		Class   string `json:"class"`
		Version string `json:"version"`
	}
	_ = getJSON(ctx, r.s.Env["OUTBOX_CANARY_CONNECT_URL"]+"/connector-plugins", &plugins)
	dbz := ""
	for _, p := range plugins {
		if p.Class == debeziumConnectorClass {
			dbz = p.Version
		}
	}
	add("Debezium", dbz)
	return vs
}

func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

const debeziumConnectorClass = "io.debezium.connector.postgresql.PostgresConnector"

// cdcConnector is the Debezium connector of the shipments pipeline.
type cdcConnector struct {
	connectURL, name, slot, dsn string
	config                      map[string]string
}

// newCDCConnector creates the connector (its own slot and publication, the
// EventRouter routing the outbox to topic, heartbeats to a topic of their
// own) and deletes it, with its slot, when the test ends.
func newCDCConnector(t *testing.T, s stacktest.Stack, connectURL, dsn, topic string) *cdcConnector {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	// The heartbeat topic "test.<unique>": its part after the first dot is
	// the topic prefix, so <topic.heartbeat.prefix>.<topic.prefix> is it.
	hb := s.NewTopic(t, 1, nil)
	hbPrefix, topicPrefix, _ := strings.Cut(hb, ".")
	suffix := strings.ReplaceAll(topicPrefix[strings.LastIndex(topicPrefix, "-")+1:], "-", "")
	c := &cdcConnector{connectURL: connectURL, name: "detect-shipments-" + suffix, slot: "detect_shipments_" + suffix, dsn: dsn}
	c.config = map[string]string{
		"connector.class":                           debeziumConnectorClass,
		"tasks.max":                                 "1",
		"database.hostname":                         u.Hostname(),
		"database.port":                             u.Port(),
		"database.user":                             u.User.Username(),
		"database.password":                         pass,
		"database.dbname":                           strings.TrimPrefix(u.Path, "/"),
		"plugin.name":                               "pgoutput",
		"slot.name":                                 c.slot,
		"publication.name":                          c.slot,
		"publication.autocreate.mode":               "filtered",
		"table.include.list":                        "public.outbox",
		"topic.prefix":                              topicPrefix,
		"snapshot.mode":                             "no_data",
		"heartbeat.interval.ms":                     "1000",
		"topic.heartbeat.prefix":                    hbPrefix,
		"transforms":                                "outbox",
		"transforms.outbox.type":                    "io.debezium.transforms.outbox.EventRouter",
		"transforms.outbox.predicate":               "isOutbox",
		"transforms.outbox.route.by.field":          "aggregatetype",
		"transforms.outbox.route.topic.replacement": topic,
		"predicates":                                "isOutbox",
		"predicates.isOutbox.type":                  "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
		"predicates.isOutbox.pattern":               regexp.QuoteMeta(topicPrefix + ".public.outbox"),
	}
	t.Cleanup(func() { c.delete(t, s) })
	c.create(t)
	return c
}

// create PUTs the configuration and waits until the connector runs and
// its slot is active.
func (c *cdcConnector) create(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body, _ := json.Marshal(c.config)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.connectURL+"/connectors/"+c.name+"/config", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("create connector %s: %v", c.name, err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("create connector %s: %s: %s", c.name, resp.Status, msg)
	}
	pool, err := pgxpool.New(ctx, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	stacktest.Eventually(t, 3*time.Minute, "connector "+c.name+" to run with its slot active", func() (bool, string) {
		st, err := connect.QueryStatus(ctx, http.DefaultClient, c.connectURL, c.name)
		if err != nil {
			return false, err.Error()
		}
		var active bool
		_ = pool.QueryRow(ctx, `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, c.slot).Scan(&active)
		return st.Running() && active, st.Summary() + fmt.Sprintf("; slot active %v", active)
	})
}

// act pauses or resumes the connector (PUT /connectors/<name>/pause or
// /resume; Connect answers 202 and acts asynchronously).
func (c *cdcConnector) act(t *testing.T, action string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, c.connectURL+"/connectors/"+c.name+"/"+action, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s connector %s: %v", action, c.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s connector %s: %s: %s", action, c.name, resp.Status, body)
	}
}

// ownersOf lists a pipeline's owners, for the scenario's text.
func ownersOf(p *config.Pipeline) string {
	var out []string
	for _, seg := range slices.Sorted(maps.Keys(p.Owners)) {
		out = append(out, seg+": "+p.Owners[seg])
	}
	return strings.Join(out, ", ")
}

// delete removes the connector and drops its slot once its walsender let
// go of it, so the database can be dropped and no WAL stays pinned.
func (c *cdcConnector) delete(t *testing.T, s stacktest.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, c.connectURL+"/connectors/"+c.name, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	admin, err := pgx.Connect(ctx, s.PGAdminDSN)
	if err != nil {
		t.Errorf("drop slot %s: %v", c.slot, err)
		return
	}
	defer admin.Close(context.Background())
	for {
		var active bool
		err := admin.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, c.slot).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) {
			return
		}
		if err != nil {
			t.Errorf("slot %s: %v", c.slot, err)
			return
		}
		if !active {
			break
		}
		select {
		case <-ctx.Done():
			t.Errorf("slot %s still active after deleting connector %s", c.slot, c.name)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, c.slot); err != nil {
		t.Errorf("drop slot %s: %v", c.slot, err)
	}
}
