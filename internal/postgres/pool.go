package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// PoolOptions sizes a pool for its user: the prober's canary inserts, a
// watcher, or a one-shot command.
type PoolOptions struct {
	// MaxConns bounds the pool (default 2).
	MaxConns int32
	// ConnectTimeout bounds each connection attempt (default 5s), so an
	// unreachable database is reported rather than waited on.
	ConnectTimeout time.Duration
	// HealthCheckPeriod is how often idle connections are checked (default
	// pgx's 1m); a short one finds the connections a database restart
	// broke before a canary insert does.
	HealthCheckPeriod time.Duration
}

// NewPool builds a pool on the pipeline's database, its connections named
// ApplicationName unless the DSN names them. It connects to nothing
// yet: a database that is down at start is found by the first query, and
// retried by whoever owns the pool. The DSN is never part of an error.
func NewPool(ctx context.Context, db config.Database, o PoolOptions) (*pgxpool.Pool, error) {
	pcfg, err := db.PoolConfig() // its errors name database.dsn and never show it
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = o.MaxConns
	if pcfg.MaxConns <= 0 {
		pcfg.MaxConns = 2
	}
	pcfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	if pcfg.ConnConfig.ConnectTimeout <= 0 {
		pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if o.HealthCheckPeriod > 0 {
		pcfg.HealthCheckPeriod = o.HealthCheckPeriod
	}
	// The DSN's application_name (or PGAPPNAME's), if it names one, wins.
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
	}
	afterConnect := pcfg.AfterConnect
	pcfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		RegisterArgTypes(conn)
		if afterConnect != nil {
			return afterConnect(ctx, conn)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	return pool, nil
}

// argTypes names the PostgreSQL type of each Go type that the prober,
// check, lint and diagnose pass as a query argument (diagnose's open
// transactions query sends a []float64), and a few more of the same kinds.
// Pointers need no entry: pgx dereferences them first.
var argTypes = []struct {
	value any
	name  string
}{
	{"", "text"}, {[]string(nil), "_text"},
	{int(0), "int8"}, {[]int(nil), "_int8"},
	{int32(0), "int4"}, {[]int32(nil), "_int4"},
	{int64(0), "int8"}, {[]int64(nil), "_int8"},
	{float64(0), "float8"}, {[]float64(nil), "_float8"},
	{false, "bool"}, {[]bool(nil), "_bool"},
	{time.Time{}, "timestamptz"}, {[]time.Time(nil), "_timestamptz"},
	{time.Duration(0), "interval"},
	{[]byte(nil), "bytea"},
	{json.RawMessage(nil), "json"},
}

// RegisterArgTypes tells conn the PostgreSQL type of the Go types in
// argTypes. pgx needs it only where the server has not said a parameter's
// type: in the exec and simple-protocol query modes, which a DSN asks for
// with default_query_exec_mode (as behind PgBouncer's transaction
// pooling). pgx has a table of these for every Go type it knows, but the
// binaries are built without it (the nopgxregisterdefaulttypes tag, the
// Makefile's TAGS: 1.4 MB of generic code), so this is the part of it
// that a query here can reach.
func RegisterArgTypes(conn *pgx.Conn) {
	m := conn.TypeMap()
	for _, t := range argTypes {
		m.RegisterDefaultPgType(t.value, t.name)
	}
}
