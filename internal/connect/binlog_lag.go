package connect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// BinlogLag is how far a connector's committed binlog position is behind
// the server's.
type BinlogLag struct {
	Position    int64 // on CaptureLog.Written's scale; unknown when Purged
	BehindBytes int64 // unknown when Purged
	BehindFiles int64
	// Purged: the connector's file is older than the oldest the server
	// keeps; it cannot resume from its offset.
	Purged bool
	// Headroom is at least the time until expiry may purge the
	// connector's file; HasHeadroom is false while the connector reads
	// the current file (never purged) or expiry is off.
	Headroom    time.Duration
	HasHeadroom bool
}

// ConnectorBinlogLag compares a connector's committed position with the
// server's binlog. Binlog file names share a base and a zero-padded
// sequence number (mariadb-bin.000042), so they sort by name and the
// number counts the files in between.
func ConnectorBinlogLag(c outboxdb.CaptureLog, pos BinlogPosition, now time.Time) (BinlogLag, error) {
	if len(c.Files) == 0 {
		return BinlogLag{}, errors.New("the server lists no binlog files")
	}
	current := c.Files[len(c.Files)-1].Name
	if pos.File > current {
		return BinlogLag{}, fmt.Errorf("the connector's binlog file %s is after the server's current %s: is it reading another server?", pos.File, current)
	}
	var lag BinlogLag
	if n, m, ok := binlogSeq(pos.File, current); ok {
		lag.BehindFiles = m - n
	}
	if pos.File < c.Files[0].Name {
		lag.Purged = true
	} else {
		var before int64
		found := false
		for _, f := range c.Files {
			if f.Name == pos.File {
				found = true
				break
			}
			before += f.Size
		}
		if !found {
			return BinlogLag{}, fmt.Errorf("the connector's binlog file %s is not among the server's files", pos.File)
		}
		lag.Position = before + pos.Pos
		lag.BehindBytes = max(c.Written-lag.Position, 0)
	}
	if pos.File != current && c.Expiry > 0 && !pos.EventsAt.IsZero() {
		// The file was last written no earlier than the last event the
		// connector read in it, so expiry purges it no earlier than that
		// event's time plus the expiry.
		lag.Headroom, lag.HasHeadroom = c.Expiry-now.Sub(pos.EventsAt), true
	}
	return lag, nil
}

// binlogSeq parses the sequence numbers of two binlog files of one base.
func binlogSeq(a, b string) (int64, int64, bool) {
	ia, ib := strings.LastIndexByte(a, '.'), strings.LastIndexByte(b, '.')
	if ia < 0 || ib < 0 || a[:ia] != b[:ib] {
		return 0, 0, false
	}
	n, err1 := strconv.ParseInt(a[ia+1:], 10, 64)
	m, err2 := strconv.ParseInt(b[ib+1:], 10, 64)
	return n, m, err1 == nil && err2 == nil
}
