package slo

import (
	"bytes"
	_ "embed"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// sreWorkbookWindows is the built-in alert window table; see the file for
// why it holds budget shares rather than burn factors.
//
//go:embed windows/sre-workbook.yaml
var sreWorkbookWindows []byte

// DefaultBurnWindows returns the built-in multiwindow, multi-burn-rate
// alert windows: the SRE Workbook's, as budget shares.
func DefaultBurnWindows() ([]config.BurnWindow, error) {
	return parseBurnWindows(sreWorkbookWindows)
}

func parseBurnWindows(data []byte) ([]config.BurnWindow, error) {
	var doc struct {
		BurnWindows []config.BurnWindow `yaml:"burn_windows"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("burn windows: %w", err)
	}
	if len(doc.BurnWindows) == 0 {
		return nil, fmt.Errorf("burn windows: none defined")
	}
	for i, w := range doc.BurnWindows {
		if err := w.Validate(); err != nil {
			return nil, fmt.Errorf("burn windows: burn_windows[%d]: %w", i, err)
		}
	}
	return doc.BurnWindows, nil
}

// BurnAlert is one multiwindow burn-rate alert of an SLO: it fires when
// the error ratio is above Factor times the error budget over both the
// long and the short window.
type BurnAlert struct {
	// Severity is config.SeverityPage or config.SeverityTicket.
	Severity string
	// BudgetPercent is the share of the SLO window's error budget that a
	// burn at the threshold spends in the long window.
	BudgetPercent *big.Rat
	Long, Short   time.Duration
	// Factor is the burn rate threshold: BudgetPercent/100 * window / Long.
	Factor *big.Rat
}

// BurnFactor is the burn rate at which budgetPercent of an SLO window's
// error budget is spent in long: budgetPercent/100 * window/long. For a
// 30d window, 2% in 1h gives the SRE Workbook's 14.4; for 28d, 13.44.
func BurnFactor(budgetPercent *big.Rat, window, long time.Duration) *big.Rat {
	f := new(big.Rat).Quo(budgetPercent, big.NewRat(100, 1))
	return f.Mul(f, new(big.Rat).SetFrac64(int64(window), int64(long)))
}

// FormatRat prints r for PromQL without floating-point noise: as an exact
// decimal when it has one ("14.4", "0.999"), otherwise as a parenthesised
// division Prometheus computes itself ("(14 / 15)").
func FormatRat(r *big.Rat) string {
	if digits, ok := decimalDigits(r.Denom()); ok {
		s := r.FloatString(digits)
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	return "(" + r.Num().String() + " / " + r.Denom().String() + ")"
}

// decimalDigits reports how many fractional digits 1/den needs, and false
// when the decimal does not terminate (den has a prime factor other than 2
// and 5).
func decimalDigits(den *big.Int) (int, bool) {
	d := new(big.Int).Set(den)
	digits := 0
	for _, p := range []int64{2, 5} {
		n := 0
		for {
			q, m := new(big.Int).QuoRem(d, big.NewInt(p), new(big.Int))
			if m.Sign() != 0 {
				break
			}
			d, n = q, n+1
		}
		digits = max(digits, n)
	}
	return digits, d.Cmp(big.NewInt(1)) == 0
}

// ObjectiveRatio converts an objective in percent (99.9) to the exact
// ratio (999/1000) it was written as: the shortest decimal that reads back
// as the same float64, divided by 100.
func ObjectiveRatio(objectivePercent float64) *big.Rat {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(objectivePercent, 'f', -1, 64))
	if !ok {
		// Unreachable for a finite float; validation rejects the rest.
		r = new(big.Rat).SetFloat64(objectivePercent)
	}
	return r.Quo(r, big.NewRat(100, 1))
}

// ObjectiveExpr is the objective as a PromQL ratio literal, e.g. "0.999".
func (s SLO) ObjectiveExpr() string { return FormatRat(ObjectiveRatio(s.Objective)) }

// ErrorBudgetExpr is the error budget as a PromQL expression that
// Prometheus computes, e.g. "(1 - 0.999)", never a float printed with noise.
func (s SLO) ErrorBudgetExpr() string { return "(1 - " + s.ObjectiveExpr() + ")" }

// ErrorBudget is the exact error budget ratio, e.g. 1/1000.
func (s SLO) ErrorBudget() *big.Rat {
	return new(big.Rat).Sub(big.NewRat(1, 1), ObjectiveRatio(s.Objective))
}

// ThresholdExpr is the error ratio the alert fires above, as PromQL:
// "(14.4 * (1 - 0.999))".
func (a BurnAlert) ThresholdExpr(s SLO) string {
	return "(" + FormatRat(a.Factor) + " * " + s.ErrorBudgetExpr() + ")"
}

// Threshold is the exact error ratio the alert fires above.
func (a BurnAlert) Threshold(s SLO) *big.Rat {
	return new(big.Rat).Mul(a.Factor, s.ErrorBudget())
}

// Windows returns the windows the alert reads, long first.
func (a BurnAlert) Windows() []time.Duration { return []time.Duration{a.Long, a.Short} }

// CurrentBurnWindow is the window of slo:current_burn_rate:ratio and the
// base of the period error ratio (Sloth's convention): always recorded.
const CurrentBurnWindow = 5 * time.Minute

// RateWindows lists every window the SLO's rules need an error ratio for,
// shortest first: each burn alert's two windows and CurrentBurnWindow.
func (s SLO) RateWindows() []time.Duration {
	seen := map[time.Duration]bool{CurrentBurnWindow: true}
	out := []time.Duration{CurrentBurnWindow}
	for _, a := range s.Burn {
		for _, w := range a.Windows() {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// PromDuration prints a duration the way Prometheus (and Sloth, in its
// series names) does: "5m", "1d", "4w".
func PromDuration(d time.Duration) string { return model.Duration(d).String() }

// burnAlerts resolves the window table for an SLO window.
func burnAlerts(windows []config.BurnWindow, sloWindow time.Duration) ([]BurnAlert, error) {
	out := make([]BurnAlert, 0, len(windows))
	for i, w := range windows {
		long, short := time.Duration(w.LongWindow), time.Duration(w.ShortWindow)
		// Equal is refused too: the period's own error ratio is recorded
		// under the window's name.
		if long >= sloWindow {
			return nil, fmt.Errorf("burn window %d (%s/%s): the long window must be shorter than the SLO window %s; shorten it or lengthen slo.window",
				i, PromDuration(long), PromDuration(short), PromDuration(sloWindow))
		}
		pct := w.BudgetPercent.Rat()
		out = append(out, BurnAlert{
			Severity:      w.Severity,
			BudgetPercent: pct,
			Long:          long,
			Short:         short,
			Factor:        BurnFactor(pct, sloWindow, long),
		})
	}
	return out, nil
}

// BurnRate is how fast a window's SLI events spend the error budget: the
// window's error ratio bad/total divided by the budget (1 - objective). At 1
// the budget lasts exactly the SLO window; the SRE Workbook pages at 14.4
// over an hour. It is computed exactly, so one bad event in a thousand at
// 99.9% is 1, not 0.9999999999999991.
//
// ok is false when there is no rate to show: no events in the window (which
// is not a burn rate of 0), or inputs out of range (bad negative or above
// total, an objective not strictly between 0 and 100, which leaves no
// budget to divide by).
func BurnRate(bad, total int, objectivePercent float64) (rate float64, ok bool) {
	if total <= 0 || bad < 0 || bad > total || !(objectivePercent > 0 && objectivePercent < 100) {
		return 0, false
	}
	budget := new(big.Rat).Sub(big.NewRat(1, 1), ObjectiveRatio(objectivePercent))
	r := new(big.Rat).SetFrac64(int64(bad), int64(total))
	rate, _ = r.Quo(r, budget).Float64()
	return rate, true
}
