package prober

// BenchmarkTrackerPersist measures what persisting the judge's state costs
// per canary, in steady state (2 x lost_after of canaries remembered), for
// each way of writing it:
//
//   - memory:  no writes, the baseline of the judge's own work;
//   - rewrite: the whole state rewritten atomically on every change (the
//     layout before the journal, version 2);
//   - journal: a journal line per change, fsynced, compacted into a
//     snapshot now and then;
//   - journal+group: the same, with changes other than Sent written in
//     batches (group commit, DefaultCommitDelay) and Sent written and
//     fsynced at once, as the tracker did until Sent left its fsync to the
//     batch (BenchmarkTrackerCommit measures the tracker as it is).
//
// Each iteration is one canary: Sent, its arrival 50ms later, and the
// sweeps every 250ms, on a simulated clock. Besides ns, B and allocs per
// canary it reports cpu-ns/canary (user and system time of the process,
// without the wait for fsyncs), fsyncs/canary, write-B/canary (bytes handed to
// write(2)) and disk-B/canary (bytes the kernel accounts as written for
// this process, /proc/self/io write_bytes: whole pages, each fsync writing
// the pages it dirtied again).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// persister is one way of making the judge's changes durable.
type persister interface {
	save(j *judge.Judge, now time.Time) error
	syncs() int64
}

// syncedStore is a stateStore whose every line is fsynced as written.
type syncedStore struct{ *stateStore }

func (s syncedStore) save(j *judge.Judge, now time.Time) error {
	pos, err := s.stateStore.save(j, now)
	if err != nil || pos == (journalPos{}) {
		return err
	}
	return s.journal.syncTo(pos)
}

func (s syncedStore) syncs() int64 { return s.stats.syncs + s.journal.syncCount() }

// rewriteStore is the previous design: the whole state in one file,
// rewritten atomically (two fsyncs) on every change.
type rewriteStore struct {
	path string
	n    int64
}

func (r *rewriteStore) save(j *judge.Judge, now time.Time) error {
	st := *j.State()
	st.AliveAt = now
	data, err := json.Marshal(&stateFile{Version: stateVersionNoJrnl, Pipeline: "payments", Instance: "bench", Judge: &st})
	if err != nil {
		return err
	}
	if err := writeFileAtomic(r.path, data); err != nil {
		return err
	}
	r.n += 2
	j.MarkPersisted(now)
	return nil
}

func (r *rewriteStore) syncs() int64 { return r.n }

// memoryStore writes nothing.
type memoryStore struct{}

func (memoryStore) save(j *judge.Judge, now time.Time) error { j.MarkPersisted(now); return nil }
func (memoryStore) syncs() int64                             { return 0 }

// persistRun drives a judge like the tracker does, writing through p.
type persistRun struct {
	j        *judge.Judge
	p        persister
	delay    time.Duration // group commit; 0: every change at once
	interval time.Duration // between canaries
	now      time.Time
	seq      uint64
	arrivals []judge.Arrival // due in order
	offset   int64
	sweepAt  time.Time
	// effects waiting for a write, since waitingAt
	waiting   int
	waitingAt time.Time
}

const (
	benchSweep   = 250 * time.Millisecond
	benchLatency = 50 * time.Millisecond
)

// commit writes as the tracker does: at once when forced (Sent) or
// without group commit; else once the oldest effect waiting is r.delay
// old, a change no effect waits on riding with the next write.
func (r *persistRun) commit(force bool, fx []judge.Effect) {
	r.waiting += len(fx)
	if !r.j.Dirty() {
		r.waiting = 0
		return
	}
	if !force && r.delay > 0 {
		if r.waiting == 0 {
			return
		}
		if r.waitingAt.IsZero() {
			r.waitingAt = r.now
		}
		if r.now.Sub(r.waitingAt) < r.delay {
			return
		}
	}
	if err := r.p.save(r.j, r.now); err != nil {
		panic(err)
	}
	r.waiting, r.waitingAt = 0, time.Time{}
}

