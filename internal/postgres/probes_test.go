package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestQueryBacklogOnTheSeedSchemas(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	for _, schema := range []stacktest.Schema{stacktest.SeedA, stacktest.SeedB} {
		t.Run(schema.Name+" reports rows and the age of the oldest unpublished row on the database clock.", func(t *testing.T) {
			t.Parallel()
			dsn, pool := st.FreshOutbox(t, schema)
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: schema})
			ctx := context.Background()

			b, err := QueryBacklog(ctx, pool, p)
			if err != nil {
				t.Fatalf("QueryBacklog of an empty outbox: %v", err)
			}
			if b != (Backlog{}) {
				t.Errorf("empty outbox: backlog %+v, want 0 rows and age 0", b)
			}

			stacktest.InsertRow(t, pool, schema, true, time.Hour) // published: not backlog, however old
			stacktest.InsertRow(t, pool, schema, false, 30*time.Second)
			stacktest.InsertRow(t, pool, schema, false, 0)
			first, err := QueryBacklog(ctx, pool, p)
			if err != nil {
				t.Fatalf("QueryBacklog: %v", err)
			}
			if first.Rows != 2 {
				t.Errorf("backlog = %d rows, want 2 unpublished", first.Rows)
			}
			if first.OldestAge < 30*time.Second || first.OldestAge >= time.Hour {
				t.Errorf("oldest unpublished age = %s, want the 30s-old row's (>= 30s, < the published row's hour)", first.OldestAge)
			}
			// The age keeps climbing while nothing is published: a stall
			// shows without traffic.
			stacktest.Eventually(t, serverWait, "the oldest age grows", func() (bool, string) {
				b, err := QueryBacklog(ctx, pool, p)
				return err == nil && b.OldestAge > first.OldestAge, fmt.Sprintf("%+v %v", b, err)
			})

			if _, err := pool.Exec(ctx, `UPDATE outbox SET published_at = clock_timestamp() WHERE published_at IS NULL`); err != nil {
				t.Fatalf("publish: %v", err)
			}
			b, err = QueryBacklog(ctx, pool, p)
			if err != nil || b != (Backlog{}) {
				t.Errorf("after publishing everything: backlog %+v (err %v), want 0 rows and age 0", b, err)
			}
		})
	}
}

// planNode is the part of EXPLAIN (FORMAT JSON) that the index test reads.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	Plans        []planNode `json:"Plans"`
}

func (n planNode) walk(visit func(planNode)) {
	visit(n)
	for _, c := range n.Plans {
		c.walk(visit)
	}
}

// planNodes returns the node types of the plan, each with its index.
func planNodes(t *testing.T, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	var out []byte
	if err := pool.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+sql).Scan(&out); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	var nodes []string
	plans[0].Plan.walk(func(n planNode) {
		node := n.NodeType
		if n.IndexName != "" {
			node += " on " + n.IndexName
		} else if n.RelationName != "" {
			node += " on " + n.RelationName
		}
		nodes = append(nodes, node)
	})
	return nodes
}

func usesIndex(nodes []string, index string) bool {
	for _, n := range nodes {
		for _, scan := range []string{"Index Only Scan", "Index Scan", "Bitmap Index Scan"} {
			if n == scan+" on "+index {
				return true
			}
		}
	}
	return false
}

func TestBacklogQueryUsesThePartialIndexOfAMillionRowOutbox(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	for _, schema := range []stacktest.Schema{stacktest.SeedA, stacktest.SeedB} {
		t.Run(schema.Name+" answers the backlog from the partial index, and warns once it is dropped.", func(t *testing.T) {
			t.Parallel()
			dsn, pool := st.FreshOutbox(t, schema)
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: schema})
			ctx := context.Background()
			fill := fmt.Sprintf(`INSERT INTO outbox (%s, aggregate_id, payload, created_at, published_at)
				SELECT 'order', 'ord-' || g, '{}', now() - interval '1 day', now() FROM generate_series(1, 1000000) AS g`, schema.Route)
			if _, err := pool.Exec(ctx, fill); err != nil {
				t.Fatalf("a million published rows: %v", err)
			}
			for range 3 {
				stacktest.InsertRow(t, pool, schema, false, 10*time.Second)
			}
			if _, err := pool.Exec(ctx, "ANALYZE outbox"); err != nil {
				t.Fatalf("ANALYZE: %v", err)
			}

			nodes := planNodes(t, pool, BacklogQuery(p))
			t.Logf("plan of %s: %v", BacklogQuery(p), nodes)
			if !usesIndex(nodes, "outbox_unpublished_idx") {
				t.Errorf("the backlog query does not scan outbox_unpublished_idx: %v", nodes)
			}
			for _, n := range nodes {
				if strings.HasPrefix(n, "Seq Scan") {
					t.Errorf("the backlog query scans the whole table: %v", nodes)
				}
			}
			b, err := QueryBacklog(ctx, pool, p)
			if err != nil || b.Rows != 3 {
				t.Errorf("backlog %+v, err %v; want 3 rows", b, err)
			}
			has, err := HasUnpublishedIndex(ctx, pool, p)
			if err != nil || !has {
				t.Errorf("HasUnpublishedIndex = %t, %v; want true", has, err)
			}

			if _, err := pool.Exec(ctx, "DROP INDEX outbox_unpublished_idx"); err != nil {
				t.Fatalf("DROP INDEX: %v", err)
			}
			if nodes := planNodes(t, pool, BacklogQuery(p)); usesIndex(nodes, "outbox_unpublished_idx") || !strings.HasPrefix(strings.Join(nodes, ","), "Aggregate") {
				t.Errorf("without the index the plan is %v", nodes)
			}
			has, err = HasUnpublishedIndex(ctx, pool, p)
			if err != nil || has {
				t.Errorf("after DROP INDEX: HasUnpublishedIndex = %t, %v; want false", has, err)
			}
		})
	}
}

