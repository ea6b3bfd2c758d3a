package prober

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// The state files under testdata/state-v3 were written by the release
// whose judge kept a canary's stamps and verdicts in maps (efd02ed):
// snapshots and journal lines that state directories hold today. Every
// later release must load them and write what it loaded byte for byte as
// that release did.
const (
	compatDir        = "testdata/state-v3"
	compatGeneration = "00000000000000c3"
)

// TestStateWrittenByAnEarlierReleaseLoadsAndIsWrittenAgainByteForByte
// decodes the snapshot and every journal line of testdata/state-v3 and
// encodes them again, through the reflection-free encoders and through
// json.Marshal, wanting the bytes on disk; then loads the pair as the
// service does.
func TestStateWrittenByAnEarlierReleaseLoadsAndIsWrittenAgainByteForByte(t *testing.T) {
	snapshot, err := os.ReadFile(filepath.Join(compatDir, "payments.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f stateFile
	if err := json.Unmarshal(snapshot, &f); err != nil {
		t.Fatal(err)
	}
	if f.Judge == nil || len(f.Judge.Canaries) < 50 {
		t.Fatalf("the snapshot holds %v, want its canaries", f.Judge)
	}
	meta := f.Judge.Meta()
	metaJSON, err := json.Marshal(&meta)
	if err != nil {
		t.Fatal(err)
	}
	got, err := appendStateFile(nil, &f, metaJSON)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, snapshot) {
		t.Errorf("the snapshot encoded again differs from the file:\n%s", firstDifference(got, snapshot))
	}
	if got, err := json.Marshal(&f); err != nil || !bytes.Equal(got, snapshot) {
		t.Errorf("the snapshot through json.Marshal (%v) differs from the file:\n%s", err, firstDifference(got, snapshot))
	}

	journal, err := os.ReadFile(filepath.Join(compatDir, "payments.json"+journalSuffix))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for data := journal; ; {
		line, _, _ := bytes.Cut(bytes.TrimLeft(data, "\n"), []byte("\n"))
		rec, gen, rest, err := readJournalLine(data)
		if err != nil {
			t.Fatalf("journal line %d: %v", lines+1, err)
		}
		if gen == "" {
			break
		}
		lines++
		data = rest
		metaJSON, err := json.Marshal(&rec.Meta)
		if err != nil {
			t.Fatal(err)
		}
		want := line[9+16+1:]
		got, err := appendRecord(nil, rec.Canaries, rec.Forgotten, rec.Committed, metaJSON)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("journal line %d encoded again differs from the file:\n%s", lines, firstDifference(got, want))
		}
		if got, err := json.Marshal(&rec); err != nil || !bytes.Equal(got, want) {
			t.Errorf("journal line %d through json.Marshal (%v) differs from the file:\n%s", lines, err, firstDifference(got, want))
		}
	}
	if lines < 3 {
		t.Fatalf("the journal holds %d lines, want its records", lines)
	}

	dir := t.TempDir()
	for _, name := range []string{"payments.json", "payments.json" + journalSuffix} {
		data, err := os.ReadFile(filepath.Join(compatDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newBenchStore(dir)
	st, committed := s.load(time.Now())
	if st == nil {
		t.Fatal("the state was not loaded")
	}
	// The journal adds two canaries and forgets two of the snapshot's.
	if n := len(st.Canaries); n != len(f.Judge.Canaries) || len(committed) != 1 {
		t.Errorf("loaded %d canaries and %d committed, want %d and 1", n, len(committed), len(f.Judge.Canaries))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the state directory holds %d files after loading, want the 2 it had (none moved aside)", len(entries))
	}
}

// firstDifference shows where two encodings part.
func firstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-80)
	return fmt.Sprintf(" got ...%s\nwant ...%s", got[from:min(len(got), i+80)], want[from:min(len(want), i+80)])
}

// TestWriteStateOfThisRelease writes testdata/state-v3 with -update: only
// ever with the release that defined the format (see compatDir), so that
// the files keep standing for what state directories already hold.
func TestWriteStateOfThisRelease(t *testing.T) {
	if !*update {
		t.Skip("writes testdata/state-v3 with -update")
	}
	st := compatJudgeState()
	canaries := st.Canaries
	// Two canaries only the journal holds, and one only committed.
	var journaled []*judge.Canary
	for _, id := range []string{"019ad2c4-0000-7000-8001-000000000003", "019ad2c4-0000-7000-8001-000000000006"} {
		journaled = append(journaled, canaries[id])
		delete(canaries, id)
	}
	rng := rand.New(rand.NewPCG(14, 3))
	for i := range 60 {
		var c judge.Canary
		fillRandom(rng, reflect.ValueOf(&c).Elem())
		c.ID = fmt.Sprintf("random-%02d", i)
		for segment, v := range c.Verdicts {
			if v == nil { // the judge never holds a segment without its verdict
				c.Verdicts[segment] = &judge.Verdict{}
			}
		}
		canaries[c.ID] = &c
	}
	f := stateFile{Version: stateVersion, Pipeline: "payments", Instance: "bench", Generation: compatGeneration, Judge: st}
	meta := st.Meta()
	metaJSON, err := json.Marshal(&meta)
	if err != nil {
		t.Fatal(err)
	}
	snapshot, err := appendStateFile(nil, &f, metaJSON)
	if err != nil {
		t.Fatal(err)
	}
	jl := &journal{}
	var lines []byte
	for _, rec := range []journalRecord{
		{Canaries: journaled[:1], Meta: meta},
		{Canaries: journaled[1:], Forgotten: []string{"random-00", "random-01"}, Meta: meta},
		{Committed: []committedCanary{{ID: "019ad2c4-0000-7000-8001-000000000099", Seq: 99, Key: "canary-key", RowID: "1000099",
			InsertStarted: compatT0, CommitSent: compatT0, Committed: compatT0}}, Meta: meta},
	} {
		payload, err := appendRecord(nil, rec.Canaries, rec.Forgotten, rec.Committed, metaJSON)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, jl.line(compatGeneration, payload)...)
	}
	if err := os.MkdirAll(compatDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(compatDir, "payments.json"), snapshot, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(compatDir, "payments.json"+journalSuffix), lines, 0o644); err != nil {
		t.Fatal(err)
	}
}

