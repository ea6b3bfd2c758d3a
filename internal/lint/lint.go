// Package lint checks a pipeline's outbox table against what a measurable
// outbox needs (indexes, ids, clocks, cleanup, the prober's privileges,
// canary routing) and reports
// OK, WARN and FAIL findings with their fix: `outbox-canary lint`.
package lint

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// Levels of a lint finding.
const (
	OK   = "OK"
	Warn = "WARN"
	Fail = "FAIL"
)

// Names of the lint checks, in the order Lint reports them.
const (
	CheckTable       = "table"
	CheckColumns     = "columns"
	CheckIndex       = "unpublished index"
	CheckOrdering    = "monotonic id"
	CheckCreatedAt   = "created_at clock"
	CheckHygiene     = "table hygiene"
	CheckCanaryRoute = "canary routing"
	CheckPublish     = "publish stamp"
	CheckPrivileges  = "privileges"
)

// Finding is one line of the schema lint: a check, its verdict, what was
// seen, and for anything but OK the fix.
type Finding struct {
	Check   string `json:"check"`
	Level   string `json:"level"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Options are the thresholds of the table hygiene check. Zero fields
// take the defaults of DefaultOptions().
type Options struct {
	// MaxPublishedRows is how many published rows (polling) or rows at all
	// (cdc) the table may keep before it counts as not cleaned up.
	MaxPublishedRows int64
	// MaxDeadTupleRatio is the share of dead tuples above which the table
	// counts as bloated, once it has at least MinDeadTuples of them.
	MaxDeadTupleRatio float64
	MinDeadTuples     int64
	// MaxTableBytes bounds the table's total size, indexes and TOAST included.
	MaxTableBytes int64
}

// DefaultOptions are thresholds for an outbox that a relay or a
// retention job keeps close to its backlog. A function, so no caller can
// change the defaults of another.
func DefaultOptions() Options {
	return Options{
		MaxPublishedRows:  100_000,
		MaxDeadTupleRatio: 0.2,
		MinDeadTuples:     10_000,
		MaxTableBytes:     1 << 30,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MaxPublishedRows <= 0 {
		o.MaxPublishedRows = d.MaxPublishedRows
	}
	if o.MaxDeadTupleRatio <= 0 {
		o.MaxDeadTupleRatio = d.MaxDeadTupleRatio
	}
	if o.MinDeadTuples <= 0 {
		o.MinDeadTuples = d.MinDeadTuples
	}
	if o.MaxTableBytes <= 0 {
		o.MaxTableBytes = d.MaxTableBytes
	}
	return o
}

// TableInfo is what the lint reads from the catalogue about an outbox
// table; the checks are pure functions of it and the pipeline.
type TableInfo struct {
	Exists  bool
	Columns map[string]ColumnInfo
	// PartialIndexes are the valid indexes with a WHERE clause.
	PartialIndexes []IndexInfo
	LiveTuples     int64
	DeadTuples     int64
	// PublishedRows counts rows with published_at set, up to
	// MaxPublishedRows+1 (counting further would scan a bloated table for
	// nothing); -1 when the table has no published_at column.
	PublishedRows int64
	TotalBytes    int64
	// Privileges are those of the role lint connected as: run lint with
	// the prober's DSN and they are the prober's.
	Privileges RolePrivileges
}

// RolePrivileges is what a role may do that the prober needs.
type RolePrivileges struct {
	Role                   string
	Insert, Select, Delete bool
	// IDSequence is the sequence behind a serial id default ("" for an
	// identity, whose sequence needs no grant, or no sequence at all);
	// SequenceUsage whether the role may draw from it.
	IDSequence    string
	SequenceUsage bool
	// ReadAllStats: a superuser or a member of pg_read_all_stats (which
	// pg_monitor includes) sees the transactions of every role in
	// pg_stat_activity; any other role sees only its own.
	ReadAllStats bool
}

// ColumnInfo describes one column.
type ColumnInfo struct {
	Type     string // format_type: "bigint", "uuid", "timestamp with time zone"
	Default  string // pg_get_expr of the default, "" if none
	Identity bool   // GENERATED ... AS IDENTITY
}

// IndexInfo is a partial index.
type IndexInfo struct {
	Name       string
	Definition string // pg_get_indexdef
	Predicate  string // pg_get_expr of indpred
}

// InspectTable reads the catalogue and statistics of the pipeline's outbox
// table. A table that does not exist is not an error: Exists is false.
func InspectTable(ctx context.Context, q postgres.Querier, p *config.Pipeline, o Options) (TableInfo, error) {
	o = o.withDefaults()
	table := p.Outbox.Table
	var info TableInfo
	oid, cols, err := inspectTableColumns(ctx, q, table)
	if err != nil || oid == nil {
		return info, err
	}
	info.Exists, info.Columns = true, cols

	rows, err := q.Query(ctx, `
		SELECT c.relname, pg_get_indexdef(i.indexrelid), pg_get_expr(i.indpred, i.indrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1 AND i.indpred IS NOT NULL AND i.indisvalid
		ORDER BY c.relname`, *oid)
	if err != nil {
		return info, fmt.Errorf("indexes of %s: %w", table, err)
	}
	info.PartialIndexes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (IndexInfo, error) {
		var ix IndexInfo
		err := r.Scan(&ix.Name, &ix.Definition, &ix.Predicate)
		return ix, err
	})
	if err != nil {
		return info, fmt.Errorf("indexes of %s: %w", table, err)
	}

	// The statistics views lag writes by up to a second or so; they are
	// estimates anyway, and the thresholds are orders of magnitude.
	if err := q.QueryRow(ctx, `
		SELECT COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0), pg_total_relation_size(r.relid)
		FROM (SELECT $1::oid AS relid) r LEFT JOIN pg_stat_user_tables s USING (relid)`, *oid).
		Scan(&info.LiveTuples, &info.DeadTuples, &info.TotalBytes); err != nil {
		return info, fmt.Errorf("statistics of %s: %w", table, err)
	}

	if info.Privileges, err = inspectPrivileges(ctx, q, p, *oid, info.Columns); err != nil {
		return info, err
	}

	info.PublishedRows = -1
	// A role that may not read the table is reported by the privileges
	// check; hygiene then goes by the statistics' estimate.
	if pub := p.Outbox.Columns.PublishedAt; pub != "" && info.Privileges.Select {
		if _, ok := info.Columns[pub]; ok {
			sql := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s IS NOT NULL LIMIT $1) AS published`,
				postgres.QuoteTable(table), postgres.QuoteIdent(pub))
			if err := q.QueryRow(ctx, sql, o.MaxPublishedRows+1).Scan(&info.PublishedRows); err != nil {
				return info, fmt.Errorf("published rows of %s: %w", table, err)
			}
		}
	}
	return info, nil
}

