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

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// Set is the watchers of every pipeline of a process. The database
// watchers of pipelines that share a database run in one loop that asks
// each question once: one open-transactions question for the database,
// one backlog question per outbox table, one read of the capture log
// (replication slots, the binlog), each as often as the shortest
// watch.interval of the pipelines that want its answer. Each pipeline
// still exports its own series, watcher_up and error counts from the
// shared answer. The watchers of Kafka and Kafka Connect, whose answers
// are each pipeline's own, run in a loop per pipeline that has them.
type Set struct {
	groups   []*group
	watchers []*Watcher
}

// Databases gives a pipeline's database to its watchers, whatever its
// family: the same value for every pipeline on one database (the
// families' Pools.Watched), which keys the sampler they share.
type Databases func(config.Database) (outboxdb.Watched, error)

// OpenSet builds the watchers of pipelines (Open) on the databases dbs
// gives, one group per database.
func OpenSet(pipelines []config.Pipeline, dbs Databases, clusters *kafkaclient.Clusters, m *Metrics, log *slog.Logger) (*Set, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{}
	index := map[outboxdb.Watched]int{}
	var members [][]*Watcher
	var order []outboxdb.Watched
	for i := range pipelines {
		p := &pipelines[i]
		db, err := dbs(p.Database)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: watchers: %w", p.Name, err)
		}
		w, err := Open(p, db, clusters, m, log)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: watchers: %w", p.Name, err)
		}
		s.watchers = append(s.watchers, w)
		g, ok := index[db]
		if !ok {
			g = len(members)
			index[db] = g
			members = append(members, nil)
			order = append(order, db)
		}
		members[g] = append(members[g], w)
	}
	for g, ws := range members {
		s.groups = append(s.groups, newGroup(order[g], ws, log))
	}
	return s, nil
}

// Run samples until ctx is done: one loop per database, and one per
// pipeline that watches Kafka or Kafka Connect.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, g := range s.groups {
		wg.Go(func() { every(ctx, g.tick, g.sampleDue) })
	}
	for _, w := range s.watchers {
		if w.watchesKafka() {
			wg.Go(func() { every(ctx, time.Duration(w.p.Watch.Interval), w.sampleKafka) })
		}
	}
	wg.Wait()
}

// group samples the database watchers (backlog, open transactions, the
// capture log) of the pipelines on one database, asking each question
// once and handing its answer to every pipeline that asked it. A failed
// answer fails the watcher of each of them, and is logged once for all of
// them.
type group struct {
	db outboxdb.Watched
	// Each question has its own cadence, the shortest interval of the
	// members that want its answer, so a pipeline watched every minute is
	// not asked about every 15 s because another on the database is. The
	// loop ticks at the greatest common divisor of the cadences (1 s at
	// least), so each is asked on time, not at the next multiple of the
	// shortest.
	tick    time.Duration
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger // names no pipeline: lines about several list them
	members []*Watcher

	// The distinct watch.long_transaction_thresholds of the members: one
	// question counts the open transactions over each.
	thresholds   []time.Duration
	transactions cadence
	backlogs     []*sharedBacklog // one per outbox table that polling members read
	captureUsers []*Watcher       // the cdc members
	capture      cadence
}

// cadence is how often one question is asked, and when it last was.
type cadence struct {
	every time.Duration
	last  time.Time
}

// want makes the question's cadence at least as short as w's interval.
func (c *cadence) want(w *Watcher) {
	if i := time.Duration(w.p.Watch.Interval); c.every == 0 || i < c.every {
		c.every = i
	}
}

// due says whether the question is to be asked at now, in a loop that
// ticks every tick: half a tick early counts, as ticks wander.
func (c *cadence) due(now time.Time, tick time.Duration) bool {
	return c.last.IsZero() || now.Sub(c.last) >= c.every-tick/2
}

// sharedBacklog is one backlog question: the pipelines whose backlog
// question is the same statement (same table, published_at and created_at
// columns) share its answer.
type sharedBacklog struct {
	table outboxdb.Table // with the first user's id column, for the index's fix
	users []*Watcher
	cadence
	// indexChecked: the table's unpublished index was looked for once, and
	// a missing one reported, for every user at once.
	indexChecked bool
}

// newGroup plans the questions of members, which share db.
func newGroup(db outboxdb.Watched, members []*Watcher, log *slog.Logger) *group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &group{db: db, now: members[0].now, log: log, members: members}
	byQuery := map[outboxdb.Table]*sharedBacklog{}
	for _, w := range members {
		p := w.p
		g.transactions.want(w)
		if threshold := time.Duration(p.Watch.LongTransactionThreshold); !slices.Contains(g.thresholds, threshold) {
			g.thresholds = append(g.thresholds, threshold)
		}
		switch p.Relay.Kind {
		case config.RelayPolling:
			c := p.Outbox.Columns
			// The backlog statement reads no id column.
			q := outboxdb.Table{Name: p.Outbox.Table, PublishedAt: c.PublishedAt, CreatedAt: c.CreatedAt}
			b, ok := byQuery[q]
			if !ok {
				b = &sharedBacklog{table: q}
				b.table.ID = c.ID
				byQuery[q] = b
				g.backlogs = append(g.backlogs, b)
			}
			b.users = append(b.users, w)
			b.want(w)
		case config.RelayCDC:
			g.captureUsers = append(g.captureUsers, w)
			g.capture.want(w)
		}
	}
	// Every member asks about open transactions: its cadence is the
	// shortest, and bounds each sample.
	g.timeout = sampleTimeout(g.transactions.every)
	g.tick = g.transactions.every
	if len(g.captureUsers) > 0 {
		g.tick = gcd(g.tick, g.capture.every)
	}
	for _, b := range g.backlogs {
		g.tick = gcd(g.tick, b.every)
	}
	g.tick = max(g.tick, minTick)
	return g
}