// until runs the arrivals and sweeps due up to t.
func (r *persistRun) until(t time.Time) {
	for {
		next := r.sweepAt
		arrival := len(r.arrivals) > 0 && !r.arrivals[0].Consumed.After(next)
		if arrival {
			next = r.arrivals[0].Consumed
		}
		if next.After(t) {
			r.now = t
			return
		}
		r.now = next
		var fx []judge.Effect
		if arrival {
			a := r.arrivals[0]
			r.arrivals = r.arrivals[1:]
			_, fx = r.j.Arrived(a)
		} else {
			fx = r.j.Tick(r.now)
			r.sweepAt = r.sweepAt.Add(benchSweep)
		}
		r.commit(false, fx)
	}
}

// canary sends the next canary and runs everything due before the one
// after it.
func (r *persistRun) canary() {
	r.seq++
	id := "c" + strconv.FormatUint(r.seq, 10)
	fx := r.j.Sent(judge.Sent{ID: id, Key: "k", RowID: id, Seq: r.seq,
		InsertStarted: r.now.Add(-2 * time.Millisecond), CommitSent: r.now.Add(-time.Millisecond), Committed: r.now})
	r.commit(true, fx)
	r.arrivals = append(r.arrivals, judge.Arrival{CanaryID: id, Key: "k", Seq: r.seq, Offset: r.offset,
		Consumed: r.now.Add(benchLatency), Stamps: map[string]time.Time{config.StampPublish: r.now.Add(benchLatency / 2)}})
	r.offset++
	r.until(r.now.Add(r.interval))
}

// procIO reads this process's write counters: bytes handed to write(2)
// and bytes accounted as written to storage.
func procIO(b *testing.B) (wchar, writeBytes int64) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io to count the bytes written: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, _ := bytes.Cut(sc.Bytes(), []byte(": "))
		n, _ := strconv.ParseInt(string(v), 10, 64)
		switch string(k) {
		case "wchar":
			wchar = n
		case "write_bytes":
			writeBytes = n
		}
	}
	return wchar, writeBytes
}

// cpuTime is the CPU time this process used so far (user and system): a
// write waiting for its fsync is not CPU.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkTrackerPersist(b *testing.B) {
	workloads := []struct {
		name                string
		lostAfter, interval time.Duration
	}{
		{"lost_after=1m/rate=1", time.Minute, time.Second},
		{"lost_after=10m/rate=1", 10 * time.Minute, time.Second},
		{"lost_after=1m/rate=100", time.Minute, 10 * time.Millisecond},
		{"lost_after=5m/every=10s", 5 * time.Minute, 10 * time.Second}, // the defaults
	}
	policies := []struct {
		name  string
		store func(dir string) persister
		delay time.Duration
	}{
		{"memory", func(string) persister { return memoryStore{} }, 0},
		{"rewrite", func(dir string) persister { return &rewriteStore{path: filepath.Join(dir, "payments.json")} }, 0},
		{"journal", func(dir string) persister { return syncedStore{newBenchStore(dir)} }, 0},
		{"journal+group", func(dir string) persister { return syncedStore{newBenchStore(dir)} }, time.Second},
		{"journal+group250ms", func(dir string) persister { return syncedStore{newBenchStore(dir)} }, 250 * time.Millisecond},
	}
	for _, w := range workloads {
		for _, pol := range policies {
			b.Run(w.name+"/"+pol.name, func(b *testing.B) {
				benchPersist(b, w.lostAfter, w.interval, pol.store(b.TempDir()), pol.delay)
			})
		}
	}
}

func newBenchStore(dir string) *stateStore {
	m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{plainPipeline()})
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "payments.json")
	sj, err := openStateJournal(path+journalSuffix, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	sj.loaded()
	return &stateStore{path: path, pipeline: "payments", instance: "bench", log: slog.New(slog.DiscardHandler), m: m, journal: sj}
}

