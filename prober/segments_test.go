package prober

import (
	"slices"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

func TestSegmentPlanFollowsTheStampOrder(t *testing.T) {
	p := testPipeline()
	plan := planSegments(&p)
	var names []string
	for _, s := range plan.pipelineSegments() {
		names = append(names, s.name+":"+s.from+">"+s.to)
	}
	want := []string{"commit_to_read:commit>read", "read_to_publish:read>publish", "publish_to_consume:publish>consume", "end_to_end:commit>consume"}
	if !slices.Equal(names, want) {
		t.Errorf("segments = %v, want %v", names, want)
	}
	if !slices.Equal(plan.middleStamps(), []string{"read", "publish"}) {
		t.Errorf("middle stamps = %v", plan.middleStamps())
	}
}

func TestSegmentPlanStuck(t *testing.T) {
	p := testPipeline()
	plan := planSegments(&p)
	cases := []struct {
		name  string
		known []string
		want  string
	}{
		{"A canary known only to be committed is stuck in the first segment.", []string{"commit"}, "commit_to_read"},
		{"A canary with a read stamp is stuck after the read.", []string{"commit", "read"}, "read_to_publish"},
		{"A looked-up publish stamp proves every earlier stamp was passed.", []string{"commit", "publish"}, "publish_to_consume"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			known := map[string]time.Time{}
			for _, s := range tc.known {
				known[s] = t0
			}
			if got := plan.stuck(known).name; got != tc.want {
				t.Errorf("stuck in %s, want %s", got, tc.want)
			}
		})
	}
	if b := plan.endToEnd.budget; b != 2*time.Second || !plan.endToEnd.budgeted {
		t.Errorf("end_to_end budget = %v", b)
	}
	if plan.insert.name != config.SegmentInsertToCommit {
		t.Errorf("insert segment = %s", plan.insert.name)
	}
}
