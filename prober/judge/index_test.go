package judge

import (
	"slices"
	"testing"
	"time"
)

func TestTickVisitsOnlyOpenCanariesAndForgetsEachByItsCommitTime(t *testing.T) {
	h := newJH(t, "cdc") // lost after 1m, forgotten 2m after commit
	openIDs := func() []string {
		var out []string
		for _, c := range h.j.open {
			out = append(out, c.ID)
		}
		return out
	}
	h.send("a", 0, ms(2))
	h.send("b", time.Second, ms(2))
	h.send("c", 2*time.Second, ms(2))
	h.arrive("b", time.Second+ms(100), map[string]time.Duration{StampPublish: time.Second + ms(50)})
	h.arrive("c", 2*time.Second+ms(100), map[string]time.Duration{StampPublish: 2*time.Second + ms(50)})
	h.tick(3 * time.Second)
	if got := openIDs(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a tick the judge still visits %v, want only a: b and c are final", got)
	}

	// Resumed from the persisted state: the indexes are rebuilt from it.
	h.restart(3*time.Second, 4*time.Second)
	if got := openIDs(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a restart the judge visits %v, want only a", got)
	}

	// a is lost, the last of the three to be final, and the first to be
	// forgotten: by commit time, not by when it was final.
	h.tick(61 * time.Second)
	if h.count(EffectLost, "a") != 1 || len(h.j.open) != 0 {
		t.Fatalf("a not lost at 61s (open %v): %v", openIDs(), h.fx)
	}
	steps := []struct {
		at   time.Duration
		want []string
	}{
		{2 * time.Minute, nil}, // forgotten once more than Forget passed
		{2*time.Minute + ms(500), []string{"a"}},
		{2*time.Minute + ms(1500), []string{"b"}},
		{2*time.Minute + ms(1500), nil},
		{2*time.Minute + ms(2500), []string{"c"}},
	}
	for _, s := range steps {
		h.j.MarkPersisted(t0.Add(s.at))
		h.tick(s.at)
		if got := h.j.Delta().Forgotten; !slices.Equal(got, s.want) {
			t.Errorf("forgotten at %s: %v, want %v", s.at, got, s.want)
		}
	}
	if len(h.j.State().Canaries) != 0 || len(h.j.forgetting) != 0 {
		t.Errorf("still remembered: %d canaries, %d queued to be forgotten", len(h.j.State().Canaries), len(h.j.forgetting))
	}
}

func TestOpenCanariesAreJudgedBySequenceWhateverOrderTheyWereSentIn(t *testing.T) {
	h := newJH(t, "cdc")
	// Two sends racing: the later sequence number committed first.
	for _, s := range []struct {
		id  string
		seq uint64
	}{{"c3", 3}, {"c1", 1}, {"c2", 2}} {
		h.add(h.j.Sent(Sent{ID: s.id, Key: "k", Seq: s.seq, InsertStarted: t0, CommitSent: t0, Committed: t0.Add(ms(1))}))
	}
	h.fx = nil
	h.tick(time.Minute + time.Second) // every one lost
	var lost []string
	for _, e := range h.fx {
		if e.Kind == EffectLost {
			lost = append(lost, e.Canary)
		}
	}
	if want := []string{"c1", "c2", "c3"}; !slices.Equal(lost, want) {
		t.Errorf("lost in the order %v, want %v", lost, want)
	}
	if n := h.j.InFlight(); n != 0 {
		t.Errorf("InFlight = %d after every canary was lost", n)
	}
}
