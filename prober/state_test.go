package prober

// Tests of persistence: the snapshot and its journal (state.go,
// journal.go), and the tracker's group commit. The restart tests that do
// not depend on how the state is written are in tracker_test.go.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober/judge"
)

func TestStateWriteIsAtomicAndLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.json")
	for _, content := range []string{`{"version":1}`, `{"version":1,"pipeline":"orders"}`} {
		if err := writeFileAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want only the state file", len(entries))
	}
}

func TestStateWriteFailsWithItsCause(t *testing.T) {
	err := writeFileAtomic(filepath.Join(t.TempDir(), "missing-dir", "orders.json"), []byte("{}"))
	if err == nil || !strings.Contains(err.Error(), "create temporary state file") {
		t.Fatalf("err = %v, want the failing step named", err)
	}
}

// journalLine encodes one record as the journal does.
func journalLine(t *testing.T, gen string, rec *journalRecord) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	jl := &journal{f: f}
	payload, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jl.write(gen, payload); err != nil {
		t.Fatal(err)
	}
	jl.close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAJournalLineIsReadBackOrRecognisedAsTorn(t *testing.T) {
	gen := "00000000000000aa"
	rec := &journalRecord{Canaries: []*judge.Canary{{ID: "a", Seq: 1, Key: "k"}}, Forgotten: []string{"z"},
		Meta: judge.State{Next: map[int]int64{0: 7}}}
	good := journalLine(t, gen, rec)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x01
	cases := []struct {
		name string
		data []byte
		torn bool
	}{
		{"A complete line is read back.", good, false},
		{"A line cut before its newline is torn.", good[:len(good)-1], true},
		{"A line cut in its record is torn.", good[:len(good)/2], true},
		{"A line with one bit flipped fails its checksum.", flipped, true},
		{"A line of zeros (a file extended but never written) is torn.", append(make([]byte, 40), '\n'), true},
		{"A line too short for its header is torn.", []byte("0000\n"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, g, rest, err := readJournalLine(tc.data)
			if tc.torn {
				if !errors.Is(err, errTornRecord) {
					t.Fatalf("err = %v, want a torn record", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g != gen || len(rest) != 0 || len(got.Canaries) != 1 || got.Canaries[0].ID != "a" ||
				got.Forgotten[0] != "z" || got.Meta.Next[0] != 7 {
				t.Errorf("read back gen %q, rest %q, record %+v", g, rest, got)
			}
		})
	}
}

func TestPagesSpannedCountsEveryPageAWriteTouches(t *testing.T) {
	for _, tc := range []struct {
		off  int64
		n    int
		want int
	}{{0, 0, 0}, {0, 1, 1}, {0, 4096, 1}, {0, 4097, 2}, {4095, 2, 2}, {4096, 100, 1}, {100, 3*4096 + 1, 4}} {
		if got := pagesSpanned(tc.off, tc.n); got != tc.want {
			t.Errorf("pagesSpanned(%d, %d) = %d, want %d", tc.off, tc.n, got, tc.want)
		}
	}
}

// stateOf is the tracker's state as a snapshot would hold it, without the
// time of the last write.
func stateOf(t *testing.T, tr *Tracker) string {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	st := *tr.j.State()
	st.AliveAt = time.Time{}
	st.Downtimes = nil
	b, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// canaryOfASecond is canary i of a pipeline that sends one a second: sent
// at i s, arrived 300 ms later if it arrives, swept at i s + 900 ms.
func (h *harness) canaryOfASecond(i int, arrives bool) {
	h.at(time.Duration(i) * time.Second)
	c := h.send(fmt.Sprint("c", i), uint64(i+1))
	h.at(time.Duration(i)*time.Second + 300*time.Millisecond)
	if arrives {
		h.arrive(c, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
	}
	h.sweep(time.Duration(i)*time.Second + 900*time.Millisecond)
}

func TestTheJournalRebuildsTheStateAndIsCompactedIntoASnapshot(t *testing.T) {
	h := newHarness(t, plainPipeline(), true)
	h.tr.store.minCompact = 8 << 10
	for i := range 200 {
		h.canaryOfASecond(i, i%10 != 3) // some are lost
	}
	st := h.tr.store.stats
	if st.snapshots < 3 {
		t.Errorf("%d snapshots after %d journal records, want the journal compacted now and then", st.snapshots, st.records)
	}
	if st.records < 400 {
		t.Errorf("%d journal records, want most writes appended", st.records)
	}
	want, compactAt, lines := stateOf(t, h.tr), h.tr.store.compactAt, h.tr.store.lineBytes
	h.restart() // kill -9
	if got := stateOf(t, h.tr); got != want {
		t.Errorf("state after the restart differs:\n got %.400s\nwant %.400s", got, want)
	}
	if got := testutil.ToFloat64(h.m().StateTornRecords.WithLabelValues(h.p.Name)); got != 0 {
		t.Errorf("torn records = %v, want 0", got)
	}
	if lines > compactAt+8<<10 {
		t.Errorf("%d bytes of lines since the last snapshot, want them bounded by the compaction (%d)", lines, compactAt)
	}
	if segs := h.segments(); len(segs) == 0 || len(segs) > 3 {
		t.Errorf("journal segments %v, want at most three: the others deleted once no snapshot needs them", segs)
	}
}

// Pipelines started together and written alike do not compact together:
// at 300 pipelines their compactions fell in the same 15 s.
func TestPipelinesWrittenAlikeCompactAtDifferentWrites(t *testing.T) {
	firstCompaction := map[int]int{} // canary at which a pipeline first compacted: pipelines
	for range 8 {
		h := newHarness(t, plainPipeline(), true)
		h.tr.store.minCompact = 64 << 10
		for i := range 300 {
			h.canaryOfASecond(i, true)
			if h.tr.store.stats.snapshots > 1 { // the first is the process's first write
				firstCompaction[i]++
				break
			}
		}
	}
	compacted := 0
	for _, n := range firstCompaction {
		compacted += n
	}
	if compacted != 8 {
		t.Fatalf("%d of 8 pipelines compacted in 300 canaries (%v); the test needs them all to", compacted, firstCompaction)
	}
	if len(firstCompaction) < 2 {
		t.Errorf("eight pipelines written alike first compacted at the same canary: %v", firstCompaction)
	}
}

func TestATornJournalTailIsIgnoredAndCounted(t *testing.T) {
	cases := []struct {
		name string
		tear func(journal []byte) []byte
	}{
		{"A last record cut short by a crash is ignored.", func(b []byte) []byte { return b[:len(b)-20] }},
		{"A last record without its newline is ignored.", func(b []byte) []byte { return b[:len(b)-1] }},
		{"Garbage after the last record is ignored.", func(b []byte) []byte { return append(b, "\x00\x00\x00garbage"...) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, plainPipeline(), true)
			a := h.send("a", 1)
			h.send("b", 2)
			before := stateOf(t, h.tr)
			h.at(300 * time.Millisecond)
			h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
			segs := h.segments()
			jpath := segs[len(segs)-1]
			data, err := os.ReadFile(jpath)
			if err != nil {
				t.Fatal(err)
			}
			torn := tc.tear(data)
			if err := os.WriteFile(jpath, torn, 0o600); err != nil {
				t.Fatal(err)
			}
			h.restart()
			// A record too damaged to name its pipeline's generation is
			// logged and counted for none: the journal is the process's.
			wantTorn := 1.0
			if bytes.HasPrefix(torn, data) { // the garbage names no generation
				wantTorn = 0
			}
			if got := testutil.ToFloat64(h.m().StateTornRecords.WithLabelValues(h.p.Name)); got != wantTorn {
				t.Errorf("torn records = %v, want %v", got, wantTorn)
			}
			if !strings.Contains(h.logs.String(), "incomplete or damaged record") {
				t.Errorf("not logged:\n%s", h.logs.String())
			}
			if bytes.HasPrefix(torn, data) { // garbage after a complete record: a's arrival stands
				if out := h.tr.Arrived(0, Arrival{CanaryID: "a", Seq: 1, Key: "k", Offset: 0, Consumed: h.clock()}); out.Kind != KindReplay {
					t.Errorf("a's arrival after the restart is %v, want a replay: its record was complete", out.Kind)
				}
				return
			}
			// The arrival's record was torn: the state is as before it, and
			// the message, read again, is judged by the new process. (The
			// first one had applied its effects, which a real tear, a crash
			// before the write returned, rules out.)
			if got := stateOf(t, h.tr); got != before {
				t.Errorf("state after the restart:\n got %.300s\nwant %.300s", got, before)
			}
			if out := h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond}); out.Kind != KindFirst {
				t.Errorf("a read again is %v, want its first arrival", out.Kind)
			}
			if got := testutil.ToFloat64(h.m().SLIEvents.WithLabelValues(h.p.Name, config.SegmentEndToEnd, "good")); got != 1 {
				t.Errorf("end_to_end good in the new process %v, want 1", got)
			}
			h.send("c", 3) // and the journal goes on after the tear
			want := stateOf(t, h.tr)
			h.restart()
			if got := stateOf(t, h.tr); got != want {
				t.Errorf("state after a second restart:\n got %.300s\nwant %.300s", got, want)
			}
		})
	}
}

func TestJournalLinesOfAnOlderSnapshotAreSkipped(t *testing.T) {
	// A compaction wrote its snapshot and crashed before emptying the
	// journal: the lines left, replayed, would take the state back.
	h := newHarness(t, plainPipeline(), true)
	a := h.send("a", 1) // the first write: a snapshot
	h.send("b", 2)      // a journal line, with no offset read yet
	segs := h.segments()
	jpath := segs[len(segs)-1]
	old, err := os.ReadFile(jpath)
	if err != nil || len(old) == 0 {
		t.Fatalf("journal %q, %v", old, err)
	}
	h.at(300 * time.Millisecond)
	h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
	if err := h.tr.Flush(); err != nil { // a snapshot: the lines before are stale
		t.Fatal(err)
	}
	// As the journal was before: had the lines not been told stale by
	// their generation, they would take the state back.
	if err := os.WriteFile(jpath, old, 0o600); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if out := h.tr.Arrived(0, Arrival{CanaryID: "a", Seq: 1, Key: "k", Offset: 0, Consumed: h.clock()}); out.Kind != KindReplay {
		t.Errorf("a's arrival after the restart is %v, want a replay: the old line must not roll the offsets back", out.Kind)
	}
	if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
		t.Errorf("end_to_end events %v, want a's one good", got)
	}
}

func TestAVersion2StateFileIsCarriedOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "payments.json")
	v2 := `{"version":2,"pipeline":"payments","instance":"test-1","judge":{"canaries":{"a":{"id":"a","seq":1,"key":"k",` +
		`"insert_started":"2025-03-01T11:59:59.95Z","commit_sent":"2025-03-01T11:59:59.999Z","committed":"2025-03-01T12:00:00Z"}},` +
		`"next_offset_by_partition":{"0":5},"alive_at":"2025-03-01T12:00:00Z"}}`
	if err := os.WriteFile(path, []byte(v2), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, p: plainPipeline(), now: t0.Add(time.Second), path: path, logs: newHarness(t, plainPipeline(), false).logs, commitDelay: -1}
	h.restart()
	if n := h.tr.InFlight(); n != 1 {
		t.Errorf("%d canaries in flight, want the v2 file's one", n)
	}
	if next := h.tr.StartOffsets()[0]; next != 5 {
		t.Errorf("next offset %d, want 5 from the v2 file", next)
	}
	if got := testutil.ToFloat64(h.m().StateResets.WithLabelValues("payments", StateResetVersion)); got != 0 {
		t.Errorf("state resets{reason=version} = %v, want 0", got)
	}
	h.send("b", 2)
	var f stateFile
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &f); err != nil || f.Version != stateVersion || f.Generation == "" || len(f.Judge.Canaries) != 2 {
		t.Errorf("state file after the first write: %v %.300s; want a version %d snapshot with both canaries", err, data, stateVersion)
	}
}

