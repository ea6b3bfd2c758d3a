package lint

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestLintCanaryRouting(t *testing.T) {
	cases := []struct {
		name  string
		topic string
		watch string
		want  string
	}{
		{"The default canary topic, read by no business group, is fine.", "", "{consumer_groups: [{group: billing, topic: outbox.event.order}]}", OK},
		{"A canary topic that a business group reads fails.", "outbox.event.order", "{consumer_groups: [{group: billing, topic: outbox.event.order}]}", Fail},
		{"A canary topic not named after the canary aggregate type warns.", "canaries", "{}", Warn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://x", Schema: stacktest.SeedA, Topic: tc.topic, Watch: tc.watch})
			f := CanaryRouting(p)
			if f.Level != tc.want {
				t.Errorf("level %s, want %s: %+v", f.Level, tc.want, f)
			}
			if f.Level != OK && f.Fix == "" {
				t.Errorf("a %s without a fix: %+v", f.Level, f)
			}
		})
	}
}

func TestLintPublishStamp(t *testing.T) {
	cases := []struct {
		name  string
		relay string
		want  string
	}{
		{"A published_at publish stamp warns, and names the better stamps.", "{kind: polling}", Warn},
		{"A relay header as publish stamp is fine.", "{kind: polling, published_stamp: header, published_header: x-sent-at}", OK},
		{"The record timestamp as publish stamp is fine.", "{kind: polling, published_stamp: record_timestamp}", OK},
		{"A cdc relay's record timestamp is fine.", "{kind: cdc}", OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			yml := stacktest.PipelineSpec{DSN: "postgres://x", Schema: stacktest.SeedA}.YAML()
			yml = strings.Replace(yml, "relay: {kind: polling}", "relay: "+tc.relay, 1)
			cfg, err := config.Load([]byte(yml))
			if err != nil {
				t.Fatalf("config: %v\n%s", err, yml)
			}
			f := PublishStamp(&cfg.Pipelines[0])
			if f.Level != tc.want {
				t.Errorf("level %s, want %s: %+v", f.Level, tc.want, f)
			}
			if f.Level == Warn && (!strings.Contains(f.Fix, "published_stamp: header") || !strings.Contains(f.Fix, "record_timestamp")) {
				t.Errorf("fix %q does not name the header and the record timestamp", f.Fix)
			}
		})
	}
}

