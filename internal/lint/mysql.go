package lint

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// CheckBinlog is the check of a MySQL server's binlog for log capture.
const CheckBinlog = "binlog"

// minBinlogExpiry is the binlog retention below which a connector that is
// down over a weekend night loses its position.
const minBinlogExpiry = 24 * time.Hour

// Binlog judges the server's binlog for the pipeline: a cdc relay
// (Debezium's MySQL or MariaDB connector) reads every row change from it,
// so it needs log_bin, binlog_format=ROW (STATEMENT and MIXED log SQL
// text, not the rows, and the connector refuses them) and
// binlog_row_image=FULL (MINIMAL and NOBLOB leave columns out of the
// row, which the outbox EventRouter needs whole). A polling relay reads
// the table, so its pipeline gets no finding.
func Binlog(p *config.Pipeline, c outboxdb.CaptureLog) []Finding {
	if p.Relay.Kind != config.RelayCDC {
		return nil
	}
	fix := "in the server's option file ([mysqld] or [mariadbd]): log_bin, binlog_format = ROW, binlog_row_image = FULL, server_id = <unique>; restart the server"
	if !c.Enabled {
		return []Finding{{Check: CheckBinlog, Level: Fail, Fix: fix,
			Message: "log_bin is OFF: the server writes no binlog, so log capture sees no canary and no business event"}}
	}
	format, image, _ := strings.Cut(c.Format, "/")
	var out []Finding
	if !strings.EqualFold(format, "ROW") {
		out = append(out, Finding{Check: CheckBinlog, Level: Fail, Fix: "SET GLOBAL binlog_format = 'ROW' (new sessions) and " + fix,
			Message: fmt.Sprintf("binlog_format=%s: the binlog holds statements, not rows; log capture needs binlog_format=ROW", format)})
	}
	if !strings.EqualFold(image, "FULL") {
		out = append(out, Finding{Check: CheckBinlog, Level: Fail, Fix: "SET GLOBAL binlog_row_image = 'FULL' (new sessions) and " + fix,
			Message: fmt.Sprintf("binlog_row_image=%s: rows are logged without some of their columns; log capture needs binlog_row_image=FULL", image)})
	}
	if c.Expiry > 0 && c.Expiry < minBinlogExpiry {
		out = append(out, Finding{Check: CheckBinlog, Level: Warn,
			Fix: fmt.Sprintf("binlog_expire_logs_seconds = %d or more, and alert on the connector's lag well before it", int(minBinlogExpiry.Seconds())),
			Message: fmt.Sprintf("binlog_expire_logs_seconds=%d: the server purges a binlog file after %s whether or not the connector has read it; a connector down longer loses its position (a new snapshot, or lost events)",
				int(c.Expiry.Seconds()), c.Expiry)})
	}
	if len(out) == 0 {
		msg := fmt.Sprintf("log_bin ON, binlog_format=%s, binlog_row_image=%s, %d files (%d bytes) kept", format, image, c.RetainedFiles, c.RetainedBytes)
		if c.Expiry > 0 {
			msg += fmt.Sprintf(", purged after %s", c.Expiry)
		}
		out = append(out, Finding{Check: CheckBinlog, Level: OK, Message: msg})
	}
	return out
}

// MySQLOutbox is what lint checks of a pipeline on MySQL or MariaDB so
// far: that its outbox table can be read (the backlog query, for a polling
// relay) and the binlog (Binlog). The other checks of Outbox read
// PostgreSQL's catalogue and are not made.
func MySQLOutbox(ctx context.Context, db outboxdb.DB, p *config.Pipeline) ([]Finding, error) {
	var out []Finding
	if p.Relay.Kind == config.RelayPolling {
		c := p.Outbox.Columns
		b, err := db.Backlog(ctx, outboxdb.Table{Name: p.Outbox.Table, ID: c.ID, PublishedAt: c.PublishedAt, CreatedAt: c.CreatedAt})
		if err != nil {
			out = append(out, Finding{Check: CheckTable, Level: Fail, Message: db.Explain(err).Error(),
				Fix: "create the table (deploy/sql/mysql_schema_a.sql), check outbox.table and outbox.columns, and grant the user SELECT on it"})
		} else {
			out = append(out, Finding{Check: CheckTable, Level: OK,
				Message: fmt.Sprintf("%s readable: %d unpublished rows, the oldest %s old", p.Outbox.Table, b.Rows, b.OldestAge.Round(time.Millisecond))})
		}
	}
	c, err := db.CaptureLog(ctx)
	if err != nil {
		if p.Relay.Kind != config.RelayCDC {
			return out, nil
		}
		return nil, fmt.Errorf("binlog: %w", db.Explain(err))
	}
	return append(out, Binlog(p, c)...), nil
}