func TestGroupCommit(t *testing.T) {
	newGroup := func(t *testing.T) *harness {
		h := newHarness(t, plainPipeline(), true)
		h.commitDelay = time.Second
		h.restart()
		// A foreign message first, so that the partition has an offset on
		// disk after the first Sent (a partition's first offset is written
		// at once, see below).
		h.tr.Skipped(0, 1, 1)
		h.offset = 1
		return h
	}
	t.Run("An arrival's SLI events wait for the batch that writes it.", func(t *testing.T) {
		h := newGroup(t)
		a := h.send("a", 1)
		records := h.tr.store.stats.records
		h.at(300 * time.Millisecond)
		h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
		h.sweep(900 * time.Millisecond)
		if got := h.sli(config.SegmentEndToEnd); got != [2]float64{0, 0} {
			t.Errorf("end_to_end events %v before the batch was written, want none", got)
		}
		if got := h.tr.store.stats.records; got != records {
			t.Errorf("%d journal records written before the delay passed, want none", got-records)
		}
		h.sweep(1300 * time.Millisecond)
		if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
			t.Errorf("end_to_end events %v once the batch was written, want one good", got)
		}
		if got := h.tr.store.stats.records; got != records+1 {
			t.Errorf("%d journal records for the batch, want one", got-records)
		}
	})
	t.Run("Sent writes its canary at once and leaves the fsync and every effect to the batch.", func(t *testing.T) {
		h := newGroup(t)
		a := h.send("a", 1) // the process's first write: a snapshot, fsynced
		h.at(300 * time.Millisecond)
		h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
		syncs := h.syncs()
		h.at(500 * time.Millisecond)
		h.send("b", 2)
		if got := h.syncs(); got != syncs {
			t.Errorf("b's Sent fsynced %d times, want none: its batch does", got-syncs)
		}
		if got := h.sli(config.SegmentEndToEnd); got != [2]float64{0, 0} {
			t.Errorf("end_to_end events %v after b's Sent, want none: a's arrival waits for its batch", got)
		}
		if got := h.sent(); got != 1 {
			t.Errorf("canaries sent %v after b's Sent, want 1: b's waits for its batch", got)
		}
		h.restart() // kill -9: b's line was written, the batch never was
		if n := h.tr.InFlight(); n != 2 {
			t.Errorf("%d canaries in flight after the restart, want a and b (a's arrival was not written)", n)
		}
		h.at(600 * time.Millisecond)
		h.offset = 1 // the readers start again from the stored offset
		if out := h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond}); out.Kind != KindFirst {
			t.Errorf("a read again is %v, want its first arrival", out.Kind)
		}
		h.sweep(2 * time.Second)
		if got := h.sent(); got != 2 {
			t.Errorf("canaries sent over both processes %v, want 2: b's Sent is judged by the process that loaded it", got)
		}
		if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
			t.Errorf("end_to_end events over both processes %v, want a's good once", got)
		}
		h.restart() // kill -9 after the batch: b is written as judged
		h.sweep(4 * time.Second)
		if got := h.sent(); got != 2 {
			t.Errorf("canaries sent over three processes %v, want 2: a canary judged in a batch is not judged again", got)
		}
	})
	t.Run("A pipeline fsyncs once per commit delay, however often it sends.", func(t *testing.T) {
		h := newGroup(t)
		h.send("first", 1) // the first write: a snapshot
		syncs := h.syncs()
		var sentAt []float64
		for i := range 50 { // one canary every 100ms for 5s, swept every 250ms
			d := time.Duration(i+1) * 100 * time.Millisecond
			h.at(d)
			h.send(fmt.Sprintf("c%d", i), uint64(i+2))
			if d%(250*time.Millisecond) == 0 {
				h.sweep(d)
			}
			sentAt = append(sentAt, h.sent())
		}
		if got := h.syncs() - syncs; got < 4 || got > 5 {
			t.Errorf("%d fsyncs for 50 canaries in 5s, want one per second of commit delay", got)
		}
		if sentAt[0] != 1 || sentAt[len(sentAt)-1] < 40 {
			t.Errorf("canaries sent as the batches went by: %v; want each counted with its batch, within a second and a sweep", sentAt)
		}
	})
	t.Run("A crash before the batch is written loses nothing and counts the arrival once.", func(t *testing.T) {
		h := newGroup(t)
		a := h.send("a", 1)
		h.at(300 * time.Millisecond)
		h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
		h.at(500 * time.Millisecond)
		h.restart() // kill -9 with the arrival unwritten
		h.at(600 * time.Millisecond)
		h.offset = 1 // the readers start again from the stored offset
		if out := h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond}); out.Kind != KindFirst {
			t.Fatalf("a read again is %v, want its first arrival", out.Kind)
		}
		h.sweep(2 * time.Second)
		var verdicts float64
		for _, m := range h.metrics {
			for _, o := range []string{"good", "bad"} {
				verdicts += testutil.ToFloat64(m.SLIEvents.WithLabelValues(h.p.Name, config.SegmentEndToEnd, o))
			}
			for _, r := range judge.Reasons() {
				verdicts += testutil.ToFloat64(m.CanariesUnjudged.WithLabelValues(h.p.Name, config.SegmentEndToEnd, r))
			}
		}
		if verdicts != 1 {
			t.Errorf("a's end_to_end was decided %v times over both processes, want once", verdicts)
		}
	})
	t.Run("The first offset of a partition is written at once.", func(t *testing.T) {
		h := newHarness(t, plainPipeline(), true)
		h.commitDelay = time.Second
		h.restart()
		a := h.send("a", 1)
		h.at(300 * time.Millisecond)
		h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
		if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
			t.Errorf("end_to_end events %v, want a's good at once: a reader restarted without the partition's offset would start past it", got)
		}
		h.restart()
		if next, ok := h.tr.StartOffsets()[0]; !ok || next != 1 {
			t.Errorf("stored next offset %d (%t), want 1", next, ok)
		}
	})
	t.Run("Flush writes the waiting batch as a snapshot and applies its effects.", func(t *testing.T) {
		h := newGroup(t)
		a := h.send("a", 1)
		h.at(300 * time.Millisecond)
		h.arrive(a, map[string]time.Duration{config.StampPublish: 100 * time.Millisecond})
		snapshots := h.tr.store.stats.snapshots
		if err := h.tr.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := h.sli(config.SegmentEndToEnd); got != [2]float64{1, 0} {
			t.Errorf("end_to_end events %v after Flush, want a's good", got)
		}
		if h.tr.store.stats.snapshots != snapshots+1 {
			t.Errorf("Flush wrote %d snapshots, want one", h.tr.store.stats.snapshots-snapshots)
		}
		if h.tr.store.pin != 0 || h.tr.store.lineBytes != 0 {
			t.Errorf("after Flush the pipeline pins journal segment %d with %d bytes of lines, want none: the snapshot holds them", h.tr.store.pin, h.tr.store.lineBytes)
		}
	})
}

