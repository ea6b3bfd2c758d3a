package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// Set is the watchers of every pipeline of a process. The database
// watchers of pipelines that share a database and a watch.interval run in
// one loop that asks each question once per interval: one open-transactions
// query for the database, one backlog query per outbox table, one
// replication-slots query. Each pipeline still exports its own series,
// watcher_up and error counts from the shared answer. The watchers of
// Kafka and Kafka Connect, whose answers are each pipeline's own, run in a
// loop per pipeline that has them.
type Set struct {
	groups   []*group
	watchers []*Watcher
	own      []*Watcher // Add's, each sampled whole in a loop of its own
}

// OpenSet builds the watchers of pipelines on the process's shared
// connections (Open), grouped by database and watch.interval.
func OpenSet(pipelines []config.Pipeline, pools *postgres.Pools, clusters *kafkaclient.Clusters, m *Metrics, log *slog.Logger) (*Set, error) {
	type groupKey struct {
		pool     *pgxpool.Pool // one per database.dsn (Pools)
		interval config.Duration
	}
	s := &Set{}
	index := map[groupKey]int{}
	var members [][]*Watcher
	for i := range pipelines {
		p := &pipelines[i]
		w, err := Open(p, pools, clusters, m, log)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: watchers: %w", p.Name, err)
		}
		pool, err := pools.Pool(p.Database)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: watchers: %w", p.Name, err)
		}
		s.watchers = append(s.watchers, w)
		k := groupKey{pool, p.Watch.Interval}
		g, ok := index[k]
		if !ok {
			g = len(members)
			index[k] = g
			members = append(members, nil)
		}
		members[g] = append(members[g], w)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, ws := range members {
		// Every member holds the same limited Querier on the pool.
		s.groups = append(s.groups, newGroup(ws[0].db, ws, log))
	}
	return s, nil
}

// Run samples until ctx is done: one loop per database and watch.interval,
// one per pipeline that watches Kafka or Kafka Connect, and one per
// watcher added with Add.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, g := range s.groups {
		wg.Go(func() { every(ctx, g.interval, g.Sample) })
	}
	for _, w := range s.own {
		wg.Go(func() { every(ctx, time.Duration(w.p.Watch.Interval), w.Sample) })
	}
	for _, w := range s.watchers {
		if w.watchesKafka() {
			wg.Go(func() { every(ctx, time.Duration(w.p.Watch.Interval), w.sampleKafka) })
		}
	}
	wg.Wait()
}

// group samples the database watchers (backlog, open transactions,
// replication slots) of pipelines that share a database and a
// watch.interval, asking each question once and handing its answer to
// every pipeline that asked it. A failed answer fails the watcher of each
// of them, and is logged once for all of them.
type group struct {
	db       postgres.Querier
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger // names no pipeline: lines about several list them
	members  []*Watcher

	// The distinct watch.long_transaction_thresholds of the members: one
	// query counts the open transactions over each (QueryOpenTransactions).
	thresholds []time.Duration
	backlogs   []*sharedBacklog // one per outbox table that polling members read
	slotUsers  []*Watcher       // the cdc members
}

// sharedBacklog is one backlog question: the pipelines whose backlog
// query is the same statement (same table, published_at and created_at
// columns) share its answer.
type sharedBacklog struct {
	p     *config.Pipeline // the first user's; the query is every user's
	users []*Watcher
	// indexChecked: the table's partial index was looked for once, and a
	// missing one reported, for every user at once.
	indexChecked bool
}

// newGroup plans the questions of members, which share db and
// watch.interval.
func newGroup(db postgres.Querier, members []*Watcher, log *slog.Logger) *group {
	interval := time.Duration(members[0].p.Watch.Interval)
	g := &group{db: db, interval: interval, timeout: sampleTimeout(interval), log: log, members: members}
	byQuery := map[string]*sharedBacklog{}
	for _, w := range members {
		p := w.p
		if threshold := time.Duration(p.Watch.LongTransactionThreshold); !slices.Contains(g.thresholds, threshold) {
			g.thresholds = append(g.thresholds, threshold)
		}
		switch p.Relay.Kind {
		case config.RelayPolling:
			q := postgres.BacklogQuery(p)
			b, ok := byQuery[q]
			if !ok {
				b = &sharedBacklog{p: p}
				byQuery[q] = b
				g.backlogs = append(g.backlogs, b)
			}
			b.users = append(b.users, w)
		case config.RelayCDC:
			g.slotUsers = append(g.slotUsers, w)
		}
	}
	return g
}

