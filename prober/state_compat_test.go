package prober

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// The state files under testdata/state-v3 were written by the release
// whose judge kept a canary's stamps and verdicts in maps (efd02ed, by
// TestWriteStateOfThisRelease of commit 006dbbf): a snapshot of canaries
// good, late, lost, in flight, with invalid, missing and skewed stamps and
// of random ones (every field, names JSON must escape), and journal lines
// of canaries, forgotten ones and a committed one. Every later release
// must load them and write what it loaded byte for byte as that release
// did; they are never regenerated.
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
	if got := encodeStateFile(t, &f, f.Judge.Meta()); !bytes.Equal(got, snapshot) {
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
		metaJSON, err := appendMeta(nil, &rec.Meta)
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

// TestAStateWithAJournalPerPipelineIsCarriedOverIntoTheProcessJournal
// loads the version 3 pair of testdata/state-v3 (a snapshot and a journal
// of its own, the layout before the process's journal) with a tracker,
// which writes it again as a version 4 snapshot, deletes the old journal,
// and loads the same state after a restart.
func TestAStateWithAJournalPerPipelineIsCarriedOverIntoTheProcessJournal(t *testing.T) {
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
	p := plainPipeline()
	path := filepath.Join(dir, "payments.json")
	logs := &stacktest.SyncBuffer{}
	start := func() *Tracker {
		m, err := NewMetrics(prometheus.NewPedanticRegistry(), []config.Pipeline{p})
		if err != nil {
			t.Fatal(err)
		}
		// The instance that wrote the files: another one's canaries are forgotten.
		tr, err := NewTracker(TrackerOptions{Pipeline: &p, Instance: "bench", Metrics: m, Logger: logs.Logger(), StatePath: path, CommitDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := start()
	loaded := stateOf(t, tr)
	if n := tr.InFlight() + len(tr.Recent(1000)); n < 50 {
		t.Fatalf("%d canaries loaded from the version 3 state, want its canaries", n)
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	var f stateFile
	if data, err := os.ReadFile(path); err != nil || json.Unmarshal(data, &f) != nil || f.Version != stateVersion {
		t.Fatalf("state file after the first write: version %d, %v; want %d", f.Version, err, stateVersion)
	}
	if _, err := os.Stat(path + journalSuffix); !os.IsNotExist(err) {
		t.Errorf("the version 3 journal after the first write: %v, want it deleted", err)
	}
	tr = start()
	if got := stateOf(t, tr); got != loaded {
		t.Errorf("state after the restart differs from the version 3 state loaded:\n%s", firstDifference([]byte(got), []byte(loaded)))
	}
	if strings.Contains(logs.String(), "moved aside") {
		t.Errorf("a file was moved aside:\n%s", logs.String())
	}
}