// minTick is the shortest tick of a group's loop: cadences whose common
// divisor is shorter are asked within half of it of their time.
const minTick = time.Second

func gcd(a, b time.Duration) time.Duration {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Sample asks every question once, due or not.
func (g *group) Sample(ctx context.Context) { g.sample(ctx, true) }

// sampleDue asks the questions whose cadence says so (Set.Run's loop).
func (g *group) sampleDue(ctx context.Context) { g.sample(ctx, false) }

// sample asks the questions (all, or the due ones) and hands each answer
// to the pipelines that asked as it comes. The database-wide questions go
// first: they wait on no table lock, whereas a locked outbox table holds
// its backlog query, and with it one of the watchers' few connections
// (the families' Pools.Watched), for the whole timeout; asked behind it
// they could time out waiting for a connection. The backlog questions
// then go all at once, so a locked table delays no other table's answer
// while a connection is free.
func (g *group) sample(ctx context.Context, all bool) {
	now := g.now()
	ask := func(c *cadence) bool {
		if !all && !c.due(now, g.tick) {
			return false
		}
		c.last = now
		return true
	}
	var databaseWide []func(context.Context) func()
	if ask(&g.transactions) {
		databaseWide = append(databaseWide, g.askTransactions)
	}
	if len(g.captureUsers) > 0 && ask(&g.capture) {
		databaseWide = append(databaseWide, g.askCaptureLog)
	}
	g.ask(ctx, databaseWide)
	var tables []func(context.Context) func()
	for _, b := range g.backlogs {
		if ask(&b.cadence) {
			tables = append(tables, func(ctx context.Context) func() { return g.askBacklog(ctx, b) })
		}
	}
	g.ask(ctx, tables)
}

// ask runs questions concurrently and applies each answer as it comes,
// here: the pipelines' state is the sampling goroutine's alone.
func (g *group) ask(ctx context.Context, questions []func(context.Context) func()) {
	switch len(questions) {
	case 0:
		return
	case 1:
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
	checked, fix := false, ""
	if !b.indexChecked {
		f, err := g.db.UnpublishedIndex(sctx, b.table)
		checked, fix = err == nil, f
	}
	backlog, err := g.db.Backlog(sctx, b.table)
	return func() {
		if checked {
			b.indexChecked = true
			if fix != "" {
				g.logAbout(ctx, slog.LevelWarn, b.users, "the outbox has no partial index on the unpublished rows (on MySQL, no index leading with published_at); every relay poll and backlog query scans the whole table",
					"table", b.table.Name, "fix", fix)
			}
		}
		g.settle(ctx, WatcherBacklog, b.users, err,
			func(w *Watcher) { w.setBacklog(backlog) },
			(*Watcher).dropBacklog)
	}
}

// askTransactions counts the database's open transactions over each
// member's threshold in one question.
func (g *group) askTransactions(ctx context.Context) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	open, err := g.db.OpenTransactions(sctx, g.thresholds)
	return func() {
		g.settle(ctx, WatcherTransactions, g.members, err,
			func(w *Watcher) {
				i := slices.Index(g.thresholds, time.Duration(w.p.Watch.LongTransactionThreshold))
				w.setTransactions(open.OldestAge, open.OverThreshold[i])
			},
			(*Watcher).dropTransactions)
	}
}

// askCaptureLog reads the capture log once for the cdc members. Its
// series are the family's: on PostgreSQL each member exports the
// replication slots it watches; on MySQL the binlog, and each member with
// a connector compares the connector's committed position with it (the
// connector's offsets are the pipeline's own question).
func (g *group) askCaptureLog(ctx context.Context) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c, err := g.db.CaptureLog(sctx)
	if g.db.Family() == config.KindPostgres {
		return func() {
			g.settle(ctx, WatcherSlots, g.captureUsers, err,
				func(w *Watcher) { w.setSlots(c.Slots) },
				(*Watcher).dropSlots)
		}
	}
	if err == nil && !c.Enabled {
		err = errBinlogOff
	}
	return func() {
		g.settle(ctx, WatcherBinlog, g.captureUsers, err,
			func(w *Watcher) { w.setBinlog(c) },
			(*Watcher).dropBinlog)
		var binlog *outboxdb.CaptureLog
		if err == nil {
			binlog = &c
		}
		for _, w := range g.captureUsers {
			w.sampleBinlogConnector(ctx, binlog)
		}
	}
}

// settle records one shared answer for each of its users: on success
// apply exports it, on failure drop withdraws their series. Each change
// (started failing, still failing, recovered) is one log line for all the
// users it happened to. An error while ctx has been cancelled is the
// service shutting down, not the database failing: nothing is recorded.
func (g *group) settle(ctx context.Context, watcher string, users []*Watcher, err error, apply, drop func(*Watcher)) {
	// Login and TLS failures worded for the operator.
	if err != nil {
		err = g.db.Explain(err)
	}
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
