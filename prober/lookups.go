package prober

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// Lookups: the judge of a pipeline whose publish stamp is the row's
// published_at asks for it at a sweep, once due (the settle time after
// arrival, then backing off; see judge.Config.LookupSettle). Every
// pipeline on one outbox table hands its asks to the same Lookups, which
// reads whatever was asked since its last round, of every pipeline, in one
// statement of at most lookupBatchMax canaries, bounded by lookupTimeout,
// and answers each tracker under its own lock. One goroutine per table, not
// one per pipeline; one statement per table per round, not one per canary.
const (
	lookupTimeout  = 2 * time.Second
	lookupBatchMax = 1000
)

// DefaultLookupInterval is the least time between the starts of two rounds
// of one table: a canary asked for while the table is idle is read at
// once, one asked for sooner after the last round waits for the next, with
// every other canary asked for meanwhile. A table then costs at most one
// statement a second, whatever the number of pipelines on it: at 30
// pipelines on a table at `@every 10s` (3 canaries a second) one statement
// per 3 canaries instead of one each. A table of one pipeline at `@every
// 1s` keeps one per canary: its canaries come due a second apart.
//
// The wait delays the verdicts that need published_at, and the SLI events
// move with them: at most this second on top of the settle time
// (LookupSettle, 500 ms), the sweep tick (250 ms) and the group commit the
// answer's effects wait for (DefaultCommitDelay, 2 s, and a sweep; the ask
// itself does not wait for it), some 4 s after arrival at worst, well
// under a scrape interval (15 s and more). It lies between the settle time
// and the judge's longest retry spacing (judge.LookupRetryMax, 10 s), so
// the retries keep their order. A longer one would serve more canaries per statement only for
// tables busier than one canary a second, at the price of later events.
const DefaultLookupInterval = time.Second

// LookupFunc reads the looked-up stamps of a batch of canaries, of any of
// the pipelines on one outbox table, in one statement. It returns what it
// found by canary id; a canary without an entry has no stamp (yet):
// published_at still NULL, or the row gone. An error means it could not
// look (the prober's own database down): every canary of the batch is
// retried, never taken for missing stamps.
type LookupFunc func(ctx context.Context, cs []Canary) (map[string]LookupResult, error)

// LookupsOptions configures Lookups.
type LookupsOptions struct {
	// Read performs one batch; nil answers nothing (the judges never get
	// an answer and do not ask again).
	Read LookupFunc
	// Interval is the least time between the starts of two rounds. Zero:
	// DefaultLookupInterval; negative: a round starts as soon as anything
	// is asked.
	Interval time.Duration
	// Now and After, optional, are the clock that spaces the rounds (real
	// time by default: the spacing is about the database's load, not about
	// the canaries' stamps).
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
}

// Lookups reads the stamps the judges of the trackers on one outbox table
// ask for, in rounds: see DefaultLookupInterval. Create it with
// NewLookups, give it to each tracker (TrackerOptions.Lookups), run it with
// Run.
type Lookups struct {
	read     LookupFunc
	interval time.Duration
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time

	mu    sync.Mutex
	asked []lookupAsk // in the order the trackers first asked
	ready chan struct{}
}

// lookupAsk is what one tracker asked for since the last round.
type lookupAsk struct {
	tracker *Tracker
	ids     []string
}

// NewLookups returns the lookups of one outbox table, not running yet.
func NewLookups(o LookupsOptions) *Lookups {
	l := &Lookups{read: o.Read, interval: o.Interval, now: o.Now, after: o.After, ready: make(chan struct{}, 1)}
	if l.interval == 0 {
		l.interval = DefaultLookupInterval
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.after == nil {
		l.after = time.After
	}
	return l
}

// ask queues canaries of a tracker for the next round.
func (l *Lookups) ask(t *Tracker, ids []string) {
	l.mu.Lock()
	i := slices.IndexFunc(l.asked, func(a lookupAsk) bool { return a.tracker == t })
	if i < 0 {
		i = len(l.asked)
		l.asked = append(l.asked, lookupAsk{tracker: t})
	}
	l.asked[i].ids = append(l.asked[i].ids, ids...)
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default: // already woken; the round takes everything asked
	}
}

// Run performs the rounds until ctx is done. A round stopped by ctx
// answers nothing: the judges ask again after a restart.
func (l *Lookups) Run(ctx context.Context) {
	var last time.Time // when the last round started
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.ready:
		}
		if !l.anyAsked() {
			continue // woken for asks an earlier round took
		}
		if !last.IsZero() {
			if wait := l.interval - l.now().Sub(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-l.after(wait):
				}
			}
		}
		last = l.now()
		l.round(ctx, l.take())
	}
}

func (l *Lookups) anyAsked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.asked) > 0
}

