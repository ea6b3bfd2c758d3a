package outboxsql_test

// Loads every schema into a fresh database of the local stack
// (`deploy/local/stack.sh up`); skips without it, fails in CI.

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestSchemasLoadIntoAFreshDatabase(t *testing.T) {
	s := stacktest.Load(t)
	tests := []struct {
		name        string
		schema      string
		wantColumns []string
		wantIndex   bool
	}{
		{"Seed schema A creates its columns and the partial index on created_at.", outboxsql.SchemaA,
			[]string{"id", "aggregate_type", "aggregate_id", "payload", "created_at", "published_at"}, true},
		{"Seed schema B creates its columns and the partial index on id.", outboxsql.SchemaB,
			[]string{"id", "aggregate_id", "event_type", "payload", "created_at", "published_at"}, true},
		{"Debezium's outbox table has its default columns and no published_at.", outboxsql.DebeziumOutbox,
			[]string{"id", "aggregatetype", "aggregateid", "type", "payload"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, s.NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, tt.schema); err != nil {
				t.Fatalf("loading the schema: %v", err)
			}
			rows, _ := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
				WHERE table_name = 'outbox' ORDER BY ordinal_position`)
			cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cols, tt.wantColumns) {
				t.Errorf("columns = %v, want %v", cols, tt.wantColumns)
			}
			var partial bool
			err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes
				WHERE tablename = 'outbox' AND indexdef LIKE '%WHERE (published_at IS NULL)')`).Scan(&partial)
			if err != nil {
				t.Fatal(err)
			}
			if partial != tt.wantIndex {
				t.Errorf("partial index over unpublished rows present = %t, want %t", partial, tt.wantIndex)
			}
		})
	}
}
