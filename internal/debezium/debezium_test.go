package debezium

import (
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// The series diagnose and the dashboards read are the ones the stack's
// exporter configuration writes: a rename on either side fails here, not
// as an empty panel.
func TestTheExporterConfigurationExportsEveryMetricRead(t *testing.T) {
	text, err := os.ReadFile("../../deploy/local/connect/jmx-exporter.yml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+name: (\S+)\n\s+type: (\S+)`).FindAllStringSubmatch(string(text), -1) {
		name := m[1]
		if m[2] == "COUNTER" { // the exporter appends _total to a counter's name
			name += "_total"
		}
		names = append(names, name)
	}
	for _, want := range Metrics {
		if !slices.Contains(names, want) {
			t.Errorf("jmx-exporter.yml exports %q, not %s", names, want)
		}
	}
	for _, l := range []string{LabelPlugin, LabelContext, LabelServer} {
		if c := strings.Count(string(text), l+`: "$`); c != len(Metrics) {
			t.Errorf("label %s set by %d rules, want every one of %d", l, c, len(Metrics))
		}
	}
}

func sample(name string, v float64) *model.Sample {
	return &model.Sample{Metric: model.Metric{model.MetricNameLabel: model.LabelValue(name), LabelPlugin: "postgres", LabelServer: "orders"},
		Value: model.SampleValue(v)}
}

func TestFromVector(t *testing.T) {
	tests := []struct {
		name string
		vec  model.Vector
		want Streaming
		line string
	}{
		{
			name: "a connected connector's series read as they are",
			vec: model.Vector{sample(MetricBehindSource, 42), sample(MetricQueueRemaining, 8000), sample(MetricQueueTotal, 8192),
				sample(MetricConnected, 1), sample(MetricEventsSeen, 7), sample(MetricSnapshotRunning, 0)},
			want: Streaming{Server: "orders", Plugin: "postgres", BehindSource: 42 * time.Millisecond, QueueRemaining: 8000, QueueTotal: 8192,
				EventsSeen: 7, Connected: true, KnownConnected: true, KnownBehind: true, KnownSnapshot: true},
			line: "Debezium postgres server orders: connected, 42 ms behind source (last event), queue remaining 8000 of 8192, 7 events seen",
		},
		{
			name: "of two tasks the worst is kept: disconnected, most behind, least queue left",
			vec: model.Vector{sample(MetricConnected, 1), sample(MetricConnected, 0), sample(MetricBehindSource, 5), sample(MetricBehindSource, 900),
				sample(MetricQueueRemaining, 10), sample(MetricQueueRemaining, 0), sample(MetricSnapshotRunning, 1)},
			want: Streaming{Server: "orders", Plugin: "postgres", BehindSource: 900 * time.Millisecond, QueueRemaining: 0, QueueTotal: math.NaN(),
				EventsSeen: math.NaN(), KnownConnected: true, KnownBehind: true, KnownSnapshot: true, SnapshotRunning: true},
			line: "Debezium postgres server orders: NOT connected to the database's log, 900 ms behind source (last event), queue remaining 0 of ?, ? events seen, a snapshot is running",
		},
		{
			name: "behind source before the first event (-1) is 0, and missing series are unknown",
			vec:  model.Vector{sample(MetricBehindSource, -1)},
			want: Streaming{Server: "orders", Plugin: "postgres", QueueRemaining: math.NaN(), QueueTotal: math.NaN(), EventsSeen: math.NaN(), KnownBehind: true},
			line: "Debezium postgres server orders: connected unknown, 0 ms behind source (last event), queue remaining ? of ?, ? events seen",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fromVector("orders", tt.vec)
			nanEq := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }
			if got.Server != tt.want.Server || got.Plugin != tt.want.Plugin || got.BehindSource != tt.want.BehindSource ||
				!nanEq(got.QueueRemaining, tt.want.QueueRemaining) || !nanEq(got.QueueTotal, tt.want.QueueTotal) || !nanEq(got.EventsSeen, tt.want.EventsSeen) ||
				got.Connected != tt.want.Connected || got.KnownConnected != tt.want.KnownConnected || got.KnownBehind != tt.want.KnownBehind ||
				got.KnownSnapshot != tt.want.KnownSnapshot || got.SnapshotRunning != tt.want.SnapshotRunning {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			if s := got.String(); s != tt.line {
				t.Errorf("line\n got %s\nwant %s", s, tt.line)
			}
		})
	}
}
