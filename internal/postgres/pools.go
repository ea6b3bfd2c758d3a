package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// ApplicationName is the application_name of every connection the prober
// opens, so a DBA finds them in pg_stat_activity, unless the DSN (or
// PGAPPNAME) already names one. A pool is shared by every pipeline on its
// database, and a session has one application_name, so it cannot name the
// pipeline; the pipeline is in the query's text (the outbox table) instead.
const ApplicationName = "outbox-canary"

// Pool sizing. A shared pool holds at most
//
//	min(PoolMaxConnsCap, PoolBaseConns + ceil(users / PoolUsersPerConn))
//
// connections: 3 for up to 25 pipelines, 6 for 100, 8 from 150 on. A
// canary insert holds a connection for about a millisecond and a watcher
// sample for a few, so 300 pipelines at `@every 10s` keep well under one
// busy on average; the headroom is for bursts (schedules that fire
// together, a slow database). The cap keeps the whole prober within 10
// connections of a database, a small share of the default max_connections
// (100), whatever the number of pipelines.
const (
	PoolBaseConns    = 2
	PoolUsersPerConn = 25
	PoolMaxConnsCap  = 8
	// PoolReservedConns of every pool are kept from the watchers (Limit),
	// so slow watcher queries never make a canary insert wait.
	PoolReservedConns = 2
)

// PoolSize is the size of a pool shared by users pipelines.
func PoolSize(users int) int32 {
	n := PoolBaseConns + (users+PoolUsersPerConn-1)/PoolUsersPerConn
	return int32(min(max(n, PoolBaseConns+1), PoolMaxConnsCap))
}

// Pools holds one pool per distinct database, shared by every pipeline on
// it: the prober's inserts and lookups, the watchers and the checks at
// start. Two pipelines share a pool when their database.dsn resolves to
// the same connection string (the usual case: one secret for every
// pipeline on a database). The key is the whole string, not host, port,
// database and user alone, because anything else in it (password, TLS
// files, search_path, target_session_attrs) changes what a connection is;
// two strings that spell the same database differently get two pools. The
// key is never logged: a pool is named by Describe.
type Pools struct {
	mu     sync.Mutex
	byDSN  map[string]*sharedPool
	closed bool
}

type sharedPool struct {
	pool  *pgxpool.Pool
	label string
	users int
	limit chan struct{} // the watchers' share of the pool's connections
	// db is the pool as the prober's outbox database, watched the
	// watchers' questions on their share: one each per database, so they
	// key what is shared per database.
	db      *OutboxDB
	watched *Probes
}

// PoolsOptions tunes every pool of a Pools.
type PoolsOptions struct {
	// ConnectTimeout bounds each connection attempt (default 5s).
	ConnectTimeout time.Duration
	// HealthCheckPeriod is how often idle connections are checked (default
	// 5s): a short one finds the connections a database restart broke
	// before a canary insert does.
	HealthCheckPeriod time.Duration
}

// NewPools builds one pool for each distinct database of dbs, sized by the
// number of entries that name it (one per pipeline). Like NewPool it
// connects to nothing yet. Its errors name the database's position in dbs
// as pipelines[i] would, never the DSN.
func NewPools(ctx context.Context, dbs []config.Database, o PoolsOptions) (*Pools, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.HealthCheckPeriod <= 0 {
		o.HealthCheckPeriod = 5 * time.Second
	}
	users := map[string]int{}
	dsns := make([]string, len(dbs))
	for i, db := range dbs {
		// The other families' databases are theirs (mysql.Pools).
		if kind, err := db.Family(); err != nil {
			return nil, fmt.Errorf("database %d: %w", i, err)
		} else if kind != config.KindPostgres {
			continue
		}
		dsn, err := db.DSN.Resolve()
		if err != nil {
			return nil, fmt.Errorf("database %d: database.dsn: %w", i, err)
		}
		dsns[i] = dsn
		users[dsn]++
	}
	ps := &Pools{byDSN: map[string]*sharedPool{}}
	for i, db := range dbs {
		dsn := dsns[i]
		if dsn == "" {
			continue
		}
		if _, ok := ps.byDSN[dsn]; ok {
			continue
		}
		size := PoolSize(users[dsn])
		pool, err := NewPool(ctx, db, PoolOptions{MaxConns: size, ConnectTimeout: o.ConnectTimeout, HealthCheckPeriod: o.HealthCheckPeriod})
		if err != nil {
			ps.Close()
			return nil, fmt.Errorf("database %d: %w", i, err)
		}
		sp := &sharedPool{pool: pool, label: Describe(pool.Config()), users: users[dsn],
			limit: make(chan struct{}, max(1, int(size)-PoolReservedConns))}
		sp.db = NewOutboxDB(pool)
		sp.watched = NewProbes(Limit(pool, sp.limit), sp.label)
		ps.byDSN[dsn] = sp
	}
	return ps, nil
}

// Pool returns the shared pool of db; db must be one NewPools was given.
func (ps *Pools) Pool(db config.Database) (*pgxpool.Pool, error) {
	sp, err := ps.lookup(db)
	if err != nil {
		return nil, err
	}
	return sp.pool, nil
}

// Limited returns db's shared pool for a watcher: a Querier that holds at
// most the pool's size minus PoolReservedConns connections at a time over
// all its users, so watchers queue among themselves rather than in front
// of the canary inserts.
func (ps *Pools) Limited(db config.Database) (Querier, error) {
	sp, err := ps.lookup(db)
	if err != nil {
		return nil, err
	}
	return Limit(sp.pool, sp.limit), nil
}

// DB returns db's shared pool as an outbox database, the same value for
// every pipeline on it.
func (ps *Pools) DB(db config.Database) (*OutboxDB, error) {
	sp, err := ps.lookup(db)
	if err != nil {
		return nil, err
	}
	return sp.db, nil
}

// Watched returns the watchers' questions of db (the same value for every
// pipeline on it), asked on their share of the pool (Limited).
func (ps *Pools) Watched(db config.Database) (*Probes, error) {
	sp, err := ps.lookup(db)
	if err != nil {
		return nil, err
	}
	return sp.watched, nil
}

func (ps *Pools) lookup(db config.Database) (*sharedPool, error) {
	dsn, err := db.DSN.Resolve()
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, errors.New("database pools: closed")
	}
	sp, ok := ps.byDSN[dsn]
	if !ok {
		return nil, errors.New("database pools: this database.dsn was not among the pipelines the pools were built for")
	}
	return sp, nil
}

// PoolInfo describes one shared pool without its secrets.
type PoolInfo struct {
	// Database is host:port/database as user (Describe).
	Database string
	Users    int
	MaxConns int32
}

// Info lists the pools, for the start-up log.
func (ps *Pools) Info() []PoolInfo {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]PoolInfo, 0, len(ps.byDSN))
	for _, sp := range ps.byDSN {
		out = append(out, PoolInfo{Database: sp.label, Users: sp.users, MaxConns: sp.pool.Config().MaxConns})
	}
	slices.SortFunc(out, func(a, b PoolInfo) int { return strings.Compare(a.Database, b.Database) })
	return out
}

// Close closes every pool; closing twice is harmless.
func (ps *Pools) Close() {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return
	}
	ps.closed = true
	pools := ps.byDSN
	ps.mu.Unlock()
	for _, sp := range pools {
		sp.pool.Close()
	}
}

// Describe names a pool's database for logs: host:port/database as user,
// never the password or the rest of the connection string.
func Describe(c *pgxpool.Config) string {
	cc := c.ConnConfig
	return fmt.Sprintf("%s:%d/%s as %s", cc.Host, cc.Port, cc.Database, cc.User)
}
