package prober

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/outbox-canary/outbox-canary/prober/judge"
	"github.com/outbox-canary/outbox-canary/slo"
)

// The state of a pipeline is kept in a snapshot of its own and lines in
// the journal of the process, so that a write costs what changed, not
// what is remembered, and the lines of every pipeline are fsynced
// together:
//
//   - the snapshot, <pipeline>.json: the judge's whole state (every canary
//     remembered for 2 x lost_after, the last sequence per key, the next
//     offset per partition, the prober's downtimes), written atomically
//     (temporary file, fsync, rename, directory fsync) with a random
//     generation;
//   - the journal, prober.journal.<segment> (statejournal.go), shared by
//     the pipelines: one line per write since that snapshot, each naming
//     its generation and holding the canaries changed or forgotten and the
//     rest of the state (a few hundred bytes), appended and fsynced in
//     batches (journal.go); or a canary whose insert committed, appended
//     by Sent at once and fsynced with the next batch.
//
// Loading reads the snapshot and replays the journal lines of its
// generation. When the pipeline's lines outgrow compactRatio times its
// snapshot they are compacted: a new snapshot under a new generation,
// which makes them stale (skipped by the next load; their segment is
// deleted once no pipeline needs it). A crash while a line is appended
// leaves an incomplete last line (a torn tail), which is ignored and
// counted: what it held was not yet durable, so none of its effects had
// been applied.
//
// A release before this one kept a journal per pipeline,
// <pipeline>.json.journal, beside a version 3 snapshot: it is replayed
// when that snapshot is loaded, and deleted once the pipeline wrote its
// first snapshot of version 4.

// stateVersion is bumped when the layout changes incompatibly. A file of
// another version is moved aside, never misread and never fatal, except
// version 2 (the whole state in one file, rewritten on every change),
// read once and carried over as a snapshot without journal, and version 3
// (a journal per pipeline), read with its journal and carried over.
// Version 4 is the same snapshot, whose lines are in the process's
// journal: a release that would look for them beside it moves it aside
// rather than resume from the snapshot alone and count again what the
// lines recorded.
const (
	stateVersion           = 4
	stateVersionOwnJournal = 3
	stateVersionNoJrnl     = 2
)

// stateFile is the snapshot of one pipeline.
type stateFile struct {
	Version  int    `json:"version"`
	Pipeline string `json:"pipeline"`
	Instance string `json:"instance"`
	// Generation names this snapshot; journal lines of another generation
	// belong to an older snapshot and are skipped.
	Generation string       `json:"generation,omitempty"`
	Judge      *judge.State `json:"judge"`
}

// Reasons a state file is moved aside, the values of the reason label of
// outbox_canary_state_resets_total.
const (
	StateResetCorrupt  = "corrupt"  // not JSON, or truncated
	StateResetVersion  = "version"  // written by an older or newer release
	StateResetPipeline = "pipeline" // another pipeline's file
)

// StateResetReasons lists every reason, for the metrics created at zero.
func StateResetReasons() []string {
	return []string{StateResetCorrupt, StateResetVersion, StateResetPipeline}
}

// Compaction: the journal is folded into a new snapshot once it is larger
// than compactRatio times the last snapshot (and than compactMin, so that
// a tiny state is not snapshotted every few writes). Bytes written per
// canary are then at most (1 + 1/compactRatio) times its journal lines,
// whatever lost_after and the canary rate. Each compaction adds a random
// part of up to compactSpread of that threshold to it: pipelines started
// together grow their journals alike, and at 300 pipelines their
// compactions all fell in the same 15 s (9 % of a core, 1.1 MB/s written,
// where the prober runs at 4 % and 200 KB/s). The two files together
// stay below (1 + compactRatio*(1+compactSpread)) times the state.
const (
	compactRatio  = 4
	compactMin    = 64 << 10
	compactSpread = 0.25
)

// journalSuffix names a pipeline's journal beside its snapshot, as the
// releases of version 3 kept it.
const journalSuffix = ".journal"

// JournalName is the prefix of the process's journal segments in the
// state directory.
const JournalName = "prober.journal"

// persistStats counts what the store wrote, for benchmarks and tests.
type persistStats struct {
	bytes         int64 // handed to write(2), the journal's padding aside
	pages         int64 // 4 KiB pages of snapshots; the journal counts its own (journalStats)
	syncs         int64 // fsyncs of snapshots and their directory; the journal counts its own
	snapshots     int64
	snapshotBytes int64
	records       int64 // journal lines, committed canaries' included
}