// inspectTableColumns looks the table up and reads its columns; a nil oid
// (and no error) when it does not exist.
func inspectTableColumns(ctx context.Context, q postgres.Querier, table string) (*uint32, map[string]ColumnInfo, error) {
	var oid *uint32
	if err := q.QueryRow(ctx, `SELECT to_regclass($1)::oid`, postgres.QuoteTable(table)).Scan(&oid); err != nil {
		return nil, nil, fmt.Errorf("look up table %s: %w", table, err)
	}
	if oid == nil {
		return nil, nil, nil
	}
	cols, err := inspectColumns(ctx, q, table, *oid)
	return oid, cols, err
}

// inspectColumns reads the columns of the table (oid).
func inspectColumns(ctx context.Context, q postgres.Querier, table string, oid uint32) (map[string]ColumnInfo, error) {
	rows, err := q.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attidentity <> '',
		       COALESCE(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, oid)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	cols := map[string]ColumnInfo{}
	var name string
	var col ColumnInfo
	if _, err := pgx.ForEachRow(rows, []any{&name, &col.Type, &col.Identity, &col.Default}, func() error {
		cols[name] = col
		return nil
	}); err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	return cols, nil
}

// ProberPrivileges runs the privileges check alone, as the prober does at
// its start: it reads the catalogue only, never the table. A table that
// does not exist is the table check's FAIL.
func ProberPrivileges(ctx context.Context, q postgres.Querier, p *config.Pipeline) (Finding, error) {
	oid, cols, err := inspectTableColumns(ctx, q, p.Outbox.Table)
	if err != nil {
		return Finding{}, err
	}
	if oid == nil {
		return Table(p, TableInfo{}, Options{})[0], nil
	}
	pv, err := inspectPrivileges(ctx, q, p, *oid, cols)
	if err != nil {
		return Finding{}, err
	}
	return Privileges(p, TableInfo{Exists: true, Columns: cols, Privileges: pv}), nil
}

