package slo

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Warning is a configuration that works but that the burn-rate alerts
// cannot judge well: too few canaries in an alert window for its threshold.
// validate and rules print them; they are not errors.
type Warning struct {
	Pipeline string
	// Segments lists the SLOs concerned, in pipeline order.
	Segments []string
	// Window is the alert window that is too coarse.
	Window  time.Duration
	Message string
}

// String prints the warning on one line.
func (w Warning) String() string {
	return fmt.Sprintf("pipeline %q (%s): %s", w.Pipeline, strings.Join(w.Segments, ", "), w.Message)
}

// Warnings checks, for every SLO and alert window, whether one bad canary
// already pushes the window's error ratio over the alert's threshold.
//
// A window holds window/interval canaries, so one bad canary is an error
// ratio of interval/window. When that is above factor*(1-objective), the
// window cannot tell one slow canary from a burn: on a short window the
// alert keeps firing (or resolves late) on a single blip; on a long window
// a single slow canary fires it. The fix is more canaries (a shorter
// schedule) or a looser objective; the message names both.
func Warnings(m *Model) []Warning {
	var out []Warning
	for _, p := range m.Pipelines {
		if p.CanaryInterval <= 0 {
			continue
		}
		byMessage := map[string]int{}
		for _, s := range p.SLOs {
			for _, a := range s.Burn {
				for _, w := range a.Windows() {
					msg, bad := windowWarning(p.CanaryInterval, s, a, w)
					if !bad {
						continue
					}
					if i, ok := byMessage[msg]; ok {
						out[i].Segments = append(out[i].Segments, s.Segment)
						continue
					}
					byMessage[msg] = len(out)
					out = append(out, Warning{
						Pipeline: p.Name,
						Segments: []string{s.Segment},
						Window:   w,
						Message:  msg,
					})
				}
			}
		}
	}
	return out
}

// windowWarning reports whether one bad canary in window crosses the
// alert's threshold, and says what would work.
func windowWarning(interval time.Duration, s SLO, a BurnAlert, window time.Duration) (string, bool) {
	threshold := a.Threshold(s)
	// One bad canary in the window: interval/window.
	oneBad := new(big.Rat).SetFrac64(int64(interval), int64(window))
	if oneBad.Cmp(threshold) <= 0 {
		return "", false
	}
	thr, _ := threshold.Float64()
	ob, _ := oneBad.Float64()
	effect := "so the window cannot tell a blip from a burn: one slow canary keeps the alert firing"
	if window == a.Long {
		effect = "so a single slow canary fires the alert"
	}
	msg := fmt.Sprintf("a canary every %s is %s canaries per %s; one bad canary (%s) is already over the %s threshold %s x (1 - %s) = %s on the %s window, %s; ",
		PromDuration(interval), formatCount(float64(window)/float64(interval)), PromDuration(window), percent(ob),
		a.Severity, FormatRat(a.Factor), s.ObjectiveExpr(), percent(thr), PromDuration(window), effect)
	// Intervals strictly below window*threshold put one bad canary under
	// the threshold.
	limit := time.Duration(float64(window) * thr)
	var fixes []string
	if every := (limit - 1).Truncate(time.Second); every >= time.Second {
		fixes = append(fixes, fmt.Sprintf("send a canary at least every %s (canary.schedule \"@every %s\")", every, every))
	}
	// Objectives strictly below 1 - 1/(n*factor) put one bad canary under
	// the threshold; suggest one rounded down to two decimals in percent.
	n := float64(window) / float64(interval)
	factor, _ := a.Factor.Float64()
	maxObjective := 100 * (1 - 1/(n*factor))
	if obj := math.Floor(maxObjective*100-1e-9) / 100; obj > 0 {
		fixes = append(fixes, fmt.Sprintf("lower slo.objective to %s or less", strconvTrim(obj)))
	}
	if len(fixes) == 0 {
		fixes = append(fixes, "use a longer alert window in alerting.burn_windows")
	}
	return msg + strings.Join(fixes, ", or "), true
}

func percent(r float64) string { return strconvTrim(math.Round(r*1e4)/1e2) + "%" }

func formatCount(n float64) string {
	if n == math.Trunc(n) {
		return fmt.Sprintf("%d", int64(n))
	}
	return fmt.Sprintf("%.1f", n)
}

func strconvTrim(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
