package prober

// Tests of the published_at reads of a database's outbox tables in one
// statement. The statement's text is pinned without servers; what it reads,
// how many statements a round costs and how a broken table is read around
// run against the project's PostgreSQL: start the stack with
// `deploy/local/stack.sh up`, then `go test ./prober/ -run Published`.
// Without the stack they skip (and fail in CI).

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// onTable is a published_at pipeline on an outbox table with the given id
// and published_at columns.
func onTable(name, table, id, publishedAt string) *config.Pipeline {
	p := publishedPipeline(name)
	p.Outbox.Table = table
	p.Outbox.Columns.ID, p.Outbox.Columns.PublishedAt = id, publishedAt
	return &p
}

// measuredClock is a database clock whose offset is known.
func measuredClock(off ClockOffset) *DBClock { return &DBClock{off: off, ok: true} }

func TestTheTablesOfADatabaseAreReadInOneStatementOfFixedText(t *testing.T) {
	pd := newPublishedDatabase(nil, slog.New(slog.DiscardHandler))
	clock := measuredClock(ClockOffset{})
	pd.add(onTable("orders", "public.outbox", "id", "published_at"), clock)
	pd.add(onTable("invoices", "Billing.Outbox", "Event ID", "Published At"), clock)
	pd.add(onTable("refunds", "public.outbox", "id", "published_at"), clock)

	// PostgreSQL's statement for the group (postgres.PublishedSQL).
	want := `SELECT 0, "id"::text, (extract(epoch FROM "published_at") * 1000000)::bigint FROM "public"."outbox" WHERE "id" = ANY($1)` +
		` UNION ALL SELECT 1, "Event ID"::text, (extract(epoch FROM "Published At") * 1000000)::bigint FROM "Billing"."Outbox" WHERE "Event ID" = ANY($2)`
	if len(pd.groups) != 1 || groupSQL(pd.groups[0].tables) != want {
		t.Fatalf("groups %d, statement\n%s\nwant one:\n%s", len(pd.groups), groupSQL(pd.groups[0].tables), want)
	}
	if len(pd.tables) != 2 || pd.pipelines["refunds"].table != pd.pipelines["orders"].table {
		t.Errorf("%d tables, want 2: two pipelines on one table share it", len(pd.tables))
	}
	if got, want := groupSQL(pd.tables[1:]), `SELECT 0, "Event ID"::text, (extract(epoch FROM "Published At") * 1000000)::bigint FROM "Billing"."Outbox" WHERE "Event ID" = ANY($1)`; got != want {
		t.Errorf("the table alone is read by\n%s\nwant\n%s", got, want)
	}
}

func TestMoreTablesThanAStatementHoldsAreReadInGroups(t *testing.T) {
	pd := newPublishedDatabase(nil, slog.New(slog.DiscardHandler))
	n := lookupTablesMax + 3
	for i := range n {
		pd.add(onTable(fmt.Sprintf("p%d", i), fmt.Sprintf("r%d.outbox", i), "id", "published_at"), measuredClock(ClockOffset{}))
	}
	if len(pd.groups) != 2 || len(pd.groups[0].tables) != lookupTablesMax || len(pd.groups[1].tables) != 3 {
		t.Fatalf("%d groups, want %d tables then 3", len(pd.groups), lookupTablesMax)
	}
	last := groupSQL(pd.groups[1].tables)
	if !strings.HasPrefix(last, "SELECT 0, ") || !strings.HasSuffix(last, `"id" = ANY($3)`) ||
		strings.Contains(last, "$4") || pd.groups[1].tables[0].index != lookupTablesMax {
		t.Errorf("the second group's statement numbers its tables and parameters from its own first, table %d: %s", lookupTablesMax, last)
	}
}

// groupSQL is PostgreSQL's statement for tables read together.
func groupSQL(tables []*publishedTable) string {
	refs := make([]outboxdb.Table, len(tables))
	for i, t := range tables {
		refs[i] = t.ref
	}
	return postgres.PublishedSQL(refs)
}