// inspectPrivileges reads what the connected role may do on the table
// (oid) whose columns are cols.
func inspectPrivileges(ctx context.Context, q postgres.Querier, p *config.Pipeline, oid uint32, cols map[string]ColumnInfo) (RolePrivileges, error) {
	table := p.Outbox.Table
	var pv RolePrivileges
	// pg_has_role holds for a superuser too (has_privs_of_role).
	if err := q.QueryRow(ctx, `
		SELECT current_user::text, has_table_privilege($1::oid, 'INSERT'), has_table_privilege($1::oid, 'SELECT'),
		       has_table_privilege($1::oid, 'DELETE'), pg_has_role('pg_read_all_stats', 'USAGE')`, oid).
		Scan(&pv.Role, &pv.Insert, &pv.Select, &pv.Delete, &pv.ReadAllStats); err != nil {
		return pv, fmt.Errorf("privileges on %s: %w", table, err)
	}
	// Only an id the database draws needs the sequence.
	id, ok := cols[p.Outbox.Columns.ID]
	if p.Outbox.IDGeneration != config.IDFromDatabase || !ok || id.Identity || !strings.Contains(id.Default, "nextval(") {
		return pv, nil
	}
	err := q.QueryRow(ctx, `
		SELECT s, has_sequence_privilege(s, 'USAGE') FROM pg_get_serial_sequence($1, $2) AS s WHERE s IS NOT NULL`,
		postgres.QuoteTable(table), p.Outbox.Columns.ID).Scan(&pv.IDSequence, &pv.SequenceUsage)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return pv, fmt.Errorf("sequence of %s.%s: %w", table, p.Outbox.Columns.ID, err)
	}
	return pv, nil
}

// Outbox inspects the pipeline's outbox table and runs every check on it. The
// error is for a database that could not be read; what is wrong with the
// table comes back as findings.
func Outbox(ctx context.Context, q postgres.Querier, p *config.Pipeline, o Options) ([]Finding, error) {
	info, err := InspectTable(ctx, q, p, o)
	if err != nil {
		return nil, err
	}
	return Table(p, info, o), nil
}

// Table runs every check on an inspected table. When the table is
// missing only that is reported, besides the routing check, which needs no
// table.
func Table(p *config.Pipeline, info TableInfo, o Options) []Finding {
	o = o.withDefaults()
	if !info.Exists {
		return []Finding{
			{Check: CheckTable, Level: Fail,
				Message: fmt.Sprintf("table %s does not exist in the configured database", p.Outbox.Table),
				Fix:     "create it (deploy/sql has the supported schemas) or correct outbox.table and database.dsn"},
			CanaryRouting(p),
			PublishStamp(p),
		}
	}
	return []Finding{
		{Check: CheckTable, Level: OK, Message: fmt.Sprintf("table %s exists", p.Outbox.Table)},
		Columns(p, info),
		UnpublishedIndex(p, info),
		MonotonicID(p, info),
		CreatedAt(p, info),
		Hygiene(p, info, o),
		Privileges(p, info),
		CanaryRouting(p),
		PublishStamp(p),
	}
}

