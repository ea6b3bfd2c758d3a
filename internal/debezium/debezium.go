// Package debezium reads Debezium's own streaming metrics from a Prometheus
// server that scrapes the Kafka Connect worker's JMX exporter (the series
// that deploy/local/connect/jmx-exporter.yml names): the evidence that
// diagnose puts beside the canary's commit_to_publish, and the series the
// dashboards draw. docs/cdc.md says what each tells that the canary cannot.
package debezium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// The series of the JMX exporter's configuration. Each carries LabelPlugin
// (postgres, mariadb), LabelContext and LabelServer.
const (
	MetricBehindSource    = "debezium_streaming_milliseconds_behind_source"
	MetricQueueRemaining  = "debezium_streaming_queue_remaining_capacity"
	MetricQueueTotal      = "debezium_streaming_queue_total_capacity"
	MetricConnected       = "debezium_streaming_connected"
	MetricEventsSeen      = "debezium_streaming_events_seen_total"
	MetricSnapshotRunning = "debezium_snapshot_running"

	LabelPlugin  = "plugin"
	LabelContext = "context"
	// LabelServer is the connector's topic.prefix (Debezium's logical
	// server name): what matches a pipeline's connector to its series.
	LabelServer = "server"
)

// Metrics lists every series the exporter's configuration must export.
var Metrics = []string{MetricBehindSource, MetricQueueRemaining, MetricQueueTotal, MetricConnected, MetricEventsSeen, MetricSnapshotRunning}

// ErrNoSeries: Prometheus has no Debezium series of the server (not
// scraped, or the connector's task is not running).
var ErrNoSeries = errors.New("no Debezium series")

// Streaming is one connector's streaming metrics at one moment. A metric
// Prometheus had no series of is NaN (booleans: Known* false).
type Streaming struct {
	Server, Plugin string
	// BehindSource is Debezium's MilliSecondsBehindSource: the last
	// event's processing time minus its commit time in the log.
	BehindSource                time.Duration
	QueueRemaining, QueueTotal  float64
	EventsSeen                  float64
	Connected, SnapshotRunning  bool
	KnownConnected, KnownBehind bool
	KnownSnapshot               bool
}

// Query reads the series of the connector whose topic.prefix is server
// from the Prometheus at promURL. With several series of a metric (two
// tasks, two scrape jobs) it keeps the worst: the most behind, the least
// queue left, disconnected over connected.
func Query(ctx context.Context, client *http.Client, promURL, server string) (Streaming, error) {
	q := fmt.Sprintf(`{__name__=~%q,%s=%s}`, strings.Join(Metrics, "|"), LabelServer, strconv.Quote(server))
	vec, err := instant(ctx, client, promURL, q)
	if err != nil {
		return Streaming{}, fmt.Errorf("prometheus %s: query %s: %w", promURL, q, err)
	}
	if len(vec) == 0 {
		return Streaming{}, fmt.Errorf("prometheus %s: %w of server %q (%s): is the worker's JMX exporter scraped, and does the connector's task run?",
			promURL, ErrNoSeries, server, q)
	}
	return fromVector(server, vec), nil
}

// instant evaluates an instant query through Prometheus' HTTP API
// (/api/v1/query), which every Prometheus-compatible server answers. A
// vector is the only result wanted here.
func instant(ctx context.Context, client *http.Client, promURL, query string) (model.Vector, error) {
	u, err := url.Parse(strings.TrimRight(promURL, "/") + "/api/v1/query")
	if err != nil {
		return nil, err
	}
	u.RawQuery = url.Values{"query": {query}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", resp.Status, err)
	}
	var env struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("%s: not Prometheus' API (%w)", resp.Status, err)
	}
	if env.Status != "success" {
		return nil, fmt.Errorf("%s: %s", resp.Status, env.Error)
	}
	if env.Data.ResultType != model.ValVector.String() {
		return nil, fmt.Errorf("a %s, want a vector", env.Data.ResultType)
	}
	var vec model.Vector
	if err := json.Unmarshal(env.Data.Result, &vec); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return vec, nil
}

func fromVector(server string, vec model.Vector) Streaming {
	s := Streaming{Server: server, QueueRemaining: math.NaN(), QueueTotal: math.NaN(), EventsSeen: math.NaN(), Connected: true}
	behind := math.NaN()
	worst := func(cur, v float64, less bool) float64 {
		if math.IsNaN(cur) || (less && v < cur) || (!less && v > cur) {
			return v
		}
		return cur
	}
	for _, smp := range vec {
		v := float64(smp.Value)
		if p := string(smp.Metric[LabelPlugin]); p != "" {
			s.Plugin = p
		}
		switch string(smp.Metric[model.MetricNameLabel]) {
		case MetricBehindSource:
			behind = worst(behind, v, false)
		case MetricQueueRemaining:
			s.QueueRemaining = worst(s.QueueRemaining, v, true)
		case MetricQueueTotal:
			s.QueueTotal = worst(s.QueueTotal, v, true)
		case MetricEventsSeen:
			s.EventsSeen = worst(s.EventsSeen, v, true)
		case MetricConnected:
			s.KnownConnected = true
			s.Connected = s.Connected && v == 1
		case MetricSnapshotRunning:
			s.KnownSnapshot = true
			s.SnapshotRunning = s.SnapshotRunning || v == 1
		}
	}
	if !math.IsNaN(behind) {
		s.KnownBehind = true
		// Debezium reports -1 before its first event.
		s.BehindSource = time.Duration(max(behind, 0)) * time.Millisecond
	}
	if !s.KnownConnected {
		s.Connected = false
	}
	return s
}

// String is the one-line evidence diagnose prints.
func (s Streaming) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Debezium")
	if s.Plugin != "" {
		fmt.Fprintf(&b, " %s", s.Plugin)
	}
	fmt.Fprintf(&b, " server %s: ", s.Server)
	parts := []string{}
	switch {
	case !s.KnownConnected:
		parts = append(parts, "connected unknown")
	case s.Connected:
		parts = append(parts, "connected")
	default:
		parts = append(parts, "NOT connected to the database's log")
	}
	if s.KnownBehind {
		parts = append(parts, fmt.Sprintf("%d ms behind source (last event)", s.BehindSource.Milliseconds()))
	} else {
		parts = append(parts, "behind source unknown")
	}
	parts = append(parts, "queue remaining "+num(s.QueueRemaining)+" of "+num(s.QueueTotal), num(s.EventsSeen)+" events seen")
	if s.KnownSnapshot && s.SnapshotRunning {
		parts = append(parts, "a snapshot is running")
	}
	b.WriteString(strings.Join(parts, ", "))
	return b.String()
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
