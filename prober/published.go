package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

// publishedDatabase reads published_at back from the outbox tables of one
// database (one shared pool) for every pipeline on them: the LookupFunc of
// the database's Lookups. A round reads the tables together, in one
// statement per group of at most lookupTablesMax tables where the family
// can (outboxdb.DB's ReadPublished), so that the common layout, one
// pipeline per table and a few tables per database, costs one statement a
// round rather than one per table. A group none of whose tables has
// canaries waiting is not read.
//
// A group statement fails as a whole when one of its tables is broken (a
// column dropped or renamed, SELECT revoked): the round then reads the
// group's tables one by one, so the broken table's canaries are
// unavailable and the others are found, and so do the group's rounds
// until lookupFallbackRounds of them (this one included) have, before it
// tries one statement again. A broken table thus costs its neighbours one
// failed statement per lookupFallbackRounds rounds, and one statement per
// table meanwhile; it never blinds them. A failure that is not the statement's (the database
// unreachable, the round's timeout) answers every canary of the batch as
// unavailable, as one statement per table would have.
//
// Its state (the groups' fallback) is only touched by read, which the
// database's one Lookups goroutine calls one batch at a time.
type publishedDatabase struct {
	db     outboxdb.DB
	log    *slog.Logger
	tables []*publishedTable // in the order of their first pipeline
	groups []*tableGroup
	// pipelines: the table and clock of each pipeline on the database.
	pipelines map[string]pipelineTable
	// fallbacks counts the group statements that failed on a table of
	// theirs and were read table by table (tests read it; the log says
	// why).
	fallbacks int
	lookups   *Lookups
}

// publishedTable is one outbox table (its name and its id and published_at
// columns) read back by the pipelines on it.
type publishedTable struct {
	ref   outboxdb.Table
	key   string // the table and columns, for logs and to find it again
	index int    // in publishedDatabase.tables
	group *tableGroup
}

// tableGroup is up to lookupTablesMax tables of a database read in one
// statement.
type tableGroup struct {
	tables []*publishedTable
	// alone is the number of rounds left that read the tables one by one,
	// after the group statement failed on one of them.
	alone int
}

type pipelineTable struct {
	table *publishedTable
	clock *DBClock
}

const (
	// lookupTablesMax bounds the tables of one statement: the planner
	// plans every branch at each execution (a custom plan, as the arrays'
	// sizes vary), some 25µs a table.
	lookupTablesMax = 32
	// lookupFallbackRounds is how many rounds a group reads its tables one
	// by one after its statement failed on one of them: about a minute at
	// DefaultLookupInterval.
	lookupFallbackRounds = 60
)

func newPublishedDatabase(db outboxdb.DB, log *slog.Logger) *publishedDatabase {
	pd := &publishedDatabase{db: db, log: log, pipelines: map[string]pipelineTable{}}
	pd.lookups = NewLookups(LookupsOptions{Read: pd.read})
	return pd
}

// add reads the pipeline's canaries from its outbox table, with the
// pipeline's clock; the service calls it for each pipeline on the
// database before the first round.
func (pd *publishedDatabase) add(p *config.Pipeline, clock *DBClock) {
	c := p.Outbox.Columns
	ref := outboxdb.Table{Name: p.Outbox.Table, ID: c.ID, PublishedAt: c.PublishedAt}
	key := fmt.Sprintf("%s (%s, %s)", ref.Name, ref.ID, ref.PublishedAt)
	var table *publishedTable
	for _, t := range pd.tables {
		if t.key == key {
			table = t
			break
		}
	}
	if table == nil {
		table = &publishedTable{ref: ref, key: key, index: len(pd.tables)}
		pd.tables = append(pd.tables, table)
		if len(pd.groups) == 0 || len(pd.groups[len(pd.groups)-1].tables) == lookupTablesMax {
			pd.groups = append(pd.groups, &tableGroup{})
		}
		g := pd.groups[len(pd.groups)-1]
		table.group = g
		g.tables = append(g.tables, table)
	}
	pd.pipelines[p.Name] = pipelineTable{table: table, clock: clock}
}

// publishedRow is the canary a row read back belongs to, and the offset
// of its pipeline's clock.
type publishedRow struct {
	canary string
	off    ClockOffset
}

type tableRow struct {
	table int
	id    string
}

