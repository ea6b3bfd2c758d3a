package prober

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// stateVersion is bumped when the file layout changes incompatibly. A file
// of another version is moved aside, never misread and never fatal.
const stateVersion = 2

// stateFile is what a Tracker persists, one file per pipeline: the judge's
// state (every canary remembered with its verdicts, the last sequence per
// key, the next offset per partition, the prober's downtimes) under the
// pipeline and instance it belongs to.
type stateFile struct {
	Version  int          `json:"version"`
	Pipeline string       `json:"pipeline"`
	Instance string       `json:"instance"`
	Judge    *judge.State `json:"judge"`
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

// stateStore reads and writes one pipeline's state file. A file it cannot
// use is moved aside with a timestamp, counted and logged, and the
// pipeline starts afresh: a damaged file or a release that changes the
// layout never stops the service.
type stateStore struct {
	path     string // "": in memory only
	pipeline string
	instance string
	log      *slog.Logger
	m        *Metrics
}

// load returns the judge's state from the file, or nil to start afresh.
func (s *stateStore) load(now time.Time) *judge.State {
	if s.path == "" {
		return nil
	}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		s.log.Error("reading the state file failed; starting without it", "file", s.path, "err", err)
		return nil
	}
	var f stateFile
	reason, detail := "", ""
	switch err := json.Unmarshal(data, &f); {
	case err != nil:
		reason, detail = StateResetCorrupt, err.Error()
	case f.Version != stateVersion:
		reason, detail = StateResetVersion, fmt.Sprintf("version %d, this release reads %d", f.Version, stateVersion)
	case f.Pipeline != s.pipeline:
		reason, detail = StateResetPipeline, fmt.Sprintf("it belongs to pipeline %q", f.Pipeline)
	case f.Judge == nil:
		reason, detail = StateResetCorrupt, "no state in it"
	}
	if reason != "" {
		aside := fmt.Sprintf("%s.%s-%s", s.path, reason, now.UTC().Format("20060102T150405Z"))
		if err := os.Rename(s.path, aside); err != nil {
			s.log.Error("a state file this release cannot use could not be moved aside; starting afresh anyway", "file", s.path, "problem", detail, "err", err)
		} else {
			s.log.Warn("state file moved aside; the pipeline starts afresh (in-flight canaries of the previous run are forgotten)",
				"file", s.path, "moved_to", aside, "problem", detail)
		}
		s.m.StateResets.WithLabelValues(s.pipeline, reason).Inc()
		return nil
	}
	if f.Instance != s.instance {
		// A renamed instance: its canaries now look foreign on the topic,
		// so tracking them would only produce false losses. Offsets and
		// the last times are the pipeline's, whoever wrote them.
		s.log.Warn("state file written by another instance id; forgetting its canaries",
			"file", s.path, "state_instance", f.Instance, "instance", s.instance)
		f.Judge.Canaries = nil
	}
	s.log.Info("tracker state loaded", "file", s.path, "canaries", len(f.Judge.Canaries))
	return f.Judge
}

// save writes the judge's state atomically and marks it persisted; a
// failure is counted and returned (the state stays in memory).
func (s *stateStore) save(j *judge.Judge, now time.Time) error {
	if s.path == "" {
		j.MarkPersisted(now)
		return nil
	}
	st := j.State()
	prev := st.AliveAt
	st.AliveAt = now
	data, err := json.Marshal(&stateFile{Version: stateVersion, Pipeline: s.pipeline, Instance: s.instance, Judge: st})
	if err == nil {
		err = writeFileAtomic(s.path, data)
	}
	if err != nil {
		st.AliveAt = prev
		s.m.StateWriteFailures.WithLabelValues(s.pipeline).Inc()
		return fmt.Errorf("write state %s: %w", s.path, err)
	}
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
