package prober

// Tests of the process's journal (statejournal.go): the pipelines of one
// process share it, a sweep fsyncs their batches once, and what each
// wrote comes back after a kill -9 or a failure of the journal.

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// process is the trackers of several pipelines sharing one journal in one
// state directory, as the service makes them, on an injected clock; a
// restart is a new process on the same directory (a kill -9: nothing is
// flushed).
type process struct {
	t        *testing.T
	dir      string
	ps       []config.Pipeline
	mu       sync.Mutex
	now      time.Time
	journal  *stateJournal
	trackers []*Tracker
	metrics  []*Metrics // one per process, oldest first
	logs     *stacktest.SyncBuffer
	offset   []int64
	// minRotate, if set, is each process's journal's least segment size.
	minRotate int64
}

func newProcess(t *testing.T, pipelines int) *process {
	t.Helper()
	p := &process{t: t, dir: t.TempDir(), now: t0, logs: &stacktest.SyncBuffer{}, offset: make([]int64, pipelines)}
	for i := range pipelines {
		pl := plainPipeline()
		pl.Name = fmt.Sprintf("p%d", i)
		p.ps = append(p.ps, pl)
	}
	p.restart()
	return p
}

func (p *process) clock() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *process) at(d time.Duration) {
	p.mu.Lock()
	p.now = t0.Add(d)
	p.mu.Unlock()
}

func (p *process) restart() {
	p.t.Helper()
	m, err := NewMetrics(prometheus.NewPedanticRegistry(), p.ps)
	if err != nil {
		p.t.Fatal(err)
	}
	sj, err := openStateJournal(filepath.Join(p.dir, JournalName), p.logs.Logger())
	if err != nil {
		p.t.Fatal(err)
	}
	sj.minRotate = p.minRotate
	sj.keepUnloaded = true // as the service's
	p.trackers = p.trackers[:0]
	for i := range p.ps {
		tr, err := NewTracker(TrackerOptions{Pipeline: &p.ps[i], Instance: "test-1", Metrics: m, Now: p.clock, Logger: p.logs.Logger(),
			StatePath: filepath.Join(p.dir, p.ps[i].Name+".json"), Journal: sj, CommitDelay: time.Second})
		if err != nil {
			p.t.Fatal(err)
		}
		p.trackers = append(p.trackers, tr)
	}
	sj.loaded()
	p.journal, p.metrics = sj, append(p.metrics, m)
}

// sweep sweeps every tracker as the service does: one group, one fsync.
func (p *process) sweep(d time.Duration) {
	p.at(d)
	var g SweepGroup
	for _, tr := range p.trackers {
		g.Sweep(tr)
	}
	g.Commit()
}

func (p *process) send(i int, id string, seq uint64) Canary {
	p.t.Helper()
	now := p.clock()
	c := Canary{ID: id, Seq: seq, Pipeline: p.ps[i].Name, Key: "k", RowID: id,
		InsertStarted: now.Add(-50 * time.Millisecond), CommitSent: now.Add(-time.Millisecond), Committed: now}
	if err := p.trackers[i].Sent(c); err != nil {
		p.t.Fatal(err)
	}
	return c
}

func (p *process) arrive(i int, c Canary) Outcome {
	tr := p.trackers[i]
	token, consumed := tr.BeginArrival(time.Time{})
	a := Arrival{CanaryID: c.ID, Seq: c.Seq, Key: c.Key, Offset: p.offset[i], Consumed: consumed,
		Stamps: map[string]time.Time{config.StampPublish: c.Committed.Add(100 * time.Millisecond)}}
	p.offset[i]++
	return tr.Arrived(token, a)
}

// good sums end_to_end good events of pipeline i over every process.
func (p *process) good(i int) float64 {
	var n float64
	for _, m := range p.metrics {
		n += testutil.ToFloat64(m.SLIEvents.WithLabelValues(p.ps[i].Name, config.SegmentEndToEnd, "good"))
	}
	return n
}

func (p *process) states() []string {
	var out []string
	for _, tr := range p.trackers {
		out = append(out, stateOf(p.t, tr))
	}
	return out
}

// ready brings every pipeline past its first write (a snapshot) and gives
// its partition an offset on disk, so that what follows is written in
// batches.
func (p *process) ready() {
	for i, tr := range p.trackers {
		tr.Skipped(0, 1, 1)
		p.offset[i] = 1
		p.send(i, "first", 1)
	}
}

