package judge

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// The judge's indexes of its canaries are derived from State.Canaries and
// never persisted (New rebuilds them from a loaded or replayed state), so
// that a Tick costs the canaries it has business with rather than every
// canary remembered for Forget:
//
//   - open: every canary not final, by sequence number, the order Tick
//     judges them in. A canary made final between ticks (by its arrival,
//     by a lookup's answer) stays until the next Tick drops it.
//   - forgetting: every final canary, earliest commit first, so that Tick
//     reaches those whose time came and no other.

// bySeq is the order Tick visits canaries in.
func bySeq(a, b *Canary) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) }

// forgetQueue is a min-heap of final canaries by commit time.
type forgetQueue []*Canary

func (q forgetQueue) Len() int { return len(q) }
func (q forgetQueue) Less(i, k int) bool {
	return cmp.Or(q[i].Committed.Compare(q[k].Committed), bySeq(q[i], q[k])) < 0
}
func (q forgetQueue) Swap(i, k int) { q[i], q[k] = q[k], q[i] }
func (q *forgetQueue) Push(x any)   { *q = append(*q, x.(*Canary)) }
func (q *forgetQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return c
}

// index builds the indexes from the state's canaries.
func (j *Judge) index() {
	j.open, j.forgetting = nil, nil
	for _, c := range j.st.Canaries {
		if c.Final {
			j.forgetting = append(j.forgetting, c)
		} else {
			j.open = append(j.open, c)
		}
	}
	slices.SortFunc(j.open, bySeq)
	heap.Init(&j.forgetting)
	j.forgetFromChanged()
}

// opened indexes a canary just sent. Sequence numbers grow with time, so
// it almost always goes at the end.
func (j *Judge) opened(c *Canary) {
	i, _ := slices.BinarySearchFunc(j.open, c, bySeq)
	j.open = slices.Insert(j.open, i, c)
}

// closed indexes a canary just made final, to be forgotten in its turn.
func (j *Judge) closed(c *Canary) {
	heap.Push(&j.forgetting, c)
	j.forgetFromChanged()
}

// forgetFromChanged keeps forgetFrom, the earliest commit in forgetting,
// after the heap changed. Every sweep of every pipeline asks whether a
// canary is due to be forgotten; nearly always none is, and reading the
// answer off the judge rather than off the heap's first canary, cold in
// memory by then, made forgetDue 2.3 % of the CPU of 300 pipelines
// (a profile of the scale benchmark at a892434).
func (j *Judge) forgetFromChanged() {
	if len(j.forgetting) > 0 {
		j.forgetFrom = j.forgetting[0].Committed
	}
}

// forgetDue forgets the final canaries committed more than Forget before
// now.
func (j *Judge) forgetDue(now time.Time) {
	for len(j.forgetting) > 0 && now.Sub(j.forgetFrom) > j.cfg.Forget {
		c := heap.Pop(&j.forgetting).(*Canary)
		delete(j.st.Canaries, c.ID)
		j.touch(c) // forgotten
		j.forgetFromChanged()
	}
}

// Idle reports whether Tick(now), or at any earlier time, would change
// nothing and emit nothing: no canary is open and none is due to be
// forgotten. At one canary every 10 s a pipeline has nothing open most of
// the time, and its sweeps need not take the fence or the clock.
func (j *Judge) Idle(now time.Time) bool {
	return len(j.open) == 0 && (len(j.forgetting) == 0 || now.Sub(j.forgetFrom) <= j.cfg.Forget)
}

// tickOpen judges what time decides about every canary not final, by
// sequence number, and drops those that are final now from the index.
func (j *Judge) tickOpen(now time.Time) {
	kept := j.open[:0]
	for _, c := range j.open {
		switch {
		case c.Final:
		case c.Arrived:
			j.tickArrived(c, now)
		default:
			j.tickInFlight(c, now)
		}
		if !c.Final {
			kept = append(kept, c)
		}
	}
	clear(j.open[len(kept):])
	j.open = kept
}

// InFlight is the number of canaries sent that have neither arrived nor
// been declared lost. Such a canary is never final, so it costs the
// canaries not final, not every one remembered.
func (j *Judge) InFlight() int {
	n := 0
	for _, c := range j.open {
		if !c.Arrived && !c.Lost {
			n++
		}
	}
	return n
}

// Open returns the canaries not final, by sequence number. Callers must
// not change them.
func (j *Judge) Open() []*Canary {
	out := make([]*Canary, 0, len(j.open))
	for _, c := range j.open {
		if !c.Final {
			out = append(out, c)
		}
	}
	return out
}
