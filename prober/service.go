package prober

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/tick"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Options configures a Service.
type Options struct {
	Config     *config.Config
	Registerer prometheus.Registerer
	Now        func() time.Time
	Logger     *slog.Logger

	// InstanceID overrides Config.InstanceID. `outbox-canary check` uses a
	// distinct one so a running service counts its canary as foreign.
	InstanceID string
	// Pipelines limits the service to these pipelines; empty means all.
	Pipelines []string
	// NoSchedule sends canaries only through Send (for check).
	NoSchedule bool
	// StateDir overrides Config.StateDir; "-" keeps state in memory only.
	StateDir string
	// OnCanaryDone, optional, is called once per canary when it is final
	// (arrived and judged, or lost).
	OnCanaryDone func(Report)

	// SweepInterval is how often deadlines and lost canaries are checked
	// (default 250ms). HealthInterval is how often the database is pinged
	// (default 2s). ShutdownTimeout bounds the wait for in-flight inserts
	// (default 5s).
	SweepInterval   time.Duration
	HealthInterval  time.Duration
	ShutdownTimeout time.Duration

	// Connections, optional, are the database pools and Kafka connections
	// the service shares with the rest of the process (the watchers); the
	// caller closes them. Nil: the service opens its own for its pipelines
	// and closes them when it is done.
	Connections *Connections
}

// Connections are a process's shared connections: one pool per distinct
// database (pgx for PostgreSQL, database/sql for MySQL) and one Kafka
// transport per distinct cluster, used by every pipeline on them.
type Connections struct {
	Pools    *postgres.Pools // the PostgreSQL databases
	MySQL    *mysql.Pools
	Clusters *kafkaclient.Clusters
}

// DB returns the shared outbox database of db, of its family: one value
// per distinct database (each family's Pools keys its databases by the
// resolved database.dsn), so it also keys what the service shares per
// database.
func (c *Connections) DB(db config.Database) (outboxdb.DB, error) {
	kind, err := db.Family()
	if err != nil {
		return nil, err
	}
	if kind == config.KindMySQL {
		if c.MySQL == nil {
			return nil, errMySQLPools
		}
		return c.MySQL.DB(db)
	}
	d, err := c.Pools.DB(db)
	if err != nil {
		return nil, err // not a nil *OutboxDB in a non-nil interface
	}
	return d, nil
}

// Watched returns the watchers' questions of db, of its family (the
// watch.Databases of a process): one value per distinct database, on the
// share of its pool the watchers may hold.
func (c *Connections) Watched(db config.Database) (outboxdb.Watched, error) {
	kind, err := db.Family()
	if err != nil {
		return nil, err
	}
	if kind == config.KindMySQL {
		if c.MySQL == nil {
			return nil, errMySQLPools
		}
		return c.MySQL.Watched(db)
	}
	w, err := c.Pools.Watched(db)
	if err != nil {
		return nil, err
	}
	return w, nil
}

var errMySQLPools = errors.New("database.dsn: a MySQL database, and these connections have no MySQL pools")

// OpenConnections builds the shared connections of pipelines: each
// database's pool sized by the pipelines on it (postgres.PoolSize), each
// cluster's transport caching the metadata of the canary topics and the
// watched consumer groups' topics. It connects to nothing yet.
func OpenConnections(ctx context.Context, pipelines []config.Pipeline) (*Connections, error) {
	dbs := make([]config.Database, len(pipelines))
	ks := make([]config.Kafka, len(pipelines))
	var topics []string
	for i, p := range pipelines {
		dbs[i], ks[i] = p.Database, p.Kafka
		topics = append(topics, p.Kafka.Topic)
		for _, g := range p.Watch.ConsumerGroups {
			topics = append(topics, g.Topic)
		}
	}
	pools, err := postgres.NewPools(ctx, dbs, postgres.PoolsOptions{})
	if err != nil {
		return nil, err
	}
	// MySQL pools are sized as PostgreSQL's.
	mysqlPools, err := mysql.NewPools(dbs, func(users int) int { return int(postgres.PoolSize(users)) })
	if err != nil {
		pools.Close()
		return nil, err
	}
	clusters, err := kafkaclient.NewClusters(ks, topics)
	if err != nil {
		pools.Close()
		mysqlPools.Close()
		return nil, err
	}
	return &Connections{Pools: pools, MySQL: mysqlPools, Clusters: clusters}, nil
}