func TestHasUnpublishedIndexIgnoresIndexesTheBacklogCannotUse(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	cases := []struct {
		name  string
		index string
		want  bool
	}{
		{"A full index is not a partial index on the backlog.", "CREATE INDEX ON outbox (published_at)", false},
		{"An index on published rows is the opposite predicate.", "CREATE INDEX ON outbox (id) WHERE published_at IS NOT NULL", false},
		{"A predicate with an extra condition does not serve the backlog query.", "CREATE INDEX ON outbox (id) WHERE published_at IS NULL AND aggregate_id <> 'x'", false},
		{"A partial index on exactly the unpublished predicate counts.", "CREATE INDEX ON outbox (created_at) WHERE (published_at IS NULL)", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA})
			ctx := context.Background()
			if _, err := pool.Exec(ctx, "DROP INDEX outbox_unpublished_idx; "+tc.index); err != nil {
				t.Fatalf("index: %v", err)
			}
			got, err := HasUnpublishedIndex(ctx, pool, p)
			if err != nil || got != tc.want {
				t.Errorf("HasUnpublishedIndex = %t, %v; want %t", got, err, tc.want)
			}
		})
	}
}

// claimQuery is the reference relay's claim (internal/relay), for schema A.
// serverWait bounds every wait for an expected state of the server.
const serverWait = 30 * time.Second

const claimQuery = `SELECT id FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`

func TestQueryTransactionsSeesTheTransactionThatHidesAnOutboxRow(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA})
	ctx := context.Background()

	idle, err := QueryTransactions(ctx, pool, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("QueryTransactions: %v", err)
	}
	if idle.OverLimit != 0 || idle.OldestAge != 0 {
		t.Errorf("no transaction open: %+v, want none", idle)
	}

	writer, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect the writer: %v", err)
	}
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatalf("BEGIN: %v", err)
	}
	stacktest.InsertRow(t, tx, stacktest.SeedA, false, 0)
	var writerPID int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&writerPID); err != nil {
		t.Fatalf("pid: %v", err)
	}

	var first Transactions
	stacktest.Eventually(t, serverWait, "the open transaction is over the 100ms threshold", func() (bool, string) {
		first, err = QueryTransactions(ctx, pool, 100*time.Millisecond)
		return err == nil && first.OverLimit == 1, fmt.Sprintf("%+v %v", first, err)
	})
	if first.OldestPID != writerPID || first.OldestAge <= 100*time.Millisecond {
		t.Errorf("transactions %+v, want pid %d older than 100ms", first, writerPID)
	}
	stacktest.Eventually(t, serverWait, "its age grows", func() (bool, string) {
		tr, err := QueryTransactions(ctx, pool, 100*time.Millisecond)
		return err == nil && tr.OldestAge > first.OldestAge, fmt.Sprintf("%+v %v", tr, err)
	})
	if tr, err := QueryTransactions(ctx, pool, time.Hour); err != nil || tr.OverLimit != 0 || tr.OldestAge == 0 {
		t.Errorf("with a 1h threshold: %+v (err %v), want it seen but not over the threshold", tr, err)
	}

	// The row is invisible to every other session: the relay cannot claim
	// it and the backlog does not count it.
	claimed := func() []int64 {
		rows, err := pool.Query(ctx, claimQuery)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return ids
	}
	if ids := claimed(); len(ids) != 0 {
		t.Errorf("the relay's claim returned %v before the commit, want nothing", ids)
	}
	if b, err := QueryBacklog(ctx, pool, p); err != nil || b.Rows != 0 {
		t.Errorf("backlog before the commit: %+v (err %v), want 0 rows", b, err)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	if ids := claimed(); len(ids) != 1 {
		t.Errorf("the relay's claim returned %v after the commit, want the row", ids)
	}
	if tr, err := QueryTransactions(ctx, pool, 100*time.Millisecond); err != nil || tr.OverLimit != 0 {
		t.Errorf("after the commit: %+v (err %v), want no long transaction", tr, err)
	}
}

