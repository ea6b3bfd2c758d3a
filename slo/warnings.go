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

// Warnings checks every SLO's window pairs against the canary rate, as the
// generated rules judge them (see BurnAlert.MinBadEvents):
//
//   - Long window: a pair fires on bad / max(events, Long/interval) over the
//     threshold, so one bad canary fires it, on a full window and on a
//     fresh Prometheus alike, exactly when MinBadEvents is below 1: when
//     interval/Long is over the threshold.
//   - Short window: it only confirms that a burn the long window proves is
//     still going on, and resets the pair soon after it stops. One bad
//     canary crossing the short window's threshold is its design, not a
//     fault (the long window holds the pair back). What breaks it is a
//     short window that can hold no canary at all (interval longer than
//     the window): between two canaries it has no events, records no
//     ratio, and the pair drops out in the middle of a burn.
func Warnings(m *Model) []Warning {
	var out []Warning
	for _, p := range m.Pipelines {
		if p.CanaryInterval <= 0 {
			continue
		}
		byMessage := map[string]int{}
		add := func(s SLO, w time.Duration, msg string) {
			if i, ok := byMessage[msg]; ok {
				out[i].Segments = append(out[i].Segments, s.Segment)
				return
			}
			byMessage[msg] = len(out)
			out = append(out, Warning{Pipeline: p.Name, Segments: []string{s.Segment}, Window: w, Message: msg})
		}
		for _, s := range p.SLOs {
			for _, a := range s.Burn {
				if msg, bad := longWindowWarning(p.CanaryInterval, s, a); bad {
					add(s, a.Long, msg)
				}
				if msg, bad := shortWindowWarning(p.CanaryInterval, a); bad {
					add(s, a.Short, msg)
				}
			}
		}
	}
	return out
}

// longWindowWarning reports whether one bad canary fires the pair: its
// minimum count of bad canaries, threshold x Long / interval, is below 1.
func longWindowWarning(interval time.Duration, s SLO, a BurnAlert) (string, bool) {
	if a.MinBadEvents(s, interval).Cmp(big.NewRat(1, 1)) >= 0 {
		return "", false
	}
	threshold := a.Threshold(s)
	thr, _ := threshold.Float64()
	oneBad, _ := new(big.Rat).SetFrac64(int64(interval), int64(a.Long)).Float64()
	msg := fmt.Sprintf("a canary every %s is %s canaries per %s; one bad canary (%s) is already over the %s threshold %s x (1 - %s) = %s on the %s window, so a single slow canary fires the alert, on a full window and on a fresh Prometheus alike; ",
		PromDuration(interval), formatCount(float64(a.Long)/float64(interval)), PromDuration(a.Long), percent(oneBad),
		a.Severity, FormatRat(a.Factor), s.ObjectiveExpr(), percent(thr), PromDuration(a.Long))
	// Intervals up to Long x threshold make one bad canary no more than
	// the threshold, which the pair needs to exceed.
	var fixes []string
	if every := time.Duration(float64(a.Long) * thr).Truncate(time.Second); every >= time.Second {
		fixes = append(fixes, fmt.Sprintf("send a canary at least every %s (canary.schedule \"@every %s\")", every, every))
	}
	// Objectives up to 1 - 1/(n x factor) do the same; suggest one
	// rounded down to two decimals in percent.
	n := float64(a.Long) / float64(interval)
	factor, _ := a.Factor.Float64()
	maxObjective := 100 * (1 - 1/(n*factor))
	if obj := math.Floor(maxObjective*100+1e-9) / 100; obj > 0 {
		fixes = append(fixes, fmt.Sprintf("lower slo.objective to %s or less", strconvTrim(obj)))
	}
	if len(fixes) == 0 {
		fixes = append(fixes, "use a longer alert window in alerting.burn_windows")
	}
	return msg + strings.Join(fixes, ", or "), true
}

// shortWindowWarning reports whether the short window can hold no canary.
func shortWindowWarning(interval time.Duration, a BurnAlert) (string, bool) {
	if interval <= a.Short {
		return "", false
	}
	return fmt.Sprintf("a canary every %s is less than one per %s, so the %s short window of the %s/%s %s is empty between two canaries: it records no error ratio then, and the alert drops out in the middle of a burn; send a canary at least every %s (canary.schedule \"@every %s\")",
		PromDuration(interval), PromDuration(a.Short), PromDuration(a.Short), PromDuration(a.Long), PromDuration(a.Short), a.Severity,
		PromDuration(a.Short), PromDuration(a.Short)), true
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