// read reads the rows of a batch of canaries back by primary key, in one
// statement per group of tables that has any (see publishedDatabase), and
// converts the database times to the prober's clock with the offset of
// each canary's pipeline, and its error bound. A row whose published_at is
// still NULL (the relay's transaction has not committed) or that is gone
// has no entry: the judge asks again. A failure (our own database
// unreachable) is retried and never taken for a missing stamp; so is a
// canary whose pipeline has no offset measured yet (Unavailable), or whose
// table cannot be read (Unavailable, see publishedDatabase), while the
// others are read.
func (pd *publishedDatabase) read(ctx context.Context, cs []Canary) (map[string]LookupResult, error) {
	found := map[string]LookupResult{}
	byRow := make(map[tableRow]publishedRow, len(cs))
	pending := make([][]string, len(pd.tables)) // row ids by table
	rows := 0
	for _, c := range cs {
		if c.RowID == "" {
			continue
		}
		pp, ok := pd.pipelines[c.Pipeline]
		if !ok {
			found[c.ID] = LookupResult{Unavailable: fmt.Errorf("pipeline %q: not on this database", c.Pipeline)}
			continue
		}
		off, ok := pp.clock.Current()
		if !ok {
			found[c.ID] = LookupResult{Unavailable: errClockUnmeasured}
			continue
		}
		byRow[tableRow{pp.table.index, c.RowID}] = publishedRow{canary: c.ID, off: off}
		pending[pp.table.index] = append(pending[pp.table.index], c.RowID)
		rows++
	}
	if rows == 0 {
		return found, nil
	}
	for _, g := range pd.groups {
		if err := pd.readGroup(ctx, g, pending, byRow, found); err != nil {
			return nil, fmt.Errorf("read published_at of %d rows: %w", rows, err)
		}
	}
	return found, nil
}

// readGroup reads the group's pending rows into found: in one statement,
// or table by table after the statement failed on a table of the group.
func (pd *publishedDatabase) readGroup(ctx context.Context, g *tableGroup, pending [][]string,
	byRow map[tableRow]publishedRow, found map[string]LookupResult) error {
	n := 0
	for _, t := range g.tables {
		n += len(pending[t.index])
	}
	if n == 0 {
		return nil
	}
	// A group of one table is read by the table's own statement: its
	// failure is that table's, like any table's read alone.
	if g.alone == 0 && len(g.tables) > 1 {
		err := pd.query(ctx, g.tables, pending, byRow, found)
		if err == nil || !pd.db.TableFault(err) || ctx.Err() != nil {
			return err
		}
		g.alone = lookupFallbackRounds
		pd.fallbacks++
		pd.log.Warn("reading published_at of several outbox tables in one statement failed on one of them; reading them one by one",
			"tables", len(g.tables), "rounds", lookupFallbackRounds, "err", pd.db.Explain(err))
	}
	g.alone = max(0, g.alone-1)
	for _, t := range g.tables {
		ids := pending[t.index]
		if len(ids) == 0 {
			continue
		}
		err := pd.query(ctx, []*publishedTable{t}, pending, byRow, found)
		if err == nil {
			continue
		}
		if !pd.db.TableFault(err) || ctx.Err() != nil {
			return err
		}
		// This table's canaries only: the others of the group are read.
		pd.log.Debug("reading published_at of an outbox table failed; its canaries retried", "table", t.key, "err", err)
		unavailable := fmt.Errorf("read published_at from %s: %w", t.key, err)
		for _, id := range ids {
			found[byRow[tableRow{t.index, id}].canary] = LookupResult{Unavailable: unavailable}
		}
	}
	return nil
}

// query reads the pending rows of tables in one statement and adds the
// stamps it found.
func (pd *publishedDatabase) query(ctx context.Context, tables []*publishedTable, pending [][]string,
	byRow map[tableRow]publishedRow, found map[string]LookupResult) error {
	refs := make([]outboxdb.Table, len(tables))
	ids := make([][]string, len(tables))
	for i, t := range tables {
		refs[i], ids[i] = t.ref, pending[t.index]
	}
	rows, err := pd.db.ReadPublished(ctx, refs, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Table < 0 || r.Table >= len(tables) {
			continue
		}
		if pr, ok := byRow[tableRow{tables[r.Table].index, r.ID}]; ok {
			found[pr.canary] = LookupResult{Stamps: map[string]time.Time{config.StampPublish: pr.off.ToLocal(r.PublishedAt)},
				ErrorBound: pr.off.Error}
		}
	}
	return nil
}

var errClockUnmeasured = errors.New("database clock offset not measured yet")
