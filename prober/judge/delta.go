package judge

import (
	"cmp"
	"slices"
	"time"
)

// Delta is what changed in the state since the last MarkPersisted, so that
// the shell persists the change rather than the whole state: the canaries
// written or forgotten, and whether the rest of the state (the offsets, the
// last sequence per key, the downtimes, the last times: a few hundred bytes
// whatever the number of canaries) changed.
type Delta struct {
	// Canaries are the records changed or added, as they stand now, by
	// sequence number. They are the judge's own: encode them before the
	// next event, never change them.
	Canaries []*Canary
	// Forgotten are the canaries no longer remembered.
	Forgotten []string
	// Meta: the state other than its canaries changed.
	Meta bool
}

// Empty reports whether nothing changed.
func (d Delta) Empty() bool { return len(d.Canaries) == 0 && len(d.Forgotten) == 0 && !d.Meta }

// Dirty reports whether the state changed since the last MarkPersisted.
func (j *Judge) Dirty() bool { return len(j.changed) > 0 || j.metaChanged }

// Delta returns what changed since the last MarkPersisted.
func (j *Judge) Delta() Delta {
	d := Delta{Meta: j.metaChanged}
	for id := range j.changed {
		if c, ok := j.st.Canaries[id]; ok {
			d.Canaries = append(d.Canaries, c)
		} else {
			d.Forgotten = append(d.Forgotten, id)
		}
	}
	slices.SortFunc(d.Canaries, func(a, b *Canary) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	slices.Sort(d.Forgotten)
	return d
}

// MarkPersisted records that the state as it stands was made durable at
// now (the delta, or the whole state): the next Delta starts from here.
func (j *Judge) MarkPersisted(now time.Time) {
	j.st.AliveAt = now
	clear(j.changed)
	j.metaChanged = false
}

// touch records that a canary changed (or was forgotten).
func (j *Judge) touch(c *Canary) { j.changed[c.ID] = struct{}{} }

// Meta returns the state without its canaries (sharing its maps: encode it
// before the next event).
func (st *State) Meta() State {
	m := *st
	m.Canaries = nil
	return m
}

// Apply brings a persisted state up to date with what a later write
// recorded: the canaries it wrote replace theirs, the forgotten ones go,
// and meta (the state without canaries, as written then) replaces the
// rest. Replaying the writes in order rebuilds the state they were taken
// from.
func (st *State) Apply(canaries []*Canary, forgotten []string, meta *State) {
	if st.Canaries == nil {
		st.Canaries = map[string]*Canary{}
	}
	for _, c := range canaries {
		st.Canaries[c.ID] = c
	}
	for _, id := range forgotten {
		delete(st.Canaries, id)
	}
	if meta != nil {
		cs := st.Canaries
		*st = *meta
		st.Canaries = cs
	}
}
