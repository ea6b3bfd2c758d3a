package judge

import (
	"slices"
	"testing"
	"time"
)

func TestUnjudgedReasonsFollowWhereASegmentLies(t *testing.T) {
	budget := func(string) (time.Duration, bool) { return time.Second, true }
	p := NewPlan([]string{StampCommit, "read", StampPublish, StampConsume}, budget, "insert_to_commit", "end_to_end", nil, []string{StampPublish})
	for _, tc := range []struct {
		segment string
		want    []string
	}{
		{"insert_to_commit", nil},
		{"end_to_end", []string{ReasonProberDown, ReasonProberLag, ReasonLost}},
		{"commit_to_read", []string{ReasonProberDown, ReasonUnknown, ReasonInvalidStamp, ReasonMissingStamp, ReasonStampOrder, ReasonClockSkew, ReasonLost, ReasonBrokersUnreachable}},
		{"read_to_publish", []string{ReasonProberDown, ReasonUnknown, ReasonInvalidStamp, ReasonMissingStamp, ReasonStampOrder, ReasonClockSkew, ReasonLost, ReasonBrokersUnreachable}},
		{"publish_to_consume", []string{ReasonProberDown, ReasonProberLag, ReasonUnknown, ReasonInvalidStamp, ReasonMissingStamp, ReasonStampOrder, ReasonClockSkew, ReasonLost}},
	} {
		if got := p.UnjudgedReasons(tc.segment); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.segment, got, tc.want)
		}
		if got, want := p.Skewable(tc.segment), tc.segment != "insert_to_commit" && tc.segment != "end_to_end"; got != want {
			t.Errorf("%s: Skewable = %v, want %v", tc.segment, got, want)
		}
	}
}
