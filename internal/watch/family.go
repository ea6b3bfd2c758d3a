package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// OpenOn builds the watcher of a pipeline whose database is reached
// through the family seam (outboxdb.DB: MySQL and MariaDB) rather than a
// PostgreSQL pool: its backlog (polling relays) and open transactions, the
// same series as on PostgreSQL; for a cdc pipeline the capture log (the
// binlog's position, the files kept and their expiry); and, as Open does,
// its consumer groups on the cluster's transport. Added to a Set, the
// database questions of the pipelines on one database are asked once for
// all of them (Set.Add); sampled alone (Sample), for it alone.
func OpenOn(p *config.Pipeline, db outboxdb.DB, clusters *kafkaclient.Clusters, m *Metrics, log *slog.Logger) (*Watcher, error) {
	o := Options{Pipeline: p, Family: db, Metrics: m, Logger: log}
	if len(p.Watch.ConsumerGroups) > 0 {
		cluster, err := clusters.For(p.Kafka)
		if err != nil {
			return nil, fmt.Errorf("consumer lag watcher: %w", err)
		}
		o.Kafka = cluster.Client(p.Kafka, sampleTimeoutMax)
	}
	return New(o)
}

// Add runs w, a watcher of its own (OpenOn), with the set. The watchers
// added on one database (the same outboxdb.DB) ask it each question once
// per interval, as OpenSet's do on PostgreSQL: one open-transactions
// query per distinct threshold, one backlog query per outbox table, one
// read of the binlog for the cdc ones. Their Kafka and Kafka Connect
// watchers run per pipeline.
func (s *Set) Add(w *Watcher) {
	if w.family == nil {
		s.own = append(s.own, w)
		return
	}
	if s.onFamily == nil {
		s.onFamily = map[outboxdb.DB][]*Watcher{}
	}
	if _, ok := s.onFamily[w.family]; !ok {
		s.familyDBs = append(s.familyDBs, w.family)
	}
	s.onFamily[w.family] = append(s.onFamily[w.family], w)
}

// familyGroup is group for a database reached through the family seam:
// it asks each of the database's questions once for the members that want
// its answer, at the shortest of their intervals, and hands the answer
// (or the failure) to each of them.
type familyGroup struct {
	*group // members, cadences, settle and the log; its db is nil
	fdb    outboxdb.DB
	// transactions: one question per distinct threshold, as the seam
	// counts against one threshold a statement.
	byThreshold [][]*Watcher // members by g.thresholds' index
	tables      []*familyBacklog
	captureLog  []*Watcher // the cdc members
	capture     cadence
}

// familyBacklog is one outbox table's backlog question and the polling
// pipelines that read the table.
type familyBacklog struct {
	table outboxdb.Table
	users []*Watcher
	cadence
}

// familyConcurrency bounds the questions one sample asks at once: the
// family's pool is shared with the canary inserts and holds no
// connections back for them (PostgreSQL's Pools.Limited does).
const familyConcurrency = 2

func newFamilyGroup(db outboxdb.DB, members []*Watcher, log *slog.Logger) *familyGroup {
	g := &familyGroup{group: &group{now: members[0].now, log: log, members: members, explain: db.Explain}, fdb: db}
	byTable := map[outboxdb.Table]*familyBacklog{}
	for _, w := range members {
		p := w.p
		g.transactions.want(w)
		threshold := time.Duration(p.Watch.LongTransactionThreshold)
		i := slices.Index(g.thresholds, threshold)
		if i < 0 {
			i = len(g.thresholds)
			g.thresholds = append(g.thresholds, threshold)
			g.byThreshold = append(g.byThreshold, nil)
		}
		g.byThreshold[i] = append(g.byThreshold[i], w)
		if p.Relay.Kind == config.RelayCDC {
			g.captureLog = append(g.captureLog, w)
			g.capture.want(w)
			continue
		}
		c := p.Outbox.Columns
		t := outboxdb.Table{Name: p.Outbox.Table, ID: c.ID, PublishedAt: c.PublishedAt, CreatedAt: c.CreatedAt}
		b, ok := byTable[t]
		if !ok {
			b = &familyBacklog{table: t}
			byTable[t] = b
			g.tables = append(g.tables, b)
		}
		b.users = append(b.users, w)
		b.want(w)
	}
	g.timeout = sampleTimeout(g.transactions.every)
	g.tick = g.transactions.every
	if len(g.captureLog) > 0 {
		g.tick = gcd(g.tick, g.capture.every)
	}
	for _, b := range g.tables {
		g.tick = gcd(g.tick, b.every)
	}
	g.tick = max(g.tick, minTick)
	return g
}

