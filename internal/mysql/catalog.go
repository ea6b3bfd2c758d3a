package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	driver "github.com/go-sql-driver/mysql"
)

// Index is one index of a table, its columns in order.
type Index struct {
	Name    string
	Columns []string
}

// Indexes lists the indexes of table (table or database.table; without a
// database, the connection's) from information_schema.STATISTICS, which
// shows a user the tables it has any privilege on. No index, or no such
// table, is an empty list.
func (d *DB) Indexes(ctx context.Context, table string) ([]Index, error) {
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		schema, name = "", table
	}
	rows, err := d.db.QueryContext(ctx, `
		SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?
		ORDER BY INDEX_NAME, SEQ_IN_INDEX`, schema, name)
	if err != nil {
		return nil, fmt.Errorf("indexes of %s: %w", table, err)
	}
	defer rows.Close()
	var out []Index
	for rows.Next() {
		var ix string
		var col sql.NullString // NULL for an expression's part (MySQL 8 functional index)
		if err := rows.Scan(&ix, &col); err != nil {
			return nil, fmt.Errorf("indexes of %s: %w", table, err)
		}
		if len(out) == 0 || out[len(out)-1].Name != ix {
			out = append(out, Index{Name: ix})
		}
		out[len(out)-1].Columns = append(out[len(out)-1].Columns, col.String)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("indexes of %s: %w", table, err)
	}
	return out, nil
}

// Server is what lint reads about the server a connector captures.
type Server struct {
	Database string // DATABASE(): the DSN's database
	ServerID int64  // @@server_id, which a connector's database.server.id must not repeat
}

// Server reads the connection's database and the server's id.
func (d *DB) Server(ctx context.Context) (Server, error) {
	var s Server
	var db sql.NullString
	if err := d.db.QueryRowContext(ctx, "SELECT DATABASE(), @@server_id").Scan(&db, &s.ServerID); err != nil {
		return Server{}, fmt.Errorf("server: %w", err)
	}
	s.Database = db.String
	return s, nil
}

// Privilege names, as GRANT spells them on MariaDB (MySQL's REPLICATION
// CLIENT is PrivBinlogMonitor's alias there).
const (
	PrivSelect        = "SELECT"
	PrivInsert        = "INSERT"
	PrivDelete        = "DELETE"
	PrivProcess       = "PROCESS"
	PrivBinlogMonitor = "BINLOG MONITOR"
)

// Refusals are the privileges the server refused, each with its error;
// an absent key was granted (or not tried).
type Refusals map[string]error

// ProbePrivileges runs each statement the prober and its watchers need,
// in forms that change nothing: a SELECT and, in a transaction rolled
// back, an INSERT ... SELECT and a DELETE of no row on the table (DELETE
// only with del; INSERT only with SELECT, which it needs as well), information_schema.innodb_trx (PROCESS) and SHOW BINARY
// LOGS (BINLOG MONITOR, MySQL's REPLICATION CLIENT). Trying, rather than
// reading the grants, counts roles, wildcard database grants and column
// grants as the server does. A refusal is recorded; any other error (the
// server down, no such table) is returned.
func (d *DB) ProbePrivileges(ctx context.Context, table, idColumn string, del bool) (Refusals, error) {
	out := Refusals{}
	try := func(priv string, err error) error {
		var me *driver.MySQLError
		switch {
		case err == nil:
			return nil
		// 1142/1143: table/column command denied; 1227: a global
		// privilege needed; 1044: database access denied; 1290: the
		// server is read-only, which refuses inserts to every user.
		case errors.As(err, &me) && (me.Number == 1142 || me.Number == 1143 || me.Number == 1227 || me.Number == 1044 || me.Number == 1290):
			out[priv] = err
			return nil
		// 1381: no binlog; a fact of the server, which lint's binlog
		// check reports, not a privilege.
		case errors.As(err, &me) && me.Number == 1381:
			return nil
		}
		return fmt.Errorf("%s: %w", priv, err)
	}
	t, id := QuoteTable(table), QuoteIdent(idColumn)
	_, err := d.db.ExecContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE FALSE", id, t))
	if err := try(PrivSelect, err); err != nil {
		return nil, err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("privileges: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Every column, from the table itself: with a column list, strict
	// mode refuses even no row when a NOT NULL column without a default
	// is left out. It needs SELECT too, so it is tried only with it.
	if out[PrivSelect] == nil {
		_, err = tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s SELECT * FROM %s WHERE FALSE", t, t))
		if err := try(PrivInsert, err); err != nil {
			return nil, err
		}
	}
	if del {
		_, err = tx.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE FALSE", t))
		if err := try(PrivDelete, err); err != nil {
			return nil, err
		}
	}
	if err := tx.Rollback(); err != nil {
		return nil, fmt.Errorf("privileges: %w", err)
	}
	_, err = d.db.ExecContext(ctx, "SELECT COUNT(*) FROM information_schema.innodb_trx")
	if err := try(PrivProcess, err); err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err == nil {
		err = rows.Close()
	}
	if err := try(PrivBinlogMonitor, err); err != nil {
		return nil, err
	}
	return out, nil
}