var compatT0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))

// compatJudgeState is the state of a judge of a polling pipeline (a read
// header, published_at looked up) that saw canaries good, late, with an
// invalid, missing or skewed stamp, lost, and in flight.
func compatJudgeState() *judge.State {
	budgets := map[string]time.Duration{"end_to_end": 2 * time.Second, "insert_to_commit": 100 * time.Millisecond,
		"commit_to_read": time.Second, "read_to_publish": 500 * time.Millisecond, "publish_to_consume": 500 * time.Millisecond}
	plan := judge.NewPlan([]string{judge.StampCommit, "read", judge.StampPublish, judge.StampConsume},
		func(s string) (time.Duration, bool) { b, ok := budgets[s]; return b, ok },
		"insert_to_commit", "end_to_end", []string{judge.StampPublish}, []string{judge.StampPublish})
	cfg := judge.Config{Plan: plan, SkewTolerance: 50 * time.Millisecond, MaxSkew: time.Minute, LostAfter: time.Minute,
		Forget: time.Hour, ArrivedLookupWindow: 10 * time.Second, FloodSkips: 100}
	j := judge.New(cfg, nil, compatT0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type life struct {
		read, publish, consume time.Duration // 0: none
		publishError           time.Duration
	}
	lives := []life{
		{read: ms(20), publish: ms(50), consume: ms(100), publishError: ms(1)},  // good
		{read: ms(20), publish: ms(50), consume: ms(3000), publishError: ms(2)}, // late
		{read: -ms(120000), publish: ms(50), consume: ms(100)},                  // read before the commit: invalid
		{read: ms(20), consume: ms(100)},                                        // published_at never found
		{read: ms(80), publish: ms(30), consume: ms(100), publishError: ms(1)},  // read after publish: order
		{read: ms(20), publish: ms(300), consume: ms(100), publishError: ms(1)}, // published after consume: skew
		{read: ms(20), publish: ms(50), consume: ms(100), publishError: 0},      // no error bound
		{}, // lost
		{read: ms(20), publish: ms(50), consume: ms(1900), publishError: ms(1)}, // good, near the budget
		{read: ms(20), publish: ms(50), consume: ms(100) + 61*time.Second},      // arrives after lost_after
	}
	for i, l := range lives {
		at := compatT0.Add(time.Duration(i) * 5 * time.Second)
		id := fmt.Sprintf("019ad2c4-0000-7000-8001-%012d", i+1)
		j.Sent(judge.Sent{ID: id, Key: "canary-key", RowID: fmt.Sprint(1000001 + i), Seq: uint64(i + 1),
			InsertStarted: at.Add(-ms(4)), CommitSent: at, Committed: at.Add(ms(2))})
		if l.consume == 0 {
			continue
		}
		stamps := map[string]time.Time{}
		if l.read != 0 {
			stamps["read"] = at.Add(l.read)
		}
		j.Arrived(judge.Arrival{CanaryID: id, Key: "canary-key", Seq: uint64(i + 1), Offset: int64(i), Partition: i % 3,
			Consumed: at.Add(l.consume), Stamps: stamps})
		if l.publish != 0 {
			j.StampFound(id, map[string]time.Time{judge.StampPublish: at.Add(l.publish)}, l.publishError, at.Add(l.consume+ms(600)))
		} else {
			j.StampAbsent(id, at.Add(l.consume+ms(600)))
		}
	}
	for at := time.Duration(0); at <= 3*time.Minute; at += 250 * time.Millisecond {
		j.Tick(compatT0.Add(at))
	}
	// Two more in flight, one of them with its read stamp already.
	for i := range 2 {
		at := compatT0.Add(3*time.Minute + time.Duration(i)*time.Second)
		id := fmt.Sprintf("019ad2c4-0000-7000-8001-%012d", 20+i)
		j.Sent(judge.Sent{ID: id, Key: "canary-key", RowID: fmt.Sprint(1000020 + i), Seq: uint64(20 + i),
			InsertStarted: at.Add(-ms(4)), CommitSent: at, Committed: at.Add(ms(2))})
	}
	j.Arrived(judge.Arrival{CanaryID: "019ad2c4-0000-7000-8001-000000000020", Key: "canary-key", Seq: 20, Offset: 30,
		Consumed: compatT0.Add(3*time.Minute + ms(100)), Stamps: map[string]time.Time{"read": compatT0.Add(3*time.Minute + ms(20))}})
	return j.State()
}
