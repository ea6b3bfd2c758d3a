package prober

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// appendCanary appends a canary's record as encoding/json encodes it
// (judge.Canary's fields in their order, with their names, omitempty and
// omitzero, map keys sorted: a judge.ByName is kept sorted and encoded as
// that map), without reflection: a batch encodes every
// canary it writes, and json.Marshal was most of its CPU.
// TestCanaryRecordsAreEncodedAsJSONMarshalEncodesThem holds it to
// json.Marshal on random canaries whose every field is filled by
// reflection, so a field added to the judge's record and not here fails.
func appendCanary(b []byte, c *judge.Canary) ([]byte, error) {
	if c == nil {
		return append(b, "null"...), nil
	}
	b, err := appendCommitFields(b, judge.Sent{ID: c.ID, Seq: c.Seq, Key: c.Key, RowID: c.RowID,
		InsertStarted: c.InsertStarted, CommitSent: c.CommitSent, Committed: c.Committed})
	if err != nil {
		return b, err
	}
	if b, err = appendByName(b, `,"stamps":`, c.Stamps, func(b []byte, t time.Time) ([]byte, error) {
		return appendTimeField(b, "", t)
	}); err != nil {
		return b, err
	}
	b, _ = appendByName(b, `,"stamp_error":`, c.StampError, func(b []byte, d time.Duration) ([]byte, error) {
		return strconv.AppendInt(b, int64(d), 10), nil
	})
	b, _ = appendByName(b, `,"invalid":`, c.Invalid, func(b []byte, reason string) ([]byte, error) {
		return appendJSONString(b, reason), nil
	})
	if c.Arrived {
		b = append(b, `,"arrived":true`...)
	}
	if !c.Consumed.IsZero() {
		if b, err = appendTimeField(b, `,"consumed":`, c.Consumed); err != nil {
			return b, err
		}
	}
	if c.Partition != 0 {
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(c.Partition), 10)
	}
	if c.Offset != 0 {
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, c.Offset, 10)
	}
	if c.Tainted != "" {
		b = append(b, `,"tainted":`...)
		b = appendJSONString(b, c.Tainted)
	}
	if c.Lost {
		b = append(b, `,"lost":true`...)
	}
	if c.OutOfOrder {
		b = append(b, `,"out_of_order":true`...)
	}
	if c.Final {
		b = append(b, `,"final":true`...)
	}
	if !c.FinalAt.IsZero() {
		if b, err = appendTimeField(b, `,"final_at":`, c.FinalAt); err != nil {
			return b, err
		}
	}
	if b, err = appendByName(b, `,"verdicts":`, c.Verdicts, func(b []byte, v judge.Verdict) ([]byte, error) {
		return appendVerdict(b, &v)
	}); err != nil {
		return b, err
	}
	if c.Lookup != (judge.Lookup{}) { // omitzero: the struct's zero value
		if b, err = appendLookup(append(b, `,"lookup":`...), c.Lookup); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

func appendVerdict(b []byte, v *judge.Verdict) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	o := objectAppender{b: append(b, '{')}
	if v.Outcome != "" {
		o.appendString("outcome", v.Outcome)
	}
	if v.Reason != "" {
		o.appendString("reason", v.Reason)
	}
	if !v.At.IsZero() {
		o.appendTime("at", v.At)
	}
	if v.Observed {
		o.appendTrue("observed")
	}
	return append(o.b, '}'), o.err
}

func appendLookup(b []byte, l judge.Lookup) ([]byte, error) {
	o := objectAppender{b: append(b, '{')}
	if l.Pending {
		o.appendTrue("pending")
	}
	if !l.Due.IsZero() {
		o.appendTime("due", l.Due)
	}
	if l.Retries != 0 {
		o.appendInt("retries", int64(l.Retries))
	}
	if l.Attempts != 0 {
		o.appendInt("attempts", int64(l.Attempts))
	}
	if l.Unavailable {
		o.appendTrue("unavailable")
	}
	return append(o.b, '}'), o.err
}

// objectAppender appends the members of a JSON object whose every member
// may be omitted, commas between them.
type objectAppender struct {
	b   []byte
	n   int
	err error
}

func (o *objectAppender) name(name string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = append(o.b, '"')
	o.b = append(o.b, name...) // our own names: nothing to escape
	o.b = append(o.b, `":`...)
}

func (o *objectAppender) appendString(name, v string) {
	o.name(name)
	o.b = appendJSONString(o.b, v)
}

func (o *objectAppender) appendInt(name string, v int64) {
	o.name(name)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *objectAppender) appendTrue(name string) {
	o.name(name)
	o.b = append(o.b, "true"...)
}

func (o *objectAppender) appendTime(name string, t time.Time) {
	o.name(name)
	if o.err == nil {
		o.b, o.err = appendTimeField(o.b, "", t)
	}
}