func TestASweepFsyncsTheBatchesOfEveryPipelineOnceAndAppliesTheirEffectsAfter(t *testing.T) {
	p := newProcess(t, 5)
	p.ready()
	var sent []Canary
	p.at(100 * time.Millisecond)
	for i := range p.trackers {
		sent = append(sent, p.send(i, "a", 2))
	}
	p.at(300 * time.Millisecond)
	for i := range p.trackers {
		p.arrive(i, sent[i])
	}
	p.sweep(900 * time.Millisecond) // no batch due yet
	syncs := p.journal.syncCount()
	var g SweepGroup
	p.at(1500 * time.Millisecond)
	for i, tr := range p.trackers {
		g.Sweep(tr)
		if got := p.good(i); got != 0 {
			t.Errorf("pipeline %d counted %v good before its batch was fsynced, want none", i, got)
		}
	}
	if got := p.journal.syncCount(); got != syncs {
		t.Errorf("%d fsyncs while the trackers were swept, want none before the group commits", got-syncs)
	}
	g.Commit()
	if got := p.journal.syncCount(); got != syncs+1 {
		t.Errorf("%d fsyncs for the batches of %d pipelines, want one", got-syncs, len(p.trackers))
	}
	for i := range p.trackers {
		if got := p.good(i); got != 1 {
			t.Errorf("pipeline %d counted %v good once its batch was fsynced, want 1", i, got)
		}
	}
	want := p.states()
	p.restart() // kill -9
	if got := p.states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states after the restart:\n got %.300s\nwant %.300s", got, want)
	}
	for i := range p.trackers {
		p.offset[i] = 1 // a's message, read again
		if out := p.arrive(i, sent[i]); out.Kind != KindReplay {
			t.Errorf("pipeline %d: a's arrival read again after the restart is %v, want a replay", i, out.Kind)
		}
	}
}

func TestSentCanariesOfEveryPipelineSurviveAKillBeforeTheirBatch(t *testing.T) {
	p := newProcess(t, 3)
	p.ready()
	p.at(100 * time.Millisecond)
	for i := range p.trackers {
		p.send(i, "a", 2) // written, not yet fsynced nor judged
	}
	p.restart() // kill -9
	for i, tr := range p.trackers {
		if n := tr.InFlight(); n != 2 {
			t.Errorf("pipeline %d: %d canaries in flight after the restart, want first and a", i, n)
		}
	}
	p.sweep(2 * time.Second)
	for i := range p.trackers {
		var sentTotal float64
		for _, m := range p.metrics {
			sentTotal += testutil.ToFloat64(m.CanariesSent.WithLabelValues(p.ps[i].Name))
		}
		if sentTotal != 2 {
			t.Errorf("pipeline %d: canaries sent over both processes %v, want 2 (a judged by the process that loaded it)", i, sentTotal)
		}
	}
}

func TestAFailedJournalWriteMakesEveryPipelineWriteASnapshotBeforeItsNextLine(t *testing.T) {
	p := newProcess(t, 3)
	p.ready()
	p.at(100 * time.Millisecond)
	p.send(0, "a", 2) // a line, so a segment is open
	p.journal.mu.Lock()
	_ = p.journal.jl.f.Close() // the next write fails
	p.journal.mu.Unlock()
	snapshots := make([]int64, len(p.trackers))
	for i, tr := range p.trackers {
		snapshots[i] = tr.store.stats.snapshots
	}
	if err := p.trackers[1].Sent(Canary{ID: "b", Seq: 2, Key: "k", RowID: "b", InsertStarted: p.clock(), CommitSent: p.clock(), Committed: p.clock()}); err == nil {
		t.Fatal("Sent succeeded on a closed journal")
	}
	if got := testutil.ToFloat64(p.metrics[0].StateWriteFailures.WithLabelValues("p1")); got != 1 {
		t.Errorf("state write failures of p1 = %v, want 1", got)
	}
	p.at(200 * time.Millisecond)
	p.send(2, "c", 2)
	p.sweep(3 * time.Second)
	for i, tr := range p.trackers {
		if tr.store.stats.snapshots <= snapshots[i] {
			t.Errorf("pipeline %d wrote no snapshot after the journal failed, want one before its next line", i)
		}
	}
	p.sweep(5 * time.Second) // the verdicts of the last sweep, in lines again
	want := p.states()
	p.restart()
	if got := p.states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states after the restart:\n got %.300s\nwant %.300s", got, want)
	}
}

