package prober

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The journal of a process: the lines of every pipeline go to one file,
// so that the batches a sweep writes for 300 pipelines are made durable by
// one fsync, not one each (group commit across pipelines: at 300 pipelines
// the per-pipeline fsyncs were 11 % of the prober's CPU). Each pipeline
// keeps its own snapshot (state.go); a line names the generation of the
// snapshot it continues, which names the pipeline too (64 random bits).
//
// The journal is a series of segments, <prefix>.<sequence as 16 hex
// digits>. A process appends to a segment of its own, the one after the
// last it found, and starts the next (rotation) once its segment outgrows
// compactRatio times the pipelines' snapshots together, after an fsync of
// the old one: so a segment read back after a crash is whole up to its
// first damaged line, or is followed by no line of a pipeline that wrote
// in it (a failed write makes every pipeline write a snapshot, under a new
// generation, before its next line; see stateJournal.epoch). A pipeline
// pins the segment of its first line since its snapshot; a segment no
// pipeline pins, older than the one written, is deleted. A pipeline still
// pinning the segment before the last when a segment is started writes a
// snapshot at its next sweep (compactDue), so that at most three segments
// are kept however slowly a pipeline writes.
//
// Durability is as with one file per pipeline: a line is in the page
// cache once write returned, on disk once a syncTo covering it returned;
// the tracker applies a batch's effects only then.

// journalPos is a position in the journal: the end of a line.
type journalPos struct {
	seq uint64
	off int64
}

func (p journalPos) before(q journalPos) bool {
	return p.seq < q.seq || (p.seq == q.seq && p.off < q.off)
}

// lineRef is where one line lies, found when the journal was opened.
type lineRef struct {
	seq      uint64
	off, len int64
}

// tornLine is the first damaged line of a segment, found at open.
type tornLine struct {
	seq      uint64
	off      int64
	dropped  int
	gen      string // the generation its header names, if readable
	problem  error
	reported bool
}

// journalStats counts the journal's fsyncs and what they wrote.
type journalStats struct {
	syncs, pages, bytes int64
}

// stateJournal is the journal of a process, shared by its pipelines'
// stateStores; safe for concurrent use.
type stateJournal struct {
	prefix string
	log    *slog.Logger

	// syncMu serialises the fsyncs, done outside mu so that lines are
	// appended while the disk writes; taken before mu.
	syncMu sync.Mutex
	mu     sync.Mutex
	seq    uint64   // the segment lines go to
	jl     *journal // nil until the segment's first line, and after a failure
	// dirSynced: the directory entry of segment seq is durable.
	dirSynced bool
	// retired segments are closed by the next syncTo, which may be
	// fsyncing one of them.
	retired []*journal
	segs    []uint64       // segments on disk, oldest first
	pins    map[uint64]int // segment: pipelines whose first line since their snapshot is in it
	synced  journalPos
	// epoch is bumped by each failure: a pipeline whose snapshot is of an
	// earlier epoch writes a snapshot before its next line, since a line
	// of its chain may be missing.
	epoch uint64
	// snapBytes is the size of every pipeline's last snapshot together,
	// which sets rotateAt.
	snapBytes int64
	rotateAt  int64
	// minRotate overrides compactMin as the least rotateAt (tests).
	minRotate int64
	// loading: pipelines are still loading, and pin what they replay;
	// nothing is deleted until loaded.
	loading bool
	index   map[string][]lineRef // by generation, from open until loaded
	torn    []tornLine
	readers map[uint64]*os.File
	// claimed holds the snapshots of the pipelines loaded, by path;
	// keepUnloaded, set for the journal of a state directory, has loaded
	// keep the lines of the other snapshots there (see keepUnloadedLocked).
	claimed      map[string]bool
	keepUnloaded bool
	// kept are the segments holding lines of snapshots no pipeline loaded.
	kept  map[uint64]bool
	stats journalStats
}

// segmentName is the file of segment seq.
func (sj *stateJournal) segmentName(seq uint64) string {
	return fmt.Sprintf("%s.%016x", sj.prefix, seq)
}

// openStateJournal finds the segments of prefix and indexes their lines by
// generation for the pipelines' loads; nothing is written until a line
// is.
func openStateJournal(prefix string, log *slog.Logger) (*stateJournal, error) {
	sj := &stateJournal{prefix: prefix, log: log, pins: map[uint64]int{}, loading: true,
		index: map[string][]lineRef{}, readers: map[uint64]*os.File{}, claimed: map[string]bool{}}
	names, err := filepath.Glob(globEscape(prefix) + ".*")
	if err != nil {
		return nil, fmt.Errorf("list state journal segments: %w", err)
	}
	for _, name := range names {
		rest := strings.TrimPrefix(name, prefix+".")
		if len(rest) != 16 {
			continue
		}
		seq, err := strconv.ParseUint(rest, 16, 64)
		if err != nil {
			continue
		}
		sj.segs = append(sj.segs, seq)
	}
	slices.Sort(sj.segs)
	for _, seq := range sj.segs {
		sj.indexSegment(seq)
	}
	if len(sj.segs) > 0 {
		sj.seq = sj.segs[len(sj.segs)-1]
	}
	sj.rotateAt = compactMin
	return sj, nil
}

