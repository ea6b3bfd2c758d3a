package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// The binaries are built without pgx's table of Go types (the Makefile's
// TAGS), so this test means most as `go test -tags
// nopgxregisterdefaulttypes`: then only RegisterArgTypes names the types.
func TestPoolSendsTheArgumentTypesInTheQueryModesThatDoNotAskTheServer(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	at := time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC)
	name := "canary's" // sent through a pointer, as a nullable argument is
	for _, mode := range []string{
		"exec",            // what PgBouncer's transaction pooling needs,
		"simple_protocol", // or this,
		"cache_statement", // and pgx's default
	} {
		t.Run("default_query_exec_mode="+mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dsn := st.PGDSN + "&default_query_exec_mode=" + mode
			pool, err := NewPool(ctx, config.Database{DSN: config.InlineSecret(dsn)}, PoolOptions{MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var (
				s        string
				n        int64
				ids      []string
				ts       time.Time
				ok       bool
				b        []byte
				doc      string
				interval time.Duration
				bounds   []float64
				nullable *string
			)
			err = pool.QueryRow(ctx, `SELECT $1::text, $2::int8 + $3::int8, $4::text[], $5::timestamptz, $6::bool, $7::bytea, $8::json::text, $9::interval, $10::float8[], $11::text`,
				"canary's", 41, int64(1), []string{"a", "b,c"}, at, true, []byte{0, 1, 2}, json.RawMessage(`{"k":1}`), 90*time.Second,
				[]float64{0, 60}, &name,
			).Scan(&s, &n, &ids, &ts, &ok, &b, &doc, &interval, &bounds, &nullable)
			if err != nil {
				t.Fatalf("a query with the prober's argument types in mode %s: %v", mode, err)
			}
			if s != "canary's" || n != 42 || len(ids) != 2 || ids[1] != "b,c" || !ts.Equal(at) || !ok || len(b) != 3 || b[2] != 2 || doc != `{"k":1}` || interval != 90*time.Second ||
				len(bounds) != 2 || bounds[1] != 60 || nullable == nil || *nullable != "canary's" {
				t.Errorf("mode %s: got %q %d %q %s %t %v %s %s %v %v", mode, s, n, ids, ts, ok, b, doc, interval, bounds, nullable)
			}
		})
	}
}
