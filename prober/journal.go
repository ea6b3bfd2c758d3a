package prober

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

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
// another record, so that the next record starts a page and its fsync
// writes one page, not two. Text, so that `grep . orders.json.journal | cut -d' ' -f3- | jq`
// shows it.

// journalRecord is one write: the canaries changed since the previous
// write, those forgotten, and the rest of the state as it then stood.
type journalRecord struct {
	Canaries  []*judge.Canary `json:"canaries,omitempty"`
	Forgotten []string        `json:"forgotten,omitempty"`
	Meta      judge.State     `json:"meta"`
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

const pageSize = 4096

// errTornRecord: a journal line without its newline, or whose checksum
// does not match.
var errTornRecord = errors.New("torn journal record")

// journal appends lines to one pipeline's journal file.
type journal struct {
	f    *os.File
	size int64
	buf  []byte
}

// openJournal creates or empties the journal at path. It need not be
// synced: until a line of the new generation is, whatever the file holds
// belongs to an older snapshot and is skipped.
func openJournal(path string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state journal: %w", err)
	}
	return &journal{f: f}, nil
}

// append writes one record and fsyncs it. It returns the bytes written
// and how many 4 KiB pages they dirtied.
func (jl *journal) append(gen string, rec *journalRecord) (n, pages int, err error) {
	payload, err := json.Marshal(rec)
	if err != nil {
		return 0, 0, fmt.Errorf("encode journal record: %w", err)
	}
	b := jl.buf[:0]
	b = append(b, "00000000 "...)
	b = append(b, gen...)
	b = append(b, ' ')
	b = append(b, payload...)
	sum := crc32.Checksum(b[9:], crc32c)
	hex.Encode(b[:8], []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	b = append(b, '\n')
	// The page this write ends in is written whole by the fsync anyway:
	// if a record like this one would not fit in what is left of it, pad
	// it out, so that the next record starts a page rather than dirtying
	// this one again.
	if used := int((jl.size + int64(len(b))) % pageSize); used > 0 && pageSize-used < len(b) {
		b = append(b, bytes.Repeat([]byte{'\n'}, pageSize-used)...)
	}
	jl.buf = b
	n, err = jl.f.Write(b)
	pages = pagesSpanned(jl.size, n)
	jl.size += int64(n)
	if err != nil {
		return n, pages, fmt.Errorf("write: %w", err)
	}
	if err := jl.f.Sync(); err != nil {
		return n, pages, fmt.Errorf("fsync: %w", err)
	}
	return n, pages, nil
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
