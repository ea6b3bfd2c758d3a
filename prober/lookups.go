package prober

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Lookups: the judge of a pipeline whose publish stamp is the row's
// published_at asks for it at a sweep, once due (the settle time after
// arrival, then backing off; see judge.Config.LookupSettle). Every
// pipeline on one database hands its asks to the same Lookups, which reads
// whatever was asked since its last round, of every pipeline and every
// outbox table, in one call of at most lookupBatchMax canaries (one
// statement for all the tables, see publishedDatabase), bounded by
// lookupTimeout, and answers each tracker under its own lock. One
// goroutine per database, not one per table or pipeline; one statement
// per database per round, not one per table or canary.
const (
	lookupTimeout  = 2 * time.Second
	lookupBatchMax = 1000
)

// DefaultLookupInterval is the least time between the starts of two rounds
// of one database: a canary asked for while the database is idle is read
// at once, one asked for sooner after the last round waits for the next,
// with every other canary asked for meanwhile. A database then costs at
// most one statement a second, whatever the number of pipelines and
// tables on it: at 30 pipelines at `@every 10s` (3 canaries a second) one
// statement per 3 canaries instead of one each, at 10 pipelines on 10
// tables at `@every 1s` one per 10. A database of one pipeline at `@every
// 1s` keeps one per canary: its canaries come due a second apart.
//
// The wait delays the verdicts that need published_at, and the SLI events
// move with them: at most this second on top of the settle time
// (LookupSettle, 500 ms), the sweep tick (250 ms) and the group commit the
// answer's effects wait for (DefaultCommitDelay, 2 s, and a sweep; the ask
// itself does not wait for it), some 4 s after arrival at worst, well
// under a scrape interval (15 s and more). It lies between the settle time
// and the judge's longest retry spacing (judge.LookupRetryMax, 10 s), so
// the retries keep their order. A longer one would serve more canaries per
// statement only for databases busier than one canary a second, at the
// price of later events.
const DefaultLookupInterval = time.Second

// LookupFunc reads the looked-up stamps of a batch of canaries, of any of
// the pipelines on one database, in one call. It returns what it
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

// Lookups reads the stamps the judges of the trackers on one database ask
// for, in rounds: see DefaultLookupInterval. Create it with
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

// NewLookups returns the lookups of one database, not running yet.
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
