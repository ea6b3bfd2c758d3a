package tick

import (
	"context"
	"testing"
	"time"
)

func TestNextIsTheFollowingMultipleOfThePeriodSinceTheEpoch(t *testing.T) {
	cases := []struct {
		name  string
		at    time.Time
		every time.Duration
		want  time.Time
	}{
		{"Between two points: the later one.", time.Unix(10, 100e6), 250 * time.Millisecond, time.Unix(10, 250e6)},
		{"On a point: the next, never the instant itself.", time.Unix(10, 250e6), 250 * time.Millisecond, time.Unix(10, 500e6)},
		{"Periods that divide one another share their points.", time.Unix(11, 900e6), 2 * time.Second, time.Unix(12, 0)},
		{"Before the epoch: floored, not truncated toward it.", time.Unix(-1, 100e6), time.Second, time.Unix(0, 0)},
		{"A period that is not a divisor of a second still counts from the epoch.", time.Unix(1, 0), 700 * time.Millisecond, time.Unix(1, 400e6)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.at, tc.every); !got.Equal(tc.want) {
				t.Errorf("Next(%s, %s) = %s, want %s", tc.at.UTC().Format(time.StampMicro), tc.every, got.UTC().Format(time.StampMicro), tc.want.UTC().Format(time.StampMicro))
			}
		})
	}
	berlin := time.FixedZone("CET", 3600)
	if got := Next(time.Unix(5, 0).In(berlin), time.Second); got.Location() != berlin {
		t.Errorf("Next kept location %s, want the caller's", got.Location())
	}
}

func TestWaitReturnsAtTheNextGridPointOrWhenCancelled(t *testing.T) {
	const every = 50 * time.Millisecond
	start := time.Now()
	if !Wait(context.Background(), every) {
		t.Fatal("Wait reported its context done, want a tick")
	}
	// A timer fires at or after its instant, never before.
	if now, point := time.Now(), Next(start, every); now.Before(point) {
		t.Errorf("Wait returned at %s, before the grid point %s", now.Format(time.StampMicro), point.Format(time.StampMicro))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Wait(ctx, time.Hour) {
		t.Error("Wait on a cancelled context reported a tick, want false")
	}
}
