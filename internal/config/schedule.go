package config

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/outbox-canary/outbox-canary/internal/tick"
)

// scheduleFields accepts an optional seconds field, so sub-minute schedules
// can be written either as "@every 10s" or as a six-field spec.
const scheduleFields = cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor

// ParseSchedule parses a canary schedule as validation accepted it.
func ParseSchedule(spec string) (cron.Schedule, error) {
	return cron.NewParser(scheduleFields).Parse(spec)
}

// PhasedSchedule is a pipeline's canary schedule as the prober runs it:
// the spec shifted by the pipeline's phase (SchedulePhase), so that many
// pipelines on one schedule do not all insert their canaries in the same
// instant. The gaps between firings stay those of the spec, and judging
// is unchanged: every deadline counts from the canary's own commit.
//
//   - "@every D" fires on a grid aligned to the Unix epoch and shifted by
//     the phase: at epoch + phase + k*D, every D apart as before, the
//     first at most D after the start (instead of exactly D).
//   - A cron spec fires at each of its times plus the phase.
func PhasedSchedule(spec, pipeline string) (cron.Schedule, time.Duration, error) {
	sched, err := ParseSchedule(spec)
	if err != nil {
		return nil, 0, err
	}
	bound, err := phaseBound(sched)
	if err != nil {
		return nil, 0, fmt.Errorf("%q: %w", spec, err)
	}
	phase := phaseOf(pipeline, bound)
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		return gridSchedule{every: every.Delay, phase: phase}, phase, nil
	}
	return shiftedSchedule{inner: sched, phase: phase}, phase, nil
}

// SchedulePhase is how far a pipeline's canary schedule is shifted: the
// FNV-1a hash of the pipeline's name, in steps of PhaseStep, modulo a bound
// below every gap of the schedule. For "@every D" the bound is D; for a
// cron spec the shortest step between its seconds, wrapping around the
// minute (at most a minute), which no gap between two firings is
// shorter than: each firing moves within the gap after it, and the
// firings keep their order and spacing.
func SchedulePhase(spec, pipeline string) (time.Duration, error) {
	_, phase, err := PhasedSchedule(spec, pipeline)
	return phase, err
}

// phaseBound is the exclusive upper bound of a schedule's phase.
func phaseBound(sched cron.Schedule) (time.Duration, error) {
	switch s := sched.(type) {
	case cron.ConstantDelaySchedule:
		return s.Delay, nil
	case *cron.SpecSchedule:
		seconds := setBits(s.Second, 0, 59)
		if len(seconds) == 0 {
			return 0, fmt.Errorf("no second to fire at")
		}
		// From the last second of a minute to the first of the next
		// firing minute is at least 60 - last + first seconds.
		step := 60 - seconds[len(seconds)-1] + seconds[0]
		for i := 1; i < len(seconds); i++ {
			step = min(step, seconds[i]-seconds[i-1])
		}
		return time.Duration(step) * time.Second, nil
	}
	return 0, fmt.Errorf("this kind of schedule is not supported")
}

// PhaseStep is what every phase is a whole multiple of: the prober's sweep
// interval, so that canaries fire on the wake grid of its periodic work
// (internal/tick) rather than each at an instant of its own.
const PhaseStep = 250 * time.Millisecond

// phaseOf is the phase of a pipeline for a bound: stable across restarts
// and instances, since it depends on the name alone.
func phaseOf(pipeline string, bound time.Duration) time.Duration {
	steps := int64(bound / PhaseStep)
	if steps <= 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(pipeline))
	return time.Duration(h.Sum64()%uint64(steps)) * PhaseStep
}

// gridSchedule fires every `every`, at epoch + phase + k*every.
type gridSchedule struct {
	every, phase time.Duration
}

// Next is the first grid point after t.
func (g gridSchedule) Next(t time.Time) time.Time {
	return tick.Next(t.Add(-g.phase), g.every).Add(g.phase)
}

// shiftedSchedule is a cron spec whose every firing comes phase later.
type shiftedSchedule struct {
	inner cron.Schedule
	phase time.Duration
}

// Next is the first shifted firing after t: the first firing of the spec
// after t - phase, plus phase.
func (s shiftedSchedule) Next(t time.Time) time.Time {
	next := s.inner.Next(t.Add(-s.phase))
	if next.IsZero() {
		return next // never fires: cron's "no next"
	}
	return next.Add(s.phase)
}

// ScheduleInterval is the longest time between two consecutive firings of
// a canary schedule: the pessimistic canary period, which alerts that
// count canary intervals use.
//
// "@every D" fires every D (the cron library rounds D down to whole
// seconds, and up to 1s). A cron spec or descriptor (@hourly ... @yearly)
// is evaluated exactly over the 400-year cycle of the Gregorian calendar,
// so weekly, monthly, yearly and irregular specs ("0 0 1,15 * *",
// "0 9-17 * * 1-5", "0 0 29 2 *") get their true longest gap, in bounded
// work whatever the spec: 4,800 month steps and a pass over each field.
//
// Gaps are measured on the wall clock of the schedule's time zone (the
// prober's local zone, or CRON_TZ=/TZ= in the spec) as if it had no
// daylight saving time: across a clock change a real gap is longer or
// shorter by the change, usually an hour.
//
// The error says why a spec is not a schedule, or that it never fires
// (e.g. "0 0 30 2 *").
func ScheduleInterval(spec string) (time.Duration, error) {
	sched, err := ParseSchedule(spec)
	if err != nil {
		return 0, fmt.Errorf("%q is not a cron spec (%w); write e.g. \"@every 10s\" or \"*/15 * * * * *\"", spec, err)
	}
	switch s := sched.(type) {
	case cron.ConstantDelaySchedule:
		return s.Delay, nil
	case *cron.SpecSchedule:
		d, ok := specInterval(s)
		if !ok {
			return 0, fmt.Errorf("%q never fires: no date matches its day-of-month, month and day-of-week fields", spec)
		}
		return d, nil
	}
	// The parser returns only the two kinds above; a new cron release
	// that adds one fails here instead of guessing.
	return 0, fmt.Errorf("%q: this kind of schedule is not supported", spec)
}