// Privileges fails when the role cannot do what the prober does on the
// table (INSERT ... RETURNING the id, the DELETE of delete_after_insert,
// drawing a serial id), and warns when it cannot see other roles'
// transactions: the open-transaction watcher would then read a long
// transaction of the application as none.
func Privileges(p *config.Pipeline, info TableInfo) Finding {
	f := Finding{Check: CheckPrivileges}
	pv := info.Privileges
	table := postgres.QuoteTable(p.Outbox.Table)
	role := postgres.QuoteIdent(pv.Role)
	var lacks, grants []string
	var tableGrants []string
	if !pv.Insert {
		lacks = append(lacks, "INSERT on "+table+" (the canary insert fails)")
		tableGrants = append(tableGrants, "INSERT")
	}
	if !pv.Select {
		lacks = append(lacks, "SELECT on "+table+" (the canary insert returns its id, and published_at is read back)")
		tableGrants = append(tableGrants, "SELECT")
	}
	if p.Canary.DeleteAfterInsert && !pv.Delete {
		lacks = append(lacks, "DELETE on "+table+" (canary.delete_after_insert)")
		tableGrants = append(tableGrants, "DELETE")
	}
	if len(tableGrants) > 0 {
		grants = append(grants, fmt.Sprintf("GRANT %s ON %s TO %s", strings.Join(tableGrants, ", "), table, role))
	}
	if pv.IDSequence != "" && !pv.SequenceUsage {
		lacks = append(lacks, "USAGE on the id's sequence "+pv.IDSequence+" (the canary insert cannot draw an id)")
		grants = append(grants, fmt.Sprintf("GRANT USAGE ON SEQUENCE %s TO %s", pv.IDSequence, role))
	}
	switch {
	case len(lacks) > 0:
		f.Level = Fail
		f.Message = fmt.Sprintf("role %s lacks %s", pv.Role, strings.Join(lacks, "; "))
		if !pv.ReadAllStats {
			grants = append(grants, "GRANT pg_monitor TO "+role)
		}
		f.Fix = strings.Join(grants, "; ")
	case !pv.ReadAllStats:
		f.Level = Warn
		f.Message = fmt.Sprintf("role %s is not a member of pg_monitor (or pg_read_all_stats): pg_stat_activity hides other roles' transactions from it, so the open-transaction watcher reads the application's long transactions as none", pv.Role)
		f.Fix = "GRANT pg_monitor TO " + role
	default:
		f.Level = OK
		may := "insert and read"
		if p.Canary.DeleteAfterInsert {
			may = "insert, read and delete"
		}
		f.Message = fmt.Sprintf("role %s may %s canaries and sees every role's transactions", pv.Role, may)
	}
	return f
}

// Columns fails when a column of outbox.columns is missing: the
// prober's insert or the relay's claim would fail on it.
func Columns(p *config.Pipeline, info TableInfo) Finding {
	f := Finding{Check: CheckColumns}
	c := p.Outbox.Columns
	var missing []string
	for _, m := range []struct{ role, name string }{
		{"id", c.ID}, {"route", c.Route}, {"key", c.Key}, {"payload", c.Payload},
		{"event_type", c.EventType}, {"created_at", c.CreatedAt}, {"published_at", c.PublishedAt},
	} {
		if m.name == "" {
			continue
		}
		if _, ok := info.Columns[m.name]; !ok {
			missing = append(missing, fmt.Sprintf("%s (%s)", m.name, m.role))
		}
	}
	if len(missing) > 0 {
		f.Level = Fail
		f.Message = "mapped columns missing from " + p.Outbox.Table + ": " + strings.Join(missing, ", ")
		f.Fix = "correct outbox.columns to the table's column names, or add the columns"
		return f
	}
	f.Level = OK
	f.Message = "every column of outbox.columns exists"
	return f
}