func TestJournalSegmentsAreDeletedOnceNoPipelineNeedsThemEvenOneThatWritesRarely(t *testing.T) {
	p := newProcess(t, 2)
	p.minRotate = 16 << 10
	p.restart()
	p.ready()
	p.at(100 * time.Millisecond)
	rare := p.send(1, "rare", 2) // pipeline 1 writes this and then nothing
	p.at(300 * time.Millisecond)
	p.arrive(1, rare)
	p.sweep(1500 * time.Millisecond)
	maxSegments := 0
	for k := range 600 { // pipeline 0 sends one a second
		base := 2*time.Second + time.Duration(k)*time.Second
		p.at(base)
		c := p.send(0, fmt.Sprint("c", k), uint64(k+2))
		p.at(base + 300*time.Millisecond)
		p.arrive(0, c)
		p.sweep(base + 900*time.Millisecond)
		names, err := filepath.Glob(filepath.Join(p.dir, JournalName+".*"))
		if err != nil {
			t.Fatal(err)
		}
		maxSegments = max(maxSegments, len(names))
	}
	if p.journal.seq < 5 {
		t.Fatalf("%d segments written, the test needs several", p.journal.seq)
	}
	if maxSegments > 3 {
		t.Errorf("up to %d segments on disk, want at most three", maxSegments)
	}
	p.sweep(700 * time.Second) // the last batch
	if p.trackers[1].store.stats.snapshots < 2 {
		t.Errorf("the pipeline that wrote once wrote %d snapshots, want one more once its segment was old", p.trackers[1].store.stats.snapshots)
	}
	want := p.states()
	p.restart()
	if got := p.states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states after the restart:\n got %.300s\nwant %.300s", got, want)
	}
	if got := p.good(1); got != 1 {
		t.Errorf("the rare pipeline's canary counted %v good over both processes, want 1", got)
	}
	if _, err := os.Stat(filepath.Join(p.dir, "p1.json")); err != nil {
		t.Error(err)
	}
}

// Sends on every pipeline at once while the sweeps write and fsync their
// batches as a group: run with -race; after a restart every pipeline has
// the state it had.
func TestPipelinesWritingAtOnceWhileTheSweepsCommitKeepEveryLine(t *testing.T) {
	p := newProcess(t, 4)
	p.minRotate = 8 << 10 // rotations while they write
	p.restart()
	p.ready()
	var wg sync.WaitGroup
	for i := range p.trackers {
		wg.Go(func() {
			for k := range 100 {
				p.send(i, fmt.Sprintf("c%d", k), uint64(k+2))
			}
		})
	}
	for k := range 100 {
		p.sweep(time.Duration(k) * 100 * time.Millisecond)
	}
	wg.Wait()
	p.sweep(time.Minute) // the last batches
	want := p.states()
	p.restart()
	if got := p.states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states after the restart:\n got %.300s\nwant %.300s", got, want)
	}
	for i, tr := range p.trackers {
		if n := tr.InFlight(); n != 101 {
			t.Errorf("pipeline %d: %d canaries in flight, want every one sent", i, n)
		}
	}
}

// A pipeline left out of the configuration for a while keeps its lines:
// the journal's segments go on and are deleted around it, and when it
// returns it has the state it had, not its snapshot's.
func TestAPipelineLeftOutForAWhileComesBackWithItsState(t *testing.T) {
	p := newProcess(t, 2)
	p.minRotate = 8 << 10
	p.restart()
	p.ready()
	p.at(100 * time.Millisecond)
	c := p.send(1, "a", 2)
	p.at(300 * time.Millisecond)
	p.arrive(1, c)
	p.sweep(2 * time.Second) // pipeline 1's lines since its snapshot: a, sent and arrived
	want := stateOf(t, p.trackers[1])

	all := p.ps
	p.ps = all[:1] // pipeline 1 left out
	p.restart()
	p.ready()
	for k := range 300 {
		base := 3*time.Second + time.Duration(k)*time.Second
		p.at(base)
		c := p.send(0, fmt.Sprint("c", k), uint64(k+2))
		p.at(base + 300*time.Millisecond)
		p.arrive(0, c)
		p.sweep(base + 900*time.Millisecond)
	}
	if p.journal.seq < 4 {
		t.Fatalf("%d segments written while pipeline 1 was away, the test needs several", p.journal.seq)
	}
	if names, _ := filepath.Glob(filepath.Join(p.dir, JournalName+".*")); len(names) > 4 {
		t.Errorf("%d segments on disk, want the one kept for pipeline 1 and at most three more: %v", len(names), names)
	}
	p.ps = all
	p.restart()
	if got := stateOf(t, p.trackers[1]); got != want {
		t.Errorf("pipeline 1's state when it returns:\n got %.300s\nwant %.300s", got, want)
	}
}