// Sample asks each question once and hands each answer to the pipelines
// that asked as it comes. The database-wide questions go first: they
// wait on no table lock, whereas a locked outbox table holds its backlog
// query, and with it one of the watchers' few connections (Pools.Limited),
// for the whole timeout; asked behind it they could time out waiting for
// a connection. The backlog questions then go all at once, so a locked
// table delays no other table's answer while a connection is free.
func (g *group) Sample(ctx context.Context) {
	databaseWide := []func(context.Context) func(){g.askTransactions}
	if len(g.slotUsers) > 0 {
		databaseWide = append(databaseWide, g.askSlots)
	}
	g.ask(ctx, databaseWide)
	tables := make([]func(context.Context) func(), len(g.backlogs))
	for i, b := range g.backlogs {
		tables[i] = func(ctx context.Context) func() { return g.askBacklog(ctx, b) }
	}
	g.ask(ctx, tables)
}

// ask runs questions concurrently and applies each answer as it comes,
// here: the pipelines' state is the sampling goroutine's alone.
func (g *group) ask(ctx context.Context, questions []func(context.Context) func()) {
	if len(questions) == 1 {
		questions[0](ctx)()
		return
	}
	answers := make(chan func(), len(questions))
	for _, q := range questions {
		go func() { answers <- q(ctx) }()
	}
	for range questions {
		apply := <-answers
		apply()
	}
}

// askBacklog queries one outbox table's backlog and returns how to hand
// the answer to the pipelines that read the table.
func (g *group) askBacklog(ctx context.Context, b *sharedBacklog) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	checked, hasIndex := false, false
	if !b.indexChecked {
		ok, err := postgres.HasUnpublishedIndex(sctx, g.db, b.p)
		checked, hasIndex = err == nil, ok
	}
	backlog, err := postgres.QueryBacklog(sctx, g.db, b.p)
	return func() {
		if checked {
			b.indexChecked = true
			if !hasIndex {
				c := b.p.Outbox.Columns
				g.logAbout(ctx, slog.LevelWarn, b.users, "the outbox has no partial index on the unpublished rows; every relay poll and backlog query scans the whole table",
					"table", b.p.Outbox.Table,
					"fix", "CREATE INDEX ON "+b.p.Outbox.Table+" ("+c.ID+") WHERE "+c.PublishedAt+" IS NULL")
			}
		}
		g.settle(ctx, WatcherBacklog, b.users, err,
			func(w *Watcher) { w.setBacklog(backlog) },
			(*Watcher).dropBacklog)
	}
}

// askTransactions counts the database's open transactions over each
// member's threshold in one query.
func (g *group) askTransactions(ctx context.Context) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	open, err := postgres.QueryOpenTransactions(sctx, g.db, g.thresholds)
	return func() {
		g.settle(ctx, WatcherTransactions, g.members, err,
			func(w *Watcher) {
				w.setTransactions(open.At(slices.Index(g.thresholds, time.Duration(w.p.Watch.LongTransactionThreshold))))
			},
			(*Watcher).dropTransactions)
	}
}

// askSlots reads every replication slot of the database once; each cdc
// member exports the ones it watches.
func (g *group) askSlots(ctx context.Context) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	slots, err := postgres.QuerySlots(sctx, g.db, "")
	return func() {
		g.settle(ctx, WatcherSlots, g.slotUsers, err,
			func(w *Watcher) { w.setSlots(slots) },
			(*Watcher).dropSlots)
	}
}

// settle records one shared answer for each of its users: on success
// apply exports it, on failure drop withdraws their series. Each change
// (started failing, still failing, recovered) is one log line for all the
// users it happened to. An error while ctx has been cancelled is the
// service shutting down, not the database failing: nothing is recorded.
func (g *group) settle(ctx context.Context, watcher string, users []*Watcher, err error, apply, drop func(*Watcher)) {
	// Login and TLS failures worded for the operator.
	err = postgres.Explain(err)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		g.logAbout(ctx, slog.LevelDebug, users, "watcher stopped by shutdown", "watcher", watcher, "err", err)
		return
	}
	var failing, still, back []*Watcher
	for _, w := range users {
		if err == nil {
			apply(w)
		}
		switch w.record(watcher, err, func() { drop(w) }) {
		case startedFailing:
			failing = append(failing, w)
		case stillFailing:
			still = append(still, w)
		case recovered:
			back = append(back, w)
		}
	}
	g.logAbout(ctx, slog.LevelWarn, failing, msgFailing, "watcher", watcher, "err", err)
	g.logAbout(ctx, slog.LevelDebug, still, msgStillFailing, "watcher", watcher, "err", err)
	g.logAbout(ctx, slog.LevelInfo, back, msgRecovered, "watcher", watcher)
}

// logAbout logs one line about the pipelines of ws: as the pipeline's own
// line when there is one, else naming them all in pipelines.
func (g *group) logAbout(ctx context.Context, level slog.Level, ws []*Watcher, msg string, args ...any) {
	switch {
	case len(ws) == 0:
		return
	case len(ws) == 1:
		ws[0].log.Log(ctx, level, msg, args...)
		return
	case !g.log.Enabled(ctx, level):
		return // spare the list of names
	}
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.p.Name
	}
	g.log.Log(ctx, level, msg, append([]any{"pipelines", strings.Join(names, ", ")}, args...)...)
}