// UnpublishedIndex: a polling relay's claim and the backlog query have
// only the predicate "published_at IS NULL"; a partial index on exactly
// that holds just the backlog, so both stay cheap at any table size.
func UnpublishedIndex(p *config.Pipeline, info TableInfo) Finding {
	f := Finding{Check: CheckIndex}
	pub := p.Outbox.Columns.PublishedAt
	if p.Relay.Kind != config.RelayPolling || pub == "" {
		f.Level = OK
		f.Message = "not needed: log capture reads the WAL, not the table"
		return f
	}
	for _, ix := range info.PartialIndexes {
		if postgres.IsUnpublishedPredicate(ix.Predicate, pub) {
			f.Level = OK
			f.Message = "partial index " + ix.Name + ": " + ix.Definition
			return f
		}
	}
	f.Level = Fail
	f.Message = fmt.Sprintf("no valid partial index WHERE %s IS NULL: every relay poll and backlog query scans the whole table history", pub)
	f.Fix = fmt.Sprintf("CREATE INDEX CONCURRENTLY ON %s (%s) WHERE %s IS NULL",
		postgres.QuoteTable(p.Outbox.Table), postgres.QuoteIdent(p.Outbox.Columns.ID), postgres.QuoteIdent(pub))
	return f
}

// integerTypes are the column types a sequence or identity can fill.
var integerTypes = []string{"bigint", "integer", "smallint", "numeric"}

// MonotonicID: a polling relay claims rows in id order, which follows
// commit order only roughly, and only if ids come from a sequence. A uuid
// id makes that order random. It also checks that outbox.id_generation
// matches the column, or the prober's canary insert fails.
func MonotonicID(p *config.Pipeline, info TableInfo) Finding {
	f := Finding{Check: CheckOrdering}
	name := p.Outbox.Columns.ID
	col, ok := info.Columns[name]
	if !ok {
		f.Level = Fail
		f.Message = fmt.Sprintf("id column %s missing", name)
		f.Fix = "set outbox.columns.id to the table's key column"
		return f
	}
	sequenced := col.Identity || strings.Contains(col.Default, "nextval(")
	isUUID := col.Type == "uuid"
	hasDefault := sequenced || col.Default != ""
	switch {
	case p.Outbox.IDGeneration == config.IDFromDatabase && !hasDefault:
		f.Level = Fail
		f.Message = fmt.Sprintf("outbox.id_generation is database but %s (%s) has no default: the canary insert cannot get an id", name, col.Type)
		f.Fix = "set outbox.id_generation: uuid (for a uuid column), or give the column a sequence default (bigserial or GENERATED ALWAYS AS IDENTITY)"
	case p.Outbox.IDGeneration == config.IDUUID && !isUUID && !strings.Contains(col.Type, "char") && col.Type != "text":
		f.Level = Fail
		f.Message = fmt.Sprintf("outbox.id_generation is uuid but %s is %s: the canary insert would fail", name, col.Type)
		f.Fix = "set outbox.id_generation: database"
	case p.Relay.Kind != config.RelayPolling:
		f.Level = OK
		f.Message = fmt.Sprintf("%s (%s): log capture publishes in WAL order, ids need not be monotonic", name, col.Type)
	case sequenced && slices.Contains(integerTypes, col.Type):
		f.Level = OK
		f.Message = fmt.Sprintf("%s (%s) is assigned by %s", name, col.Type, sequenceSource(col))
	case isUUID:
		f.Level = Warn
		f.Message = fmt.Sprintf("%s is a uuid: not monotonic, so a relay ordering by it publishes in random order, not commit order", name)
		f.Fix = "add a bigserial (or identity) column and have the relay order by it; map it as outbox.columns.id"
	default:
		f.Level = Warn
		f.Message = fmt.Sprintf("%s (%s) has no sequence or identity default: nothing guarantees that ids grow with inserts", name, col.Type)
		f.Fix = fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s ADD GENERATED BY DEFAULT AS IDENTITY (for an integer column), or order by a bigserial column",
			postgres.QuoteTable(p.Outbox.Table), postgres.QuoteIdent(name))
	}
	return f
}

func sequenceSource(col ColumnInfo) string {
	if col.Identity {
		return "an identity"
	}
	return "a sequence (" + col.Default + ")"
}

// dbClockDefault matches the defaults that stamp with the database clock.
var dbClockDefault = regexp.MustCompile(`(?i)\b(now\(\)|clock_timestamp\(\)|statement_timestamp\(\)|transaction_timestamp\(\)|current_timestamp|localtimestamp)`)

