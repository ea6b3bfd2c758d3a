package prober

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"

	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// A journal line is
//
//	<crc> <generation> <record>\n
//
// with the record as JSON (one line: JSON escapes newlines), the
// generation of the snapshot it continues (16 hex digits), and the CRC-32C
// of "<generation> <record>" (8 hex digits). A line without its newline or
// whose CRC does not match was torn by a crash while it was written.
// Empty lines are padding to the end of a page that would not hold
// another batch, so that the next batch starts a page and its fsync
// writes one page, not two. Text, so that `grep -h <generation> prober.journal.* | cut -d' ' -f3- | jq`
// shows a pipeline's lines (its snapshot names its generation).
//
// Lines are written with write(2) as soon as they are made, and fsynced
// in batches, the lines of every pipeline together (statejournal.go): a
// line is in the kernel's page cache once written, so it survives the
// process being killed (kill -9, OOM), and on disk once the fsync of its
// batch returned, so it survives the machine crashing.

// journalRecord is one write: the canaries changed since the previous
// write, those forgotten, the canaries committed and not yet judged, and
// the rest of the state as it then stood.
type journalRecord struct {
	Canaries  []*judge.Canary `json:"canaries,omitempty"`
	Forgotten []string        `json:"forgotten,omitempty"`
	// Committed: canaries whose insert committed, each written by Sent at
	// once and alone (with Meta as the previous line left it), before
	// Sent judged anything: until a later line holds the canary itself,
	// the effects of its Sent were not applied, so a process that loads
	// the line judges its Sent again (stateStore.replay).
	Committed []judge.Sent `json:"committed,omitempty"`
	Meta      judge.State  `json:"meta"`
}

// appendRecord appends the JSON of a journalRecord whose Meta is already
// encoded (a line of a committed canary repeats the previous line's
// meta): the bytes json.Marshal gives the record, without encoding the
// meta again nor compacting it as a json.RawMessage would.
func appendRecord(b []byte, canaries []*judge.Canary, forgotten []string, committed []judge.Sent, meta []byte) ([]byte, error) {
	b = append(b, '{')
	if len(canaries) > 0 {
		b = append(b, `"canaries":[`...)
		for i, c := range canaries {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendCanary(b, c); err != nil {
				return b, err
			}
		}
		b = append(b, "],"...)
	}
	if len(forgotten) > 0 {
		fb, err := json.Marshal(forgotten)
		if err != nil {
			return b, err
		}
		b = append(b, `"forgotten":`...)
		b = append(b, fb...)
		b = append(b, ',')
	}
	if len(committed) > 0 {
		b = append(b, `"committed":[`...)
		for i, c := range committed {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendCommitted(b, c); err != nil {
				return b, err
			}
		}
		b = append(b, "],"...)
	}
	b = append(b, `"meta":`...)
	b = append(b, meta...)
	return append(b, '}'), nil
}

// appendCommitted appends c as json.Marshal encodes it, without
// reflection: Sent writes one per canary.
func appendCommitted(b []byte, c judge.Sent) ([]byte, error) {
	b, err := appendCommitFields(b, c)
	if err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string, as json.Marshal does: as is
// when it holds only printable ASCII that JSON and HTML need not escape
// (ids, keys, row ids), else through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

const pageSize = 4096

// errTornRecord: a journal line without its newline, or whose checksum
// does not match.
var errTornRecord = errors.New("torn journal record")

// journal appends lines to one file: a segment of the process's journal
// (statejournal.go), which fsyncs it.
type journal struct {
	f    *os.File
	size int64
}

// journalBufs are the buffers records and lines are built in, shared by
// every pipeline: a line lives from its encoding to its
// write(2), so one process needs a few, not one per pipeline (at 300
// pipelines a buffer each was 3 MB of heap held between writes).
var journalBufs = sync.Pool{New: func() any { return new([]byte) }}

// newlines pads a batch to the end of its page.
var newlines = bytes.Repeat([]byte{'\n'}, pageSize)

// line builds the line of one record in buf.
func line(buf []byte, gen string, payload []byte) []byte {
	b := buf[:0]
	b = append(b, "00000000 "...)
	b = append(b, gen...)
	b = append(b, ' ')
	b = append(b, payload...)
	sum := crc32.Checksum(b[9:], crc32c)
	hex.Encode(b[:8], []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	b = append(b, '\n')
	return b
}

// write appends one record without syncing it: it survives the process,
// not yet the machine. It returns the bytes written.
func (jl *journal) write(gen string, payload []byte) (n int, err error) {
	buf := journalBufs.Get().(*[]byte)
	b := line(*buf, gen, payload)
	n, err = jl.f.Write(b)
	*buf = b[:0]
	journalBufs.Put(buf)
	jl.size += int64(n)
	if err != nil {
		return n, fmt.Errorf("write: %w", err)
	}
	return n, nil
}

func (jl *journal) close() { _ = jl.f.Close() }

// readJournalLine decodes the first record of data (after any padding)
// and returns the rest; gen is "" when only padding was left.
func readJournalLine(data []byte) (rec journalRecord, gen string, rest []byte, err error) {
	data = bytes.TrimLeft(data, "\n")
	if len(data) == 0 {
		return rec, "", nil, nil
	}
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return rec, "", nil, fmt.Errorf("%w: %d bytes without a newline", errTornRecord, len(data))
	}
	line, rest := data[:i], data[i+1:]
	if len(line) < 8+1+16+1 || line[8] != ' ' || line[8+1+16] != ' ' {
		return rec, "", nil, fmt.Errorf("%w: malformed line of %d bytes", errTornRecord, len(line))
	}
	var want [4]byte
	if _, err := hex.Decode(want[:], line[:8]); err != nil {
		return rec, "", nil, fmt.Errorf("%w: checksum: %w", errTornRecord, err)
	}
	sum := crc32.Checksum(line[9:], crc32c)
	if got := [4]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}; got != want {
		return rec, "", nil, fmt.Errorf("%w: checksum mismatch", errTornRecord)
	}
	gen = string(line[9 : 9+16])
	if err := json.Unmarshal(line[9+16+1:], &rec); err != nil {
		return rec, "", nil, fmt.Errorf("%w: %w", errTornRecord, err)
	}
	return rec, gen, rest, nil
}

// pagesSpanned is how many pages a write of n bytes at offset off
// touches: each is written whole when synced.
func pagesSpanned(off int64, n int) int {
	if n <= 0 {
		return 0
	}
	first := off / pageSize
	last := (off + int64(n) - 1) / pageSize
	return int(last - first + 1)
}