// Sample asks every question once, due or not.
func (g *familyGroup) Sample(ctx context.Context) { g.sample(ctx, true) }

func (g *familyGroup) sampleDue(ctx context.Context) { g.sample(ctx, false) }

// sample asks the due questions (or all), the database-wide ones first
// (see group.sample), at most familyConcurrency at once.
func (g *familyGroup) sample(ctx context.Context, all bool) {
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
		for i := range g.thresholds {
			databaseWide = append(databaseWide, func(ctx context.Context) func() { return g.askTransactions(ctx, i) })
		}
	}
	if len(g.captureLog) > 0 && ask(&g.capture) {
		databaseWide = append(databaseWide, g.askCaptureLog)
	}
	g.askBounded(ctx, databaseWide)
	var tables []func(context.Context) func()
	for _, b := range g.tables {
		if ask(&b.cadence) {
			tables = append(tables, func(ctx context.Context) func() { return g.askBacklog(ctx, b) })
		}
	}
	g.askBounded(ctx, tables)
}

// askBounded is group.ask with at most familyConcurrency questions at
// the database at once.
func (g *familyGroup) askBounded(ctx context.Context, questions []func(context.Context) func()) {
	slots := make(chan struct{}, familyConcurrency)
	bounded := make([]func(context.Context) func(), len(questions))
	for i, q := range questions {
		bounded[i] = func(ctx context.Context) func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			return q(ctx)
		}
	}
	g.ask(ctx, bounded)
}

func (g *familyGroup) askTransactions(ctx context.Context, i int) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	tx, err := g.fdb.OpenTransactions(sctx, g.thresholds[i])
	return func() {
		g.settle(ctx, WatcherTransactions, g.byThreshold[i], err,
			func(w *Watcher) {
				w.setTransactions(postgres.Transactions{OldestAge: tx.OldestAge, OverLimit: tx.OverThreshold})
			},
			(*Watcher).dropTransactions)
	}
}

func (g *familyGroup) askBacklog(ctx context.Context, b *familyBacklog) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	backlog, err := g.fdb.Backlog(sctx, b.table)
	return func() {
		g.settle(ctx, WatcherBacklog, b.users, err,
			func(w *Watcher) { w.setBacklog(postgres.Backlog(backlog)) },
			(*Watcher).dropBacklog)
	}
}

// askCaptureLog reads the binlog once for the cdc members; then each
// member with a connector compares the connector's committed position
// with it (the connector's offsets are the pipeline's own question).
func (g *familyGroup) askCaptureLog(ctx context.Context) func() {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c, err := g.fdb.CaptureLog(sctx)
	if err == nil && !c.Enabled {
		err = errBinlogOff
	}
	return func() {
		g.settle(ctx, WatcherBinlog, g.captureLog, err,
			func(w *Watcher) { w.setBinlog(c) },
			(*Watcher).dropBinlog)
		var binlog *outboxdb.CaptureLog
		if err == nil {
			binlog = &c
		}
		for _, w := range g.captureLog {
			w.sampleBinlogConnector(ctx, binlog)
		}
	}
}

var errBinlogOff = errors.New("log_bin is OFF: the server writes no binlog for log capture to read")