// stateStore reads and writes one pipeline's snapshot and journal. A file
// it cannot use is moved aside with a timestamp, counted and logged, and
// the pipeline starts afresh: a damaged file or a release that changes the
// layout never stops the service.
type stateStore struct {
	path     string // the snapshot; "": in memory only
	pipeline string
	instance string
	log      *slog.Logger
	m        *Metrics

	// journal is the process's, which the pipeline's lines go to.
	journal *stateJournal
	// gen is the generation of the snapshot on disk that the pipeline's
	// lines continue; appending is false until this process wrote its
	// first snapshot, and after a failed write, so that the next write is
	// a snapshot. epoch is the journal's when that snapshot was written: a
	// failure of the journal since makes the next write a snapshot too.
	gen       string
	appending bool
	epoch     uint64
	// pin is the journal segment of the first line since the snapshot
	// (0: none); lineBytes, the bytes of the lines since.
	pin       uint64
	lineBytes int64
	// snapshotBytes is the size of the last snapshot written.
	snapshotBytes int64
	// ownJournal: the snapshot loaded is of version 3, whose journal,
	// beside it, is deleted once a snapshot of this version replaces it.
	ownJournal bool
	stats      persistStats
	// minCompact overrides compactMin (tests); it takes effect at the next
	// snapshot, so set it before the first write.
	minCompact int64
	// compactAt is the size of the lines since the snapshot past which
	// the next write is a snapshot, drawn at each snapshot.
	compactAt int64
	// offsetsWritten is how many partitions have their next offset on
	// disk. A reader of a partition without one starts near the service's
	// start, so the first offset of a partition is written at once (see
	// Tracker.commitAndUnlock). A count is enough: the judge only ever
	// adds partitions to its next offsets (judge.State.Next).
	offsetsWritten int
	// writtenMeta is the state but its canaries as the last line or
	// snapshot wrote it (JSON): a line that records a committed canary
	// alone repeats it, so that it changes nothing else on replay.
	writtenMeta []byte
	// failing is whether the last write failed: the log says when writes
	// start failing and when they work again, not every failure.
	failing bool
}

// unwrittenPartition reports whether a partition in next, the judge's
// next offsets, has no offset on disk yet. Every commit asks; at 300
// pipelines walking a map of the partitions written for the answer was
// 2.6 % of the prober's CPU.
func (s *stateStore) unwrittenPartition(next map[int]int64) bool {
	return len(next) > s.offsetsWritten
}

// wrote records that a successful write holds the offsets of every
// partition in next.
func (s *stateStore) wrote(next map[int]int64) {
	s.offsetsWritten = len(next)
	if s.failing {
		s.failing = false
		s.log.Info("state writes work again", "path", s.path)
	}
}

func (s *stateStore) journalPath() string { return s.path + journalSuffix }