// Close closes the pools and the Kafka connections.
func (c *Connections) Close() {
	c.Pools.Close()
	if c.MySQL != nil {
		c.MySQL.Close()
	}
	c.Clusters.Close()
}

// Service runs every pipeline's sender and consumer, one sweeper for all
// of them, and one health check and clock estimator per database. Create
// it with New, start it with Run.
type Service struct {
	opts     Options
	instance string
	metrics  *Metrics
	// model is the SLOs of the configuration, whose objective series the
	// rules read; the status page judges stalls from it too.
	model  *slo.Model
	signer *Signer
	now    func() time.Time
	log    *slog.Logger
	pipes  []*pipelineRunner
	dbs    []*database // one per distinct database, in configuration order
	// published: the outbox tables of each database read back by the
	// pipelines on them whose publish stamp is the row's published_at;
	// lookups, their rounds, in the order of their first pipeline, one
	// goroutine per database.
	published map[outboxdb.DB]*publishedDatabase
	lookups   []*Lookups
	started   time.Time
	// conns are the pools and Kafka connections; closed by the service
	// only when it opened them (ownConns).
	conns     *Connections
	ownConns  bool
	closeOnce sync.Once
	// running is true from the moment Run has started every pipeline's
	// schedule, consumer and sweeper until it begins to stop: readiness.
	running atomic.Bool
}

// pipelineRunner is one pipeline's parts.
type pipelineRunner struct {
	p *config.Pipeline
	// db is the pipeline's database as the service watches it, and clock
	// its clock: both shared with the other pipelines on it.
	db       *database
	clock    *DBClock
	tracker  *Tracker
	sender   *Sender
	consumer *Consumer
	log      *slog.Logger
	// lookups reads published_at back for this pipeline and the others
	// on its database; nil when the publish stamp is not published_at.
	// Tests replace its read to play the database.
	lookups *Lookups
}