// CreatedAt: created_at must come from the database clock, so
// that the oldest-unpublished age (database clock minus created_at) has no
// cross-host skew and every writer agrees.
func CreatedAt(p *config.Pipeline, info TableInfo) Finding {
	f := Finding{Check: CheckCreatedAt}
	name := p.Outbox.Columns.CreatedAt
	if name == "" {
		f.Level = OK
		f.Message = "no created_at column mapped (not needed for log capture)"
		if p.Relay.Kind == config.RelayPolling {
			f.Level = Warn
			f.Message = "no created_at column mapped: the age of the oldest unpublished row cannot be measured"
			f.Fix = "map outbox.columns.created_at to a timestamptz column with DEFAULT now()"
		}
		return f
	}
	col, ok := info.Columns[name]
	if !ok {
		f.Level = Fail
		f.Message = fmt.Sprintf("created_at column %s missing", name)
		f.Fix = "correct outbox.columns.created_at"
		return f
	}
	fix := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT now(), and stop writers from supplying it",
		postgres.QuoteTable(p.Outbox.Table), postgres.QuoteIdent(name))
	switch {
	case col.Default == "":
		f.Level = Warn
		f.Message = fmt.Sprintf("%s has no default: writers stamp it with their own clocks, so the backlog age carries their skew", name)
		f.Fix = fix
	case !dbClockDefault.MatchString(col.Default):
		f.Level = Warn
		f.Message = fmt.Sprintf("%s defaults to %s, not the database clock", name, col.Default)
		f.Fix = fix
	case col.Type != "timestamp with time zone":
		f.Level = Warn
		f.Message = fmt.Sprintf("%s is %s: without a time zone, ages depend on the session's TimeZone setting", name, col.Type)
		f.Fix = fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE timestamptz", postgres.QuoteTable(p.Outbox.Table), postgres.QuoteIdent(name))
	default:
		f.Level = OK
		f.Message = fmt.Sprintf("%s (%s) defaults to %s (database clock)", name, col.Type, col.Default)
	}
	return f
}

// Hygiene: published rows must be deleted or archived, or scans slow
// down and dead tuples bloat the table and its indexes. With log capture
// rows can be deleted in the transaction that inserted them.
func Hygiene(p *config.Pipeline, info TableInfo, o Options) Finding {
	o = o.withDefaults()
	f := Finding{Check: CheckHygiene}
	var problems []string
	kept, what := info.PublishedRows, "published rows"
	if kept < 0 {
		kept, what = info.LiveTuples, "rows (estimated)"
	}
	if kept > o.MaxPublishedRows {
		problems = append(problems, fmt.Sprintf("more than %d %s kept", o.MaxPublishedRows, what))
	}
	total := info.LiveTuples + info.DeadTuples
	ratio := 0.0
	if total > 0 {
		ratio = float64(info.DeadTuples) / float64(total)
	}
	if info.DeadTuples >= o.MinDeadTuples && ratio > o.MaxDeadTupleRatio {
		problems = append(problems, fmt.Sprintf("%d dead tuples, %.0f%% of the table (over %.0f%%)", info.DeadTuples, ratio*100, o.MaxDeadTupleRatio*100))
	}
	if info.TotalBytes > o.MaxTableBytes {
		problems = append(problems, fmt.Sprintf("%d bytes with indexes (over %d)", info.TotalBytes, o.MaxTableBytes))
	}
	facts := fmt.Sprintf("%s: %d live and %d dead tuples, %d bytes", what, kept, info.DeadTuples, info.TotalBytes)
	if info.PublishedRows >= 0 {
		published := fmt.Sprint(info.PublishedRows)
		if info.PublishedRows > o.MaxPublishedRows {
			published = fmt.Sprintf("over %d", o.MaxPublishedRows) // the count stops there
		}
		facts = fmt.Sprintf("%s published rows, %d live and %d dead tuples, %d bytes", published, info.LiveTuples, info.DeadTuples, info.TotalBytes)
	}
	if len(problems) == 0 {
		f.Level = OK
		f.Message = facts
		return f
	}
	f.Level = Warn
	f.Message = strings.Join(problems, "; ") + " (" + facts + ")"
	if p.Relay.Kind == config.RelayPolling {
		f.Fix = fmt.Sprintf("delete published rows on a schedule (DELETE FROM %s WHERE %s < now() - interval '1 day', in batches) or have the relay delete them; make sure autovacuum keeps up",
			postgres.QuoteTable(p.Outbox.Table), postgres.QuoteIdent(p.Outbox.Columns.PublishedAt))
	} else {
		f.Fix = "delete each row in the transaction that inserted it (Debezium ignores the DELETE), or purge old rows on a schedule; make sure autovacuum keeps up"
	}
	return f
}

