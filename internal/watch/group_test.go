package watch

// Tests of the watchers of many pipelines on one database: each question
// is asked once per interval, and its answer, or its failure, reaches every
// pipeline that asked it. Those that need a server run against the
// project's stack (see watcher_test.go).

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// countingQuerier counts the statements it passes on, by their SQL, and
// fails those whose SQL contains failing (when not "").
type countingQuerier struct {
	q       postgres.Querier
	mu      sync.Mutex
	counts  map[string]int
	failing string
}

func newCountingQuerier(q postgres.Querier) *countingQuerier {
	return &countingQuerier{q: q, counts: map[string]int{}}
}

func (c *countingQuerier) count(sql string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[sql]++
	if c.failing != "" && strings.Contains(sql, c.failing) {
		return fmt.Errorf("injected failure of the statement reading %s", c.failing)
	}
	return nil
}

func (c *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := c.count(sql); err != nil {
		return errRow{err}
	}
	return c.q.QueryRow(ctx, sql, args...)
}

func (c *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := c.count(sql); err != nil {
		return nil, err
	}
	return c.q.Query(ctx, sql, args...)
}

func (c *countingQuerier) fail(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failing = what
}

// take returns the statements counted since the last take: how many
// statements contain each of whats, and how many there were in all.
func (c *countingQuerier) take(whats ...string) (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	by, all := map[string]int{}, 0
	for sql, n := range c.counts {
		all += n
		for _, what := range whats {
			if strings.Contains(sql, what) {
				by[what] += n
			}
		}
	}
	c.counts = map[string]int{}
	return by, all
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// fleetSpec is a configuration of many pipelines on one database.
type fleetSpec struct {
	dsn     string
	polling int // pipelines p000..., spread round-robin over the tables
	tables  []string
	cdc     []string // one cdc pipeline per entry, with that watch.slot ("": none)
	// thresholds, round-robin over the polling pipelines, e.g. "100ms"
	thresholds []string
	interval   string // watch.interval of every pipeline; "" the default
}

func (f fleetSpec) yaml() string {
	var b strings.Builder
	b.WriteString("instance_id: test\nsigning_key: {value: test-key}\npipelines:\n")
	pipeline := func(name, table, columns, kind, watch string) {
		fmt.Fprintf(&b, `  - name: %s
    database: {dsn: {value: %q}}
    outbox: {table: %s, columns: %s}
    relay: {kind: %s}
    kafka: {brokers: [127.0.0.1:1], topic: outbox.event.outbox-canary}
    budgets: {end_to_end: 30s}
    watch: %s
`, name, f.dsn, table, columns, kind, watch)
	}
	interval := ""
	if f.interval != "" {
		interval = "interval: " + f.interval + ", "
	}
	for i := range f.polling {
		pipeline(fmt.Sprintf("p%03d", i), f.tables[i%len(f.tables)], stacktest.SeedA.Columns, config.RelayPolling,
			fmt.Sprintf("{%slong_transaction_threshold: %s}", interval, f.thresholds[i%len(f.thresholds)]))
	}
	for i, slot := range f.cdc {
		watch := "{" + strings.TrimSuffix(interval, ", ") + "}"
		if slot != "" {
			watch = fmt.Sprintf("{%sslot: %s}", interval, slot)
		}
		pipeline(fmt.Sprintf("c%03d", i), "cdc_outbox", stacktest.SeedDebezium.Columns, config.RelayCDC, watch)
	}
	return b.String()
}

func (f fleetSpec) load(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(f.yaml()))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// pgDatabases gives the pipelines' PostgreSQL databases as a process
// does: the watchers' share of pools.
func pgDatabases(pools *postgres.Pools) Databases {
	return func(d config.Database) (outboxdb.Watched, error) {
		w, err := pools.Watched(d)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
}

// newFleetGroup builds the watchers of cfg's pipelines as one group on db.
func newFleetGroup(t *testing.T, cfg *config.Config, db postgres.Querier, log *stacktest.SyncBuffer) (*group, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var ws []*Watcher
	probes := pgDB(db)
	for i := range cfg.Pipelines {
		w, err := New(Options{Pipeline: &cfg.Pipelines[i], DB: probes, Metrics: m, Logger: log.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	return newGroup(probes, ws, log.Logger()), m
}

// The statements of the database watchers, told apart by what they read.
const (
	readsActivity = "pg_stat_activity"
	readsSlots    = "pg_replication_slots"
	readsIndexes  = "pg_index"
	readsBacklog  = "count(*), COALESCE"
)

func TestPipelinesOnOneDatabaseAskEachQuestionOncePerInterval(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// 300 pipelines on 10 outbox tables, as the scale benchmark runs them;
	// table i holds i unpublished rows.
	tables := []string{"outbox"}
	for i := 1; i < 10; i++ {
		tables = append(tables, fmt.Sprintf("outbox_%d", i))
		exec(fmt.Sprintf("CREATE TABLE outbox_%d (LIKE outbox INCLUDING ALL)", i))
		for range i {
			exec(fmt.Sprintf("INSERT INTO outbox_%d (aggregate_type, aggregate_id, payload) VALUES ('order', 'o', '{}')", i))
		}
	}
	// Two cdc pipelines beside them, on one slot of the database.
	exec(strings.Replace(stacktest.SeedDebezium.SQL, "CREATE TABLE outbox", "CREATE TABLE cdc_outbox", 1))
	slot := "fleet_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	exec("SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot)
	stacktest.DropSlotOnCleanup(t, pool, slot)

	cfg := fleetSpec{dsn: dsn, polling: 300, tables: tables, cdc: []string{slot, ""}, thresholds: []string{"100ms", "1h"}}.load(t)
	db := newCountingQuerier(pool)
	var logs stacktest.SyncBuffer
	g, m := newFleetGroup(t, cfg, db, &logs)

	// A transaction older than 100ms and younger than an hour: over the
	// threshold of half the pipelines.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)

	g.Sample(ctx)
	by, all := db.take(readsActivity, readsSlots, readsIndexes, readsBacklog)
	if by[readsIndexes] != len(tables) {
		t.Errorf("the first sample looked for the partial index %d times, want once per table (%d)", by[readsIndexes], len(tables))
	}
	for i := range 3 {
		g.Sample(ctx)
		by, all = db.take(readsActivity, readsSlots, readsIndexes, readsBacklog)
		want := map[string]int{readsActivity: 1, readsSlots: 1, readsBacklog: len(tables)}
		if fmt.Sprint(by) != fmt.Sprint(want) || all != 2+len(tables) {
			t.Errorf("sample %d of 302 pipelines on %d tables: %d statements %v, want %d: %v", i+2, len(tables), all, by, 2+len(tables), want)
		}
	}
	t.Logf("302 pipelines (300 polling on %d tables, 2 cdc) on one database: %d statements per interval", len(tables), all)

	if n := testutil.CollectAndCount(m.Errors); n != 0 {
		t.Fatalf("%d watch error series, want none:\n%s", n, logs.String())
	}
	for i := range 300 {
		p := &cfg.Pipelines[i]
		if got, want := testutil.ToFloat64(m.BacklogRows.WithLabelValues(p.Name)), float64(i%len(tables)); got != want {
			t.Errorf("backlog rows of %s on %s = %v, want %v (its own table's)", p.Name, p.Outbox.Table, got, want)
		}
		wantLong := 1.0 // over 100ms
		if p.Watch.LongTransactionThreshold == config.Duration(time.Hour) {
			wantLong = 0
		}
		if got := testutil.ToFloat64(m.LongTransactions.WithLabelValues(p.Name)); got != wantLong {
			t.Errorf("long transactions of %s (threshold %s) = %v, want %v", p.Name, p.Watch.LongTransactionThreshold, got, wantLong)
		}
		if got := testutil.ToFloat64(m.OldestTransactionAge.WithLabelValues(p.Name)); got < 0.2 {
			t.Errorf("oldest transaction age of %s = %vs, want at least 0.2s", p.Name, got)
		}
		for _, watcher := range []string{WatcherBacklog, WatcherTransactions} {
			if got := testutil.ToFloat64(m.Up.WithLabelValues(p.Name, watcher)); got != 1 {
				t.Errorf("watcher_up{pipeline=%s, watcher=%s} = %v, want 1", p.Name, watcher, got)
			}
		}
	}
	for _, name := range []string{"c000", "c001"} {
		if got := testutil.ToFloat64(m.SlotActive.WithLabelValues(name, slot)); got != 0 {
			t.Errorf("slot_active{pipeline=%s, slot=%s} = %v, want 0 (nothing reads it)", name, slot, got)
		}
	}
	if n := testutil.CollectAndCount(m.SlotActive); n != 2 {
		t.Errorf("%d slot_active series, want 2 (the slot, once per cdc pipeline)", n)
	}
	if n := testutil.CollectAndCount(m.BacklogRows); n != 300 {
		t.Errorf("%d backlog series, want one per polling pipeline (300)", n)
	}
}

// warnLines returns the lines of logs at level WARN with message msg.
func warnLines(logs, msg string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, `msg="`+msg+`"`) {
			out = append(out, line)
		}
	}
	return out
}

func TestAFailedSharedQueryFailsTheWatcherOfEveryPipelineThatAskedIt(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE outbox_b (LIKE outbox INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	stacktest.InsertRow(t, pool, stacktest.SeedA, false, 40*time.Second)
	cfg := fleetSpec{dsn: dsn, polling: 6, tables: []string{"outbox", "outbox_b"}, thresholds: []string{"1m", "5m", "1h"}}.load(t)
	db := newCountingQuerier(pool)
	var logs stacktest.SyncBuffer
	g, m := newFleetGroup(t, cfg, db, &logs)
	onOutbox, onOutboxB := []string{"p000", "p002", "p004"}, []string{"p001", "p003", "p005"}
	all := []string{"p000", "p001", "p002", "p003", "p004", "p005"}
	up := func(pipeline, watcher string) float64 {
		return testutil.ToFloat64(m.Up.WithLabelValues(pipeline, watcher))
	}

	g.Sample(ctx)
	if n := testutil.CollectAndCount(m.OldestTransactionAge); n != len(all) {
		t.Fatalf("%d oldest transaction age series after a good sample, want %d:\n%s", n, len(all), logs.String())
	}

	t.Run("The open-transactions query fails: every pipeline's transactions watcher is down, its series withdrawn, one warning names them all.", func(t *testing.T) {
		db.fail(readsActivity)
		g.Sample(ctx)
		g.Sample(ctx)
		for _, p := range all {
			if got := up(p, WatcherTransactions); got != 0 {
				t.Errorf("watcher_up{pipeline=%s, watcher=transactions} = %v while its query fails, want 0", p, got)
			}
			if got := testutil.ToFloat64(m.Errors.WithLabelValues(p, WatcherTransactions)); got != 2 {
				t.Errorf("transactions watch errors of %s = %v after two failed samples, want 2", p, got)
			}
			if got := up(p, WatcherBacklog); got != 1 {
				t.Errorf("watcher_up{pipeline=%s, watcher=backlog} = %v, want 1: its own query works", p, got)
			}
		}
		if n := testutil.CollectAndCount(m.OldestTransactionAge) + testutil.CollectAndCount(m.LongTransactions); n != 0 {
			t.Errorf("%d open-transaction series while the query fails, want none", n)
		}
		lines := warnLines(logs.String(), msgFailing)
		if len(lines) != 1 {
			t.Fatalf("%d warnings over two failed samples, want one for all six pipelines:\n%s", len(lines), logs.String())
		}
		if want := `pipelines="` + strings.Join(all, ", ") + `" watcher=transactions err="open transactions: injected failure`; !strings.Contains(lines[0], want) {
			t.Errorf("the warning does not name the pipelines and the watcher (%s):\n%s", want, lines[0])
		}
	})

	t.Run("It recovers: every pipeline is up again, with one line for all.", func(t *testing.T) {
		db.fail("")
		g.Sample(ctx)
		for _, p := range all {
			if got := up(p, WatcherTransactions); got != 1 {
				t.Errorf("watcher_up{pipeline=%s, watcher=transactions} = %v after recovery, want 1", p, got)
			}
		}
		if n := strings.Count(logs.String(), `msg="watcher recovered" pipelines="`+strings.Join(all, ", ")+`" watcher=transactions`); n != 1 {
			t.Errorf("%d recovery lines for the six pipelines, want one:\n%s", n, logs.String())
		}
	})

	t.Run("One table's backlog query fails: the pipelines on it are down, those on the other table are not.", func(t *testing.T) {
		if _, err := pool.Exec(ctx, "ALTER TABLE outbox_b RENAME TO outbox_gone"); err != nil {
			t.Fatal(err)
		}
		g.Sample(ctx)
		for _, p := range onOutboxB {
			if got := up(p, WatcherBacklog); got != 0 {
				t.Errorf("watcher_up{pipeline=%s, watcher=backlog} = %v while its table is gone, want 0", p, got)
			}
			if m.BacklogRows.DeleteLabelValues(p) {
				t.Errorf("the backlog series of %s is still exported while its table is gone", p)
			}
		}
		for _, p := range onOutbox {
			if got := testutil.ToFloat64(m.BacklogRows.WithLabelValues(p)); got != 1 || up(p, WatcherBacklog) != 1 {
				t.Errorf("backlog of %s = %v rows (up %v), want 1 row and up: its table is there", p, got, up(p, WatcherBacklog))
			}
		}
		lines := warnLines(logs.String(), msgFailing)
		if len(lines) != 2 || !regexp.MustCompile(`pipelines="p001, p003, p005" watcher=backlog err=".*outbox_b`).MatchString(lines[1]) {
			t.Errorf("want a second warning naming the pipelines of outbox_b and the table, got:\n%s", strings.Join(lines, "\n"))
		}
	})
}

func TestOpenSetGroupsPipelinesByDatabase(t *testing.T) {
	t.Parallel()
	// Nothing listens there, and nothing is asked: building connects to nothing.
	dsnA := "postgres://u@" + stacktest.ClosedAddr(t) + "/a"
	dsnB := "postgres://u@" + stacktest.ClosedAddr(t) + "/b"
	var pipelines []config.Pipeline
	for _, f := range []fleetSpec{
		{dsn: dsnA, polling: 4, tables: []string{"outbox", "outbox_b"}, thresholds: []string{"1m", "1h"}, cdc: []string{"s1"}},
		{dsn: dsnA, polling: 2, tables: []string{"outbox_c"}, thresholds: []string{"1m"}, interval: "1m"},
		{dsn: dsnB, polling: 3, tables: []string{"outbox"}, thresholds: []string{"1m"}},
	} {
		cfg := f.load(t)
		for _, p := range cfg.Pipelines {
			p.Name = fmt.Sprintf("%s_%d", p.Name, len(pipelines))
			pipelines = append(pipelines, p)
		}
	}
	dbs := make([]config.Database, len(pipelines))
	kafkas := make([]config.Kafka, len(pipelines))
	for i, p := range pipelines {
		dbs[i], kafkas[i] = p.Database, p.Kafka
	}
	pools, err := postgres.NewPools(context.Background(), dbs, postgres.PoolsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	clusters, err := kafkaclient.NewClusters(kafkas, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clusters.Close)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	set, err := OpenSet(pipelines, pgDatabases(pools), clusters, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range set.groups {
		var tables []string
		for _, b := range g.backlogs {
			tables = append(tables, fmt.Sprintf("%s every %s", b.table.Name, b.every))
		}
		got = append(got, fmt.Sprintf("%d pipelines, ticks every %s: %d thresholds, backlog of %s, %d cdc (slots every %s)",
			len(g.members), g.tick, len(g.thresholds), strings.Join(tables, " and "), len(g.captureUsers), g.capture.every))
	}
	// One group per database, whatever the pipelines' watch.intervals:
	// each question at the shortest interval of the pipelines asking it.
	want := []string{
		"7 pipelines, ticks every 15s: 2 thresholds, backlog of outbox every 15s and outbox_b every 15s and outbox_c every 1m0s, 1 cdc (slots every 15s)",
		"3 pipelines, ticks every 15s: 1 thresholds, backlog of outbox every 15s, 0 cdc (slots every 0s)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestASharedQuestionIsAskedAtItsOwnCadence(t *testing.T) {
	cases := []struct {
		name      string
		intervals []string // of pipelines on tables t0, t1, ...
		wantTick  time.Duration
		want      []int // times each table's backlog is asked in the first 2 minutes (ticks at 0 included)
	}{
		{"One interval: one tick, every question at it.", []string{"15s", "15s"}, 15 * time.Second, []int{8, 8}},
		{"15s and 1m: the 1m table every fourth tick.", []string{"15s", "1m"}, 15 * time.Second, []int{8, 2}},
		{"15s and 40s: ticks every 5s, the 40s table on time, not every 45s.", []string{"15s", "40s"}, 5 * time.Second, []int{8, 3}},
		{"15s and 15.5s: ticks at the 1s floor, each asked within half a tick of its cadence.", []string{"15s", "15500ms"}, time.Second, []int{8, 8}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ws []*Watcher
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			for i, interval := range tc.intervals {
				p := fleetSpec{dsn: "postgres://u@127.0.0.1:1/x", polling: 1, tables: []string{fmt.Sprintf("t%d", i)},
					thresholds: []string{"1m"}, interval: interval}.load(t).Pipelines[0]
				w, err := New(Options{Pipeline: &p, Metrics: m})
				if err != nil {
					t.Fatal(err)
				}
				ws = append(ws, w)
			}
			g := newGroup(nil, ws, nil)
			if g.tick != tc.wantTick {
				t.Errorf("tick %s, want %s", g.tick, tc.wantTick)
			}
			// The loop's ticks over two minutes, each a little late.
			start := time.Now()
			asked := make([]int, len(g.backlogs))
			for at := time.Duration(0); at < 2*time.Minute; at += g.tick {
				now := start.Add(at + 20*time.Millisecond)
				for i, b := range g.backlogs {
					if b.due(now, g.tick) {
						b.last = now
						asked[i]++
					}
				}
			}
			if fmt.Sprint(asked) != fmt.Sprint(tc.want) {
				t.Errorf("each table's backlog asked %v times in 2 minutes, want %v", asked, tc.want)
			}
		})
	}
}

// Pipelines on one database with different watch.intervals share one
// sampler: each tick asks the open transactions once for all of them, and
// each table's backlog once, at the shortest interval of the pipelines on
// it; every pipeline gets its own series from the shared answers. The
// statements are counted on the real connection.
func TestPipelinesOnOneDatabaseShareOneSamplerWhateverTheirIntervals(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE outbox_c (LIKE outbox INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	stacktest.InsertRow(t, pool, stacktest.SeedA, false, 40*time.Second)
	// p000 every 15s and p001 every minute on outbox; p002 every minute on outbox_c.
	var pipelines []config.Pipeline
	for _, f := range []fleetSpec{
		{dsn: dsn, polling: 1, tables: []string{"outbox"}, thresholds: []string{"1m"}},
		{dsn: dsn, polling: 1, tables: []string{"outbox"}, thresholds: []string{"1m"}, interval: "1m"},
		{dsn: dsn, polling: 1, tables: []string{"outbox_c"}, thresholds: []string{"1m"}, interval: "1m"},
	} {
		p := f.load(t).Pipelines[0]
		p.Name = fmt.Sprintf("p%03d", len(pipelines))
		pipelines = append(pipelines, p)
	}
	db := newCountingQuerier(pool)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs stacktest.SyncBuffer
	probes := pgDB(db)
	set, err := OpenSet(pipelines, func(config.Database) (outboxdb.Watched, error) { return probes, nil }, nil, m, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.groups) != 1 {
		t.Fatalf("%d samplers for one database, want 1", len(set.groups))
	}
	g := set.groups[0]
	start := time.Now()
	clock := start
	g.now = func() time.Time { return clock }

	// Ticks of the 15 s loop over a minute, a little late as real ticks are.
	type counts struct{ transactions, outbox, outboxC int }
	var got []counts
	for i := range 5 {
		clock = start.Add(time.Duration(i)*15*time.Second + 50*time.Millisecond*time.Duration(i%2))
		g.sampleDue(ctx)
		by, all := db.take(readsActivity, readsIndexes, "\"outbox\"", "\"outbox_c\"")
		got = append(got, counts{by[readsActivity], by["\"outbox\""], by["\"outbox_c\""]})
		if want := by[readsActivity] + by[readsIndexes] + by["\"outbox\""] + by["\"outbox_c\""]; all != want {
			t.Errorf("tick %d: %d statements, of which %d are not the watchers' known ones", i, all, all-want)
		}
	}
	want := []counts{{1, 1, 1}, {1, 1, 0}, {1, 1, 0}, {1, 1, 0}, {1, 1, 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statements per tick {open transactions, backlog of outbox, backlog of outbox_c} = %v, want %v", got, want)
	}
	for _, p := range pipelines {
		for _, watcher := range []string{WatcherBacklog, WatcherTransactions} {
			if up := testutil.ToFloat64(m.Up.WithLabelValues(p.Name, watcher)); up != 1 {
				t.Errorf("watcher_up{pipeline=%s, watcher=%s} = %v, want 1:\n%s", p.Name, watcher, up, logs.String())
			}
		}
	}
	for name, rows := range map[string]float64{"p000": 1, "p001": 1, "p002": 0} {
		if got := testutil.ToFloat64(m.BacklogRows.WithLabelValues(name)); got != rows {
			t.Errorf("backlog rows of %s = %v, want %v (its own table's)", name, got, rows)
		}
	}
}

// BenchmarkWatchersOf300PipelinesOn10Tables is one watch.interval of the
// scale benchmark's database watchers: each pipeline asking alone (as
// Watcher.Sample does), against one group asking for all of them (as Set
// does). Needs the stack.
func BenchmarkWatchersOf300PipelinesOn10Tables(b *testing.B) {
	st := stacktest.Load(b)
	dsn, pool := st.FreshOutbox(b, stacktest.SeedA)
	tables := []string{"outbox"}
	for i := 1; i < 10; i++ {
		tables = append(tables, fmt.Sprintf("outbox_%d", i))
		if _, err := pool.Exec(context.Background(), fmt.Sprintf("CREATE TABLE outbox_%d (LIKE outbox INCLUDING ALL)", i)); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := config.Load([]byte(fleetSpec{dsn: dsn, polling: 300, tables: tables, thresholds: []string{"1m"}}.yaml()))
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	db := newCountingQuerier(pool)
	var ws []*Watcher
	for i := range cfg.Pipelines {
		w, err := New(Options{Pipeline: &cfg.Pipelines[i], DB: pgDB(db), Metrics: m})
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	g := newGroup(pgDB(db), ws, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for _, mode := range []struct {
		name   string
		sample func()
	}{
		{"each pipeline alone", func() {
			for _, w := range ws {
				w.Sample(ctx)
			}
		}},
		{"one group", func() { g.Sample(ctx) }},
	} {
		b.Run(mode.name, func(b *testing.B) {
			mode.sample() // the index checks of the first sample
			db.take()
			cpu := processCPU(b)
			for b.Loop() {
				mode.sample()
			}
			cpu = processCPU(b) - cpu
			_, all := db.take()
			b.ReportMetric(float64(all)/float64(b.N), "statements/op")
			// The prober's own CPU, not the wait for PostgreSQL's answers.
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time the test process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestSetRunSamplesEveryPipelineUntilCancelled(t *testing.T) {
	t.Parallel()
	connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, connectStatus("RUNNING", "RUNNING@w1"))
	}))
	t.Cleanup(connect.Close)
	// Nothing listens on the database: its watchers fail, each pipeline's
	// own, while the connector watchers, in loops of their own, see.
	cfg := fleetSpec{dsn: "postgres://u@" + stacktest.ClosedAddr(t) + "/x?connect_timeout=5", polling: 3,
		tables: []string{"outbox"}, thresholds: []string{"1m"}}.load(t)
	for i := range cfg.Pipelines {
		cfg.Pipelines[i].Watch.ConnectURL, cfg.Pipelines[i].Watch.Connector = connect.URL, "outbox"
	}
	pools, err := postgres.NewPools(context.Background(), []config.Database{cfg.Pipelines[0].Database}, postgres.PoolsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs stacktest.SyncBuffer
	set, err := OpenSet(cfg.Pipelines, pgDatabases(pools), nil, m, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	// A failing watcher's up gauge reads 0 before its first sample too: the
	// warnings are what say both database questions were asked and failed.
	stacktest.Eventually(t, watchWait, "every pipeline's watchers sampled once", func() (bool, string) {
		var missing []string
		if n := len(warnLines(logs.String(), msgFailing)); n < 2 {
			missing = append(missing, fmt.Sprintf("%d of 2 failing-watcher warnings", n))
		}
		for _, p := range cfg.Pipelines {
			for watcher, want := range map[string]float64{WatcherConnector: 1, WatcherBacklog: 0, WatcherTransactions: 0} {
				if got := testutil.ToFloat64(m.Up.WithLabelValues(p.Name, watcher)); got != want {
					missing = append(missing, fmt.Sprintf("%s %s up=%v", p.Name, watcher, got))
				}
			}
		}
		return len(missing) == 0, strings.Join(missing, "; ")
	})
	cancel()
	select {
	case <-done:
	case <-time.After(watchWait):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if lines := warnLines(logs.String(), msgFailing); len(lines) != 2 {
		t.Errorf("%d warnings, want two naming the three pipelines: one for the backlog query, one for the transactions query:\n%s", len(lines), logs.String())
	}
}
