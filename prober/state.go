package prober

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// stateVersion is bumped when the file layout changes incompatibly; a
// tracker refuses a file of another version rather than misread it.
const stateVersion = 1

// stateFile is what a Tracker persists, one file per pipeline. It holds
// everything needed to resume after kill -9 without losing or recounting a
// canary: in-flight canaries with how far each segment got, recently
// resolved canaries (to recognise duplicates), the last sequence number per
// key (for out-of-order), and per partition the next offset to read.
type stateFile struct {
	Version  int    `json:"version"`
	Pipeline string `json:"pipeline"`
	Instance string `json:"instance"`
	// Canaries is every canary still tracked, in flight or resolved, by Seq.
	Canaries    []*canaryState    `json:"canaries"`
	LastSeq     map[string]uint64 `json:"last_seq_by_key,omitempty"`
	NextOffsets map[int]int64     `json:"next_offset_by_partition,omitempty"`
	// Last* restore the last_*_timestamp_seconds gauges after a restart, so
	// that the stall alert (last sent minus last received, guarded by last
	// received > 0) does not go blind until the next canary arrives. They
	// were added without a version bump: a file without them loads, with
	// the gauges at 0 as before.
	LastSent     time.Time `json:"last_sent,omitzero"`
	LastReceived time.Time `json:"last_received,omitzero"`
	LastSuccess  time.Time `json:"last_success,omitzero"`
}

// canaryState is one canary as tracked: what Sent recorded, the stamps
// learnt since, and per segment whether its SLI event and its latency
// observation have already been emitted (each exactly once).
type canaryState struct {
	ID            string    `json:"id"`
	Seq           uint64    `json:"seq"`
	Key           string    `json:"key"`
	RowID         string    `json:"row_id,omitempty"`
	InsertStarted time.Time `json:"insert_started"`
	// Stamps holds every known stamp on the prober clock, commit included
	// and consume once arrived.
	Stamps     map[string]time.Time     `json:"stamps"`
	Segments   map[string]*segmentState `json:"segments,omitempty"`
	Arrived    bool                     `json:"arrived,omitempty"`
	Lost       bool                     `json:"lost,omitempty"`
	OutOfOrder bool                     `json:"out_of_order,omitempty"`
	// PendingLookup: arrived, still missing a stamp that LookupStamps may
	// find (a polling relay's published_at).
	PendingLookup bool      `json:"pending_lookup,omitempty"`
	ResolvedAt    time.Time `json:"resolved_at,omitzero"` // arrival or loss, for Recent
	Lookups       int       `json:"lookups,omitempty"`
	NextLookup    time.Time `json:"next_lookup,omitzero"`
}

// segmentState records what was emitted for one segment of one canary.
type segmentState struct {
	// Outcome is "good" or "bad" once the SLI event was counted, at
	// JudgedAt.
	Outcome  string    `json:"outcome,omitempty"`
	JudgedAt time.Time `json:"judged_at,omitzero"`
	// Observed is set once the duration went into the histogram (or, if
	// negative, into the skew counter).
	Observed bool `json:"observed,omitempty"`
}

// loadState reads a state file; a missing file is no state (nil, nil).
func loadState(path string) (*stateFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var s stateFile
	if err := json.Unmarshal(data, &s); err != nil {
		// Writes are atomic, so this is not a torn write but damage or a
		// foreign file: refuse it rather than silently forget canaries.
		return nil, fmt.Errorf("state file %s: decode: %w (move it away to start afresh)", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("state file %s: version %d, this build reads %d (move it away to start afresh)", path, s.Version, stateVersion)
	}
	return &s, nil
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
