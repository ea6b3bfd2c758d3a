// Command flapping writes the promtool scenarios of pipelines that stall
// again and again (t-, u-, v-), a burn that looks like it comes before
// its stall (w-) and a page that must resolve (x-) from a simulation of
// the test configuration's orders pipeline: a canary committed every 10s
// at 10k+5 s, published by the relay 0.05s after it can be, consumed
// 0.05s later, judged against the 1s commit_to_publish and 2s end_to_end
// budgets at the earlier of its arrival and its deadline, and scraped
// every 15s. Run from the repository's root:
//
//	go run ./alerts/testdata/flapping
//
// The expectations in each file are written by hand below, from the
// stalls the simulation prints.
package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

const (
	interval  = 10.0
	phase     = 5.0
	scrape    = 15.0
	hop       = 0.05
	relayBud  = 1.0
	e2eBud    = 2.0
	threshold = 32.0 // 2s budget + 3 x 10s
	minSent   = 22.0 // threshold - interval
	blameWin  = 152.0
)

// relay says when a canary committed at c is published.
type relay func(c float64) float64

// downs is a relay that is down in the given [from, to) spans and
// publishes what waited when it comes back.
func downs(spans [][2]float64) relay {
	return func(c float64) float64 {
		t := c
		for _, s := range spans {
			if t >= s[0] && t < s[1] {
				t = s[1]
			}
		}
		return t + hop
	}
}

// polls is a relay that, in [from, to), publishes only at whole minutes.
func polls(from, to float64, every float64) relay {
	return func(c float64) float64 {
		if c >= from && c < to {
			return math.Min(math.Ceil(c/every)*every, to) + hop
		}
		return c + hop
	}
}

// delayed is a relay that takes d more to publish in [from, to).
func delayed(r relay, from, to, d float64) relay {
	return func(c float64) float64 {
		p := r(c)
		if c >= from && c < to {
			return p + d
		}
		return p
	}
}

type canary struct{ commit, publish, consume float64 }

type sim struct {
	canaries []canary
	end      float64
}

func simulate(r relay, end float64) sim {
	var cs []canary
	for c := phase; c < end; c += interval {
		p := r(c)
		cs = append(cs, canary{c, p, p + hop})
	}
	return sim{cs, end}
}

// at is what the prober exports at t.
type sample struct {
	sent, recv                           float64
	relayGood, relayBad, e2eGood, e2eBad float64
	backlog, oldest, consumed            float64
}

func (s sim) at(t float64) sample {
	var x sample
	var oldestCommit = math.Inf(1)
	for _, c := range s.canaries {
		if c.commit > t {
			break
		}
		x.sent = c.commit
		if c.consume <= t {
			x.recv = math.Max(x.recv, c.consume)
			x.consumed++
		}
		if c.publish > t {
			x.backlog++
			oldestCommit = math.Min(oldestCommit, c.commit)
		}
		switch {
		case c.publish-c.commit <= relayBud && c.publish <= t:
			x.relayGood++
		case c.publish-c.commit > relayBud && c.commit+relayBud <= t:
			x.relayBad++
		}
		switch {
		case c.consume-c.commit <= e2eBud && c.consume <= t:
			x.e2eGood++
		case c.consume-c.commit > e2eBud && c.commit+e2eBud <= t:
			x.e2eBad++
		}
	}
	if x.backlog > 0 {
		x.oldest = t - oldestCommit
	}
	return x
}

