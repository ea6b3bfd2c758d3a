package dashboards

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

// windowGroup is the SLOs that share an SLO window, and with it the burn
// factors of their alerts (factor = budget share * window / long window:
// 14.4 on the 1h page for 30d, 13.44 for 28d). Grafana colors a table
// column with one set of thresholds for every row, so a column of burn
// rates is colored right only when its rows share their factors: the
// burn-rate tables are drawn one per group.
type windowGroup struct {
	window time.Duration
	// pipelines are the group's pipelines, in configuration order.
	pipelines []string
	// slos counts the group's SLOs.
	slos int
	// alerts are the burn-rate alerts of every SLO of the group.
	alerts []slo.BurnAlert
	// rateWindows are the windows the rules record an error ratio for,
	// shortest first.
	rateWindows []time.Duration
}

// windowGroups groups the model's SLOs by window and burn alerts, longest
// window first (the window the dashboards' default time range covers).
func windowGroups(m *slo.Model) []windowGroup {
	var groups []windowGroup
	index := map[string]int{}
	for _, p := range m.Pipelines {
		seen := map[int]bool{}
		for _, s := range p.SLOs {
			key := groupKey(s)
			i, ok := index[key]
			if !ok {
				i = len(groups)
				index[key] = i
				groups = append(groups, windowGroup{window: s.Window, alerts: s.Burn, rateWindows: s.RateWindows()})
			}
			groups[i].slos++
			if !seen[i] {
				seen[i] = true
				groups[i].pipelines = append(groups[i].pipelines, p.Name)
			}
		}
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].window > groups[j].window })
	return groups
}

// groupKey identifies the SLO window and the burn alerts of an SLO.
func groupKey(s slo.SLO) string {
	var b strings.Builder
	b.WriteString(slo.PromDuration(s.Window))
	for _, a := range s.Burn {
		fmt.Fprintf(&b, "|%s %s %s/%s", a.Severity, a.Factor.RatString(), slo.PromDuration(a.Long), slo.PromDuration(a.Short))
	}
	return b.String()
}

// matchers restricts a query to the group's pipelines when the model has
// other groups; with a single group every pipeline is in it.
func (g windowGroup) matchers(groups []windowGroup) []string {
	if len(groups) < 2 {
		return nil
	}
	return []string{slo.LabelPipeline + `=~"` + strings.Join(g.pipelines, "|") + `"`}
}

// Colors of a burn rate, from harmless to paging.
const (
	colorOK     = "green"
	colorFast   = "yellow" // the budget would not last the SLO window
	colorTicket = "orange"
	colorPage   = "red"
)

// severityRank orders the burn colors: a step may only raise it.
var severityRank = map[string]int{colorOK: 0, colorFast: 1, colorTicket: 2, colorPage: 3}

// burnSteps are the thresholds of a burn rate measured over window, for
// SLOs with the given alerts: yellow from 1 (the budget runs out before
// the SLO window ends), orange from the lowest factor of a ticket alert
// that reads the window, red from the lowest factor of a page alert that
// reads it. Each alert reads its long and its short window: on the SRE
// Workbook's 30d table, 1h and 5m turn red at 14.4, 6h and 30m at 6, 6h
// turns orange at 1 (the 3d/6h ticket) and 1d and 2h at 3.
func burnSteps(alerts []slo.BurnAlert, window time.Duration) []step {
	lowest := map[string]*big.Rat{}
	for _, a := range alerts {
		if a.Long != window && a.Short != window {
			continue
		}
		color := colorTicket
		if a.Severity == config.SeverityPage {
			color = colorPage
		}
		if l, ok := lowest[color]; !ok || a.Factor.Cmp(l) < 0 {
			lowest[color] = a.Factor
		}
	}
	type candidate struct {
		at    *big.Rat
		color string
	}
	candidates := []candidate{{big.NewRat(1, 1), colorFast}}
	for _, color := range []string{colorTicket, colorPage} {
		if f, ok := lowest[color]; ok {
			candidates = append(candidates, candidate{f, color})
		}
	}
	// By value, the more severe first among equals; then a step that
	// would lower the severity (yellow at 1 above an orange at 14/15) is
	// dropped, so the colors only ever get worse as the burn grows.
	sort.SliceStable(candidates, func(i, j int) bool {
		if c := candidates[i].at.Cmp(candidates[j].at); c != 0 {
			return c < 0
		}
		return severityRank[candidates[i].color] > severityRank[candidates[j].color]
	})
	steps := []step{{nil, colorOK}}
	rank := 0
	for _, c := range candidates {
		if severityRank[c.color] <= rank {
			continue
		}
		rank = severityRank[c.color]
		f, _ := c.at.Float64()
		steps = append(steps, step{at(f), c.color})
	}
	return steps
}

// burnAlertKinds lists the model's burn alerts by what they mean (severity,
// budget share, windows), in the order of the window table: their factors
// differ between SLO windows, their meaning does not.
func burnAlertKinds(m *slo.Model) []slo.BurnAlert {
	var out []slo.BurnAlert
	seen := map[string]bool{}
	for _, p := range m.Pipelines {
		for _, s := range p.SLOs {
			for _, a := range s.Burn {
				key := fmt.Sprintf("%s %s %s/%s", a.Severity, a.BudgetPercent.RatString(), slo.PromDuration(a.Long), slo.PromDuration(a.Short))
				if !seen[key] {
					seen[key] = true
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// factorsText says what factor an alert kind has for each SLO window of
// the model: "14.4x for a 30d window, 13.44x for 28d".
func factorsText(m *slo.Model, kind slo.BurnAlert) string {
	var parts []string
	for i, g := range windowGroups(m) {
		for _, a := range g.alerts {
			if a.Severity != kind.Severity || a.Long != kind.Long || a.Short != kind.Short || a.BudgetPercent.Cmp(kind.BudgetPercent) != 0 {
				continue
			}
			f, _ := a.Factor.Float64()
			text := fmt.Sprintf("%sx for %s", trimFloat(f), windowText(g.window))
			if i == 0 {
				text = fmt.Sprintf("%sx for a %s window", trimFloat(f), windowText(g.window))
			}
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, ", ")
}

// trimFloat prints a factor with at most two decimals: a description, not
// a threshold.
func trimFloat(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// windowsText lists the model's SLO windows, longest first: "30d" or
// "30d or 28d".
func windowsText(m *slo.Model) string {
	var parts []string
	for _, g := range windowGroups(m) {
		w := windowText(g.window)
		if len(parts) == 0 || parts[len(parts)-1] != w {
			parts = append(parts, w)
		}
	}
	return strings.Join(parts, " or ")
}

// windowText prints an SLO window as people write it: in days when it is
// whole days ("28d", where Prometheus would print "4w"), as Prometheus
// does otherwise.
func windowText(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return slo.PromDuration(d)
}
