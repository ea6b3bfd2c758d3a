package e2e

// Debezium's own metrics on the stack's Kafka Connect worker, which runs the
// Prometheus JMX exporter agent (deploy/local/connect.sh,
// deploy/local/connect/jmx-exporter.yml): scraped straight from the agent,
// then through a real Prometheus (Debian's, from the stack's env) by the
// pipeline health dashboard's Debezium panels and `diagnose
// --prometheus-url`, for a PostgreSQL and a MariaDB connector.
// Run with `make stack-up` first:
//
//	go test ./e2e/ -run TestDebeziumMetrics -v
//
// It skips without the stack (or a worker without the agent), and fails in CI.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/debezium"
	"github.com/outbox-canary/outbox-canary/internal/diagnose"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// metricsWait bounds the waits for a series to appear or move: a scrape,
// Debezium's next event and a loaded machine's scheduling. Only a bound.
const metricsWait = 2 * time.Minute

// agentSeries scrapes the JMX exporter and returns the Debezium series of
// one server (a connector's topic.prefix), name -> value, and their lines
// in the exposition format for the log.
func agentSeries(ctx context.Context, metricsURL, server string) (map[string]float64, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %s", metricsURL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", metricsURL, err)
	}
	got := map[string]float64{}
	var lines []string
	for name, f := range fams {
		if !strings.HasPrefix(name, "debezium_") {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[debezium.LabelServer] != server {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			full := name
			if f.GetType().String() == "COUNTER" && !strings.HasSuffix(name, "_total") {
				full += "_total"
			}
			if _, dup := got[full]; dup {
				// A rule that matches more than one attribute (Debezium 3's
				// MilliSecondsBehindSourceP99 beside MilliSecondsBehindSource).
				return nil, nil, fmt.Errorf("two series of %s for server %s", full, server)
			}
			got[full] = v
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %v", full, strings.Join(pairs, ","), v))
		}
	}
	sort.Strings(lines)
	return got, lines, nil
}

// panelQuery is one query of a dashboard panel.
type panelQuery struct{ title, expr string }

// debeziumPanelQueries reads the queries of Debezium's series from the
// example pipeline health dashboard's Debezium row (the generator's
// output, which dashboards' tests keep in step with it).
func debeziumPanelQueries(t *testing.T) []panelQuery {
	t.Helper()
	text, err := os.ReadFile("../examples/dashboards/outbox-canary-pipeline-health.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type, Title string
		Panels      []json.RawMessage
		Targets     []struct{ Expr string }
	}
	var d struct{ Panels []panel }
	if err := json.Unmarshal(text, &d); err != nil {
		t.Fatal(err)
	}
	var out []panelQuery
	add := func(p panel) {
		for _, q := range p.Targets {
			if strings.Contains(q.Expr, "debezium_") {
				out = append(out, panelQuery{p.Title, q.Expr})
			}
		}
	}
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			for _, raw := range p.Panels { // a collapsed row holds its panels
				var inner panel
				if err := json.Unmarshal(raw, &inner); err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(row, "Debezium") {
					add(inner)
				}
			}
			continue
		}
		if strings.HasPrefix(row, "Debezium") {
			add(p)
		}
	}
	if len(out) < 5 {
		t.Fatalf("the pipeline health dashboard has %d queries of Debezium's series: %v", len(out), out)
	}
	return out
}

// family is one database family's running connector, set up by start,
// and a row insert that Debezium reads as one change event.
type family struct {
	name, plugin string
	start        func(t *testing.T, s stacktest.Stack, names stacktest.ConnectorNames, agg string) (dsn string, schema stacktest.Schema, c *stacktest.Connector, insert func(t *testing.T))
}

