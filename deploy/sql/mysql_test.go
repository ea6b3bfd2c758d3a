package outboxsql_test

// Loads every MySQL schema into a fresh database of the local stack's
// MariaDB; skips without it, fails in CI.

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestMySQLSchemasLoadIntoAFreshMariaDBDatabase(t *testing.T) {
	m := stacktest.Load(t).MySQL(t)
	tests := []struct {
		name        string
		schema      string
		wantColumns []string
		wantIndex   []string // the unpublished index's columns, published_at first
	}{
		{"Seed schema A creates its columns and the index on (published_at, created_at).", outboxsql.MySQLSchemaA,
			[]string{"id", "aggregate_type", "aggregate_id", "payload", "created_at", "published_at"}, []string{"published_at", "created_at"}},
		{"Seed schema B creates its columns and the index on (published_at, id).", outboxsql.MySQLSchemaB,
			[]string{"id", "aggregate_id", "event_type", "payload", "created_at", "published_at"}, []string{"published_at", "id"}},
		{"Debezium's outbox table has its default columns and no published_at.", outboxsql.MySQLDebeziumOutbox,
			[]string{"id", "aggregatetype", "aggregateid", "type", "payload"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			_, adminDSN := m.NewDatabase(t)
			db := stacktest.OpenMySQL(t, adminDSN)
			if _, err := db.ExecContext(ctx, tt.schema); err != nil {
				t.Fatalf("loading the schema: %v", err)
			}
			cols := queryStrings(t, db, `SELECT column_name FROM information_schema.columns
				WHERE table_schema = DATABASE() AND table_name = 'outbox' ORDER BY ordinal_position`)
			if !slices.Equal(cols, tt.wantColumns) {
				t.Errorf("columns = %v, want %v", cols, tt.wantColumns)
			}
			index := queryStrings(t, db, `SELECT column_name FROM information_schema.statistics
				WHERE table_schema = DATABASE() AND table_name = 'outbox' AND index_name = 'outbox_unpublished_idx'
				ORDER BY seq_in_index`)
			if !slices.Equal(index, tt.wantIndex) {
				t.Errorf("unpublished index columns = %v, want %v", index, tt.wantIndex)
			}
			// created_at is the statement's start on the database clock,
			// stored with microseconds.
			if tt.wantIndex != nil {
				route := tt.wantColumns[1]
				if route == "aggregate_id" {
					route = "event_type" // schema B routes by event type
				}
				if _, err := db.ExecContext(ctx, "INSERT INTO outbox ("+route+", aggregate_id, payload) VALUES ('order', 'k', '{}')"); err != nil {
					t.Fatal(err)
				}
				var precision int
				if err := db.QueryRowContext(ctx, `SELECT datetime_precision FROM information_schema.columns
					WHERE table_schema = DATABASE() AND table_name = 'outbox' AND column_name = 'created_at'`).Scan(&precision); err != nil {
					t.Fatal(err)
				}
				if precision != 6 {
					t.Errorf("created_at precision %d, want 6 (microseconds)", precision)
				}
			}
		})
	}
}

func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