// New builds the service: the metrics, and a tracker, sender and consumer
// per pipeline, on one pool per database and one Kafka transport per
// cluster (Options.Connections, or its own). It connects to nothing:
// servers that are down at start are retried by Run, and Dependencies says
// so meanwhile.
func New(o Options) (*Service, error) {
	if o.Config == nil || o.Registerer == nil {
		return nil, errors.New("service: config and registerer are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = config.PhaseStep // canaries fire on the sweep's wake grid
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 2 * time.Second
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	cfg := o.Config
	instance := cmp.Or(o.InstanceID, cfg.InstanceID)
	stateDir := cmp.Or(o.StateDir, cfg.StateDir)

	var pipelines []config.Pipeline
	for _, p := range cfg.Pipelines {
		if len(o.Pipelines) == 0 || slices.Contains(o.Pipelines, p.Name) {
			pipelines = append(pipelines, p)
		}
	}
	for _, name := range o.Pipelines {
		if _, ok := cfg.Pipeline(name); !ok {
			return nil, fmt.Errorf("pipeline %q: not in the configuration", name)
		}
	}
	key, err := cfg.SigningKey.Resolve()
	if err != nil {
		return nil, fmt.Errorf("signing_key: %w", err)
	}
	var previous [][]byte
	for i, k := range cfg.PreviousSigningKeys {
		v, err := k.Resolve()
		if err != nil {
			return nil, fmt.Errorf("previous_signing_keys[%d]: %w", i, err)
		}
		previous = append(previous, []byte(v))
	}
	signer, err := NewSigner([]byte(key), previous...)
	if err != nil {
		return nil, fmt.Errorf("signing_key: %w", err)
	}
	metrics, err := NewMetrics(o.Registerer, pipelines)
	if err != nil {
		return nil, err
	}
	model, err := slo.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	metrics.ExportObjectives(model, pipelines)
	var journal *stateJournal
	if stateDir != "-" {
		if err := os.MkdirAll(stateDir, 0o750); err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
		// One journal for every pipeline: a sweep fsyncs their lines once.
		if journal, err = openStateJournal(filepath.Join(stateDir, JournalName), o.Logger); err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
		journal.keepUnloaded = true
	}
	s := &Service{opts: o, instance: instance, metrics: metrics, model: model, signer: signer, now: o.Now, log: o.Logger, started: o.Now(),
		conns: o.Connections, published: map[outboxdb.DB]*publishedDatabase{}}
	if s.conns == nil {
		if s.conns, err = OpenConnections(context.Background(), pipelines); err != nil {
			return nil, err
		}
		s.ownConns = true
	}
	byPool, err := s.newDatabases(pipelines)
	if err != nil {
		s.closePools()
		return nil, err
	}
	for i := range pipelines {
		pr, err := s.newPipeline(&pipelines[i], stateDir, journal, byPool)
		if err != nil {
			s.closePools()
			return nil, fmt.Errorf("pipeline %q: %w", pipelines[i].Name, err)
		}
		s.pipes = append(s.pipes, pr)
	}
	if journal != nil {
		journal.loaded()
	}
	return s, nil
}

// newDatabases groups the pipelines by their shared database, one per
// distinct database (Connections.DB), and builds the watcher of each.
func (s *Service) newDatabases(pipelines []config.Pipeline) (map[outboxdb.DB]*database, error) {
	var dbs []outboxdb.DB
	on := map[outboxdb.DB][]*config.Pipeline{}
	for i := range pipelines {
		db, err := s.conns.DB(pipelines[i].Database)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: %w", pipelines[i].Name, err)
		}
		if _, ok := on[db]; !ok {
			dbs = append(dbs, db)
		}
		on[db] = append(on[db], &pipelines[i])
	}
	byDB := make(map[outboxdb.DB]*database, len(dbs))
	for _, db := range dbs {
		d := newDatabase(db.Describe(), db, on[db], s.metrics, s.now, s.log)
		byDB[db] = d
		s.dbs = append(s.dbs, d)
	}
	return byDB, nil
}

// logFetchAnswer logs, at debug level, where a fetch answer's time went;
// its times as Unix nanoseconds, so a canary's consume stamp (its
// Report.Consumed) finds its answer (the consume benchmark reads them).
func (s *Service) logFetchAnswer(a kafkaclient.FetchAnswer) {
	s.log.Debug("kafka fetch answered", "broker", a.Broker, "session", a.Session, "fetch", a.Fetch, "began_ns", a.Began.UnixNano(), "sent_ns", a.Sent.UnixNano(),
		"returned_ns", a.Returned.UnixNano(), "received_ns", a.Received.UnixNano(), "delivered_ns", a.Delivered.UnixNano(),
		"partitions", a.Partitions, "with_records", a.WithRecords)
}

func (s *Service) newPipeline(p *config.Pipeline, stateDir string, journal *stateJournal, dbs map[outboxdb.DB]*database) (*pipelineRunner, error) {
	log := s.log.With("pipeline", p.Name)
	pool, err := s.conns.DB(p.Database)
	if err != nil {
		return nil, err
	}
	cluster, err := s.conns.Clusters.For(p.Kafka)
	if err != nil {
		return nil, err
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		cluster.Fetcher().TraceAnswers(s.logFetchAnswer)
	}
	db := dbs[pool]
	pr := &pipelineRunner{p: p, db: db, clock: db.clock, log: log}
	if p.Relay.PublishedStamp == config.PublishedFromColumn {
		pr.lookups = s.lookupsOf(p, pool, pr.clock, db.log)
	}

	statePath := ""
	if stateDir != "-" {
		statePath = filepath.Join(stateDir, p.Name+".json")
	}
	tr, err := NewTracker(TrackerOptions{
		Pipeline: p, Instance: s.instance, Metrics: s.metrics, Now: s.now, Logger: log,
		StatePath: statePath, Journal: journal, OnDone: s.opts.OnCanaryDone, Lookups: pr.lookups,
	})
	if err != nil {
		return nil, err
	}
	pr.tracker = tr
	pr.sender, err = NewSender(SenderOptions{Pipeline: p, Instance: s.instance, DB: pool, Signer: s.signer,
		Tracker: tr, Metrics: s.metrics, Now: s.now, Logger: log})
	if err != nil {
		return nil, err
	}
	pr.consumer, err = NewConsumer(ConsumerOptions{Pipeline: p, Instance: s.instance, Signer: s.signer, Tracker: tr,
		Metrics: s.metrics, Cluster: cluster, Now: s.now, Logger: log,
		// A little before the start, for the relay's clock.
		Since: s.started.Add(-5 * time.Second)})
	if err != nil {
		return nil, err
	}
	return pr, nil
}

// lookupsOf returns the lookups of the pipeline's database, shared with
// the pipelines before it on the same database, and adds the pipeline's
// outbox table and clock to the database's.
func (s *Service) lookupsOf(p *config.Pipeline, pool outboxdb.DB, clock *DBClock, log *slog.Logger) *Lookups {
	pd, ok := s.published[pool]
	if !ok {
		pd = newPublishedDatabase(pool, log)
		s.published[pool] = pd
		s.lookups = append(s.lookups, pd.lookups)
	}
	pd.add(p, clock)
	return pd.lookups
}

// Close releases the connections the service opened itself, of a service
// that is not run (Run releases them itself when it returns); closing
// twice is harmless. Options.Connections are the caller's to close.
func (s *Service) Close() { s.closePools() }

func (s *Service) closePools() {
	if s.ownConns {
		s.closeOnce.Do(s.conns.Close)
	}
}

// Metrics returns the service's metrics (tests read them).
func (s *Service) Metrics() *Metrics { return s.metrics }

// Instance is the instance id written into this service's canaries.
func (s *Service) Instance() string { return s.instance }

// Model is the SLO model of the configuration the service measures.
func (s *Service) Model() *slo.Model { return s.model }

func (s *Service) pipeline(name string) (*pipelineRunner, error) {
	for _, pr := range s.pipes {
		if pr.p.Name == name {
			return pr, nil
		}
	}
	return nil, fmt.Errorf("pipeline %q: not run by this service", name)
}

// Tracker returns a pipeline's tracker.
func (s *Service) Tracker(pipeline string) (*Tracker, error) {
	pr, err := s.pipeline(pipeline)
	if err != nil {
		return nil, err
	}
	return pr.tracker, nil
}

// RecordTimestampType says whose clock the Kafka record timestamp of the
// pipeline's last canary was on (see Consumer.RecordTimestampType).
func (s *Service) RecordTimestampType(pipeline string) (kafkaclient.TimestampType, bool, error) {
	pr, err := s.pipeline(pipeline)
	if err != nil {
		return 0, false, err
	}
	t, ok := pr.consumer.RecordTimestampType()
	return t, ok, nil
}

// Send sends one canary now, outside the schedule.
func (s *Service) Send(ctx context.Context, pipeline string) (Canary, error) {
	pr, err := s.pipeline(pipeline)
	if err != nil {
		return Canary{}, err
	}
	return pr.sender.Send(ctx)
}

// Pipelines lists the pipelines this service runs, in configuration order.
func (s *Service) Pipelines() []*config.Pipeline {
	out := make([]*config.Pipeline, len(s.pipes))
	for i, pr := range s.pipes {
		out[i] = pr.p
	}
	return out
}

// Ready reports whether this process works: its configuration is loaded
// (the service exists) and Run has started every pipeline's canary
// schedule, consumer and sweeper and is not stopping; otherwise why not.
// Whether the pipelines' databases and Kafka answer is not part of it: a
// downstream outage is what the prober is there to measure, and a prober
// taken out of service for it (a NotReady pod, a failed rollout) would page
// its namespace on top of the pipeline's own alerts. Dependencies says
// whether they answer, and outbox_canary_dependency_up exports it.
func (s *Service) Ready() (bool, []string) {
	if !s.running.Load() {
		return false, []string{"the canary schedules are not running (starting or stopping)"}
	}
	return true, nil
}

// Dependencies reports whether every pipeline's database and Kafka answer;
// otherwise the reasons, one per broken part. `check` waits for it before
// sending, so a dead server is reported as such rather than as a lost
// canary.
func (s *Service) Dependencies() (bool, []string) {
	var reasons []string
	for _, pr := range s.pipes {
		down := pr.down()
		for _, d := range []string{DependencyDatabase, DependencyKafka} {
			if why, ok := down[d]; ok {
				reasons = append(reasons, fmt.Sprintf("pipeline %q: %s: %s", pr.p.Name, d, why))
			}
		}
	}
	return len(reasons) == 0, reasons
}

// down returns the pipeline's dependencies that do not answer, with why.
func (pr *pipelineRunner) down() map[string]string {
	out := map[string]string{}
	if ok, why := pr.db.status(); !ok {
		out[DependencyDatabase] = why
	}
	if ok, why := pr.consumer.Ready(); !ok {
		out[DependencyKafka] = why
	}
	return out
}

// cronLogger sends cron's messages to slog.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }
func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}