// take empties the queue for a round.
func (l *Lookups) take() []lookupAsk {
	l.mu.Lock()
	defer l.mu.Unlock()
	asked := l.asked
	l.asked = nil
	return asked
}

// round reads everything asked: the canaries each judge still wants, in
// batches of at most lookupBatchMax.
func (l *Lookups) round(ctx context.Context, asked []lookupAsk) {
	var cs []Canary
	var owners []*Tracker // of cs[i], each tracker's canaries together
	for _, a := range asked {
		for _, c := range a.tracker.lookupCanaries(a.ids) {
			cs, owners = append(cs, c), append(owners, a.tracker)
		}
	}
	for len(cs) > 0 && ctx.Err() == nil {
		n := min(len(cs), lookupBatchMax)
		l.batch(ctx, cs[:n], owners[:n])
		cs, owners = cs[n:], owners[n:]
	}
}

// batch reads one batch in one call and hands each tracker its answers.
func (l *Lookups) batch(ctx context.Context, cs []Canary, owners []*Tracker) {
	if l.read == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	found, err := l.read(lctx, cs)
	cancel()
	if ctx.Err() != nil {
		return
	}
	for i := 0; i < len(cs); {
		j := i + 1
		for j < len(cs) && owners[j] == owners[i] {
			j++
		}
		owners[i].lookupAnswered(cs[i:j], found, err)
		i = j
	}
}

// publishedTable reads published_at back from one outbox table for every
// pipeline on it (same database, same table and columns): the LookupFunc
// of its Lookups.
type publishedTable struct {
	pool *pgxpool.Pool
	// sql reads the published_at of a batch of rows by primary key
	// (publishedQuery); built once, as it runs on every round.
	sql string
	// clocks converts each pipeline's stamps with its own offset estimate.
	clocks map[string]*DBClock
	// lookups runs the rounds of the table, read by read.
	lookups *Lookups
}

// lookupTableKey identifies the pipelines that share a publishedTable.
type lookupTableKey struct {
	pool *pgxpool.Pool // one per database (postgres.Pools)
	sql  string
}

// publishedQuery reads the published_at of a batch of rows by primary
// key. The ids go as a text array, which PostgreSQL takes as an array of
// the id column's own type (bigint or uuid), so the primary key index is
// used; they come back as text, as the sender's RETURNING gave them.
func publishedQuery(p *config.Pipeline) string {
	c := p.Outbox.Columns
	return fmt.Sprintf("SELECT %s::text, %s FROM %s WHERE %s = ANY($1)",
		postgres.QuoteIdent(c.ID), postgres.QuoteIdent(c.PublishedAt), postgres.QuoteTable(p.Outbox.Table), postgres.QuoteIdent(c.ID))
}

// read reads the rows of a batch of canaries back by primary key in one
// query and converts the database times to the prober's clock with the
// offset of each canary's pipeline, and its error bound. A row whose
// published_at is still NULL (the relay's transaction has not committed)
// or that is gone has no entry: the judge asks again. A failure (our own
// database unreachable) is retried and never taken for a missing stamp; so
// is a canary whose pipeline has no offset measured yet (Unavailable),
// while the others are read.
func (pt *publishedTable) read(ctx context.Context, cs []Canary) (map[string]LookupResult, error) {
	found := map[string]LookupResult{}
	type row struct {
		canary string
		off    ClockOffset
	}
	byRow := make(map[string]row, len(cs))
	rowIDs := make([]string, 0, len(cs))
	for _, c := range cs {
		if c.RowID == "" {
			continue
		}
		clock, ok := pt.clocks[c.Pipeline]
		if !ok {
			found[c.ID] = LookupResult{Unavailable: fmt.Errorf("pipeline %q: not on this outbox table", c.Pipeline)}
			continue
		}
		off, ok := clock.Current()
		if !ok {
			found[c.ID] = LookupResult{Unavailable: errClockUnmeasured}
			continue
		}
		byRow[c.RowID] = row{canary: c.ID, off: off}
		rowIDs = append(rowIDs, c.RowID)
	}
	if len(rowIDs) == 0 {
		return found, nil
	}
	rows, err := pt.pool.Query(ctx, pt.sql, rowIDs)
	if err != nil {
		return nil, fmt.Errorf("read published_at of %d rows: %w", len(rowIDs), err)
	}
	var rowID string
	var published *time.Time
	_, err = pgx.ForEachRow(rows, []any{&rowID, &published}, func() error {
		if r, ok := byRow[rowID]; ok && published != nil {
			found[r.canary] = LookupResult{Stamps: map[string]time.Time{config.StampPublish: r.off.ToLocal(*published)}, ErrorBound: r.off.Error}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read published_at of %d rows: %w", len(rowIDs), err)
	}
	return found, nil
}

var errClockUnmeasured = errors.New("database clock offset not measured yet")
