package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/metricsdoc"
	"github.com/outbox-canary/outbox-canary/internal/watch"
	"github.com/outbox-canary/outbox-canary/prober"
)

var update = flag.Bool("update", false, "rewrite docs/metrics.md")

// TestMetricsDoc registers what `run` registers (the prober's and the
// watchers' families), touches every series that is created lazily,
// checks the descriptions against what the registry exposes, lints the
// exposition, and fails when docs/metrics.md drifted from them.
func TestMetricsDoc(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p := config.Pipeline{
		Name:    "orders",
		Relay:   config.Relay{Kind: config.RelayPolling},
		Canary:  config.Canary{LostAfter: config.Duration(time.Minute)},
		Budgets: config.Budgets{config.SegmentEndToEnd: config.Duration(2 * time.Second)},
	}
	pm, err := prober.NewMetrics(reg, []config.Pipeline{p})
	if err != nil {
		t.Fatal(err)
	}
	wm, err := watch.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm.DBClockOffset.WithLabelValues("orders")
	pm.DBClockOffsetError.WithLabelValues("orders")
	pm.DependencyUp.WithLabelValues("orders", prober.DependencyDatabase)
	pm.DependencyErrors.WithLabelValues("orders", prober.DependencyDatabase)
	pm.CanariesUnjudged.WithLabelValues("orders", config.SegmentEndToEnd, "lost")
	pm.SLOObjective.WithLabelValues("orders", config.SegmentEndToEnd, "orders-end_to_end", "orders", config.SegmentEndToEnd, "team", "99.9", "30d", "2s", "10s", "32s", "", "polling", "postgres", "", "end_to_end", "team", "team", "team", "team").Set(0.999)
	for _, g := range []*compactvec.GaugeVec{wm.BacklogRows, wm.OldestUnpublishedAge, wm.OldestTransactionAge, wm.LongTransactions,
		wm.BinlogWritten, wm.BinlogRetainedBytes, wm.BinlogRetainedFiles, wm.BinlogExpiry} {
		g.WithLabelValues("orders")
	}
	for _, g := range []*compactvec.GaugeVec{wm.Up, wm.LastSuccess} {
		g.WithLabelValues("orders", watch.WatcherBacklog)
	}
	wm.Errors.WithLabelValues("orders", watch.WatcherBacklog)
	for _, g := range []*compactvec.GaugeVec{wm.SlotRetainedWAL, wm.SlotUnconfirmedWAL, wm.SlotActive, wm.SlotSafeWALSize} {
		g.WithLabelValues("orders", "slot")
	}
	wm.SlotWALStatus.WithLabelValues("orders", "slot", "reserved")
	wm.ConsumerLagMessages.WithLabelValues("orders", "g", "t")
	wm.ConsumerLagSeconds.WithLabelValues("orders", "g", "t")
	wm.ConnectorRunning.WithLabelValues("orders", "c")
	for _, g := range []*compactvec.GaugeVec{wm.BinlogConnectorPosition, wm.BinlogConnectorBehindBytes, wm.BinlogConnectorBehindFiles,
		wm.BinlogConnectorFilePurged, wm.BinlogConnectorPurgeHeadroom} {
		g.WithLabelValues("orders", "c")
	}
	wm.ConnectorTaskFailures.WithLabelValues("orders", "c")
	wm.ConnectorRestarts.WithLabelValues("orders", "c")

	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sections := []metricsdoc.Section{
		{Title: "The canary engine (prober/)", Families: prober.Catalogue(),
			Intro: "Canaries sent, received and judged, per pipeline and segment, and the prober's own dependencies."},
		{Title: "The watchers (internal/watch)", Families: watch.Catalogue(),
			Intro: "Signals that back the canaries up. A series appears once its watcher has measured it, and disappears while the watcher fails (`outbox_canary_watcher_up` is then 0)."},
	}
	var all []metricsdoc.Family
	for _, s := range sections {
		all = append(all, s.Families...)
	}
	for _, err := range metricsdoc.Compare(gathered, all, nil) {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	doc := metricsdoc.Markdown("`make generate` (TestMetricsDoc in cmd/outbox-canary)", sections)
	path := filepath.Join("..", "..", "docs", "metrics.md")
	if *update {
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run `make generate`", err)
	}
	if !bytes.Equal(got, doc) {
		t.Fatalf("docs/metrics.md is out of date with the metric descriptions: run `make generate`")
	}
	if !strings.Contains(string(doc), "outbox_canary_watcher_up") {
		t.Error("the watchers' families are missing from the docs")
	}
}
