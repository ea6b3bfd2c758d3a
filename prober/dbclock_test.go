package prober

import (
	"context"
	"errors"
	"testing"
	"time"
)

// scriptedDB answers the database clock from a script and advances a fake
// local clock by each sample's round trip.
type scriptedDB struct {
	local   *time.Time
	samples []scriptedSample
	i       int
}

type scriptedSample struct {
	before, rtt time.Duration // local clock advance before the DB reads, and after
	dbTime      time.Time
	err         error
}

func (d *scriptedDB) Clock(context.Context) (time.Time, error) {
	s := d.samples[d.i]
	d.i++
	*d.local = d.local.Add(s.before)
	defer func() { *d.local = d.local.Add(s.rtt - s.before) }()
	return s.dbTime, s.err
}

func TestEstimateDBOffsetKeepsTheLowestRoundTrip(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	local := base
	now := func() time.Time { return local }
	// The DB clock runs 250ms ahead. Sample 1: slow (40ms), the DB answered
	// late in the bracket, so its midpoint guess is off by 15ms. Sample 2:
	// fast (2ms), answered in the middle: exact.
	db := &scriptedDB{local: &local, samples: []scriptedSample{
		{before: 35 * time.Millisecond, rtt: 40 * time.Millisecond, dbTime: base.Add(35*time.Millisecond + 250*time.Millisecond)},
		{before: time.Millisecond, rtt: 2 * time.Millisecond, dbTime: base.Add(40*time.Millisecond + time.Millisecond + 250*time.Millisecond)},
	}}
	got, err := EstimateDBOffset(context.Background(), db, now, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Offset != 250*time.Millisecond || got.Error != time.Millisecond {
		t.Fatalf("offset %v ± %v, want 250ms ± 1ms", got.Offset, got.Error)
	}
	dbStamp := base.Add(time.Hour)
	if want := dbStamp.Add(-250 * time.Millisecond); !got.ToLocal(dbStamp).Equal(want) {
		t.Fatalf("ToLocal(%v) = %v, want %v", dbStamp, got.ToLocal(dbStamp), want)
	}
}

func TestEstimateDBOffsetReportsAQueryFailure(t *testing.T) {
	local := time.Now()
	boom := errors.New("connection refused")
	db := &scriptedDB{local: &local, samples: []scriptedSample{{err: boom}}}
	_, err := EstimateDBOffset(context.Background(), db, func() time.Time { return local }, 1)
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want it to wrap %v", err, boom)
	}
}
