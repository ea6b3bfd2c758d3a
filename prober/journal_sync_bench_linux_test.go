package prober

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkJournalSync measures what making one batch durable costs the
// process, for three ways the state journal could be laid out, so that
// the choice rests on figures: batches of 2.5 KB (a line of the service
// benchmark's 300 pipelines @every 10s) to 8 pipelines in turn, as a
// sweep finds them due. Per batch: cpu-ns (user and system time; the wait
// for the disk is not CPU) and disk-B (/proc/self/io write_bytes: what
// the kernel accounts as sent to storage).
//
//	go test ./prober/ -run '^$' -bench JournalSync -benchtime 2000x
//
// The layouts:
//
//   - per-pipeline: each pipeline's journal its own file, a batch
//     appended and fsynced (the journal as it is);
//   - shared: the batches of every pipeline appended to one file, fsynced
//     once per sweep (a journal shared by the pipelines of a process, not
//     built);
//   - padded/chunk and padded/page: each pipeline's file padded ahead of
//     its lines, a batch written over the padding and fdatasynced, so
//     that the file's size and extents do not change and ext4 commits no
//     metadata (tried on branch cpu-padded-journal, not kept). Padding
//     written 64 KiB at a time is held in the page cache as large folios
//     (Linux 6.x, ext4): a batch then dirties, and its sync writes, the
//     whole folio. Written a page at a time it is not, until something
//     reads the file back into large folios; either way every journal
//     page is written once more, as padding.
func BenchmarkJournalSync(b *testing.B) {
	const pipelines = 8
	const chunk = 64 << 10 // padding laid down at a time
	padding := bytes.Repeat([]byte{'\n'}, chunk)
	line := make([]byte, 2500)
	for i := range line {
		line[i] = 'x'
	}
	line[len(line)-1] = '\n'
	padded := func(piece int) func(dir string) (func(int) error, func()) {
		return func(dir string) (func(int) error, func()) {
			var fs []*os.File
			for i := range pipelines {
				f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				fs = append(fs, f)
			}
			filled := make([]int64, pipelines)
			written := make([]int64, pipelines)
			return func(p int) error {
					f := fs[p]
					if written[p]+int64(len(line)) > filled[p] {
						for off := 0; off < chunk; off += piece {
							if _, err := f.WriteAt(padding[:piece], filled[p]+int64(off)); err != nil {
								return err
							}
						}
						filled[p] += chunk
						if _, err := f.WriteAt(line, written[p]); err != nil {
							return err
						}
						written[p] += int64(len(line))
						return f.Sync()
					}
					if _, err := f.WriteAt(line, written[p]); err != nil {
						return err
					}
					written[p] += int64(len(line))
					return syscall.Fdatasync(int(f.Fd()))
				}, func() {
					for _, f := range fs {
						_ = f.Close()
					}
				}
		}
	}
	layouts := []struct {
		name string
		// open returns what writes pipeline p's batch and makes it durable
		// (the shared layout makes all durable at the last pipeline's).
		open func(dir string) (batch func(p int) error, close func())
	}{
		{"per-pipeline", func(dir string) (func(int) error, func()) {
			var fs []*os.File
			for i := range pipelines {
				f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				fs = append(fs, f)
			}
			return func(p int) error {
					if _, err := fs[p].Write(line); err != nil {
						return err
					}
					return fs[p].Sync()
				}, func() {
					for _, f := range fs {
						_ = f.Close()
					}
				}
		}},
		{"shared", func(dir string) (func(int) error, func()) {
			f, err := os.OpenFile(filepath.Join(dir, "journal"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			return func(p int) error {
				if _, err := f.Write(line); err != nil {
					return err
				}
				if p == pipelines-1 {
					return f.Sync()
				}
				return nil
			}, func() { _ = f.Close() }
		}},
		{"padded/chunk", padded(chunk)},
		{"padded/page", padded(pageSize)},
	}
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			batch, closeAll := l.open(b.TempDir())
			defer closeAll()
			_, disk0 := procIO(b)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for i := range b.N {
				if err := batch(i % pipelines); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_, disk := procIO(b)
			b.ReportMetric(float64((cpuTime(b)-cpu0)/time.Duration(b.N)), "cpu-ns/batch")
			b.ReportMetric(float64(disk-disk0)/float64(b.N), "disk-B/batch")
		})
	}
}