func TestLintOnRealTables(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	cases := []struct {
		name   string
		schema stacktest.Schema
		setup  string // SQL run after the schema
		idGen  string
		opts   Options
		// inRoles, when set, lints as a fresh role in these roles (none
		// for an empty slice) that is granted grant (%[1]s is the role).
		inRoles []string
		grant   string
		// deleteAfterInsert sets canary.delete_after_insert.
		deleteAfterInsert bool
		// want maps a check to its expected level; unlisted checks must be OK.
		want map[string]string
	}{
		{name: "Seed schema A passes every check.", schema: stacktest.SeedA},
		{name: "Seed schema B passes every check.", schema: stacktest.SeedB},
		{name: "Debezium's outbox passes every check of a cdc pipeline.", schema: stacktest.SeedDebezium, idGen: config.IDUUID},
		{name: "A polling outbox without the partial index fails.", schema: stacktest.SeedA,
			setup: "DROP INDEX outbox_unpublished_idx", want: map[string]string{CheckIndex: Fail}},
		{name: "A polling outbox ordered by a uuid warns.", schema: stacktest.SeedA,
			setup: "ALTER TABLE outbox DROP COLUMN id; ALTER TABLE outbox ADD COLUMN id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
			want:  map[string]string{CheckOrdering: Warn}},
		{name: "An id without a default fails when the database is to generate it.", schema: stacktest.SeedDebezium,
			want: map[string]string{CheckOrdering: Fail}},
		{name: "A created_at stamped by the writers' clocks warns.", schema: stacktest.SeedA,
			setup: "ALTER TABLE outbox ALTER COLUMN created_at DROP DEFAULT", want: map[string]string{CheckCreatedAt: Warn}},
		{name: "A created_at defaulting to a constant warns.", schema: stacktest.SeedB,
			setup: "ALTER TABLE outbox ALTER COLUMN created_at SET DEFAULT '2020-01-01'", want: map[string]string{CheckCreatedAt: Warn}},
		{name: "A created_at defaulting to CURRENT_TIMESTAMP passes.", schema: stacktest.SeedA,
			setup: "ALTER TABLE outbox ALTER COLUMN created_at SET DEFAULT CURRENT_TIMESTAMP"},
		{name: "A mapped column missing from the table fails.", schema: stacktest.SeedA,
			setup: "ALTER TABLE outbox RENAME COLUMN payload TO body", want: map[string]string{CheckColumns: Fail}},
		{name: "Published rows kept over the threshold warn.", schema: stacktest.SeedA,
			setup: `INSERT INTO outbox (aggregate_type, aggregate_id, payload, published_at) SELECT 'order', 'o', '{}', now() FROM generate_series(1, 500)`,
			opts:  Options{MaxPublishedRows: 100}, want: map[string]string{CheckHygiene: Warn}},
		{name: "A table over the size threshold warns.", schema: stacktest.SeedA,
			opts: Options{MaxTableBytes: 1}, want: map[string]string{CheckHygiene: Warn}},
		{name: "A missing table fails.", schema: stacktest.SeedA,
			setup: "DROP TABLE outbox", want: map[string]string{CheckTable: Fail}},
		{name: "A role in pg_monitor that may insert, read and draw ids passes.", schema: stacktest.SeedA,
			inRoles: []string{"pg_monitor"}, grant: "GRANT INSERT, SELECT ON outbox TO %[1]s; GRANT USAGE ON SEQUENCE outbox_id_seq TO %[1]s"},
		{name: "A role outside pg_monitor warns: it cannot see the application's transactions.", schema: stacktest.SeedA,
			inRoles: []string{}, grant: "GRANT INSERT, SELECT ON outbox TO %[1]s; GRANT USAGE ON SEQUENCE outbox_id_seq TO %[1]s",
			want: map[string]string{CheckPrivileges: Warn}},
		{name: "A role that cannot draw from the id's sequence fails.", schema: stacktest.SeedB,
			inRoles: []string{"pg_monitor"}, grant: "GRANT INSERT, SELECT ON outbox TO %[1]s",
			want: map[string]string{CheckPrivileges: Fail}},
		{name: "A role that may only insert fails: the insert returns the id.", schema: stacktest.SeedA,
			inRoles: []string{"pg_monitor"}, grant: "GRANT INSERT ON outbox TO %[1]s; GRANT USAGE ON SEQUENCE outbox_id_seq TO %[1]s",
			want: map[string]string{CheckPrivileges: Fail}},
		{name: "A role without DELETE fails where canaries are deleted after insert.", schema: stacktest.SeedDebezium, idGen: config.IDUUID,
			deleteAfterInsert: true, inRoles: []string{"pg_monitor"}, grant: "GRANT INSERT, SELECT ON outbox TO %[1]s",
			want: map[string]string{CheckPrivileges: Fail}},
		{name: "A role with DELETE passes where canaries are deleted after insert.", schema: stacktest.SeedDebezium, idGen: config.IDUUID,
			deleteAfterInsert: true, inRoles: []string{"pg_monitor"}, grant: "GRANT INSERT, SELECT, DELETE ON outbox TO %[1]s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, pool := st.FreshOutbox(t, tc.schema)
			ctx := context.Background()
			if tc.setup != "" {
				if _, err := pool.Exec(ctx, tc.setup); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: tc.schema, IDGen: tc.idGen})
			p.Canary.DeleteAfterInsert = tc.deleteAfterInsert
			lintAs := pool
			if tc.inRoles != nil {
				roleDSN := st.RoleDSN(t, pool, dsn, tc.inRoles...)
				u, err := url.Parse(roleDSN)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, fmt.Sprintf(tc.grant, u.User.Username())); err != nil {
					t.Fatalf("grant: %v", err)
				}
				if lintAs, err = pgxpool.New(ctx, roleDSN); err != nil {
					t.Fatal(err)
				}
				defer lintAs.Close()
			}
			findings, err := Outbox(ctx, lintAs, p, tc.opts)
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
					want = OK
					if f.Check == CheckPublish && p.Relay.PublishedStamp == config.PublishedFromColumn {
						want = Warn // advisory, for every published_at pipeline
					}
				}
				if f.Level != want {
					t.Errorf("%s: %s, want %s (%s)", f.Check, f.Level, want, f.Message)
				}
				if f.Level != OK && f.Fix == "" {
					t.Errorf("%s: %s without a fix", f.Check, f.Level)
				}
			}
			for check := range tc.want {
				if !seen[check] {
					t.Errorf("no finding of check %s", check)
				}
			}
			if Failed(findings) != containsValue(tc.want, Fail) {
				t.Errorf("Failed = %t", Failed(findings))
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
	dsn, pool := st.FreshOutbox(t, stacktest.SeedA)
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
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedA})
	// The statistics are flushed asynchronously, a second or so late.
	var f Finding
	stacktest.Eventually(t, 30*time.Second, "the dead tuples show", func() (bool, string) {
		info, err := InspectTable(ctx, pool, p, Options{})
		if err != nil {
			t.Fatalf("InspectTable: %v", err)
		}
		f = Hygiene(p, info, Options{})
		return f.Level == Warn, fmt.Sprintf("%+v", f)
	})
	t.Logf("%s %s: %s; fix: %s", f.Level, f.Check, f.Message, f.Fix)
	if !strings.Contains(f.Message, "20000 dead tuples") {
		t.Errorf("message %q does not count the 20000 dead tuples", f.Message)
	}
}