// CanaryRouting: canaries must reach a topic of their own that no
// business consumer reads. The configured canary topic must not be a topic
// a watched business group consumes, and with the default routing
// (outbox.event.<route>, Debezium's and the reference relay's) it must be
// named after the canary aggregate type, or the relay sends canaries
// somewhere the prober does not listen.
func CanaryRouting(p *config.Pipeline) Finding {
	f := Finding{Check: CheckCanaryRoute}
	topic, agg := p.Kafka.Topic, p.Canary.AggregateType
	for _, g := range p.Watch.ConsumerGroups {
		if g.Topic == topic {
			f.Level = Fail
			f.Message = fmt.Sprintf("canary topic %s is read by business consumer group %s: canaries would reach business consumers", topic, g.Group)
			f.Fix = fmt.Sprintf("route canary.aggregate_type %q to its own topic (default outbox.event.%s) and set kafka.topic to it", agg, agg)
			return f
		}
	}
	if !strings.Contains(topic, agg) {
		f.Level = Warn
		f.Message = fmt.Sprintf("canary topic %s does not contain the canary aggregate type %q: the default routing sends canaries to outbox.event.%s", topic, agg, agg)
		f.Fix = fmt.Sprintf("set kafka.topic: outbox.event.%s, unless the relay routes %q to %s by a custom rule", agg, agg, topic)
		return f
	}
	f.Level = OK
	f.Message = fmt.Sprintf("canaries (%s %q) go to %s, which no watched business group reads", p.Outbox.Columns.Route, agg, topic)
	return f
}

// PublishStamp is advisory: a published_at column is written after the
// broker's ack, often after the relay's whole batch, so it only bounds the
// publish moment from above. Canaries consumed before their row is marked
// show a negative publish_to_consume (stamp order, counted in
// outbox_canary_stamp_order_total), which leaves that segment unmeasured
// and commit_to_publish judged only by what end to end can prove. A stamp
// taken when the relay sends, a header of its own or the record
// timestamp, measures both. It warns, never fails: published_at works.
func PublishStamp(p *config.Pipeline) Finding {
	f := Finding{Check: CheckPublish}
	switch p.Relay.PublishedStamp {
	case config.PublishedFromColumn:
		f.Level = Warn
		f.Message = fmt.Sprintf("the publish stamp is %s, which the relay writes after Kafka acknowledged the row (often after its whole batch): "+
			"a canary consumed before it shows stamp order instead of a publish_to_consume latency", p.Outbox.Columns.PublishedAt)
		f.Fix = "have the relay put its send time in a header (relay.published_stamp: header, relay.published_header: <its name>) " +
			"or set the record timestamp when sending (relay.published_stamp: record_timestamp)"
	case config.PublishedFromHeader:
		f.Level = OK
		f.Message = fmt.Sprintf("the publish stamp is the relay's header %s, taken when it sends", p.Relay.PublishedHeader)
	default:
		f.Level = OK
		f.Message = "the publish stamp is the Kafka record timestamp, taken when the relay sends"
	}
	return f
}

// Failed reports whether any finding is a FAIL.
func Failed(findings []Finding) bool {
	return slices.ContainsFunc(findings, func(f Finding) bool { return f.Level == Fail })
}
