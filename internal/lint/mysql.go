package lint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
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

// MySQLIndex is UnpublishedIndex on MySQL, which has no partial index:
// an index whose first column is published_at keeps the unpublished rows
// (NULL sorts first) together at its start, so a polling relay's claim and
// the backlog query read only the backlog's entries.
func MySQLIndex(p *config.Pipeline, indexes []mysql.Index) Finding {
	f := Finding{Check: CheckIndex}
	pub := p.Outbox.Columns.PublishedAt
	if p.Relay.Kind != config.RelayPolling || pub == "" {
		f.Level, f.Message = OK, "not needed: log capture reads the binlog, not the table"
		return f
	}
	for _, ix := range indexes {
		if len(ix.Columns) > 0 && strings.EqualFold(ix.Columns[0], pub) {
			f.Level = OK
			f.Message = fmt.Sprintf("index %s (%s) leads with %s", ix.Name, strings.Join(ix.Columns, ", "), pub)
			return f
		}
	}
	f.Level = Fail
	f.Message = fmt.Sprintf("no index leads with %s: every relay poll and backlog query scans the whole table history", pub)
	second := p.Outbox.Columns.ID
	if c := p.Outbox.Columns.CreatedAt; c != "" {
		second = c
	}
	f.Fix = fmt.Sprintf("ALTER TABLE %s ADD INDEX %s (%s, %s), ALGORITHM=INPLACE, LOCK=NONE",
		mysql.QuoteTable(p.Outbox.Table), mysql.QuoteIdent("ix_"+pub), mysql.QuoteIdent(pub), mysql.QuoteIdent(second))
	return f
}

// mysqlPrivilege is one privilege the prober or a watcher needs, and what
// its absence does.
type mysqlPrivilege struct {
	name string
	// on is where it is granted: the table, or *.* for a global one.
	on    string
	level string
	// blinds says what the pipeline loses without it.
	blinds string
}

// mysqlPrivileges are the privileges of a pipeline's user, in the order
// lint reports them: what the canaries need, then the watchers.
func mysqlPrivileges(p *config.Pipeline) []mysqlPrivilege {
	table := p.Outbox.Table
	out := []mysqlPrivilege{
		{mysql.PrivInsert, table, Fail, "no canary can be inserted: the pipeline is not measured (OutboxCanaryInsertsFailing)"},
		{mysql.PrivSelect, table, Fail, "published_at cannot be read back and the backlog watcher fails: no publish stamp, no backlog alerts"},
	}
	if p.Canary.DeleteAfterInsert {
		out = append(out, mysqlPrivilege{mysql.PrivDelete, table, Fail, "canary.delete_after_insert cannot delete the canary row: every insert fails"})
	}
	out = append(out, mysqlPrivilege{mysql.PrivProcess, "*.*", Warn,
		"information_schema.innodb_trx is refused: the transactions watcher fails (OutboxLongTransaction is blind) and diagnose cannot name a transaction that hides rows"})
	if p.Relay.Kind == config.RelayCDC {
		out = append(out, mysqlPrivilege{mysql.PrivBinlogMonitor, "*.*", Warn,
			"SHOW BINARY LOGS is refused: the binlog and binlog_connector watchers fail (the binlog alerts are blind) and lint and diagnose cannot read the binlog"})
	}
	return out
}

// MySQLPrivileges judges what ProbePrivileges found the user may do: each
// missing privilege is named with what it blinds; missing what the
// canaries need is a FAIL, missing what a watcher needs a WARN.
func MySQLPrivileges(p *config.Pipeline, refused mysql.Refusals) Finding {
	f := Finding{Check: CheckPrivileges, Level: OK}
	var missing, grants, held []string
	for _, pr := range mysqlPrivileges(p) {
		err, no := refused[pr.name]
		if !no {
			held = append(held, pr.name)
			continue
		}
		if pr.level == Fail || f.Level == OK {
			f.Level = pr.level
		}
		why := pr.blinds
		var me *driver.MySQLError
		if errors.As(err, &me) && me.Number == 1290 {
			why = "the server is read-only (" + me.Message + "): " + why
		}
		missing = append(missing, fmt.Sprintf("no %s on %s: %s", pr.name, pr.on, why))
		on := pr.on
		if on != "*.*" {
			on = mysql.QuoteTable(on)
		}
		grants = append(grants, fmt.Sprintf("GRANT %s ON %s TO <user>", pr.name, on))
	}
	if len(missing) == 0 {
		f.Message = "the user may " + strings.Join(held, ", ") + ": everything the prober and its watchers do"
		return f
	}
	f.Message = strings.Join(missing, "; ")
	f.Fix = strings.Join(grants, "; ")
	if refused[mysql.PrivBinlogMonitor] != nil {
		f.Fix += " (MySQL: REPLICATION CLIENT for BINLOG MONITOR)"
	}
	return f
}

// MySQLOutbox is lint on a pipeline on MySQL or MariaDB: the table (its
// backlog query, for a polling relay), the unpublished index, the user's
// privileges and the binlog (Binlog). The connector is ConnectorChecks'.
func MySQLOutbox(ctx context.Context, db *mysql.DB, p *config.Pipeline) ([]Finding, error) {
	var out []Finding
	c := p.Outbox.Columns
	if p.Relay.Kind == config.RelayPolling {
		b, err := db.Backlog(ctx, outboxdb.Table{Name: p.Outbox.Table, ID: c.ID, PublishedAt: c.PublishedAt, CreatedAt: c.CreatedAt})
		if err != nil {
			out = append(out, Finding{Check: CheckTable, Level: Fail, Message: db.Explain(err).Error(),
				Fix: "create the table (deploy/sql/mysql_schema_a.sql), check outbox.table and outbox.columns, and grant the user SELECT on it"})
		} else {
			out = append(out, Finding{Check: CheckTable, Level: OK,
				Message: fmt.Sprintf("%s readable: %d unpublished rows, the oldest %s old", p.Outbox.Table, b.Rows, b.OldestAge.Round(time.Millisecond))})
		}
		ix, err := db.Indexes(ctx, p.Outbox.Table)
		if err != nil {
			return nil, db.Explain(err)
		}
		out = append(out, MySQLIndex(p, ix))
	}
	refused, err := db.ProbePrivileges(ctx, p.Outbox.Table, c.ID, p.Canary.DeleteAfterInsert)
	if err != nil {
		var me *driver.MySQLError
		if !errors.As(err, &me) || me.Number != 1146 {
			return nil, db.Explain(err)
		}
		// No such table: the table check (polling) says so, or here.
		if p.Relay.Kind != config.RelayPolling {
			out = append(out, Finding{Check: CheckTable, Level: Fail, Message: err.Error(),
				Fix: "create the table (deploy/sql/mysql_debezium_outbox.sql) and check outbox.table"})
		}
	} else {
		out = append(out, MySQLPrivileges(p, refused))
	}
	log, err := db.CaptureLog(ctx)
	switch {
	case err != nil && p.Relay.Kind != config.RelayCDC:
	case err != nil && refused[mysql.PrivBinlogMonitor] != nil:
		out = append(out, Finding{Check: CheckBinlog, Level: Fail,
			Message: "the binlog's files and position cannot be read without BINLOG MONITOR (see privileges): whether log capture can work is not checked",
			Fix:     "GRANT BINLOG MONITOR ON *.* TO <user> (MySQL: REPLICATION CLIENT)"})
	case err != nil:
		return nil, fmt.Errorf("binlog: %w", db.Explain(err))
	default:
		out = append(out, Binlog(p, log)...)
	}
	return out, nil
}