func benchPersist(b *testing.B, lostAfter, interval time.Duration, p persister, delay time.Duration) {
	pl := plainPipeline()
	pl.Canary.LostAfter = config.Duration(lostAfter)
	plan := planOf(&pl)
	j := judge.New(judgeConfig(&pl, plan, 2*lostAfter), nil, t0)
	// Steady state first, without writing: 2 x lost_after of canaries.
	r := &persistRun{j: j, p: memoryStore{}, interval: interval, now: t0, sweepAt: t0.Add(benchSweep)}
	for range int(2*lostAfter/interval) + 10 {
		r.canary()
	}
	r.p, r.delay = p, delay
	if err := p.save(j, r.now); err != nil { // the first write: a snapshot for the journal
		b.Fatal(err)
	}
	syncs := p.syncs()
	wchar, disk := procIO(b)
	cpu := cpuTime(b)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		r.canary()
		n++
	}
	b.StopTimer()
	wchar2, disk2 := procIO(b)
	b.ReportMetric(float64(cpuTime(b)-cpu)/float64(n), "cpu-ns/canary")
	b.ReportMetric(float64(p.syncs()-syncs)/float64(n), "fsyncs/canary")
	b.ReportMetric(float64(wchar2-wchar)/float64(n), "write-B/canary")
	b.ReportMetric(float64(disk2-disk)/float64(n), "disk-B/canary")
	b.ReportMetric(float64(len(j.State().Canaries)), "canaries-kept")
}

// BenchmarkTrackerCommit measures what the tracker itself writes per
// canary, commit policy and all: a real Tracker on a simulated clock, fed
// as the service feeds it (Sent at each commit, the arrival 50ms later,
// a sweep every 250ms, the published_at lookups of a polling relay read
// in rounds as Lookups reads them, each answered 5ms after it starts and
// at most one a DefaultLookupInterval), in steady state (2 x lost_after
// of canaries remembered before the measure starts). Per canary it reports
// cpu-ns (user and system time of the process: the wait for an fsync is
// not CPU), fsyncs, write-B (bytes handed to write(2)), pages (4 KiB pages
// an fsync had to write: the pages written since the previous one), disk-B
// (what the kernel accounts as written, /proc/self/io write_bytes),
// snapshots and their bytes.
//
// The workloads "steady" and "scale" are the canary scenarios of
// make bench-service, per pipeline (10 pipelines @every 1s, 300 @every
// 10s, lost_after 5m); the others vary lost_after and the rate, over which
// the bytes per canary should not move. Ids, row ids and times look like
// the service's (a UUIDv7, a bigserial, times to the nanosecond), so that
// records are as long as it writes them.
func BenchmarkTrackerCommit(b *testing.B) {
	workloads := []struct {
		name                string
		lostAfter, interval time.Duration
	}{
		{"steady/lost_after=5m/every=1s", 5 * time.Minute, time.Second},
		{"scale/lost_after=5m/every=10s", 5 * time.Minute, 10 * time.Second},
		{"lost_after=1m/every=1s", time.Minute, time.Second},
		{"lost_after=20m/every=1s", 20 * time.Minute, time.Second},
		{"lost_after=1m/rate=100", time.Minute, 10 * time.Millisecond},
	}
	policies := []struct {
		name   string
		memory bool
		delay  time.Duration
	}{
		{"memory", true, 0},
		{"delay=1s", false, time.Second},
		{"delay=2s", false, 2 * time.Second},
	}
	for _, w := range workloads {
		for _, pol := range policies {
			b.Run(w.name+"/"+pol.name, func(b *testing.B) {
				benchCommit(b, w.lostAfter, w.interval, pol.memory, pol.delay)
			})
		}
	}
}

// commitRun drives a Tracker as the service does, on a simulated clock.
type commitRun struct {
	tr       *Tracker
	now      time.Time
	interval time.Duration
	seq      uint64
	offset   int64
	sweepAt  time.Time
	arrivals []Arrival // due in order
	lookups  *Lookups
	// The next lookup round starts at roundStart and answers at roundAt
	// (zero: nothing asked); lastRound is when the last one started.
	roundStart, roundAt, lastRound time.Time
	sent                           map[string]Canary
}

