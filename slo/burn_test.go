package slo

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

const day = 24 * time.Hour

func TestBurnFactor(t *testing.T) {
	for _, tc := range []struct {
		name          string
		budgetPercent string
		window, long  time.Duration
		want          string
	}{
		{"2% of a 30d budget in 1h is the Workbook's 14.4", "2", 30 * day, time.Hour, "14.4"},
		{"5% of a 30d budget in 6h is the Workbook's 6", "5", 30 * day, 6 * time.Hour, "6"},
		{"10% of a 30d budget in 1d is the Workbook's 3", "10", 30 * day, day, "3"},
		{"10% of a 30d budget in 3d is the Workbook's 1", "10", 30 * day, 3 * day, "1"},
		{"2% of a 28d budget in 1h is 13.44, not 14.4", "2", 28 * day, time.Hour, "13.44"},
		{"5% of a 28d budget in 6h is 5.6", "5", 28 * day, 6 * time.Hour, "5.6"},
		{"10% of a 28d budget in 1d is 2.8", "10", 28 * day, day, "2.8"},
		{"10% of a 28d budget in 3d has no finite decimal and prints as a division", "10", 28 * day, 3 * day, "(14 / 15)"},
		{"a fractional budget share stays exact", "0.5", 30 * day, time.Hour, "3.6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pct, err := config.ParseDecimal(tc.budgetPercent)
			if err != nil {
				t.Fatal(err)
			}
			if got := FormatRat(BurnFactor(pct.Rat(), tc.window, tc.long)); got != tc.want {
				t.Errorf("BurnFactor(%s%%, %s, %s) = %s, want %s", tc.budgetPercent, tc.window, tc.long, got, tc.want)
			}
		})
	}
}

func TestThresholdExpressionsHaveNoFloatNoise(t *testing.T) {
	for _, tc := range []struct {
		name      string
		objective float64
		factor    *big.Rat
		want      string
	}{
		{"99.9% at 14.4x reads as the Workbook writes it", 99.9, big.NewRat(72, 5), "(14.4 * (1 - 0.999))"},
		{"99.5% at 13.44x", 99.5, big.NewRat(336, 25), "(13.44 * (1 - 0.995))"},
		{"99.95% keeps all its digits", 99.95, big.NewRat(6, 1), "(6 * (1 - 0.9995))"},
		{"a 1x factor stays 1", 99, big.NewRat(1, 1), "(1 * (1 - 0.99))"},
		{"a repeating factor is left for PromQL to divide", 99.9, big.NewRat(14, 15), "((14 / 15) * (1 - 0.999))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SLO{Objective: tc.objective}
			a := BurnAlert{Factor: tc.factor}
			if got := a.ThresholdExpr(s); got != tc.want {
				t.Errorf("ThresholdExpr = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestObjectiveRatioIsExact(t *testing.T) {
	if got, want := ObjectiveRatio(99.9), big.NewRat(999, 1000); got.Cmp(want) != 0 {
		t.Errorf("ObjectiveRatio(99.9) = %s, want %s", got, want)
	}
	if got, want := (SLO{Objective: 99.9}).ErrorBudget(), big.NewRat(1, 1000); got.Cmp(want) != 0 {
		t.Errorf("ErrorBudget(99.9) = %s, want %s", got, want)
	}
}

func TestDefaultBurnWindowsAreTheWorkbooks(t *testing.T) {
	windows, err := DefaultBurnWindows()
	if err != nil {
		t.Fatal(err)
	}
	type w struct {
		severity, pct, long, short string
	}
	want := []w{{"page", "2", "1h", "5m"}, {"page", "5", "6h", "30m"}, {"ticket", "10", "1d", "2h"}, {"ticket", "10", "3d", "6h"}}
	if len(windows) != len(want) {
		t.Fatalf("got %d windows, want %d", len(windows), len(want))
	}
	for i, g := range windows {
		got := w{g.Severity, g.BudgetPercent.String(), g.LongWindow.String(), g.ShortWindow.String()}
		if got != want[i] {
			t.Errorf("window %d = %+v, want %+v", i, got, want[i])
		}
	}
}

func TestBurnAlertsRefuseWindowsAsLongAsTheSLOWindow(t *testing.T) {
	pct, _ := config.ParseDecimal("10")
	windows := []config.BurnWindow{{Severity: "ticket", BudgetPercent: pct, LongWindow: config.Duration(3 * day), ShortWindow: config.Duration(6 * time.Hour)}}
	for _, tc := range []struct {
		name    string
		window  time.Duration
		wantErr string
	}{
		{"a 3d alert window fits a 28d SLO window", 28 * day, ""},
		{"a 3d alert window does not fit a 3d SLO window", 3 * day, "must be shorter than the SLO window 3d"},
		{"a 3d alert window does not fit a 1d SLO window", day, "must be shorter than the SLO window 1d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := burnAlerts(windows, tc.window)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRateWindowsCoverEveryAlertWindowOnce(t *testing.T) {
	cfg := loadConfig(t, "")
	m, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range m.Pipelines[0].SLOs[0].RateWindows() {
		got = append(got, PromDuration(w))
	}
	if want := "5m 30m 1h 2h 6h 1d 3d"; strings.Join(got, " ") != want {
		t.Errorf("RateWindows = %s, want %s", strings.Join(got, " "), want)
	}
}

func TestBurnRate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bad, total int
		objective  float64
		want       float64
		wantOK     bool
	}{
		{"One bad event in a thousand at 99.9% spends the budget exactly as fast as the window allows.", 1, 1000, 99.9, 1, true},
		{"1.44% bad at 99.9% is the Workbook's page threshold of 14.4.", 144, 10000, 99.9, 14.4, true},
		{"Every event bad at 99.9% burns a thousand times too fast.", 5, 5, 99.9, 1000, true},
		{"One bad in ten at 99% is a burn rate of 10.", 1, 10, 99, 10, true},
		{"One bad in three at 99% keeps its repeating decimal to float precision.", 1, 3, 99, 100.0 / 3, true},
		{"Events, none bad, are a burn rate of 0.", 0, 10, 99.9, 0, true},
		{"No events in the window is no burn rate, not 0.", 0, 0, 99.9, 0, false},
		{"More bad events than events is refused.", 2, 1, 99.9, 0, false},
		{"A negative count is refused.", -1, 10, 99.9, 0, false},
		{"An objective of 100% leaves no budget to divide by.", 1, 10, 100, 0, false},
		{"An objective of 0% is refused as the configuration refuses it.", 1, 10, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := BurnRate(tc.bad, tc.total, tc.objective)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("BurnRate(%d, %d, %v) = %v, %v; want %v, %v", tc.bad, tc.total, tc.objective, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