// Run runs every pipeline until ctx is done, then shuts down in order: no
// new canaries, in-flight inserts finish (bounded by ShutdownTimeout),
// readers close, the tracker state is flushed, pools close. It returns the
// flush errors, if any; server failures never end it.
func (s *Service) Run(ctx context.Context) error {
	return s.run(ctx, true)
}

func (s *Service) run(ctx context.Context, flush bool) error {
	// Inserts get a context that outlives ctx by ShutdownTimeout, so a
	// canary being committed at SIGTERM is committed and tracked, not
	// abandoned half way.
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()

	c, err := s.newCron(sendCtx)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	for _, d := range s.dbs {
		wg.Go(func() { d.watch(ctx, s.opts.HealthInterval) })
	}
	for _, pr := range s.pipes {
		wg.Go(func() { _ = pr.consumer.Run(ctx) })
	}
	for _, l := range s.lookups {
		wg.Go(func() { l.Run(ctx) })
	}
	wg.Go(func() { s.sweep(ctx, s.opts.SweepInterval, positionInterval) })
	if c != nil {
		c.Start()
	}
	s.running.Store(true)
	s.log.Info("prober started", "instance", s.instance, "pipelines", len(s.pipes))

	<-ctx.Done()
	s.running.Store(false)
	s.log.Info("prober stopping")
	if c != nil {
		stopped := c.Stop()
		t := time.NewTimer(s.opts.ShutdownTimeout)
		select {
		case <-stopped.Done():
		case <-t.C:
			s.log.Warn("in-flight canary inserts did not finish in time; abandoning them", "timeout", s.opts.ShutdownTimeout)
		}
		t.Stop()
	}
	cancelSends()
	wg.Wait()

	var errs []error
	if flush {
		for _, pr := range s.pipes {
			if err := pr.tracker.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("pipeline %q: flush state: %w", pr.p.Name, err))
			}
		}
	}
	s.closePools()
	s.log.Info("prober stopped")
	return errors.Join(errs...)
}