func TestQuerySlotsReportsAnInactiveSlotRetainingWALWithPgMonitorOnly(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := st.FreshOutbox(t, stacktest.SeedDebezium)
	ctx := context.Background()
	// A database without a slot: the capture log's one row has none.
	if c, err := NewProbes(pool, "fresh").CaptureLog(ctx); err != nil || len(c.Slots) != 0 || c.Position == "" {
		t.Fatalf("CaptureLog of a database without slots: %+v, %v; want a position and no slot", c, err)
	}
	slot := "t_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	if _, err := pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	stacktest.DropSlotOnCleanup(t, pool, slot)
	var unbounded bool
	if err := pool.QueryRow(ctx, "SELECT current_setting('max_slot_wal_keep_size') = '-1'").Scan(&unbounded); err != nil {
		t.Fatalf("max_slot_wal_keep_size: %v", err)
	}

	monitor, err := pgxpool.New(ctx, st.RoleDSN(t, pool, dsn, "pg_monitor"))
	if err != nil {
		t.Fatalf("connect as pg_monitor: %v", err)
	}
	t.Cleanup(monitor.Close)
	var super bool
	if err := monitor.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil || super {
		t.Fatalf("the monitor role is a superuser (%t, %v): the test would prove nothing", super, err)
	}

	generateWAL := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO outbox SELECT gen_random_uuid(), 'order', 'ord-' || g, 'OrderPaid', '{}' FROM generate_series(1, 2000) AS g`); err != nil {
			t.Fatalf("generate WAL: %v", err)
		}
	}
	find := func(q Querier) Slot {
		t.Helper()
		slots, err := QuerySlots(ctx, q, "")
		if err != nil {
			t.Fatalf("QuerySlots: %v", err)
		}
		for _, s := range slots {
			if s.Name == slot {
				return s
			}
		}
		t.Fatalf("slot %s not in %+v", slot, slots)
		return Slot{}
	}

	generateWAL()
	first := find(monitor)
	t.Logf("slot after the first writes: %+v", first)
	if first.Active {
		t.Error("the slot is active, but nothing consumes it")
	}
	if first.WALStatus != "reserved" {
		t.Errorf("wal_status = %q, want reserved", first.WALStatus)
	}
	if first.RetainedWAL <= 0 || first.UnconfirmedWAL <= 0 {
		t.Errorf("retained WAL %d, unconfirmed %d bytes; want both > 0", first.RetainedWAL, first.UnconfirmedWAL)
	}
	if unbounded != (first.SafeWALSize == nil) {
		t.Errorf("safe_wal_size = %v with max_slot_wal_keep_size unbounded = %t", first.SafeWALSize, unbounded)
	}
	generateWAL()
	second := find(monitor)
	if second.RetainedWAL <= first.RetainedWAL {
		t.Errorf("retained WAL went from %d to %d bytes after more writes, want growth", first.RetainedWAL, second.RetainedWAL)
	}
	if super := find(pool); super.Name != slot {
		t.Errorf("as superuser: %+v", super)
	}
	// The other database watchers work with pg_monitor only, too.
	if _, err := QueryTransactions(ctx, monitor, time.Second); err != nil {
		t.Errorf("QueryTransactions as pg_monitor: %v", err)
	}
	// The watchers read the slots through the family seam: one statement
	// gives the WAL position and the database's slots, as QuerySlots does.
	c, err := NewProbes(monitor, "monitor").CaptureLog(ctx)
	if err != nil {
		t.Fatalf("CaptureLog as pg_monitor: %v", err)
	}
	if c.Position == "" || c.Written <= 0 || c.RetainedBytes <= 0 || !c.Enabled {
		t.Errorf("capture log %+v: want a position, bytes written and retained, wal_level logical", c)
	}
	if len(c.Slots) != 1 || c.Slots[0].Name != slot || c.Slots[0].Active || c.Slots[0].WALStatus != "reserved" ||
		c.Slots[0].RetainedWAL < second.RetainedWAL || (c.Slots[0].SafeWALSize == nil) != unbounded {
		t.Errorf("capture log's slots %+v, want the database's one slot, %+v or further", c.Slots, second)
	}
}