// load returns the judge's state from the files, or nil to start afresh,
// and the canaries whose commit the journal records but whose Sent was
// never judged with it (see journalRecord.Committed), by sequence.
func (s *stateStore) load(now time.Time) (*judge.State, []judge.Sent) {
	if s.path == "" {
		return nil, nil
	}
	s.journal.claim(s.path)
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(s.journalPath()); err == nil {
			s.log.Warn("a state journal without its snapshot is ignored; the pipeline starts afresh", "file", s.journalPath())
		}
		return nil, nil
	}
	if err != nil {
		s.log.Error("reading the state file failed; starting without it", "file", s.path, "err", err)
		return nil, nil
	}
	var f stateFile
	reason, detail := "", ""
	switch err := json.Unmarshal(data, &f); {
	case err != nil:
		reason, detail = StateResetCorrupt, err.Error()
	case f.Version != stateVersion && f.Version != stateVersionOwnJournal && f.Version != stateVersionNoJrnl:
		reason, detail = StateResetVersion, fmt.Sprintf("version %d, this release reads %d (and %d, %d)", f.Version, stateVersion, stateVersionOwnJournal, stateVersionNoJrnl)
	case f.Pipeline != s.pipeline:
		reason, detail = StateResetPipeline, fmt.Sprintf("it belongs to pipeline %q", f.Pipeline)
	case f.Judge == nil:
		reason, detail = StateResetCorrupt, "no state in it"
	case f.Version != stateVersionNoJrnl && f.Generation == "":
		reason, detail = StateResetCorrupt, "no generation in it"
	}
	if reason != "" {
		s.moveAside(reason, detail, now)
		return nil, nil
	}
	st := f.Judge
	var committed []judge.Sent
	switch f.Version {
	case stateVersion:
		committed = s.replayShared(st, f.Generation)
	case stateVersionOwnJournal:
		s.ownJournal = true
		committed = s.replay(st, f.Generation)
		s.log.Info("state of the previous layout (a journal per pipeline) carried over; the next write replaces it with a snapshot whose lines go to the process's journal",
			"file", s.path, "version", f.Version)
	default:
		s.log.Info("state file of the previous layout (one file rewritten on every change) carried over; the next write replaces it with a snapshot and a journal",
			"file", s.path, "version", f.Version)
	}
	if f.Instance != s.instance {
		// A renamed instance: its canaries now look foreign on the topic,
		// so tracking them would only produce false losses. Offsets and
		// the last times are the pipeline's, whoever wrote them.
		s.log.Warn("state file written by another instance id; forgetting its canaries",
			"file", s.path, "state_instance", f.Instance, "instance", s.instance)
		st.Canaries, committed = nil, nil
	}
	s.wrote(st.Next)
	s.log.Info("tracker state loaded", "file", s.path, "canaries", len(st.Canaries), "committed_not_judged", len(committed))
	return st, committed
}

// moveAside renames the snapshot (and its journal, if any) out of the way,
// counts and logs it.
func (s *stateStore) moveAside(reason, detail string, now time.Time) {
	suffix := fmt.Sprintf(".%s-%s", reason, now.UTC().Format("20060102T150405Z"))
	aside := s.path + suffix
	if err := os.Rename(s.path, aside); err != nil {
		s.log.Error("a state file this release cannot use could not be moved aside; starting afresh anyway", "file", s.path, "problem", detail, "err", err)
	} else {
		s.log.Warn("state file moved aside; the pipeline starts afresh (in-flight canaries of the previous run are forgotten)",
			"file", s.path, "moved_to", aside, "problem", detail)
	}
	// The journal continues that snapshot and nothing else: keep it with it.
	if err := os.Rename(s.journalPath(), s.journalPath()+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Error("the state journal could not be moved aside with its snapshot", "file", s.journalPath(), "err", err)
	}
	s.m.StateResets.WithLabelValues(s.pipeline, reason).Inc()
}

// replay applies the lines of generation gen in the pipeline's own
// journal (version 3) to st, in order. It stops at the first line that is
// incomplete or damaged (a crash while it was appended), which is counted
// and logged: nothing it held had been applied to the metrics, and the
// messages it recorded are read again. It returns the committed canaries
// no later line holds, by sequence: their Sent was written, its batch
// never was, so its effects were never applied.
func (s *stateStore) replay(st *judge.State, gen string) []judge.Sent {
	data, err := os.ReadFile(s.journalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		s.log.Error("reading the state journal failed; resuming from the snapshot alone (what the journal held since may be counted again)",
			"file", s.journalPath(), "err", err)
		return nil
	}
	var r replayed
	stale, total := 0, len(data)
	for len(data) > 0 {
		rec, recGen, rest, err := readJournalLine(data)
		if err != nil {
			s.log.Warn("state journal ends with an incomplete or damaged record, ignored (a crash while it was written; what it held was not yet counted)",
				"file", s.journalPath(), "offset", total-len(data), "dropped_bytes", len(data), "err", err)
			s.m.StateTornRecords.WithLabelValues(s.pipeline).Inc()
			break
		}
		data = rest
		if recGen == "" {
			break // padding to the end
		}
		if recGen != gen {
			stale++ // written before a compaction that crashed before emptying the journal
			continue
		}
		r.apply(st, rec)
	}
	s.log.Debug("state journal replayed", "file", s.journalPath(), "records", r.applied, "stale_records", stale, "committed_not_judged", len(r.committed))
	return r.notJudged()
}