// newCron builds the canary schedule (nil with NoSchedule), not started.
func (s *Service) newCron(sendCtx context.Context) (*cron.Cron, error) {
	var c *cron.Cron
	if !s.opts.NoSchedule {
		cl := cronLogger{s.log}
		c = cron.New(cron.WithLogger(cl), cron.WithChain(cron.Recover(cl), cron.SkipIfStillRunning(cl)))
		for _, pr := range s.pipes {
			// Each pipeline's schedule is shifted by a phase of its own
			// (from its name), so pipelines on one schedule do not all
			// insert in the same instant.
			sched, phase, err := config.PhasedSchedule(pr.p.Canary.Schedule, pr.p.Name)
			if err != nil {
				return nil, fmt.Errorf("pipeline %q: canary.schedule: %w", pr.p.Name, err)
			}
			pr.log.Debug("canary schedule", "schedule", pr.p.Canary.Schedule, "phase", phase)
			// A canary that takes longer than its end-to-end budget to
			// commit is late anyway; the bound keeps a hung database from
			// piling up jobs.
			timeout := 30 * time.Second
			c.Schedule(sched, cron.FuncJob(func() {
				ictx, cancel := context.WithTimeout(sendCtx, timeout)
				defer cancel()
				_, _ = pr.sender.Send(ictx)
			}))
		}
	}
	return c, nil
}