// appendByName appends prefix and entries as the map they stand for
// (judge.ByName keeps them in json.Marshal's key order), nothing when
// there are none, as omitempty does.
func appendByName[V any](b []byte, prefix string, entries judge.ByName[V], appendValue func([]byte, V) ([]byte, error)) ([]byte, error) {
	if len(entries) == 0 {
		return b, nil
	}
	b = append(b, prefix...)
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, e.Name)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, e.Value); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// appendCommitFields opens a canary's object with the fields it has from
// its commit on, in the order json.Marshal writes them: a committed
// canary's whole line, and the start of a judged canary's.
func appendCommitFields(b []byte, c judge.Sent) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, c.ID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, c.Key)
	if c.RowID != "" {
		b = append(b, `,"row_id":`...)
		b = appendJSONString(b, c.RowID)
	}
	var err error
	for _, f := range []struct {
		prefix string
		t      time.Time
	}{{`,"insert_started":`, c.InsertStarted}, {`,"commit_sent":`, c.CommitSent}, {`,"committed":`, c.Committed}} {
		if b, err = appendTimeField(b, f.prefix, f.t); err != nil {
			return b, err
		}
	}
	return b, nil
}

// appendTimeField appends prefix and t as time.Time's MarshalJSON does
// (RFC 3339 with nanoseconds, quoted; an error outside years 0-9999).
func appendTimeField(b []byte, prefix string, t time.Time) ([]byte, error) {
	b = append(b, prefix...)
	b = append(b, '"')
	b, err := t.AppendText(b)
	return append(b, '"'), err
}

// appendStateFile appends a snapshot as encoding/json encodes f, its
// canaries through appendCanary and the rest of its state from meta, the
// JSON of f.Judge.Meta() (which a snapshot keeps for the journal lines
// after it): a snapshot is every remembered canary.
// TestSnapshotsAreEncodedAsJSONMarshalEncodesThem holds it to json.Marshal.
func appendStateFile(b []byte, f *stateFile, meta []byte) ([]byte, error) {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(f.Version), 10)
	b = append(b, `,"pipeline":`...)
	b = appendJSONString(b, f.Pipeline)
	b = append(b, `,"instance":`...)
	b = appendJSONString(b, f.Instance)
	if f.Generation != "" {
		b = append(b, `,"generation":`...)
		b = appendJSONString(b, f.Generation)
	}
	b = append(b, `,"judge":`...)
	if f.Judge == nil {
		return append(b, "null}"...), nil
	}
	// The meta's first member is its canaries, null (State.Meta): the
	// canaries go in their place, the rest follows as it is.
	const noCanaries = `{"canaries":null`
	if len(meta) < len(noCanaries) || string(meta[:len(noCanaries)]) != noCanaries {
		return b, fmt.Errorf("encode state: the rest of the state does not start with %s", noCanaries)
	}
	b = append(b, `{"canaries":`...)
	if f.Judge.Canaries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, id := range slices.Sorted(maps.Keys(f.Judge.Canaries)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, id)
			b = append(b, ':')
			var err error
			if b, err = appendCanary(b, f.Judge.Canaries[id]); err != nil {
				return b, err
			}
		}
		b = append(b, '}')
	}
	b = append(b, meta[len(noCanaries):]...)
	return append(b, '}'), nil
}

// appendMeta appends the state without its canaries (judge.State.Meta, its
// Canaries nil) as json.Marshal encodes it, without reflection: every
// journal line holds one, and json.Marshal of it was 2.4 % of the CPU at
// 300 pipelines (a profile of the scale benchmark at a892434).
// TestSnapshotsAreEncodedAsJSONMarshalEncodesThem holds it to json.Marshal
// on random states whose every field is filled by reflection.
func appendMeta(b []byte, m *judge.State) ([]byte, error) {
	if m.Canaries != nil {
		return b, fmt.Errorf("encode state: the rest of the state holds %d canaries", len(m.Canaries))
	}
	b = append(b, `{"canaries":null`...)
	if len(m.LastSeq) > 0 {
		b = append(b, `,"last_seq_by_key":{`...)
		for i, key := range slices.Sorted(maps.Keys(m.LastSeq)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, key)
			b = append(b, ':')
			b = strconv.AppendUint(b, m.LastSeq[key], 10)
		}
		b = append(b, '}')
	}
	if len(m.Next) > 0 {
		// encoding/json sorts integer keys as the strings they print as.
		type member struct {
			key    string
			offset int64
		}
		members := make([]member, 0, len(m.Next))
		for p, offset := range m.Next {
			members = append(members, member{strconv.Itoa(p), offset})
		}
		slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
		b = append(b, `,"next_offset_by_partition":{`...)
		for i, e := range members {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, e.key...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, e.offset, 10)
		}
		b = append(b, '}')
	}
	var err error
	for _, f := range []struct {
		prefix string
		spans  []judge.Interval
	}{{`,"downtimes":[`, m.Downtimes}, {`,"brokers_unreachable":[`, m.Unreachable}} {
		if len(f.spans) == 0 {
			continue
		}
		b = append(b, f.prefix...)
		for i, d := range f.spans {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendTimeField(b, `{"from":`, d.From); err != nil {
				return b, err
			}
			if b, err = appendTimeField(b, `,"to":`, d.To); err != nil {
				return b, err
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	for _, f := range []struct {
		prefix string
		t      time.Time
	}{{`,"alive_at":`, m.AliveAt}, {`,"last_sent":`, m.LastSent}, {`,"last_received":`, m.LastReceived}, {`,"last_success":`, m.LastSuccess}} {
		if f.t.IsZero() {
			continue
		}
		if b, err = appendTimeField(b, f.prefix, f.t); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}
