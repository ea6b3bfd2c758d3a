package postgres

import (
	"context"
	"fmt"
	"time"

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
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	return pool, nil
}
