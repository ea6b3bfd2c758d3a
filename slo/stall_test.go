package slo

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

func TestStallThresholdAndTolerance(t *testing.T) {
	p := Pipeline{EndToEndBudget: 2 * time.Second, CanaryInterval: 10 * time.Second}
	for _, tc := range []struct {
		name                 string
		missed               int
		threshold, tolerance time.Duration
	}{
		{"Three missed canaries at 10s past a 2s budget is 32s; a 20s relay restart (22s tolerated) does not reach it.", 3, 32 * time.Second, 22 * time.Second},
		{"Two missed canaries is 22s and tolerates a pause of the budget plus one interval.", 2, 22 * time.Second, 12 * time.Second},
		{"One missed canary is the longest gap a healthy pipeline shows, and tolerates a pause shorter than the budget.", 1, 12 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.StallThreshold(tc.missed); got != tc.threshold {
				t.Errorf("StallThreshold(%d) = %s, want %s", tc.missed, got, tc.threshold)
			}
			if got := p.StallTolerance(tc.missed); got != tc.tolerance {
				t.Errorf("StallTolerance(%d) = %s, want %s", tc.missed, got, tc.tolerance)
			}
		})
	}
}

func TestStallBlameSegmentsAreThePipelinesBudgetedStagesInOrder(t *testing.T) {
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"A relay and a broker segment with budgets are both candidates, relay first.",
			"    budgets: {end_to_end: 2s, commit_to_publish: 1s, publish_to_consume: 1s, insert_to_commit: 1s}\n",
			"commit_to_publish publish_to_consume"},
		{"Segments without a budget judge no canary and cannot be blamed.",
			"",
			"commit_to_publish"},
		{"Extra stamps split the relay into segments, in stamp order.",
			"    relay: {stamps: [{name: read, header: x-read}]}\n    budgets: {end_to_end: 2s, commit_to_read: 1s, read_to_publish: 1s, publish_to_consume: 1s}\n    owners: {default: team-orders}\n",
			"commit_to_read read_to_publish publish_to_consume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := testConfigYAML
			if strings.Contains(tc.extra, "budgets:") {
				yaml = strings.Replace(yaml, "    budgets: {end_to_end: 2s, commit_to_publish: 1s}\n", "", 1)
			}
			if strings.Contains(tc.extra, "owners:") {
				yaml = strings.Replace(yaml, "    owners: {default: team-orders, commit_to_publish: team-relay}\n", "", 1)
			}
			cfg := loadConfigYAML(t, yaml+tc.extra)
			m, err := FromConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(m.Pipelines[0].StallBlameSegments(), " "); got != tc.want {
				t.Errorf("StallBlameSegments = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMinBadEventsIsWhatAFullWindowNeeds(t *testing.T) {
	s := SLO{Objective: 99.9}
	for _, tc := range []struct {
		name     string
		factor   *big.Rat
		long     time.Duration
		interval time.Duration
		want     string
		wantExpr string
	}{
		{"The 1h page at 14.4x and a canary every 10s needs 5.184 of the hour's 360 canaries bad.", big.NewRat(72, 5), time.Hour, 10 * time.Second, "648/125", "(14.4 * (1 - 0.999)) * 360"},
		{"The 6h page at 6x needs 12.96 of 2,160.", big.NewRat(6, 1), 6 * time.Hour, 10 * time.Second, "324/25", "(6 * (1 - 0.999)) * 2160"},
		{"The 3d ticket at 1x needs 25.92 of 25,920.", big.NewRat(1, 1), 3 * 24 * time.Hour, 10 * time.Second, "648/25", "(1 * (1 - 0.999)) * 25920"},
		{"An interval that does not divide the window keeps its fraction for PromQL: 7.4 of 514.3.", big.NewRat(72, 5), time.Hour, 7 * time.Second, "1296/175", "(14.4 * (1 - 0.999)) * (3600 / 7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := BurnAlert{Factor: tc.factor, Long: tc.long}
			if got := a.MinBadEvents(s, tc.interval); got.String() != tc.want {
				t.Errorf("MinBadEvents = %s, want %s", got, tc.want)
			}
			if got := a.MinBadEventsExpr(s, tc.interval); got != tc.wantExpr {
				t.Errorf("MinBadEventsExpr = %s, want %s", got, tc.wantExpr)
			}
		})
	}
}

func loadConfigYAML(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