var families = []family{
	{name: "PostgreSQL", plugin: "postgres", start: func(t *testing.T, s stacktest.Stack, names stacktest.ConnectorNames, agg string) (string, stacktest.Schema, *stacktest.Connector, func(t *testing.T)) {
		dsn, pool := s.FreshOutbox(t, stacktest.SeedDebezium)
		c := s.NewConnector(t, names.Name, stacktest.RecommendedConnector(t, dsn, names))
		c.WaitRunning(t)
		return dsn, stacktest.SeedDebezium, c, func(t *testing.T) {
			t.Helper()
			if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES (gen_random_uuid(), $1, 'k', 'created', '{}')`, agg); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{name: "MariaDB", plugin: "mariadb", start: func(t *testing.T, s stacktest.Stack, names stacktest.ConnectorNames, agg string) (string, stacktest.Schema, *stacktest.Connector, func(t *testing.T)) {
		m := s.MySQL(t)
		dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
		s.NewTopicNamed(t, names.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
		cfg := m.MariaDBConnector(t, s, dsn, names)
		user, password := m.NewCDCUser(t)
		cfg["database.user"], cfg["database.password"] = user, password
		c := s.NewConnector(t, names.Name, cfg)
		c.WaitRunning(t)
		m.StreamingBinlog(t, c, user)
		return dsn, stacktest.MySQLSeedDebezium, c, func(t *testing.T) {
			t.Helper()
			if _, err := admin.ExecContext(context.Background(), "INSERT INTO outbox VALUES (UUID(), ?, 'k', 'created', '{}')", agg); err != nil {
				t.Fatal(err)
			}
		}
	}},
}

// Disruptive: it runs alone, after the other packages. In a CI run beside
// them, the shared worker stopped answering REST requests right after
// another package's pause and resume of its connector while this test's
// Prometheus scraped the worker's JMX agent every second; Kafka Connect
// 4.3's standalone herder locks against itself on concurrent connector
// changes (StandaloneHerder and MemoryConfigBackingStore), and every later
// connector test then failed.
func TestDisruptiveDebeziumMetricsMoveOnBothFamiliesAndDiagnoseReadsThemThroughPrometheus(t *testing.T) {
	s := stacktest.Load(t)
	connectURL := s.ConnectURL(t)
	metricsURL := s.ConnectMetricsURL(t)
	if s.PrometheusPath == "" {
		stacktest.Unavailable(t, "the stack env names no prometheus binary (OUTBOX_CANARY_PROMETHEUS)")
	}
	target, err := url.Parse(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, s.PrometheusPath, promConfig{scrape: time.Second, eval: time.Second,
		job: "kafka-connect", targets: []string{target.Host}, alertmanager: freeAddr(t)})
	prom.waitReady(t)
	promURL := "http://" + prom.addr

	for _, f := range families {
		// One family after the other: Kafka Connect 4.3's standalone herder
		// deadlocks when one connector is deleted while another is paused
		// or resumed (StandaloneHerder and MemoryConfigBackingStore lock each
		// other), and the worker then answers no request.
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			names := stacktest.NewConnectorNames(t)
			agg := names.Name + "-canary"
			topic := "outbox.event." + agg
			s.NewTopicNamed(t, topic, 1, nil)
			s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
			dsn, schema, c, insert := f.start(t, s, names, agg)
			server := names.TopicPrefix

			// Straight from the agent: the streaming series of this
			// connector, connected, and its events seen growing with a row.
			var got map[string]float64
			var lines []string
			scrape := func() string {
				got, lines, err = agentSeries(ctx, metricsURL, server)
				return fmt.Sprintf("%v; %s", err, strings.Join(lines, "; "))
			}
			stacktest.Eventually(t, metricsWait, "the connector's streaming series, connected", func() (bool, string) {
				msg := scrape()
				_, seen := got[debezium.MetricEventsSeen]
				return got[debezium.MetricConnected] == 1 && seen, msg
			})
			for _, m := range []string{debezium.MetricBehindSource, debezium.MetricQueueRemaining, debezium.MetricQueueTotal, debezium.MetricConnected, debezium.MetricEventsSeen} {
				if _, ok := got[m]; !ok {
					t.Errorf("the agent exports no %s of server %s: %s", m, server, strings.Join(lines, "; "))
				}
			}
			before := got[debezium.MetricEventsSeen]
			t.Logf("%s before the insert:\n%s", f.name, strings.Join(lines, "\n"))
			insert(t)
			stacktest.Eventually(t, metricsWait, "events seen to grow after a row insert", func() (bool, string) {
				msg := scrape()
				return got[debezium.MetricEventsSeen] > before && got[debezium.MetricBehindSource] >= 0, msg
			})
			t.Logf("%s after the insert:\n%s", f.name, strings.Join(lines, "\n"))
			if got[debezium.MetricQueueTotal] <= 0 || got[debezium.MetricQueueRemaining] > got[debezium.MetricQueueTotal] {
				t.Errorf("queue remaining %v of total %v", got[debezium.MetricQueueRemaining], got[debezium.MetricQueueTotal])
			}
			seen := got[debezium.MetricEventsSeen]

			// Through Prometheus, as diagnose reads them.
			var st debezium.Streaming
			stacktest.Eventually(t, metricsWait, "Prometheus to hold the scraped series", func() (bool, string) {
				st, err = debezium.Query(ctx, http.DefaultClient, promURL, server)
				return err == nil && st.EventsSeen >= seen && st.KnownBehind && st.KnownConnected, fmt.Sprintf("%+v, %v", st, err)
			})
			if st.Plugin != f.plugin || !st.Connected {
				t.Errorf("through Prometheus: %+v, want plugin %s, connected", st, f.plugin)
			}

			// The pipeline health dashboard's Debezium panels, as generated,
			// show this connector when its server is picked.
			for _, q := range debeziumPanelQueries(t) {
				expr := strings.NewReplacer("$debezium_server", server, "$__rate_interval", "1m").Replace(q.expr)
				stacktest.Eventually(t, metricsWait, "panel "+q.title+" to show the connector", func() (bool, string) {
					got, err := promQuery(ctx, prom.addr, expr)
					return err == nil && len(got) == 1 && got[0].Metric[debezium.LabelServer] == server, fmt.Sprintf("%s: %+v, %v", expr, got, err)
				})
			}

			// diagnose on a paused connector: the relay stage is unhealthy
			// by the connector's state, with Debezium's series as evidence.
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: schema, IDGen: config.IDUUID,
				Brokers: s.KafkaBrokers, Topic: topic, Budgets: "{commit_to_publish: 30s, end_to_end: 60s}",
				Watch: fmt.Sprintf("{connect_url: %q, connector: %q}", connectURL, names.Name)})
			p.Canary.AggregateType = agg
			c.Pause(t)
			var d diagnose.Diagnosis
			stacktest.EventuallyEvery(t, metricsWait, stacktest.InnoDBTrxIdle, "diagnose to name the paused connector with Debezium's evidence", func() (bool, string) {
				d = diagnose.Pipeline(ctx, p, diagnose.Options{PrometheusURL: promURL})
				return d.FirstUnhealthy == diagnose.StageRelay, fmt.Sprintf("%+v", d)
			})
			var relay diagnose.StageResult
			for _, st := range d.Stages {
				if st.Name == diagnose.StageRelay {
					relay = st
				}
			}
			evidence := strings.Join(relay.Evidence, "\n")
			want := fmt.Sprintf("Debezium %s server %s: connected, ", f.plugin, server)
			if !strings.Contains(evidence, want) || !strings.Contains(evidence, "ms behind source (last event), queue remaining ") {
				t.Errorf("relay evidence lacks %q and Debezium's behind source and queue:\n%s", want, evidence)
			}
			t.Logf("%s diagnose relay stage (%s):\n%s", f.name, relay.Status, evidence)
		})
	}
}
