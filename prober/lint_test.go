package prober

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestIsUnpublishedPredicate(t *testing.T) {
	cases := []struct {
		name, predicate, column string
		want                    bool
	}{
		{"PostgreSQL's rendering of the seed index matches.", "(published_at IS NULL)", "published_at", true},
		{"A quoted mixed-case column matches.", `("PublishedAt" IS NULL)`, "PublishedAt", true},
		{"The opposite predicate does not match.", "(published_at IS NOT NULL)", "published_at", false},
		{"A predicate with more conditions does not match.", "((published_at IS NULL) AND (aggregate_type <> 'x'::text))", "published_at", false},
		{"Another column whose name ends the same does not match.", "(not_published_at IS NULL)", "published_at", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnpublishedPredicate(tc.predicate, tc.column); got != tc.want {
				t.Errorf("IsUnpublishedPredicate(%q, %q) = %t, want %t", tc.predicate, tc.column, got, tc.want)
			}
		})
	}
}

func TestLintCanaryRouting(t *testing.T) {
	cases := []struct {
		name  string
		topic string
		watch string
		want  string
	}{
		{"The default canary topic, read by no business group, is fine.", "", "{consumer_groups: [{group: billing, topic: outbox.event.order}]}", LintOK},
		{"A canary topic that a business group reads fails.", "outbox.event.order", "{consumer_groups: [{group: billing, topic: outbox.event.order}]}", LintFail},
		{"A canary topic not named after the canary aggregate type warns.", "canaries", "{}", LintWarn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := loadPipeline(t, pipelineSpec{dsn: "postgres://x", schema: seedA, topic: tc.topic, watch: tc.watch})
			f := LintCanaryRouting(p)
			if f.Level != tc.want {
				t.Errorf("level %s, want %s: %+v", f.Level, tc.want, f)
			}
			if f.Level != LintOK && f.Fix == "" {
				t.Errorf("a %s without a fix: %+v", f.Level, f)
			}
		})
	}
}

func TestLintOnRealTables(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	cases := []struct {
		name   string
		schema seedSchema
		setup  string // SQL run after the schema
		idGen  string
		opts   LintOptions
		// want maps a check to its expected level; unlisted checks must be OK.
		want map[string]string
	}{
		{name: "Seed schema A passes every check.", schema: seedA},
		{name: "Seed schema B passes every check.", schema: seedB},
		{name: "Debezium's outbox passes every check of a cdc pipeline.", schema: seedDebezium, idGen: config.IDUUID},
		{name: "A polling outbox without the partial index fails.", schema: seedA,
			setup: "DROP INDEX outbox_unpublished_idx", want: map[string]string{CheckIndex: LintFail}},
		{name: "A polling outbox ordered by a uuid warns.", schema: seedA,
			setup: "ALTER TABLE outbox DROP COLUMN id; ALTER TABLE outbox ADD COLUMN id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
			want:  map[string]string{CheckOrdering: LintWarn}},
		{name: "An id without a default fails when the database is to generate it.", schema: seedDebezium,
			want: map[string]string{CheckOrdering: LintFail}},
		{name: "A created_at stamped by the writers' clocks warns.", schema: seedA,
			setup: "ALTER TABLE outbox ALTER COLUMN created_at DROP DEFAULT", want: map[string]string{CheckCreatedAt: LintWarn}},
		{name: "A created_at defaulting to a constant warns.", schema: seedB,
			setup: "ALTER TABLE outbox ALTER COLUMN created_at SET DEFAULT '2020-01-01'", want: map[string]string{CheckCreatedAt: LintWarn}},
		{name: "A created_at defaulting to CURRENT_TIMESTAMP passes.", schema: seedA,
			setup: "ALTER TABLE outbox ALTER COLUMN created_at SET DEFAULT CURRENT_TIMESTAMP"},
		{name: "A mapped column missing from the table fails.", schema: seedA,
			setup: "ALTER TABLE outbox RENAME COLUMN payload TO body", want: map[string]string{CheckColumns: LintFail}},
		{name: "Published rows kept over the threshold warn.", schema: seedA,
			setup: `INSERT INTO outbox (aggregate_type, aggregate_id, payload, published_at) SELECT 'order', 'o', '{}', now() FROM generate_series(1, 500)`,
			opts:  LintOptions{MaxPublishedRows: 100}, want: map[string]string{CheckHygiene: LintWarn}},
		{name: "A table over the size threshold warns.", schema: seedA,
			opts: LintOptions{MaxTableBytes: 1}, want: map[string]string{CheckHygiene: LintWarn}},
		{name: "A missing table fails.", schema: seedA,
			setup: "DROP TABLE outbox", want: map[string]string{CheckTable: LintFail}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, pool := freshOutbox(t, st, tc.schema)
			ctx := context.Background()
			if tc.setup != "" {
				if _, err := pool.Exec(ctx, tc.setup); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			p := loadPipeline(t, pipelineSpec{dsn: dsn, schema: tc.schema, idGen: tc.idGen})
			findings, err := Lint(ctx, pool, p, tc.opts)
			if err != nil {
				t.Fatalf("Lint: %v", err)
			}
			var report strings.Builder
			for _, f := range findings {
				fmt.Fprintf(&report, "%-4s %-17s %s\n", f.Level, f.Check, f.Message)
				if f.Fix != "" {
					fmt.Fprintf(&report, "     fix: %s\n", f.Fix)
				}
			}
			t.Logf("lint:\n%s", report.String())
			seen := map[string]bool{}
			for _, f := range findings {
				seen[f.Check] = true
				want, ok := tc.want[f.Check]
				if !ok {
					want = LintOK
				}
				if f.Level != want {
					t.Errorf("%s: %s, want %s (%s)", f.Check, f.Level, want, f.Message)
				}
				if f.Level != LintOK && f.Fix == "" {
					t.Errorf("%s: %s without a fix", f.Check, f.Level)
				}
			}
			for check := range tc.want {
				if !seen[check] {
					t.Errorf("no finding of check %s", check)
				}
			}
			if LintFailed(findings) != containsValue(tc.want, LintFail) {
				t.Errorf("LintFailed = %t", LintFailed(findings))
			}
		})
	}
}

func containsValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}

func TestLintWarnsAboutDeadTuples(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	dsn, pool := freshOutbox(t, st, seedA)
	ctx := context.Background()
	// Autovacuum off for this table, so the dead tuples stay until linted.
	for _, sql := range []string{
		"ALTER TABLE outbox SET (autovacuum_enabled = false)",
		"INSERT INTO outbox (aggregate_type, aggregate_id, payload) SELECT 'order', 'o', '{}' FROM generate_series(1, 20000)",
		"DELETE FROM outbox",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	p := loadPipeline(t, pipelineSpec{dsn: dsn, schema: seedA})
	// The statistics are flushed asynchronously, a second or so late.
	var f Finding
	eventually(t, "the dead tuples show", func() (bool, string) {
		info, err := InspectTable(ctx, pool, p, LintOptions{})
		if err != nil {
			t.Fatalf("InspectTable: %v", err)
		}
		f = LintHygiene(p, info, LintOptions{})
		return f.Level == LintWarn, fmt.Sprintf("%+v", f)
	})
	t.Logf("%s %s: %s; fix: %s", f.Level, f.Check, f.Message, f.Fix)
	if !strings.Contains(f.Message, "20000 dead tuples") {
		t.Errorf("message %q does not count the 20000 dead tuples", f.Message)
	}
}