// globEscape escapes the metacharacters of filepath.Match in a path.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// indexSegment records where each line of segment seq lies, up to the
// first damaged one.
func (sj *stateJournal) indexSegment(seq uint64) {
	name := sj.segmentName(seq)
	data, err := os.ReadFile(name)
	if err != nil {
		sj.log.Error("reading a state journal segment failed; the pipelines that wrote in it resume from their snapshots (what it held since may be counted again)",
			"file", name, "err", err)
		return
	}
	total := int64(len(data))
	for len(data) > 0 {
		trimmed := bytes.TrimLeft(data, "\n")
		if len(trimmed) == 0 {
			break // padding to the end
		}
		off := total - int64(len(trimmed))
		n, gen, err := checkJournalLine(trimmed)
		if err != nil {
			sj.torn = append(sj.torn, tornLine{seq: seq, off: off, dropped: len(trimmed), gen: gen, problem: err})
			break
		}
		sj.index[gen] = append(sj.index[gen], lineRef{seq: seq, off: off, len: int64(n)})
		data = trimmed[n:]
	}
}

// checkJournalLine checks the first line of data (no padding before it)
// and returns its length with its newline and its generation; a damaged
// line returns the generation its header names, if it names one.
func checkJournalLine(data []byte) (n int, gen string, err error) {
	if len(data) >= 8+1+16+1 && data[8] == ' ' && data[8+1+16] == ' ' {
		if _, err := hex.DecodeString(string(data[9 : 9+16])); err == nil {
			gen = string(data[9 : 9+16])
		}
	}
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return 0, gen, fmt.Errorf("%w: %d bytes without a newline", errTornRecord, len(data))
	}
	line := data[:i]
	if len(line) < 8+1+16+1 || line[8] != ' ' || line[8+1+16] != ' ' {
		return 0, gen, fmt.Errorf("%w: malformed line of %d bytes", errTornRecord, len(line))
	}
	var want [4]byte
	if _, err := hex.Decode(want[:], line[:8]); err != nil {
		return 0, gen, fmt.Errorf("%w: checksum: %w", errTornRecord, err)
	}
	sum := crc32.Checksum(line[9:], crc32c)
	if got := [4]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}; got != want {
		return 0, gen, fmt.Errorf("%w: checksum mismatch", errTornRecord)
	}
	return i + 1, gen, nil
}

// claim records that the pipeline whose snapshot is path is loaded.
// Called while loading.
func (sj *stateJournal) claim(path string) {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	if sj.claimed != nil {
		sj.claimed[path] = true
	}
}

// replay hands the lines of generation gen to each, in order, and pins
// the segment of the first; it reports a damaged line that names gen (the
// first load that asks for it). Called while loading.
func (sj *stateJournal) replay(gen string, pin *uint64, each func(rec journalRecord)) (torn *tornLine, err error) {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	for i := range sj.torn {
		if t := &sj.torn[i]; t.gen == gen && !t.reported {
			t.reported = true
			torn = t
		}
	}
	refs := sj.index[gen]
	delete(sj.index, gen)
	for _, ref := range refs {
		f, ok := sj.readers[ref.seq]
		if !ok {
			if f, err = os.Open(sj.segmentName(ref.seq)); err != nil {
				return torn, fmt.Errorf("open state journal segment: %w", err)
			}
			sj.readers[ref.seq] = f
		}
		buf := make([]byte, ref.len)
		if _, err := f.ReadAt(buf, ref.off); err != nil {
			return torn, fmt.Errorf("read state journal segment %s: %w", f.Name(), err)
		}
		rec, _, _, err := readJournalLine(buf)
		if err != nil {
			return torn, err
		}
		if *pin == 0 {
			*pin = ref.seq
			sj.pins[ref.seq]++
		}
		each(rec)
	}
	return torn, nil
}