func (r *commitRun) clock() time.Time { return r.now }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// canary sends the next canary and runs everything due before the one
// after it.
func (r *commitRun) canary(b testing.TB) {
	r.seq++
	id := fmt.Sprintf("019ad2c4-%04x-7%03x-8%03x-%012x", r.seq>>24&0xffff, r.seq>>12&0xfff, r.seq&0xfff, r.seq*2654435761&0xffffffffffff)
	c := Canary{ID: id, Seq: r.seq, Pipeline: "orders", Key: "canary-key", RowID: strconv.FormatUint(1_000_000+r.seq, 10),
		InsertStarted: r.now.Add(-2_345_678 * time.Nanosecond), CommitSent: r.now.Add(-1_234_567 * time.Nanosecond), Committed: r.now}
	r.sent[id] = c
	if err := r.tr.Sent(c); err != nil {
		b.Fatal(err)
	}
	r.arrivals = append(r.arrivals, Arrival{CanaryID: id, Key: c.Key, Seq: r.seq, Offset: r.offset,
		Consumed: r.now.Add(benchLatency + 271_828*time.Nanosecond),
		Stamps:   map[string]time.Time{"read": r.now.Add(benchLatency / 4).Truncate(time.Millisecond)}})
	r.offset++
	r.until(r.now.Add(r.interval))
}

// until runs the arrivals, lookup answers and sweeps due up to t.
func (r *commitRun) until(t time.Time) {
	for {
		next, what := r.sweepAt, 0
		if len(r.arrivals) > 0 && !r.arrivals[0].Consumed.After(next) {
			next, what = r.arrivals[0].Consumed, 1
		}
		if !r.roundAt.IsZero() && r.roundAt.Before(next) {
			next, what = r.roundAt, 2
		}
		if next.After(t) {
			r.now = t
			return
		}
		r.now = next
		switch what {
		case 0:
			r.tr.Sweep()
			r.sweepAt = r.sweepAt.Add(benchSweep)
		case 1:
			a := r.arrivals[0]
			r.arrivals = r.arrivals[1:]
			token, _ := r.tr.BeginArrival(time.Time{})
			r.tr.Arrived(token, a)
		case 2:
			r.roundAt, r.lastRound = time.Time{}, r.roundStart
			r.lookups.round(context.Background(), r.lookups.take())
		}
		// A round starts once something is asked, at most one a
		// DefaultLookupInterval (from start to start, as Lookups.Run
		// spaces them), and answers 5ms later.
		if r.roundAt.IsZero() && r.lookups.anyAsked() {
			r.roundStart = r.now
			if !r.lastRound.IsZero() {
				r.roundStart = maxTime(r.roundStart, r.lastRound.Add(DefaultLookupInterval))
			}
			r.roundAt = r.roundStart.Add(5*time.Millisecond + 314_159*time.Nanosecond)
		}
	}
}

