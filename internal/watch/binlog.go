package watch

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// The binlog watchers of a MySQL database (group.askCaptureLog).

// errBinlogOff fails the binlog watcher of a server that writes none.
var errBinlogOff = errors.New("log_bin is OFF: the server writes no binlog for log capture to read")

// sampleBinlogConnector compares the pipeline's connector's committed
// binlog position with binlog, the server's (nil: it could not be read).
func (w *Watcher) sampleBinlogConnector(ctx context.Context, binlog *outboxdb.CaptureLog) {
	p := w.p
	if p.Watch.ConnectURL == "" || p.Watch.Connector == "" {
		return
	}
	w.run(ctx, WatcherBinlogConnector, func(ctx context.Context) error {
		if binlog == nil {
			return errors.New("the server's binlog could not be read (watcher binlog): the connector's position has nothing to be compared with")
		}
		offsets, err := connect.QueryOffsets(ctx, w.http, p.Watch.ConnectURL, p.Watch.Connector)
		if err != nil {
			return err
		}
		pos, ok := connect.BinlogOffset(offsets)
		if !ok {
			return fmt.Errorf("connector %s has committed no binlog position (GET /connectors/%s/offsets)", p.Watch.Connector, p.Watch.Connector)
		}
		lag, err := connect.ConnectorBinlogLag(*binlog, pos, w.now())
		if err != nil {
			return err
		}
		w.setBinlogConnector(lag)
		return nil
	}, w.dropBinlogConnector)
}

func (w *Watcher) setBinlog(c outboxdb.CaptureLog) {
	name := w.p.Name
	w.m.BinlogWritten.WithLabelValues(name).Set(float64(c.Written))
	w.m.BinlogRetainedBytes.WithLabelValues(name).Set(float64(c.RetainedBytes))
	w.m.BinlogRetainedFiles.WithLabelValues(name).Set(float64(c.RetainedFiles))
	w.m.BinlogExpiry.WithLabelValues(name).Set(c.Expiry.Seconds())
}

func (w *Watcher) setBinlogConnector(lag connect.BinlogLag) {
	name, c := w.p.Name, w.p.Watch.Connector
	if lag.Purged {
		w.m.BinlogConnectorPosition.DeleteLabelValues(name, c)
		w.m.BinlogConnectorBehindBytes.DeleteLabelValues(name, c)
		w.m.BinlogConnectorFilePurged.WithLabelValues(name, c).Set(1)
	} else {
		w.m.BinlogConnectorPosition.WithLabelValues(name, c).Set(float64(lag.Position))
		w.m.BinlogConnectorBehindBytes.WithLabelValues(name, c).Set(float64(lag.BehindBytes))
		w.m.BinlogConnectorFilePurged.WithLabelValues(name, c).Set(0)
	}
	w.m.BinlogConnectorBehindFiles.WithLabelValues(name, c).Set(float64(lag.BehindFiles))
	if lag.HasHeadroom {
		w.m.BinlogConnectorPurgeHeadroom.WithLabelValues(name, c).Set(lag.Headroom.Seconds())
	} else {
		w.m.BinlogConnectorPurgeHeadroom.DeleteLabelValues(name, c)
	}
}

func (w *Watcher) dropBinlogConnector() {
	name, c := w.p.Name, w.p.Watch.Connector
	w.m.BinlogConnectorPosition.DeleteLabelValues(name, c)
	w.m.BinlogConnectorBehindBytes.DeleteLabelValues(name, c)
	w.m.BinlogConnectorBehindFiles.DeleteLabelValues(name, c)
	w.m.BinlogConnectorFilePurged.DeleteLabelValues(name, c)
	w.m.BinlogConnectorPurgeHeadroom.DeleteLabelValues(name, c)
}

func (w *Watcher) dropBinlog() {
	name := w.p.Name
	w.m.BinlogWritten.DeleteLabelValues(name)
	w.m.BinlogRetainedBytes.DeleteLabelValues(name)
	w.m.BinlogRetainedFiles.DeleteLabelValues(name)
	w.m.BinlogExpiry.DeleteLabelValues(name)
}