// loaded ends the loads: it reports the damaged lines no pipeline claimed,
// drops the index and lets segments no pipeline pins be deleted.
func (sj *stateJournal) loaded() {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	if !sj.loading {
		return
	}
	for _, t := range sj.torn {
		if !t.reported {
			sj.log.Warn("state journal segment ends with an incomplete or damaged record, ignored (a crash while it was written; what it held was not yet counted)",
				"file", sj.segmentName(t.seq), "offset", t.off, "dropped_bytes", t.dropped, "err", t.problem)
		}
	}
	for _, f := range sj.readers {
		_ = f.Close()
	}
	if sj.keepUnloaded && len(sj.index) > 0 {
		sj.keepUnloadedLocked()
	}
	sj.loading, sj.index, sj.torn, sj.readers, sj.claimed = false, nil, nil, nil, nil
	sj.deleteUnpinnedLocked()
}

// keepUnloadedLocked pins, for as long as the process runs, the segments
// holding lines of a snapshot in the directory that no pipeline loaded (a
// pipeline left out of the configuration for a while, or sharded to
// another process since): deleted, they would take its state back to the
// snapshot when it returns, and what they recorded would be counted again.
func (sj *stateJournal) keepUnloadedLocked() {
	names, err := filepath.Glob(filepath.Join(globEscape(filepath.Dir(sj.prefix)), "*.json"))
	if err != nil {
		return
	}
	for _, name := range names {
		if sj.claimed[name] {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		var f struct {
			Version    int    `json:"version"`
			Generation string `json:"generation"`
		}
		if json.Unmarshal(data, &f) != nil || f.Version != stateVersion {
			continue
		}
		for _, ref := range sj.index[f.Generation] {
			if sj.kept == nil {
				sj.kept = map[uint64]bool{}
			}
			if !sj.kept[ref.seq] {
				sj.kept[ref.seq] = true
				sj.log.Info("a journal segment holding lines of a pipeline not loaded is kept for when it is", "file", name, "segment", sj.segmentName(ref.seq))
			}
		}
	}
}

// write appends one line, starting a segment if none is open, and returns
// its end. pin is the caller's pinned segment: its first line since its
// snapshot pins the segment it lands in.
func (sj *stateJournal) write(gen string, payload []byte, pin *uint64) (journalPos, int, error) {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	if sj.jl != nil && sj.jl.size > sj.rotateAt {
		if err := sj.rotateLocked(); err != nil {
			return journalPos{}, 0, err
		}
	}
	if sj.jl == nil {
		if err := sj.startSegmentLocked(); err != nil {
			return journalPos{}, 0, err
		}
	}
	n, err := sj.jl.write(gen, payload)
	sj.stats.bytes += int64(n)
	if err != nil {
		name := sj.jl.f.Name()
		sj.failLocked()
		return journalPos{}, n, fmt.Errorf("append to state journal %s: %w", name, err)
	}
	if *pin == 0 {
		*pin = sj.seq
		sj.pins[sj.seq]++
	}
	return journalPos{sj.seq, sj.jl.size}, n, nil
}

// startSegmentLocked creates the segment after the last one on disk.
func (sj *stateJournal) startSegmentLocked() error {
	for {
		sj.seq++
		f, err := os.OpenFile(sj.segmentName(sj.seq), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // another process's; never appended to
		}
		if err != nil {
			return fmt.Errorf("create state journal segment: %w", err)
		}
		sj.jl, sj.dirSynced = &journal{f: f}, false
		sj.segs = append(sj.segs, sj.seq)
		return nil
	}
}

// rotateLocked fsyncs the segment and closes it to lines: the next
// segment's lines continue chains whose lines in this one must all be
// durable first.
func (sj *stateJournal) rotateLocked() error {
	old := sj.jl
	if from := sj.syncedOff(); from < old.size { // else the last syncTo left nothing to sync
		if err := old.f.Sync(); err != nil {
			name := old.f.Name()
			sj.failLocked()
			return fmt.Errorf("fsync state journal %s: %w", name, err)
		}
		sj.stats.syncs++
		sj.stats.pages += int64(pagesSpanned(from, int(old.size-from)))
	}
	if !sj.dirSynced {
		if err := syncDir(filepath.Dir(sj.prefix)); err != nil {
			sj.failLocked()
			return err
		}
	}
	sj.synced = journalPos{sj.seq, old.size}
	sj.retired = append(sj.retired, old)
	sj.jl = nil
	// Pipelines that have not written a snapshot since the segment before
	// this one began now pin two: they write one at their next sweep.
	return nil
}

// syncedOff is how much of segment seq is durable.
func (sj *stateJournal) syncedOff() int64 {
	if sj.synced.seq == sj.seq {
		return sj.synced.off
	}
	return 0
}

// failLocked abandons the segment after a failed write or fsync: a line
// may be half written, or not on disk though written, and nothing is ever
// appended after it. Every pipeline writes a snapshot before its next line.
func (sj *stateJournal) failLocked() {
	if sj.jl != nil {
		sj.retired = append(sj.retired, sj.jl)
		sj.jl = nil
	}
	sj.epoch++
}

// epochNow is the epoch a snapshot written now belongs to.
func (sj *stateJournal) epochNow() uint64 {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	return sj.epoch
}

// errJournalAbandoned: a line's segment was abandoned after a failure
// before the line was synced.
var errJournalAbandoned = errors.New("state journal segment abandoned after a failed write; its last lines may not be on disk")

// syncTo makes every line up to pos durable, with every other line
// written before the fsync: one fsync for all the lines of a sweep.
// Padding first fills the rest of a page that would not hold another batch
// like this one, so that the next batch starts a page.
func (sj *stateJournal) syncTo(pos journalPos) error {
	sj.syncMu.Lock()
	defer sj.syncMu.Unlock()
	sj.mu.Lock()
	retired := sj.retired
	sj.retired = nil
	if !sj.synced.before(pos) {
		sj.mu.Unlock()
		closeAll(retired)
		return nil
	}
	if pos.seq != sj.seq || sj.jl == nil {
		sj.mu.Unlock()
		closeAll(retired)
		return errJournalAbandoned
	}
	jl, seq, needDir := sj.jl, sj.seq, !sj.dirSynced
	from := sj.syncedOff()
	if used := jl.size % pageSize; used > 0 && pageSize-used < jl.size-from {
		n, err := jl.f.Write(newlines[:pageSize-used])
		jl.size += int64(n)
		sj.stats.bytes += int64(n)
		if err != nil {
			sj.failLocked()
			sj.mu.Unlock()
			closeAll(retired)
			return fmt.Errorf("pad state journal %s: %w", jl.f.Name(), err)
		}
	}
	size := jl.size
	sj.mu.Unlock()
	closeAll(retired)

	err := jl.f.Sync()
	if err != nil {
		err = fmt.Errorf("fsync state journal %s: %w", jl.f.Name(), err)
	} else if needDir {
		err = syncDir(filepath.Dir(sj.prefix))
	}

	sj.mu.Lock()
	defer sj.mu.Unlock()
	sj.stats.syncs++
	sj.stats.pages += int64(pagesSpanned(from, int(size-from)))
	if err != nil {
		if sj.seq == seq {
			sj.failLocked()
		}
		return err
	}
	if sj.seq == seq {
		sj.dirSynced = true
	}
	if sj.synced.before(journalPos{seq, size}) {
		sj.synced = journalPos{seq, size}
	}
	return nil
}

func closeAll(jls []*journal) {
	for _, jl := range jls {
		jl.close()
	}
}

// snapshotWritten releases the segment a pipeline pinned (its lines are
// all of an older generation now), records its snapshot's size, and
// deletes the segments no pipeline pins.
func (sj *stateJournal) snapshotWritten(pin *uint64, oldSize, newSize int64) {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	if *pin != 0 {
		if sj.pins[*pin]--; sj.pins[*pin] <= 0 {
			delete(sj.pins, *pin)
		}
		*pin = 0
	}
	sj.snapBytes += newSize - oldSize
	sj.rotateAt = max(cmp.Or(sj.minRotate, compactMin), compactRatio*sj.snapBytes)
	sj.deleteUnpinnedLocked()
}

// deleteUnpinnedLocked deletes the segments older than any pinned one and
// than the one written (a pipeline's lines run from its pinned segment to
// the last), but those kept for pipelines not loaded.
func (sj *stateJournal) deleteUnpinnedLocked() {
	if sj.loading {
		return
	}
	oldest := sj.seq
	if sj.jl == nil {
		oldest = sj.seq + 1 // the next line starts a segment
	}
	for seq := range sj.pins {
		oldest = min(oldest, seq)
	}
	sj.segs = slices.DeleteFunc(sj.segs, func(seq uint64) bool {
		if seq >= oldest || sj.kept[seq] {
			return false
		}
		name := sj.segmentName(seq)
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			sj.log.Warn("a state journal segment no pipeline needs could not be deleted", "file", name, "err", err)
			return false
		}
		return true
	})
}

// compactDue reports whether a pipeline whose first line since its
// snapshot is in segment pin must write a snapshot: it pins a segment two
// before the one written.
func (sj *stateJournal) compactDue(pin uint64) bool {
	if pin == 0 {
		return false
	}
	sj.mu.Lock()
	defer sj.mu.Unlock()
	return pin+1 < sj.seq
}

// syncCount is how many fsyncs the journal made.
func (sj *stateJournal) syncCount() int64 {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	return sj.stats.syncs
}

// syncDir fsyncs a directory, so that a file created or renamed in it is.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync state dir %s: %w", dir, err)
	}
	return nil
}