func benchCommit(b *testing.B, lostAfter, interval time.Duration, memory bool, delay time.Duration) {
	p := testPipeline() // a polling relay: published_at is looked up
	p.Relay.PublishedStamp, p.Relay.MaxClockSkew = config.PublishedFromColumn, config.Duration(time.Minute)
	p.Canary.LostAfter = config.Duration(lostAfter)
	m, err := NewMetrics(prometheus.NewRegistry(), []config.Pipeline{p})
	if err != nil {
		b.Fatal(err)
	}
	start := t0.Add(123_456_789 * time.Nanosecond)
	r := &commitRun{now: start, interval: interval, sweepAt: start.Add(benchSweep + 3_141_592*time.Nanosecond), sent: map[string]Canary{}}
	r.lookups = NewLookups(LookupsOptions{Read: func(_ context.Context, cs []Canary) (map[string]LookupResult, error) {
		found := map[string]LookupResult{}
		for _, c := range cs {
			// published_at to the microsecond, on the prober clock
			// through the database's measured offset.
			found[c.ID] = LookupResult{Stamps: map[string]time.Time{config.StampPublish: c.Committed.Add(benchLatency / 2).Truncate(time.Microsecond).Add(-170_333 * time.Nanosecond)},
				ErrorBound: 1_234_567 * time.Nanosecond}
		}
		return found, nil
	}})
	tr, err := NewTracker(TrackerOptions{Pipeline: &p, Instance: "bench", Metrics: m, Now: r.clock, CommitDelay: delay, Lookups: r.lookups})
	if err != nil {
		b.Fatal(err)
	}
	r.tr = tr
	// Steady state first, in memory: 2 x lost_after of canaries.
	for range int(2*lostAfter/interval) + 10 {
		r.canary(b)
	}
	clear(r.sent)
	if !memory {
		tr.path = filepath.Join(b.TempDir(), p.Name+".json")
		tr.store.path = tr.path
		if tr.store.journal, err = openStateJournal(tr.path+journalSuffix, slog.New(slog.DiscardHandler)); err != nil {
			b.Fatal(err)
		}
		tr.store.journal.loaded()
		tr.mu.Lock()
		if err := tr.commitModeAndUnlock(nil, commitSnapshot); err != nil { // the first write: a snapshot for the journal
			b.Fatal(err)
		}
	}
	st := tr.store.stats
	if sj := tr.store.journal; sj != nil {
		st.syncs += sj.syncCount()
		st.pages += sj.stats.pages
	}
	_, disk := procIO(b)
	cpu := cpuTime(b)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		r.canary(b)
		n++
	}
	_, disk2 := procIO(b)
	st2 := tr.store.stats
	if sj := tr.store.journal; sj != nil {
		st2.syncs += sj.syncCount()
		st2.pages += sj.stats.pages
	}
	per := func(v int64) float64 { return float64(v) / float64(n) }
	b.ReportMetric(per(int64(cpuTime(b)-cpu)), "cpu-ns/canary")
	b.ReportMetric(per(st2.syncs-st.syncs), "fsyncs/canary")
	b.ReportMetric(per(st2.bytes-st.bytes), "write-B/canary")
	b.ReportMetric(per(st2.pages-st.pages), "pages/canary")
	b.ReportMetric(per(disk2-disk), "disk-B/canary")
	b.ReportMetric(per(st2.snapshots-st.snapshots), "snapshots/canary")
	b.ReportMetric(per(st2.snapshotBytes-st.snapshotBytes), "snapshot-B/canary")
	b.ReportMetric(float64(len(tr.j.State().Canaries)), "canaries-kept")
}