// sweep reports every pipeline's reader position every positionEvery and
// resolves its deadlines and lost canaries every sweepEvery, so that a
// stall is counted within a sweep of its deadline. A tracker's sweep costs
// its canaries not final, and a write when a batch of its changes is due.
// Both run on one goroutine and one timer, at the instants of either wake
// grid (internal/tick), the positions first when both fall together (the
// sweep then judges on the freshest): one timer waking one goroutine for
// the whole service rather than one per pipeline or per job, for work of
// microseconds a pipeline, where the wakeups cost more than the work (on
// the default grids, 4 a second where two loops woke 6 times). The
// batches a sweep writes are fsynced together (SweepGroup): one fsync a
// sweep, not one per pipeline with a batch due.
func (s *Service) sweep(ctx context.Context, sweepEvery, positionEvery time.Duration) {
	var group SweepGroup
	now := time.Now()
	nextSweep, nextPosition := tick.Next(now, sweepEvery), tick.Next(now, positionEvery)
	for {
		at := nextSweep
		if nextPosition.Before(at) {
			at = nextPosition
		}
		if !tick.Until(ctx, at) {
			return
		}
		// From the time woken: a loop held up longer than a period
		// skips the instants it missed rather than running them back to
		// back.
		woke := time.Now()
		if !nextPosition.After(at) {
			for _, pr := range s.pipes {
				pr.consumer.samplePositionOnce()
			}
			nextPosition = tick.Next(woke, positionEvery)
		}
		if !nextSweep.After(at) {
			for _, pr := range s.pipes {
				group.Sweep(pr.tracker)
			}
			group.Commit()
			nextSweep = tick.Next(woke, sweepEvery)
		}
	}
}

// PipelineView is what the status page reads of one pipeline: its
// configuration, its canaries as the tracker knows them, and its database
// clock offset.
type PipelineView struct {
	Pipeline *config.Pipeline
	// InFlight is every canary sent that has neither arrived nor been
	// declared lost, oldest first.
	InFlight []Report
	// LastReceived is when a canary last arrived; zero before the first.
	LastReceived time.Time
	// Resolved is every final canary the tracker remembers, newest first.
	Resolved []Report
	// Memory is how long the tracker remembers a canary after its commit:
	// burn rates over a longer window only see that much of it.
	Memory time.Duration
	// ClockOffset is the database clock offset, if measured.
	ClockOffset *ClockOffset
	// Down holds the pipeline's dependencies (DependencyDatabase,
	// DependencyKafka) that do not answer, with why; empty when all do.
	Down map[string]string
}

// Views returns a view of every pipeline, in configuration order.
func (s *Service) Views() []PipelineView {
	out := make([]PipelineView, 0, len(s.pipes))
	for _, pr := range s.pipes {
		v := PipelineView{Pipeline: pr.p, InFlight: pr.tracker.InFlightReports(), LastReceived: pr.tracker.LastReceived(), Resolved: pr.tracker.Recent(math.MaxInt), Memory: pr.tracker.Memory(), Down: pr.down()}
		if off, ok := pr.clock.Current(); ok {
			v.ClockOffset = &off
		}
		out = append(out, v)
	}
	return out
}
