package config

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

const day = 24 * time.Hour

func TestScheduleIntervalIsTheLongestGapBetweenFirings(t *testing.T) {
	// 2096-02-29 to 2104-02-29: 2100 is not a leap year.
	feb29Gap := time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC).Sub(time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC))
	cases := []struct {
		name, spec string
		want       time.Duration
	}{
		{"@every is its own interval", "@every 10s", 10 * time.Second},
		{"@every in minutes", "@every 5m", 5 * time.Minute},
		{"@every below a second is rounded up to 1s by cron", "@every 500ms", time.Second},
		{"@every with a fraction of a second is rounded down by cron", "@every 1500ms", time.Second},
		{"every second, six fields", "* * * * * *", time.Second},
		{"every 15 seconds, six fields", "*/15 * * * * *", 15 * time.Second},
		{"seconds 0 and 50 leave a 50s gap", "0,50 * * * * *", 50 * time.Second},
		{"every minute, five fields", "* * * * *", time.Minute},
		{"every 7 minutes restarts each hour (:56 to :00 is only 4m)", "*/7 * * * *", 7 * time.Minute},
		{"@hourly", "@hourly", time.Hour},
		{"hourly at minute 30", "30 * * * *", time.Hour},
		{"@daily", "@daily", day},
		{"twice a day, unevenly", "0 6,9 * * *", 21 * time.Hour},
		{"office hours on weekdays: Friday 17:00 to Monday 09:00", "0 9-17 * * 1-5", 64 * time.Hour},
		{"weekly on Monday", "0 0 * * 1", 7 * day},
		{"weekly on Sunday", "0 0 * * 0", 7 * day},
		{"@weekly", "@weekly", 7 * day},
		{"@monthly: the longest month", "@monthly", 31 * day},
		{"the 1st and 15th: 15th to the next 1st of a 31-day month", "0 0 1,15 * *", 17 * day},
		{"the 31st skips the shorter months: Aug 31 to Oct 31", "0 0 31 * *", 61 * day},
		{"@yearly: a leap year", "@yearly", 366 * day},
		{"the 29th of February: eight years across 2100", "0 0 29 2 *", feb29Gap},
		{"day-of-month and day-of-week both set fire on either", "0 0 13 * 5", 7 * day},
		{"a time zone prefix is allowed", "CRON_TZ=Europe/Berlin 0 0 * * *", day},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ScheduleInterval(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("ScheduleInterval(%q) = %s, want %s", tc.spec, got, tc.want)
			}
		})
	}
}