// statementCounter counts the statements a publishedDatabase runs.
type statementCounter struct {
	outboxdb.DB
	statements atomic.Int64
}

func (c *statementCounter) ReadPublished(ctx context.Context, tables []outboxdb.Table, ids [][]string) ([]outboxdb.PublishedRow, error) {
	c.statements.Add(1)
	return c.DB.ReadPublished(ctx, tables, ids)
}

// publishedStack is a database of the stack with outbox tables of
// different shapes: a.outbox (schema A: bigint id, timestamptz
// published_at) and "B"."Outbox" (uuid "Event ID", timestamp without time
// zone "Published At"), read by a session whose TimeZone is not UTC.
type publishedStack struct {
	t     *testing.T
	pool  *pgxpool.Pool
	q     *statementCounter
	pd    *publishedDatabase
	clock *DBClock
}

func newPublishedStack(t *testing.T) *publishedStack {
	s := stacktest.Load(t)
	dsn := s.NewDatabase(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// A timestamp column must not be read in the session's time zone.
	cfg.ConnConfig.RuntimeParams["timezone"] = "America/Sao_Paulo"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA a; SET search_path TO a; "+outboxsql.SchemaA+"; RESET search_path;"+
		`CREATE SCHEMA "B"; CREATE TABLE "B"."Outbox" ("Event ID" uuid PRIMARY KEY, "Published At" timestamp)`); err != nil {
		t.Fatal(err)
	}
	ps := &publishedStack{t: t, pool: pool, q: &statementCounter{DB: postgres.NewOutboxDB(pool)}, clock: measuredClock(ClockOffset{Offset: time.Second, Error: time.Millisecond})}
	ps.pd = newPublishedDatabase(ps.q, slog.New(slog.DiscardHandler))
	ps.pd.add(onTable("orders", "a.outbox", "id", "published_at"), ps.clock)
	ps.pd.add(onTable("invoices", "B.Outbox", "Event ID", "Published At"), ps.clock)
	return ps
}

// row inserts a row into the pipeline's table, published at (a
// timestamptz literal, or NULL), and returns a canary for it.
func (ps *publishedStack) row(pipeline, id, publishedAt string) Canary {
	ps.t.Helper()
	var err error
	var rowID string
	switch pipeline {
	case "orders":
		err = ps.pool.QueryRow(context.Background(), `INSERT INTO a.outbox (aggregate_type, aggregate_id, payload, published_at)
			VALUES ('o', 'k', '{}', `+publishedAt+`) RETURNING id::text`).Scan(&rowID)
	default:
		err = ps.pool.QueryRow(context.Background(), `INSERT INTO "B"."Outbox" VALUES (gen_random_uuid(), `+publishedAt+`)
			RETURNING "Event ID"::text`).Scan(&rowID)
	}
	if err != nil {
		ps.t.Fatal(err)
	}
	return Canary{ID: id, Pipeline: pipeline, RowID: rowID}
}

// stampAsPgxReadsIt is what one statement per table read: the row's
// published_at as pgx scans it (a timestamp's wall clock as UTC).
func (ps *publishedStack) stampAsPgxReadsIt(c Canary) time.Time {
	ps.t.Helper()
	sql := `SELECT published_at FROM a.outbox WHERE id = $1::bigint`
	if c.Pipeline != "orders" {
		sql = `SELECT "Published At" FROM "B"."Outbox" WHERE "Event ID" = $1::uuid`
	}
	var ts time.Time
	if err := ps.pool.QueryRow(context.Background(), sql, c.RowID).Scan(&ts); err != nil {
		ps.t.Fatal(err)
	}
	return ts
}

// read reads a batch and returns how many statements it took.
func (ps *publishedStack) read(cs ...Canary) (map[string]LookupResult, int64, error) {
	before := ps.q.statements.Load()
	found, err := ps.pd.read(context.Background(), cs)
	return found, ps.q.statements.Load() - before, err
}

