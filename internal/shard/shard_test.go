package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestOfIsPrometheusHashmod(t *testing.T) {
	// Computed outside Go, as the package doc says anyone can:
	//   python3 -c 'import hashlib; print(int(hashlib.md5(b"orders").hexdigest()[16:], 16) % 3)'
	// and as Prometheus' relabel_config `action: hashmod` puts it in
	// target_label for source label value "orders".
	cases := []struct {
		name  string
		count int
		want  int
	}{
		{"orders", 2, 1}, {"orders", 3, 1}, {"orders", 7, 6},
		{"payments", 2, 0}, {"payments", 3, 2}, {"payments", 7, 3},
		{"shipments", 2, 0}, {"shipments", 3, 2}, {"shipments", 7, 5},
		{"p000", 3, 1}, {"p017", 3, 0}, {"p017", 7, 1},
		{"anything", 1, 0},
	}
	for _, c := range cases {
		if got := Of(c.name, c.count); got != c.want {
			t.Errorf("Of(%q, %d) = %d, want %d", c.name, c.count, got, c.want)
		}
	}
}

// names are the 30 pipelines of the fleet tests: p000..p029.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p%03d", i)
	}
	return out
}

func TestThreeShardsOfTwoReplicasMeasureEveryPipelineExactlyTwice(t *testing.T) {
	const shards, replicas = 3, 2
	all := names(30)
	measuredBy := map[string][]string{}
	// One StatefulSet of shards × replicas pods, each told its shard by its
	// pod name, as the Helm chart's sharded mode runs them.
	for ordinal := range shards * replicas {
		pod := fmt.Sprintf("outbox-canary-%d", ordinal)
		s, err := New(shards, "", pod)
		if err != nil {
			t.Fatalf("pod %s: %v", pod, err)
		}
		for _, n := range s.Select(all) {
			measuredBy[n] = append(measuredBy[n], pod)
		}
	}
	for _, n := range all {
		if got := measuredBy[n]; len(got) != replicas {
			t.Errorf("pipeline %s is measured by %d probers %v, want %d", n, len(got), got, replicas)
			continue
		}
		// The two replicas of a shard are pods k and k+shards.
		a, _ := ParseOrdinal(measuredBy[n][0])
		b, _ := ParseOrdinal(measuredBy[n][1])
		if a%shards != b%shards || a == b {
			t.Errorf("pipeline %s is measured by %v: want two replicas of one shard", n, measuredBy[n])
		}
	}
	// The split itself, pinned: it must not change between releases.
	got := Assign(all, shards)
	want := [][]string{
		strings.Fields("p001 p002 p003 p004 p006 p008 p011 p013 p017 p021 p025 p027 p028 p029"),
		nil, nil,
	}
	if !slices.Equal(got[0], want[0]) {
		t.Errorf("shard 0 of 3 = %v, want %v", got[0], want[0])
	}
	if len(got[1]) != 9 || len(got[2]) != 7 {
		t.Errorf("shards 1 and 2 hold %d and %d pipelines, want 9 and 7", len(got[1]), len(got[2]))
	}
}

func TestAddingAPipelineMovesNoOther(t *testing.T) {
	before := Assign(names(30), 3)
	after := Assign(names(31), 3)
	for i := range before {
		for _, n := range before[i] {
			if !slices.Contains(after[i], n) {
				t.Errorf("pipeline %s left shard %d when p030 was added", n, i)
			}
		}
	}
}

func TestNew(t *testing.T) {
	cases := []struct {
		name           string
		count          int
		index, ordinal string
		want           Shard
		wantErr        error
		wantErrText    string
	}{
		{name: "No shard flags: one shard, every pipeline.", count: 1, want: All},
		{name: "An explicit index.", count: 3, index: "2", want: Shard{2, 3}},
		{name: "A StatefulSet pod name: its ordinal mod the count.", count: 3, ordinal: "outbox-canary-4", want: Shard{1, 3}},
		{name: "A bare ordinal.", count: 3, ordinal: "5", want: Shard{2, 3}},
		{name: "A release name with dashes and digits in it.", count: 2, ordinal: "prod-2-outbox-canary-3", want: Shard{1, 2}},
		{name: "An ordinal with one shard is shard 0.", count: 1, ordinal: "outbox-canary-7", want: All},
		{name: "A zero count is refused.", count: 0, wantErr: ErrCount, wantErrText: "0: the shard count must be at least 1"},
		{name: "An index past the count is refused.", count: 3, index: "3", wantErr: ErrIndex,
			wantErrText: `"3" with count 3: the shard index must be a whole number from 0 to count-1`},
		{name: "A negative index is refused.", count: 3, index: "-1", wantErr: ErrIndex},
		{name: "An index that is not a number is refused.", count: 3, index: "one", wantErr: ErrIndex},
		{name: "Index and ordinal together are refused.", count: 3, index: "1", ordinal: "outbox-canary-1", wantErr: ErrBoth},
		{name: "A host name without an ordinal is refused.", count: 3, ordinal: "outbox-canary-7f9c8d-x2l4q", wantErr: ErrOrdinal,
			wantErrText: `"outbox-canary-7f9c8d-x2l4q": not an ordinal: a whole number, or a StatefulSet pod name ending in -<ordinal> (such as outbox-canary-4)`},
		{name: "A Deployment's pod name (random suffix) is refused.", count: 2, ordinal: "outbox-canary-5d8f7b9c4-abcde", wantErr: ErrOrdinal},
		{name: "Several shards and no place among them is refused.", count: 3, wantErr: ErrUnplaced,
			wantErrText: "count 3: more than one shard, and neither the shard index nor the ordinal is given"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := New(c.count, c.index, c.ordinal)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("New(%d, %q, %q) = %v, %v; want error %v", c.count, c.index, c.ordinal, got, err, c.wantErr)
				}
				if c.wantErrText != "" && err.Error() != c.wantErrText {
					t.Errorf("error %q, want %q", err, c.wantErrText)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("New(%d, %q, %q) = %v, %v; want %v", c.count, c.index, c.ordinal, got, err, c.want)
			}
		})
	}
}