// replayShared applies the lines of generation gen in the process's
// journal to st, in order, as replay does, and pins the segment of the
// first.
func (s *stateStore) replayShared(st *judge.State, gen string) []judge.Sent {
	var r replayed
	torn, err := s.journal.replay(gen, &s.pin, func(rec journalRecord) { r.apply(st, rec) })
	if torn != nil {
		s.log.Warn("state journal ends with an incomplete or damaged record, ignored (a crash while it was written; what it held was not yet counted)",
			"file", s.journal.segmentName(torn.seq), "offset", torn.off, "dropped_bytes", torn.dropped, "err", torn.problem)
		s.m.StateTornRecords.WithLabelValues(s.pipeline).Inc()
	}
	if err != nil {
		s.log.Error("reading the state journal failed; resuming from what was read of it (what it held since may be counted again)",
			"prefix", s.journal.prefix, "err", err)
	}
	s.log.Debug("state journal replayed", "prefix", s.journal.prefix, "records", r.applied, "committed_not_judged", len(r.committed))
	return r.notJudged()
}

// replayed gathers what the lines of a generation say, in order.
type replayed struct {
	applied   int
	committed map[string]judge.Sent
}

func (r *replayed) apply(st *judge.State, rec journalRecord) {
	st.Apply(rec.Canaries, rec.Forgotten, &rec.Meta)
	for _, c := range rec.Canaries {
		delete(r.committed, c.ID)
	}
	for _, id := range rec.Forgotten {
		delete(r.committed, id)
	}
	for _, c := range rec.Committed {
		if r.committed == nil {
			r.committed = map[string]judge.Sent{}
		}
		r.committed[c.ID] = c
	}
	r.applied++
}