func TestPublishedAtOfTablesOfEveryShapeIsReadInOneStatement(t *testing.T) {
	ps := newPublishedStack(t)
	order := ps.row("orders", "o1", "'2026-03-04 05:06:07.123456+00'")
	invoice := ps.row("invoices", "i1", "'2026-03-04 05:06:08.654321'")
	unpublished := ps.row("invoices", "i2", "NULL")
	gone := Canary{ID: "o2", Pipeline: "orders", RowID: "999999"}

	found, statements, err := ps.read(order, invoice, unpublished, gone)
	if err != nil {
		t.Fatal(err)
	}
	if statements != 1 {
		t.Errorf("%d statements, want one for both tables", statements)
	}
	for _, c := range []Canary{order, invoice} {
		want := ps.stampAsPgxReadsIt(c).Add(-time.Second) // the database clock's offset
		if got := found[c.ID]; !got.Stamps[config.StampPublish].Equal(want) || got.ErrorBound != time.Millisecond {
			t.Errorf("%s: %+v, want published at %v (the prober's clock) within 1ms", c.ID, got, want)
		}
	}
	for _, c := range []Canary{unpublished, gone} {
		if got, ok := found[c.ID]; ok {
			t.Errorf("%s: %+v, want no entry: published_at NULL, or the row gone", c.ID, got)
		}
	}

	// One table waiting: the same statement, the other table's array empty.
	if _, statements, err := ps.read(ps.row("orders", "o3", "now()")); err != nil || statements != 1 {
		t.Errorf("one table waiting: %d statements (%v), want one", statements, err)
	}
	if _, statements, err := ps.read(Canary{ID: "x", Pipeline: "refunds", RowID: "1"}); err != nil || statements != 0 {
		t.Errorf("no canary of the database's tables: %d statements (%v), want none", statements, err)
	}
}

func TestABrokenTableIsReadAroundAndTheStatementTriedAgainLater(t *testing.T) {
	ps := newPublishedStack(t)
	ctx := context.Background()
	order := ps.row("orders", "o1", "now()")
	invoice := ps.row("invoices", "i1", "now()")
	if _, err := ps.pool.Exec(ctx, `ALTER TABLE "B"."Outbox" RENAME COLUMN "Published At" TO "Sent At"`); err != nil {
		t.Fatal(err)
	}

	found, statements, err := ps.read(order, invoice)
	if err != nil {
		t.Fatalf("the round failed (%v): the healthy table's canary must be read", err)
	}
	if statements != 3 {
		t.Errorf("%d statements, want 3: the failed one, then each table's", statements)
	}
	if _, ok := found["o1"].Stamps[config.StampPublish]; !ok {
		t.Errorf("o1 = %+v, want found: its table is fine", found["o1"])
	}
	if found["i1"].Unavailable == nil {
		t.Errorf("i1 = %+v, want unavailable (retried), never missing: its table cannot be read", found["i1"])
	}
	if ps.pd.fallbacks != 1 {
		t.Errorf("%d fallbacks counted, want 1", ps.pd.fallbacks)
	}

	if _, err := ps.pool.Exec(ctx, `ALTER TABLE "B"."Outbox" RENAME COLUMN "Sent At" TO "Published At"`); err != nil {
		t.Fatal(err)
	}
	for round := 2; round <= lookupFallbackRounds; round++ {
		found, statements, err := ps.read(order, invoice)
		if err != nil || statements != 2 || len(found) != 2 {
			t.Fatalf("round %d after the failure: %d statements, %d found (%v), want each table read alone", round, statements, len(found), err)
		}
	}
	found, statements, err = ps.read(order, invoice)
	if err != nil || statements != 1 || len(found) != 2 {
		t.Errorf("%d rounds after the failure: %d statements, %d found (%v), want one statement again", lookupFallbackRounds, statements, len(found), err)
	}
	if ps.pd.fallbacks != 1 {
		t.Errorf("%d fallbacks counted, want still 1", ps.pd.fallbacks)
	}

	// A table of its own (a database of one table, or the last group's)
	// is read alone already: its failure is its own canaries'.
	if _, err := ps.pool.Exec(ctx, `ALTER TABLE "B"."Outbox" RENAME COLUMN "Published At" TO "Sent At"`); err != nil {
		t.Fatal(err)
	}
	alone := newPublishedDatabase(ps.q, slog.New(slog.DiscardHandler))
	alone.add(onTable("invoices", "B.Outbox", "Event ID", "Published At"), ps.clock)
	found, err = alone.read(ctx, []Canary{invoice})
	if err != nil || found["i1"].Unavailable == nil || alone.fallbacks != 0 {
		t.Errorf("a broken table alone: %+v (%v), %d fallbacks; want its canary unavailable, no fallback", found, err, alone.fallbacks)
	}
}