func TestAJournalRecordIsEncodedAsJSONMarshalEncodesIt(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	meta := judge.State{Next: map[int]int64{0: 7, 2: 9}, LastSeq: map[string]uint64{"k": 3}, AliveAt: at, LastSent: at.Add(-time.Second)}
	canary := &judge.Canary{ID: "019ad2c4-0000-7000-8001-000000000001", Seq: 1, Key: "k", Committed: at, Arrived: true,
		Stamps: judge.ByName[time.Time]{{Name: "publish", Value: at}, {Name: "read", Value: at}}, Verdicts: judge.ByName[judge.Verdict]{{Name: "end_to_end", Value: judge.Verdict{Outcome: "good", At: at}}}}
	cases := []struct {
		name string
		rec  journalRecord
	}{
		{"A batch of canaries and forgotten ones.", journalRecord{Canaries: []*judge.Canary{canary, {ID: "b", Seq: 2}}, Forgotten: []string{"x", "y"}, Meta: meta}},
		{"A line of nothing but the rest of the state.", journalRecord{Meta: judge.State{}}},
		{"A committed canary.", journalRecord{Committed: []judge.Sent{{ID: "019ad2c4-0000-7000-8001-000000000002", Seq: 2, Key: "canary-key",
			RowID: "1000002", InsertStarted: at.Add(-2 * time.Millisecond), CommitSent: at.Add(-time.Millisecond), Committed: at}}, Meta: meta}},
		{"A committed canary without a row id, at a zoned time.", journalRecord{Committed: []judge.Sent{{ID: "c", Seq: 3, Key: "k",
			Committed: at.In(time.FixedZone("x", 3600))}}, Meta: meta}},
		{"Ids and keys JSON or HTML must escape.", journalRecord{Committed: []judge.Sent{{ID: "a\"b\\c<d>&e\u2028f\x01g", Seq: 4, Key: "ключ",
			RowID: "r\tn", Committed: at}}, Forgotten: []string{"<&>"}, Meta: meta}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(&tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			metaJSON, err := json.Marshal(&tc.rec.Meta)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendRecord(nil, tc.rec.Canaries, tc.rec.Forgotten, tc.rec.Committed, metaJSON)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("encoded\n  %s\nwant, as json.Marshal encodes it,\n  %s", got, want)
			}
		})
	}
}