// notJudged is the committed canaries no later line holds, by sequence.
func (r *replayed) notJudged() []judge.Sent {
	out := slices.Collect(maps.Values(r.committed))
	slices.SortFunc(out, func(a, b judge.Sent) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	return out
}

// canAppend reports whether the next write can be a line: this process
// wrote a snapshot, no write failed since, nor did the journal.
func (s *stateStore) canAppend() bool {
	return s.appending && s.writtenMeta != nil && s.epoch == s.journal.epochNow()
}

// compactDue reports whether the pipeline must write a snapshot even
// with nothing to write: its first line since the last is in a segment
// the journal would delete (see stateJournal.compactDue).
func (s *stateStore) compactDue() bool {
	return s.path != "" && s.journal.compactDue(s.pin)
}

// save persists what changed in the judge's state since its last write and
// marks it persisted: one journal line, written and not yet fsynced (the
// caller makes it durable with syncTo, before applying the effects it
// records, with the lines of other pipelines), or a new snapshot, durable
// on return, when there is no journal to append to yet or the lines
// outgrew the snapshot; then pos is zero. A failure is counted and
// returned; the state stays in memory, and the next write is a whole
// snapshot.
func (s *stateStore) save(j *judge.Judge, now time.Time) (pos journalPos, err error) {
	if s.path == "" {
		j.MarkPersisted(now)
		return pos, nil
	}
	defer func() {
		if err == nil {
			s.wrote(j.State().Next)
		}
	}()
	if !s.canAppend() || s.lineBytes > s.compactAt || s.journal.compactDue(s.pin) {
		return pos, s.snapshot(j, now)
	}
	d := j.Delta()
	meta := j.State().Meta()
	meta.AliveAt = now
	metaJSON, err := appendMeta(make([]byte, 0, 512), &meta)
	if err != nil {
		return pos, s.failed(fmt.Errorf("encode state journal record: %w", err))
	}
	buf := journalBufs.Get().(*[]byte)
	payload, err := appendRecord((*buf)[:0], d.Canaries, d.Forgotten, nil, metaJSON)
	defer func() { *buf = payload[:0]; journalBufs.Put(buf) }()
	if err != nil {
		return pos, s.failed(fmt.Errorf("encode state journal record: %w", err))
	}
	pos, n, err := s.journal.write(s.gen, payload, &s.pin)
	s.stats.bytes += int64(n)
	s.stats.records++
	s.lineBytes += int64(n)
	if err != nil {
		return journalPos{}, s.failed(err)
	}
	s.writtenMeta = metaJSON
	j.MarkPersisted(now)
	return pos, nil
}

// canWriteCommitted reports whether a committed canary can be written
// alone: there is a journal to append it to.
func (s *stateStore) canWriteCommitted() bool {
	return s.path != "" && s.canAppend()
}

// writeCommitted appends a line that records a canary whose insert
// committed, alone, before anything was judged of it, with the rest of
// the state as the last line left it; it does not fsync it (the next
// batch does) and marks nothing persisted: the canary, and whatever else
// changed, go into the next line as well. Until that line, replaying the
// journal hands the canary back as committed and not judged (see
// journalRecord.Committed).
func (s *stateStore) writeCommitted(sent judge.Sent) error {
	buf := journalBufs.Get().(*[]byte)
	payload, err := appendRecord((*buf)[:0], nil, nil, []judge.Sent{sent}, s.writtenMeta)
	defer func() { *buf = payload[:0]; journalBufs.Put(buf) }()
	if err != nil {
		return s.failed(fmt.Errorf("encode state journal record: %w", err))
	}
	_, n, err := s.journal.write(s.gen, payload, &s.pin)
	s.stats.bytes += int64(n)
	s.stats.records++
	s.lineBytes += int64(n)
	if err != nil {
		return s.failed(err)
	}
	return nil
}

// syncTo makes the journal durable up to pos (with every line written
// before, any pipeline's); a failure is counted as a failed write.
// Called without the tracker's lock: failed takes it.
func (s *stateStore) syncTo(pos journalPos, lock *sync.Mutex) error {
	err := s.journal.syncTo(pos)
	if err != nil {
		lock.Lock()
		defer lock.Unlock()
		return s.failed(err)
	}
	return nil
}

// failed counts a failed write and stops appending, so that the next
// write is a snapshot: a line may be half written, and nothing of this
// pipeline is appended after it.
func (s *stateStore) failed(err error) error {
	s.appending = false
	s.m.StateWriteFailures.WithLabelValues(s.pipeline).Inc()
	// A read-only or full directory fails every write: one warning when
	// it starts, as for a dependency that goes down.
	if s.failing {
		s.log.Debug("state write still failing", "err", err)
	} else {
		s.log.Warn("state writes failing; the state is kept in memory only, a restart may recount canaries, counted in "+slo.MetricStateWriteFailures, "err", err)
	}
	s.failing = true
	return err
}

// snapshot writes the whole state under a new generation, which makes
// the pipeline's lines in the journal stale (load skips them), and marks
// the state persisted.
func (s *stateStore) snapshot(j *judge.Judge, now time.Time) error {
	if s.path == "" {
		j.MarkPersisted(now)
		return nil
	}
	st := *j.State()
	st.AliveAt = now
	gen := fmt.Sprintf("%016x", rand.Uint64())
	// Read before the snapshot is written: a failure of the journal after
	// it makes the next write a snapshot again.
	epoch := s.journal.epochNow()
	meta := st.Meta()
	metaJSON, err := appendMeta(make([]byte, 0, 512), &meta)
	var data []byte
	if err == nil {
		data, err = appendStateFile(nil, &stateFile{Version: stateVersion, Pipeline: s.pipeline, Instance: s.instance, Generation: gen, Judge: &st}, metaJSON)
	}
	if err == nil {
		err = writeFileAtomic(s.path, data)
		s.stats.bytes += int64(len(data))
		s.stats.pages += int64(pagesSpanned(0, len(data)))
		s.stats.syncs += 2
		s.stats.snapshots++
		s.stats.snapshotBytes += int64(len(data))
	}
	if err != nil {
		return s.failed(fmt.Errorf("write state %s: %w", s.path, err))
	}
	if s.ownJournal {
		// Its lines are of the generation just replaced.
		if err := os.Remove(s.journalPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("the journal of the previous layout could not be deleted; it is stale and ignored", "file", s.journalPath(), "err", err)
		}
		s.ownJournal = false
	}
	s.journal.snapshotWritten(&s.pin, s.snapshotBytes, int64(len(data)))
	s.gen, s.writtenMeta, s.epoch, s.appending = gen, metaJSON, epoch, true
	s.snapshotBytes, s.lineBytes = int64(len(data)), 0
	threshold := max(cmp.Or(s.minCompact, compactMin), compactRatio*int64(len(data)))
	s.compactAt = threshold + rand.Int64N(int64(float64(threshold)*compactSpread)+1)
	s.wrote(st.Next)
	j.MarkPersisted(now)
	return nil
}

// writeFileAtomic replaces path with data so that a crash at any instant
// leaves either the old or the new content: write a temporary file in the
// same directory, fsync it, rename it over path, then fsync the directory
// so the rename itself is durable.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary state file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename state file into place: %w", err)
	}
	return syncDir(dir)
}