// starBit is robfig/cron's mark on a field written as * or ? (spec.go).
// It changes how day-of-month and day-of-week combine, as in Vixie cron:
// when either is *, a day must match both; otherwise either.
// TestStarBitIsRobfigs pins it.
const starBit = 1 << 63

// gregorianCycleYears is the period of the Gregorian calendar: leap years
// and weekdays repeat every 400 years (146,097 days, exactly 20,871 weeks).
const gregorianCycleYears = 400

// specInterval is the longest gap of a cron spec: within a firing day, the
// longest step between its times of day; across days, the longest run
// between two firing days less the span of a day's firings. Every firing
// day has the same times, so the two together are exact.
func specInterval(s *cron.SpecSchedule) (time.Duration, bool) {
	within, span, ok := dayTimes(s)
	if !ok {
		return 0, false
	}
	dayGap, ok := longestDayGap(s)
	if !ok {
		return 0, false
	}
	return max(within, time.Duration(dayGap)*24*time.Hour-span), true
}

// dayTimes returns the longest step between two firings within a day and
// the span from a day's first firing to its last. The times of day are
// the product of the hour, minute and second sets, so each is read from
// the three sets alone: a step either stays in a minute, or crosses to the
// next minute of the hour, or to the next hour.
func dayTimes(s *cron.SpecSchedule) (within, span time.Duration, ok bool) {
	hours, minutes, seconds := setBits(s.Hour, 0, 23), setBits(s.Minute, 0, 59), setBits(s.Second, 0, 59)
	if len(hours) == 0 || len(minutes) == 0 || len(seconds) == 0 {
		return 0, 0, false
	}
	sec := func(v int) time.Duration { return time.Duration(v) * time.Second }
	secSpan := sec(seconds[len(seconds)-1] - seconds[0])
	minSpan := sec(60*(minutes[len(minutes)-1]-minutes[0])) + secSpan
	within = sec(longestStep(seconds))
	if len(minutes) > 1 {
		within = max(within, sec(60*longestStep(minutes))-secSpan)
	}
	if len(hours) > 1 {
		within = max(within, sec(3600*longestStep(hours))-minSpan)
	}
	return within, sec(3600*(hours[len(hours)-1]-hours[0])) + minSpan, true
}

// longestStep is the largest difference of consecutive values.
func longestStep(sorted []int) int {
	step := 0
	for i := 1; i < len(sorted); i++ {
		step = max(step, sorted[i]-sorted[i-1])
	}
	return step
}

// setBits lists the values in [lo, hi] whose bit is set, ascending.
func setBits(field uint64, lo, hi int) []int {
	var out []int
	for f := field &^ starBit; f != 0; f &= f - 1 {
		if v := bits.TrailingZeros64(f); v >= lo && v <= hi {
			out = append(out, v)
		}
	}
	return out
}

// monthDays is where a spec fires within a month of a given length that
// starts on a given weekday: 0-based offsets of the first and last firing
// day, and the longest run between two firing days inside it.
type monthDays struct {
	fires       bool
	first, last int
	longest     int
}

// longestDayGap walks one Gregorian cycle month by month and returns the
// most days between two consecutive firing days (the cycle wraps around),
// or false when no day fires. A month's firing days depend only on its
// length and first weekday, so the 28 kinds of month are worked out once.
func longestDayGap(s *cron.SpecSchedule) (int, bool) {
	// Vixie cron: with day-of-month or day-of-week written as *, a day
	// must match both; with both restricted, either.
	either := s.Dom&starBit == 0 && s.Dow&starBit == 0
	var kinds [4][7]monthDays // [length-28][first weekday]
	for length := 28; length <= 31; length++ {
		for wd := range 7 {
			k := monthDays{first: -1}
			for dom := 1; dom <= length; dom++ {
				domOK := s.Dom&(1<<uint(dom)) != 0
				dowOK := s.Dow&(1<<uint((wd+dom-1)%7)) != 0
				if (either && (domOK || dowOK)) || (!either && domOK && dowOK) {
					if k.fires {
						k.longest = max(k.longest, dom-1-k.last)
					} else {
						k.fires, k.first = true, dom-1
					}
					k.last = dom - 1
				}
			}
			kinds[length-28][wd] = k
		}
	}
	first, last, longest := -1, -1, 0
	day := 0
	weekday := int(time.Saturday) // 2000-01-01
	for year := 2000; year < 2000+gregorianCycleYears; year++ {
		for month := 1; month <= 12; month++ {
			length := daysIn(year, month)
			if k := kinds[length-28][weekday]; s.Month&(1<<uint(month)) != 0 && k.fires {
				if first < 0 {
					first = day + k.first
				} else {
					longest = max(longest, day+k.first-last)
				}
				longest = max(longest, k.longest)
				last = day + k.last
			}
			day += length
			weekday = (weekday + length) % 7
		}
	}
	if first < 0 {
		return 0, false
	}
	return max(longest, first+day-last), true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