// stalls lists the evaluations at which the stall recording holds.
func (s sim) stalls() []float64 {
	var out []float64
	for t := 0.0; t <= s.end; t += scrape {
		x := s.at(t)
		if !(x.recv > 0 && t-x.recv > threshold && x.sent-x.recv > minSent) {
			continue
		}
		first := s.at(math.Max(0, math.Ceil((t-blameWin)/scrape)*scrape))
		if x.relayBad+x.e2eBad > first.relayBad+first.e2eBad {
			out = append(out, t)
		}
	}
	return out
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (s sim) series(name, labels string, f func(sample) float64) string {
	var vs []string
	for t := 0.0; t <= s.end; t += scrape {
		vs = append(vs, num(math.Round(f(s.at(t))*100)/100))
	}
	return fmt.Sprintf("      - series: %s{job=\"outbox-canary\", instance=\"prober:9464\", pipeline=\"orders\"%s}\n        values: %s\n", name, labels, strings.Join(vs, " "))
}

func (s sim) inputs() string {
	n := int(s.end/scrape) + 1
	var b strings.Builder
	b.WriteString("    input_series:\n")
	fmt.Fprintf(&b, "      - series: outbox_canary_build_info{job=\"outbox-canary\", instance=\"prober:9464\", version=\"test\"}\n        values: 1x%d\n", n)
	fmt.Fprintf(&b, "      - series: outbox_canary_dependency_up{job=\"outbox-canary\", instance=\"prober:9464\", pipeline=\"orders\", dependency=\"kafka\"}\n        values: 1x%d\n", n)
	b.WriteString(s.series("outbox_canary_last_sent_timestamp_seconds", "", func(x sample) float64 { return x.sent }))
	b.WriteString(s.series("outbox_canary_last_received_timestamp_seconds", "", func(x sample) float64 { return x.recv }))
	sli := func(seg, outcome string) string {
		return fmt.Sprintf(", segment=%q, outcome=%q", seg, outcome)
	}
	b.WriteString(s.series("outbox_canary_sli_events_total", sli("commit_to_publish", "good"), func(x sample) float64 { return x.relayGood }))
	b.WriteString(s.series("outbox_canary_sli_events_total", sli("commit_to_publish", "bad"), func(x sample) float64 { return x.relayBad }))
	b.WriteString(s.series("outbox_canary_sli_events_total", sli("publish_to_consume", "good"), func(x sample) float64 { return x.consumed }))
	fmt.Fprintf(&b, "      - series: outbox_canary_sli_events_total{job=\"outbox-canary\", instance=\"prober:9464\", pipeline=\"orders\", segment=\"publish_to_consume\", outcome=\"bad\"}\n        values: 0x%d\n", n)
	b.WriteString(s.series("outbox_canary_sli_events_total", sli("end_to_end", "good"), func(x sample) float64 { return x.e2eGood }))
	b.WriteString(s.series("outbox_canary_sli_events_total", sli("end_to_end", "bad"), func(x sample) float64 { return x.e2eBad }))
	b.WriteString(s.series("outbox_canary_outbox_backlog_rows", "", func(x sample) float64 { return x.backlog }))
	b.WriteString(s.series("outbox_canary_outbox_oldest_unpublished_age_seconds", "", func(x sample) float64 { return x.oldest }))
	return b.String()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "stalls" {
		for _, sc := range scenarios() {
			fmt.Printf("%s: stall seen at %s\n", sc.name, spans(simulate(sc.relay, sc.end).stalls()))
		}
		return
	}
	for _, sc := range scenarios() {
		s := simulate(sc.relay, sc.end)
		doc := sc.header + "rule_files: [labels-only.rules.yml]\nevaluation_interval: 15s\ntests:\n  - interval: 15s\n" + s.inputs() + "    alert_rule_test:\n" + sc.expect(s)
		if err := os.WriteFile("alerts/testdata/scenarios/"+sc.name+".yml", []byte(doc), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// spans prints evaluation times as runs: 1h0m45s-1h1m0s, ...
func spans(ts []float64) string {
	var out []string
	for i := 0; i < len(ts); {
		j := i
		for j+1 < len(ts) && ts[j+1]-ts[j] == scrape {
			j++
		}
		out = append(out, dur(ts[i])+"-"+dur(ts[j]))
		i = j + 1
	}
	return strings.Join(out, " ")
}

func dur(t float64) string {
	s := int(t)
	return fmt.Sprintf("%dh%dm%ds", s/3600, s%3600/60, s%60)
}

type scenario struct {
	name, header string
	expect       func(s sim) string
	relay        relay
	end          float64
}

const stallStart = 3606 // just after the canary of 1h5s arrived

// cycles is a relay down and up in turn from stallStart: down[i], then up.
func cycles(up float64, down ...float64) ([][2]float64, float64) {
	var spans [][2]float64
	t := float64(stallStart)
	for _, d := range down {
		spans = append(spans, [2]float64{t, t + d})
		t += d + up
	}
	return spans, t - up
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func scenarios() []scenario {
	crash, crashEnd := cycles(5, repeat(40, 14)...)
	backoff, backoffEnd := cycles(5, 10, 20, 40, 80, 160, 300, 300)
	// The stall alert is the incident's one page: nothing else fires,
	// not even the burn page of the back-off's first short outages.
	stalls := func(s sim) string { return s.stallChecks() + s.noneChecks(stallStart, s.end, 60, consequences...) }
	first := [2]float64{stallStart, stallStart + 180}
	second := first[1] + 40*60
	blip := float64(stallStart + 10*60 + 20*60)
	stallThenBlip := [][2]float64{{stallStart, stallStart + 360}, {stallStart + 360 + 20*60, stallStart + 360 + 20*60 + 20}}
	return []scenario{
		{name: "t-crash-loop", relay: downs(crash), end: round(crashEnd + 20*60), header: headerCrash, expect: stalls},
		{name: "u-crash-loop-backoff", relay: downs(backoff), end: round(backoffEnd + 20*60), header: headerBackoff, expect: stalls},
		{name: "v-relay-every-minute", relay: polls(stallStart, stallStart+20*60, 60), end: round(stallStart + 40*60), header: headerPoll, expect: stalls},
		{name: "w-burn-before-stall", relay: downs([][2]float64{first, {second, second + 600}}), end: round(second + 600 + 20*60), header: headerBurn, expect: stalls},
		// Long enough to see the page resolve while the blip is still in
		// its 30m short window.
		{name: "x-page-resolves", relay: delayed(downs([][2]float64{{blip, blip + 20}}), stallStart, stallStart+600, 1.5), end: pageResolved + 5*60, header: headerResolve, expect: expectResolve},
		// Long enough for the blip to have left the 30m short window.
		{name: "y-stall-then-blip", relay: downs(stallThenBlip), end: round(stallThenBlip[1][1] + 35*60), header: headerStallBlip, expect: stalls},
	}
}

func round(t float64) float64 { return math.Ceil(t/scrape) * scrape }

const headerCrash = `# (t) A relay that crash-loops, as issue 26 found it: at 1h6s, just after
# the canary of 1h5s arrived, it goes down for 40s, up for 5s (it
# publishes the backlog, which arrives bad), down for 40s, and so on, for
# 10.5 minutes; then it stays up. Generated by
# alerts/testdata/flapping (go run ./alerts/testdata/flapping).
# Every down stretch is a stall (32s without a delivery): 14 of them.
# Expect: one incident, one alert, named by the last delivery before the
# first stall (stalled_since 01:00:05), firing from the first stall to
# 9m (keep_firing_for) after the last. Before issue 26, each stall was
# a new alert (stalled_since its own last delivery): 14 alerts.
`

const headerBackoff = `# (u) A relay restarted with back-off, as Kubernetes' CrashLoopBackOff
# does: from 1h6s down 10, 20, 40, 80, 160, 300 and 300s, up 5s between
# (long enough to publish the backlog). Generated by
# alerts/testdata/flapping.
# Expect: one incident from the first stall (in the 80s stretch: the
# shorter ones are under the 32s threshold) to 9m after the last, named
# by the last delivery before it. Before issue 26 each stretch over the
# threshold was an alert of its own: 4 here.
`

const headerPoll = `# (v) A relay that only delivers once a minute: from 1h6s for 20 minutes
# it publishes at whole minutes only, so canaries arrive in batches of
# six, the oldest 55s late, and between batches no canary arrives for
# up to 60s: a stall every minute. Generated by alerts/testdata/flapping.
# Expect: one incident for the 20 minutes, one alert. Before issue 26:
# one alert a minute, 20 in all.
`

// keepFiringFor is the stall alert's: it resolves keepFiringFor after
// the first evaluation without a stall.
const keepFiringFor = 9 * 60

type incident struct {
	since       string
	first, last float64
}

// incidents splits the stall evaluations into incidents: a stall more
// than 5m after the previous one starts a new one, named by the last
// delivery before it.
func (s sim) incidents() []incident {
	var out []incident
	prev := math.Inf(-1)
	for _, t := range s.stalls() {
		if t-prev > 300 {
			out = append(out, incident{since: stamp(s.at(t).recv), first: t})
		}
		out[len(out)-1].last = t
		prev = t
	}
	return out
}

func stamp(unix float64) string {
	s := int(unix)
	return fmt.Sprintf("1970-01-01T%02d:%02d:%02dZ", s/3600, s%3600/60, s%60)
}

const stallLabels = `severity: page, pipeline: orders, segment: commit_to_publish, owner: team-relay`

// stallChecks expects, every minute from the first stall to the end,
// the stall alert of each open incident, one alert each: present up to
// keepFiringFor after its last stall, gone 15s later.
func (s sim) stallChecks() string {
	incs := s.incidents()
	var b strings.Builder
	check := func(t float64) {
		var exp []string
		for _, in := range incs {
			if t >= in.first && t <= in.last+keepFiringFor {
				exp = append(exp, fmt.Sprintf("{exp_labels: {stalled_since: %q, %s}}", in.since, stallLabels))
			}
		}
		fmt.Fprintf(&b, "      - {eval_time: %s, alertname: OutboxCanaryStalled, exp_alerts: [%s]}\n", dur(t), strings.Join(exp, ", "))
	}
	for t := incs[0].first; t <= s.end; t += 60 {
		check(t)
	}
	for _, in := range incs {
		check(in.first - scrape)
		check(in.last + keepFiringFor)
		check(in.last + keepFiringFor + scrape)
	}
	return b.String()
}

// consequences are the alerts a stall sets off by itself.
var consequences = []string{"OutboxCanaryErrorBudgetBurn", "OutboxOldestUnpublishedTooOld", "OutboxBacklogGrowing"}

// noneChecks expects none of the alerts, every step from from to to.
func (s sim) noneChecks(from, to, step float64, alerts ...string) string {
	var b strings.Builder
	for t := round(from); t <= to; t += step {
		for _, a := range alerts {
			fmt.Fprintf(&b, "      - {eval_time: %s, alertname: %s, exp_alerts: []}\n", dur(t), a)
		}
	}
	return b.String()
}

const headerBurn = `# (w) A burn page must not come before the stall page of the same
# incident (issue 26). At 1h6s the relay stops for 3 minutes: 18 bad
# canaries, which stay in the 1h and 6h windows. 40 minutes later it
# stops again, for 10 minutes. Generated by alerts/testdata/flapping.
# Before issue 26 the second stall's burn pages fired at its first or
# second bad canary (the long windows held the first stall's, the short
# ones needed one or two), before its stall page. Now the short window
# needs as many bad canaries as the long one, which a stall makes only
# after its stall page; a burn page waits 1m2s (its for:) too, by which
# the stall page fires; and the burn waits while a stall is in its short
# window.
# Expect: two incidents, two stall pages; no burn alert, oldest-row page
# or backlog ticket at any time.
`

const headerStallBlip = `# (y) A page resolves once its incident is over (issue 26). The relay
# stops at 1h6s for 6 minutes (36 bad canaries), then runs; 20 minutes
# later it pauses for 20s (2 bad canaries, which page nobody on their
# own, scenario j). Generated by alerts/testdata/flapping.
# Before issue 26 the 6h/30m burn page of the stall stayed firing until
# the blip left its 30m short window, 30 minutes after the blip, plus 9m.
# Expect: the stall page from the first stall to 9m after its last; no
# burn alert, oldest-row page or backlog ticket at any time.
`

const headerResolve = `# (x) A burn page resolves once its burn is over, and a later blip does
# not hold it (issue 26). At 1h6s the relay starts taking 1.5s to
# publish, over the 1s commit_to_publish budget (end to end stays within
# its 2s): every canary is bad on the relay's segment, none is late, no
# stall. It recovers 10 minutes later (60 bad canaries). 20 minutes after
# that it pauses for 20s (2 bad canaries). Generated by
# alerts/testdata/flapping.
# Expect: the relay's page at 1h2m30s (6 bad canaries at 1h1m15s, then
# its for: of 1m2s, the stall threshold plus a scrape and an evaluation),
# its ticket at 1h4m30s (26 bad). The page holds while its 30m short
# window holds more than the 12.96 bad canaries the 6h/30m pair needs
# (to 1h38m15s), plus its keep_firing_for (9m): it resolves at 1h47m30s,
# 37 minutes after the burn ended. The blip's 2 bad canaries count while
# the burn's own still hold the window (15s more here), never alone.
# Before issue 26 the page held until the blip's 2 bad canaries left the
# 30m window, plus 9m: to 2h9m.
`

const (
	relayPage   = `{exp_labels: {severity: page, sloth_severity: page, pipeline: orders, segment: commit_to_publish, owner: team-relay, sloth_id: orders-commit_to_publish, sloth_service: orders, sloth_slo: commit_to_publish}}`
	relayTicket = `{exp_labels: {severity: ticket, sloth_severity: ticket, pipeline: orders, segment: commit_to_publish, owner: team-relay, sloth_id: orders-commit_to_publish, sloth_service: orders, sloth_slo: commit_to_publish}}`
	// pageResolved is the first evaluation without the relay's page.
	pageResolved = 6450
)

func expectResolve(s sim) string {
	var b strings.Builder
	burn := func(t float64, exp ...string) {
		fmt.Fprintf(&b, "      - {eval_time: %s, alertname: OutboxCanaryErrorBudgetBurn, exp_alerts: [%s]}\n", dur(t), strings.Join(exp, ", "))
	}
	burn(3600 + 75 + 60) // pending: 6 bad canaries, for 1m2s
	burn(3600+150, relayPage)
	burn(3600+255, relayPage)
	burn(3600+270, relayPage, relayTicket)
	for t := 3600.0 + 300; t < s.end; t += 300 {
		if t < pageResolved {
			burn(t, relayPage, relayTicket)
		} else {
			burn(t, relayTicket)
		}
	}
	burn(pageResolved-scrape, relayPage, relayTicket)
	burn(pageResolved, relayTicket)
	return b.String() + s.noneChecks(stallStart, s.end, 60, "OutboxCanaryStalled", "OutboxOldestUnpublishedTooOld", "OutboxBacklogGrowing")
}