// sampleFamily asks the family seam the pipeline's database questions
// alone (Sample).
func (w *Watcher) sampleFamily(ctx context.Context) {
	if w.soloFamily == nil {
		w.soloFamily = newFamilyGroup(w.family, []*Watcher{w}, w.log)
	}
	w.soloFamily.Sample(ctx)
}

// sampleBinlogConnector compares the pipeline's connector's committed
// binlog position with binlog, the server's (nil: it could not be read).
func (w *Watcher) sampleBinlogConnector(ctx context.Context, binlog *outboxdb.CaptureLog) {
	p := w.p
	if p.Watch.ConnectURL == "" || p.Watch.Connector == "" {
		return
	}
	w.run(ctx, WatcherBinlogConnector, func(ctx context.Context) error {
		if binlog == nil {
			return errors.New("the server's binlog could not be read (watcher binlog): the connector's position has nothing to be compared with")
		}
		offsets, err := connect.QueryOffsets(ctx, w.http, p.Watch.ConnectURL, p.Watch.Connector)
		if err != nil {
			return err
		}
		pos, ok := connect.BinlogOffset(offsets)
		if !ok {
			return fmt.Errorf("connector %s has committed no binlog position (GET /connectors/%s/offsets)", p.Watch.Connector, p.Watch.Connector)
		}
		lag, err := connect.ConnectorBinlogLag(*binlog, pos, w.now())
		if err != nil {
			return err
		}
		w.setBinlogConnector(lag)
		return nil
	}, w.dropBinlogConnector)
}

func (w *Watcher) setBinlog(c outboxdb.CaptureLog) {
	name := w.p.Name
	w.m.BinlogWritten.WithLabelValues(name).Set(float64(c.Written))
	w.m.BinlogRetainedBytes.WithLabelValues(name).Set(float64(c.RetainedBytes))
	w.m.BinlogRetainedFiles.WithLabelValues(name).Set(float64(c.RetainedFiles))
	w.m.BinlogExpiry.WithLabelValues(name).Set(c.Expiry.Seconds())
}

func (w *Watcher) setBinlogConnector(lag connect.BinlogLag) {
	name, c := w.p.Name, w.p.Watch.Connector
	if lag.Purged {
		w.m.BinlogConnectorPosition.DeleteLabelValues(name, c)
		w.m.BinlogConnectorBehindBytes.DeleteLabelValues(name, c)
		w.m.BinlogConnectorFilePurged.WithLabelValues(name, c).Set(1)
	} else {
		w.m.BinlogConnectorPosition.WithLabelValues(name, c).Set(float64(lag.Position))
		w.m.BinlogConnectorBehindBytes.WithLabelValues(name, c).Set(float64(lag.BehindBytes))
		w.m.BinlogConnectorFilePurged.WithLabelValues(name, c).Set(0)
	}
	w.m.BinlogConnectorBehindFiles.WithLabelValues(name, c).Set(float64(lag.BehindFiles))
	if lag.HasHeadroom {
		w.m.BinlogConnectorPurgeHeadroom.WithLabelValues(name, c).Set(lag.Headroom.Seconds())
	} else {
		w.m.BinlogConnectorPurgeHeadroom.DeleteLabelValues(name, c)
	}
}

func (w *Watcher) dropBinlogConnector() {
	name, c := w.p.Name, w.p.Watch.Connector
	w.m.BinlogConnectorPosition.DeleteLabelValues(name, c)
	w.m.BinlogConnectorBehindBytes.DeleteLabelValues(name, c)
	w.m.BinlogConnectorBehindFiles.DeleteLabelValues(name, c)
	w.m.BinlogConnectorFilePurged.DeleteLabelValues(name, c)
	w.m.BinlogConnectorPurgeHeadroom.DeleteLabelValues(name, c)
}

func (w *Watcher) dropBinlog() {
	name := w.p.Name
	w.m.BinlogWritten.DeleteLabelValues(name)
	w.m.BinlogRetainedBytes.DeleteLabelValues(name)
	w.m.BinlogRetainedFiles.DeleteLabelValues(name)
	w.m.BinlogExpiry.DeleteLabelValues(name)
}