func TestADatabaseThatCannotBeReadAnswersNoCanaryAsMissing(t *testing.T) {
	ps := newPublishedStack(t)
	cs := []Canary{ps.row("orders", "o1", "now()"), ps.row("invoices", "i1", "now()")}
	timedOut, cancel := context.WithCancel(context.Background())
	cancel()
	if found, err := ps.pd.read(timedOut, cs); err == nil {
		t.Errorf("a round past its timeout read %+v, want an error: the trackers count every canary of the batch unavailable", found)
	}
	ps.pool.Close()
	if found, err := ps.pd.read(context.Background(), cs); err == nil {
		t.Errorf("a round without a database read %+v, want an error", found)
	}
	if ps.pd.fallbacks != 0 {
		t.Errorf("%d fallbacks, want none: the database's failure is not a table's", ps.pd.fallbacks)
	}
}

// BenchmarkPublishedRoundOf10Tables reads one canary from each of 10
// outbox tables of one database, as a round of the 10-pipeline benchmark
// does: in one statement (one Lookups per database) or in one statement
// per table (the layout of one Lookups per table). It reports the
// statements and the prober's own CPU (user+system, without PostgreSQL's)
// per round.
func BenchmarkPublishedRoundOf10Tables(b *testing.B) {
	s := stacktest.Load(b)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, s.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	const tables = 10
	clock := measuredClock(ClockOffset{})
	q := &statementCounter{DB: postgres.NewOutboxDB(pool)}
	whole := newPublishedDatabase(q, slog.New(slog.DiscardHandler))
	var alone []*publishedDatabase
	var cs []Canary
	for i := range tables {
		schema := fmt.Sprintf("r%d", i)
		if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE SCHEMA %[1]s; SET search_path TO %[1]s; %[2]s; RESET search_path;"+
			"INSERT INTO %[1]s.outbox (aggregate_type, aggregate_id, payload, published_at) SELECT 'o', 'k', '{}', now() FROM generate_series(1, 1000)",
			schema, outboxsql.SchemaA)); err != nil {
			b.Fatal(err)
		}
		const id = "500"
		p := onTable(fmt.Sprintf("p%d", i), schema+".outbox", "id", "published_at")
		whole.add(p, clock)
		one := newPublishedDatabase(q, slog.New(slog.DiscardHandler))
		one.add(p, clock)
		alone = append(alone, one)
		cs = append(cs, Canary{ID: fmt.Sprint(i), Pipeline: p.Name, RowID: id})
	}
	bench := func(b *testing.B, round func() int) {
		found := 0
		q.statements.Store(0)
		cpu := cpuTime(b)
		b.ResetTimer()
		for b.Loop() {
			found += round()
		}
		b.StopTimer()
		b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(q.statements.Load())/float64(b.N), "statements/op")
		if found != tables*b.N {
			b.Fatalf("found %d stamps, want %d", found, tables*b.N)
		}
	}
	b.Run("one statement per database", func(b *testing.B) {
		bench(b, func() int {
			found, err := whole.read(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			return len(found)
		})
	})
	b.Run("one statement per table", func(b *testing.B) {
		bench(b, func() int {
			n := 0
			for i, pd := range alone {
				found, err := pd.read(ctx, cs[i:i+1])
				if err != nil {
					b.Fatal(err)
				}
				n += len(found)
			}
			return n
		})
	})
}
