package prober

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// appendingPartition is a partition's log while a relay appends to it: a
// record, stamped now, lands after every answer the consumer gets.
type appendingPartition struct {
	stamps []time.Time
	now    time.Time
}

func (p *appendingPartition) lookup(req kafka.OffsetRequest) (int64, error) {
	answer := int64(len(p.stamps)) // kafka.LastOffset: the end
	if req.Timestamp != kafka.LastOffset {
		answer = -1
		for i, at := range p.stamps {
			if at.UnixMilli() >= req.Timestamp {
				answer = int64(i)
				break
			}
		}
	}
	p.now = p.now.Add(time.Millisecond)
	p.stamps = append(p.stamps, p.now)
	return answer, nil
}

func TestTheStartOffsetNeverLiesPastARecordStampedSinceEvenWhileRecordsAreAppended(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 49, 30, 0, time.UTC)
	cases := []struct {
		name string
		old  []time.Time // the log before the consumer asks
	}{
		{"An empty partition: the first canary is appended between the two answers.", nil},
		{"Only records from before since: the next one appended is the first to read.", []time.Time{since.Add(-time.Hour), since.Add(-time.Second)}},
		{"A record since already there: it is the start.", []time.Time{since.Add(-time.Hour), since.Add(time.Second)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &appendingPartition{stamps: tc.old, now: since}
			start, err := offsetSince(0, since, p.lookup)
			if err != nil {
				t.Fatal(err)
			}
			first := -1
			for i, at := range p.stamps {
				if !at.Before(since) {
					first = i
					break
				}
			}
			if first < 0 || start > int64(first) {
				t.Errorf("start offset %d, past the first record stamped at or after since (offset %d of %v): it would never be read", start, first, p.stamps)
			}
			if start < int64(len(tc.old)) && tc.old[start].Before(since) {
				t.Errorf("start offset %d, at a record from before since", start)
			}
		})
	}
	t.Run("No since: the end as first answered.", func(t *testing.T) {
		p := &appendingPartition{stamps: []time.Time{since}, now: since}
		if start, err := offsetSince(0, time.Time{}, p.lookup); err != nil || start != 1 {
			t.Errorf("start offset %d (%v), want 1", start, err)
		}
	})
}