// BenchmarkJournalRecordEncoding compares the encoding of the two kinds of
// journal line, a committed canary (one per Sent) and a batch of two
// final canaries, through json.Marshal of the whole record and through
// appendRecord (the meta encoded once, the committed canary without
// reflection).
func BenchmarkJournalRecordEncoding(b *testing.B) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	meta := judge.State{Next: map[int]int64{0: 7, 1: 8, 2: 9}, LastSeq: map[string]uint64{"canary-key": 3}, AliveAt: at,
		LastSent: at, LastReceived: at, LastSuccess: at}
	metaJSON, err := json.Marshal(&meta)
	if err != nil {
		b.Fatal(err)
	}
	final := func(id string) *judge.Canary {
		v := func() judge.Verdict { return judge.Verdict{Outcome: judge.Good, At: at, Observed: true} }
		return &judge.Canary{ID: id, Seq: 1, Key: "canary-key", RowID: "1000001", InsertStarted: at, CommitSent: at, Committed: at,
			Stamps: judge.ByName[time.Time]{{Name: "publish", Value: at}, {Name: "read", Value: at}}, StampError: judge.ByName[time.Duration]{{Name: "publish", Value: time.Millisecond}},
			Arrived: true, Consumed: at, Offset: 1, Final: true, FinalAt: at,
			Verdicts: judge.ByName[judge.Verdict]{{Name: "commit_to_read", Value: v()}, {Name: "end_to_end", Value: v()}, {Name: "insert_to_commit", Value: v()},
				{Name: "publish_to_consume", Value: v()}, {Name: "read_to_publish", Value: v()}},
			Lookup: judge.Lookup{Due: at, Attempts: 1}}
	}
	committed := []judge.Sent{{ID: "019ad2c4-0000-7000-8001-000000000001", Seq: 1, Key: "canary-key", RowID: "1000001",
		InsertStarted: at, CommitSent: at, Committed: at}}
	batch := []*judge.Canary{final("019ad2c4-0000-7000-8001-000000000001"), final("019ad2c4-0000-7000-8001-000000000002")}
	var buf []byte
	for _, tc := range []struct {
		name string
		rec  journalRecord
	}{
		{"committed", journalRecord{Committed: committed, Meta: meta}},
		{"batch", journalRecord{Canaries: batch, Meta: meta}},
	} {
		b.Run(tc.name+"/json.Marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(&tc.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/appendRecord", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = appendRecord(buf[:0], tc.rec.Canaries, tc.rec.Forgotten, tc.rec.Committed, metaJSON); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSnapshotEncoding encodes the snapshot of a pipeline at one
// canary a second with lost_after 5m (600 final canaries) through
// json.Marshal and through appendStateFile.
func BenchmarkSnapshotEncoding(b *testing.B) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	st := judge.State{Canaries: map[string]*judge.Canary{}, Next: map[int]int64{0: 7, 1: 8, 2: 9}, LastSeq: map[string]uint64{"canary-key": 600},
		AliveAt: at, LastSent: at, LastReceived: at, LastSuccess: at}
	for i := range 600 {
		v := func() judge.Verdict { return judge.Verdict{Outcome: judge.Good, At: at, Observed: true} }
		id := fmt.Sprintf("019ad2c4-0000-7000-8001-%012d", i)
		st.Canaries[id] = &judge.Canary{ID: id, Seq: uint64(i), Key: "canary-key", RowID: strconv.Itoa(1_000_000 + i), InsertStarted: at, CommitSent: at, Committed: at,
			Stamps: judge.ByName[time.Time]{{Name: "publish", Value: at}, {Name: "read", Value: at}}, StampError: judge.ByName[time.Duration]{{Name: "publish", Value: time.Millisecond}},
			Arrived: true, Consumed: at, Offset: int64(i), Final: true, FinalAt: at,
			Verdicts: judge.ByName[judge.Verdict]{{Name: "commit_to_read", Value: v()}, {Name: "end_to_end", Value: v()}, {Name: "insert_to_commit", Value: v()},
				{Name: "publish_to_consume", Value: v()}, {Name: "read_to_publish", Value: v()}},
			Lookup: judge.Lookup{Due: at, Attempts: 1}}
	}
	f := &stateFile{Version: stateVersion, Pipeline: "orders", Instance: "bench", Generation: "00000000000000aa", Judge: &st}
	meta := st.Meta()
	metaJSON, err := json.Marshal(&meta)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendStateFile", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			if buf, err = appendStateFile(buf[:0], f, metaJSON); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkProcessCommit measures what the trackers of a whole process
// write per canary at make bench-service's scale scenario (300 pipelines
// @every 10s, phases spread over the interval, lost_after 5m, the arrival
// 50ms after the commit, a sweep of every pipeline every 250ms), with
// their lines
//
//   - per-pipeline: in a journal of each pipeline's own, each batch
//     fsynced as its tracker is swept (the layout of version 3);
//   - process: in the process's journal, the batches of a sweep fsynced
//     once (SweepGroup), as the service writes them.
//
// Per canary: cpu-ns (user and system time), fsyncs, disk-B (/proc/self/io
// write_bytes), in steady state (2 x lost_after of canaries remembered).
//
//	go test ./prober/ -run '^$' -bench ProcessCommit -benchtime 3000x
func BenchmarkProcessCommit(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "scale/pipelines=300/per-pipeline"
		if shared {
			name = "scale/pipelines=300/process"
		}
		b.Run(name, func(b *testing.B) { benchProcessCommit(b, 300, 10*time.Second, 5*time.Minute, shared) })
	}
}

func benchProcessCommit(b *testing.B, pipelines int, interval, lostAfter time.Duration, shared bool) {
	ps := make([]config.Pipeline, pipelines)
	for i := range ps {
		ps[i] = plainPipeline()
		ps[i].Name = fmt.Sprintf("p%03d", i)
		ps[i].Canary.LostAfter = config.Duration(lostAfter)
	}
	m, err := NewMetrics(prometheus.NewRegistry(), ps)
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	clock := func() time.Time { return now }
	trackers := make([]*Tracker, pipelines)
	for i := range ps {
		if trackers[i], err = NewTracker(TrackerOptions{Pipeline: &ps[i], Instance: "bench", Metrics: m, Now: clock}); err != nil {
			b.Fatal(err)
		}
	}
	type arrival struct {
		i int
		a Arrival
	}
	var (
		arrivals []arrival
		offsets  = make([]int64, pipelines)
		k        uint64
		sweepAt  = t0.Add(benchSweep)
		grouped  bool
	)
	sweep := func() {
		var g SweepGroup
		for _, tr := range trackers {
			if grouped {
				g.Sweep(tr)
			} else {
				tr.Sweep()
			}
		}
		g.Commit()
	}
	// canary k is pipeline k%pipelines's, committed at k x its share of
	// the interval; everything due before it runs first.
	canary := func() {
		at := t0.Add(time.Duration(k) * interval / time.Duration(pipelines))
		for {
			next, isArrival := sweepAt, false
			if len(arrivals) > 0 && !arrivals[0].a.Consumed.After(next) {
				next, isArrival = arrivals[0].a.Consumed, true
			}
			if next.After(at) {
				break
			}
			now = next
			if isArrival {
				a := arrivals[0]
				arrivals = arrivals[1:]
				token, _ := trackers[a.i].BeginArrival(time.Time{})
				trackers[a.i].Arrived(token, a.a)
			} else {
				sweep()
				sweepAt = sweepAt.Add(benchSweep)
			}
		}
		now = at
		i := int(k % uint64(pipelines))
		seq := k/uint64(pipelines) + 1
		id := fmt.Sprintf("019ad2c4-%04x-7%03x-8%03x-%012x", k>>24&0xffff, k>>12&0xfff, k&0xfff, k*2654435761&0xffffffffffff)
		c := Canary{ID: id, Seq: seq, Pipeline: ps[i].Name, Key: "canary-key", RowID: strconv.FormatUint(1_000_000+k, 10),
			InsertStarted: at.Add(-2_345_678 * time.Nanosecond), CommitSent: at.Add(-1_234_567 * time.Nanosecond), Committed: at}
		if err := trackers[i].Sent(c); err != nil {
			b.Fatal(err)
		}
		arrivals = append(arrivals, arrival{i, Arrival{CanaryID: id, Key: c.Key, Seq: seq, Offset: offsets[i],
			Consumed: at.Add(benchLatency + 271_828*time.Nanosecond), Stamps: map[string]time.Time{config.StampPublish: at.Add(benchLatency / 2)}}})
		offsets[i]++
		k++
	}
	// Steady state first, in memory: 2 x lost_after of canaries.
	for range int(2*lostAfter/interval)*pipelines + pipelines {
		canary()
	}
	dir := b.TempDir()
	journals := map[*stateJournal]bool{}
	var sj *stateJournal
	if shared {
		if sj, err = openStateJournal(filepath.Join(dir, JournalName), slog.New(slog.DiscardHandler)); err != nil {
			b.Fatal(err)
		}
	}
	for _, tr := range trackers {
		tr.path = filepath.Join(dir, tr.p.Name+".json")
		tr.store.path = tr.path
		tr.store.journal = sj
		if !shared {
			if tr.store.journal, err = openStateJournal(tr.path+journalSuffix, slog.New(slog.DiscardHandler)); err != nil {
				b.Fatal(err)
			}
		}
		journals[tr.store.journal] = true
	}
	for j := range journals {
		j.loaded()
	}
	for _, tr := range trackers {
		tr.mu.Lock()
		if err := tr.commitModeAndUnlock(nil, commitSnapshot); err != nil { // the first write: a snapshot
			b.Fatal(err)
		}
	}
	grouped = shared
	syncs := func() (n int64) {
		for j := range journals {
			n += j.syncCount()
		}
		for _, tr := range trackers {
			n += tr.store.stats.syncs
		}
		return n
	}
	syncs0 := syncs()
	_, disk := procIO(b)
	cpu := cpuTime(b)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		canary()
		n++
	}
	_, disk2 := procIO(b)
	per := func(v int64) float64 { return float64(v) / float64(n) }
	b.ReportMetric(per(int64(cpuTime(b)-cpu)), "cpu-ns/canary")
	b.ReportMetric(per(syncs()-syncs0), "fsyncs/canary")
	b.ReportMetric(per(disk2-disk), "disk-B/canary")
}