func TestScheduleIntervalRejectsWhatCannotRun(t *testing.T) {
	cases := []struct{ name, spec, want string }{
		{"prose", "every ten seconds", `"every ten seconds" is not a cron spec (expected 5 to 6 fields, found 3: [every ten seconds]); write e.g. "@every 10s" or "*/15 * * * * *"`},
		{"a date that does not exist", "0 0 30 2 *", `"0 0 30 2 *" never fires: no date matches its day-of-month, month and day-of-week fields`},
		{"an unknown descriptor", "@fortnightly", `"@fortnightly" is not a cron spec (unrecognized descriptor: @fortnightly); write e.g. "@every 10s" or "*/15 * * * * *"`},
		{"seven fields", "0 0 0 * * * *", `"0 0 0 * * * *" is not a cron spec (expected 5 to 6 fields, found 7: [0 0 0 * * * *]); write e.g. "@every 10s" or "*/15 * * * * *"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ScheduleInterval(tc.spec)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error:\n  got  %v\n  want %s", err, tc.want)
			}
		})
	}
}

// ScheduleInterval reads robfig/cron's bit fields; this pins the one
// unexported detail it relies on.
func TestStarBitIsRobfigs(t *testing.T) {
	s, err := ParseSchedule("0 0 * * 1")
	if err != nil {
		t.Fatal(err)
	}
	spec := s.(*cron.SpecSchedule)
	if spec.Dom&starBit == 0 || spec.Dow&starBit != 0 {
		t.Fatalf("dom %b, dow %b: robfig/cron's star bit moved", spec.Dom, spec.Dow)
	}
}

// The cron library's own Next, followed for three leap cycles, never sees
// a gap longer than ScheduleInterval, and for specs that repeat within
// that span sees exactly it. Random specs cover the day-of-month and
// day-of-week combinations a table would miss.
func TestScheduleIntervalAgreesWithTheCronLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(lo, hi int) string {
		switch rng.IntN(4) {
		case 0:
			return "*"
		case 1:
			return strconv.Itoa(lo + rng.IntN(hi-lo+1))
		case 2:
			a := lo + rng.IntN(hi-lo+1)
			return strconv.Itoa(a) + "-" + strconv.Itoa(a+rng.IntN(hi-a+1))
		}
		return strconv.Itoa(lo+rng.IntN(hi-lo+1)) + "," + strconv.Itoa(lo+rng.IntN(hi-lo+1))
	}
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	end := time.Date(2012, 1, 1, 0, 0, 0, 0, time.UTC)
	checked := 0
	for range 300 {
		// At most a few firings a day keep the walk short.
		spec := strings.Join([]string{strconv.Itoa(rng.IntN(60)), strconv.Itoa(rng.IntN(24)) + "," + strconv.Itoa(rng.IntN(24)),
			pick(1, 31), pick(1, 12), pick(0, 6)}, " ")
		want, err := ScheduleInterval(spec)
		if err != nil {
			if strings.Contains(err.Error(), "never fires") {
				if s, _ := ParseSchedule(spec); !s.Next(start).IsZero() {
					t.Errorf("%q: ScheduleInterval says it never fires, cron fires at %s", spec, s.Next(start))
				}
				continue
			}
			t.Fatalf("%q: %v", spec, err)
		}
		sched, _ := ParseSchedule(spec)
		var longest time.Duration
		prev := sched.Next(start)
		for !prev.IsZero() && prev.Before(end) {
			next := sched.Next(prev)
			if next.IsZero() {
				break
			}
			longest = max(longest, next.Sub(prev))
			prev = next
		}
		if longest > want {
			t.Errorf("%q: cron shows a gap of %s, longer than ScheduleInterval's %s", spec, longest, want)
		}
		// Twelve years hold every weekday alignment of every month but
		// the rare ones of century years; a gap of a month or less recurs
		// many times in them.
		if want <= 31*day && longest != want {
			t.Errorf("%q: cron's longest gap is %s, ScheduleInterval says %s", spec, longest, want)
		}
		checked++
	}
	if checked < 100 {
		t.Fatalf("only %d of 300 random specs fire; the generator is broken", checked)
	}
}

// The worst case for both loops: every second of every day.
func BenchmarkScheduleInterval(b *testing.B) {
	for _, spec := range []string{"@every 10s", "*/15 * * * * *", "* * * * * *", "0 0 29 2 *"} {
		b.Run(spec, func(b *testing.B) {
			for b.Loop() {
				if _, err := ScheduleInterval(spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestPhasedSchedulesKeepTheirGapsAndShiftEveryFiringByThePhase(t *testing.T) {
	cases := []struct {
		name, spec string
		maxPhase   time.Duration // exclusive
	}{
		{"@every 10s is shifted by less than 10s.", "@every 10s", 10 * time.Second},
		{"@every 1s is shifted by less than a second.", "@every 1s", time.Second},
		{"@every 5m is shifted by less than 5m.", "@every 5m", 5 * time.Minute},
		{"A spec every 15 seconds is shifted by less than 15s.", "*/15 * * * * *", 15 * time.Second},
		{"Seconds 0 and 50 leave 10s from :50 to the next :00, the bound.", "0,50 * * * * *", 10 * time.Second},
		{"A spec every minute is shifted by less than a minute.", "* * * * *", time.Minute},
		{"@hourly is shifted by less than a minute, not an hour.", "@hourly", time.Minute},
		{"Office hours stay office hours: shifted by less than a minute.", "0 9-17 * * 1-5", time.Minute},
		{"A time zone prefix is kept.", "CRON_TZ=Europe/Berlin 30 2 * * *", time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, pipeline := range []string{"orders", "payments", "shipping-eu", "p-042"} {
				sched, phase, err := PhasedSchedule(tc.spec, pipeline)
				if err != nil {
					t.Fatal(err)
				}
				if phase < 0 || phase >= tc.maxPhase || phase%PhaseStep != 0 {
					t.Fatalf("%s: phase %s, want in [0, %s) and a multiple of %s", pipeline, phase, tc.maxPhase, PhaseStep)
				}
				if again, _ := SchedulePhase(tc.spec, pipeline); again != phase {
					t.Fatalf("%s: phase %s then %s: want it stable", pipeline, phase, again)
				}
				plain, _ := ParseSchedule(tc.spec)
				// The firings are the spec's (for @every: on a grid from
				// the epoch) plus the phase, each after the last, gaps
				// unchanged.
				at := time.Date(2026, 3, 28, 23, 0, 0, 123e6, time.UTC) // across a DST change in Berlin
				for i := range 200 {
					next := sched.Next(at)
					if !next.After(at) {
						t.Fatalf("%s: firing %d: Next(%s) = %s, not after it", pipeline, i, at, next)
					}
					if every, ok := plain.(cron.ConstantDelaySchedule); ok {
						onGrid := next.Add(-phase).UnixNano()%int64(every.Delay) == 0
						if !onGrid || next.Sub(at) > every.Delay || (i > 0 && next.Sub(at) != every.Delay) {
							t.Fatalf("%s: firing %d: Next(%s) = %s, want the next point of epoch + %s + k*%s", pipeline, i, at, next, phase, every.Delay)
						}
					} else if want := plain.Next(at.Add(-phase)).Add(phase); !next.Equal(want) {
						t.Fatalf("%s: firing %d: Next(%s) = %s, want the spec's next firing plus the phase: %s", pipeline, i, at, next, want)
					}
					at = next
				}
			}
		})
	}
}

func TestAHundredPipelinesOnOneScheduleDoNotFireInTheSameSecond(t *testing.T) {
	// Just before a minute, so a phase of zero fires at its start, in the
	// same ten seconds as the others.
	from := time.Date(2025, 12, 31, 23, 59, 59, 999e6, time.UTC)
	for _, spec := range []string{"@every 10s", "*/10 * * * * *"} {
		perSecond := map[time.Time]int{}
		for i := range 100 {
			sched, _, err := PhasedSchedule(spec, fmt.Sprintf("pipeline-%03d", i))
			if err != nil {
				t.Fatal(err)
			}
			perSecond[sched.Next(from).Truncate(time.Second)]++
		}
		busiest := 0
		for _, n := range perSecond {
			busiest = max(busiest, n)
		}
		// Spread evenly that is 10 a second; unphased all 100 fire at once.
		if len(perSecond) != 10 || busiest > 20 {
			t.Errorf("%s: the first firings of 100 pipelines fall in %d distinct seconds, at most %d in one; want all 10 seconds used, at most 20 in one",
				spec, len(perSecond), busiest)
		}
	}
}
