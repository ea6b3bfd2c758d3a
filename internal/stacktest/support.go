package stacktest

// Test support shared by the packages that test against the stack: the
// seed outbox schemas with their column mappings, a one-pipeline
// configuration built from a few knobs, a fresh outbox database, and small
// helpers for waiting and capturing logs. One copy here instead of one per
// test package.

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
)

// Schema is one of the supported outbox tables with its column mapping.
type Schema struct {
	Name    string
	SQL     string
	Columns string // YAML of outbox.columns
	Route   string // the route column, for inserts
	Kind    string // relay.kind
}

// The supported outbox tables: the seed article's schemas A and B, and
// Debezium's default outbox table.
var (
	SeedA = Schema{Name: "seed schema A", SQL: outboxsql.SchemaA, Route: "aggregate_type", Kind: config.RelayPolling,
		Columns: "{}"}
	SeedB = Schema{Name: "seed schema B", SQL: outboxsql.SchemaB, Route: "event_type", Kind: config.RelayPolling,
		Columns: "{route: event_type, event_type: event_type}"}
	SeedDebezium = Schema{Name: "Debezium's outbox", SQL: outboxsql.DebeziumOutbox, Route: "aggregatetype", Kind: config.RelayCDC,
		Columns: "{route: aggregatetype, key: aggregateid, event_type: type}"}
)

// PipelineSpec is what a test varies in a one-pipeline configuration.
type PipelineSpec struct {
	DSN     string
	Schema  Schema
	Brokers []string
	Topic   string
	Budgets string // YAML map; default {end_to_end: 30s}
	Watch   string // YAML of watch; default {}
	IDGen   string // outbox.id_generation; default database
}

// YAML renders a whole configuration file with one pipeline named "orders".
func (s PipelineSpec) YAML() string {
	budgets := cmp.Or(s.Budgets, "{end_to_end: 30s}")
	watch := cmp.Or(s.Watch, "{}")
	brokers := s.Brokers
	if len(brokers) == 0 {
		brokers = []string{"127.0.0.1:1"}
	}
	extra := ""
	if s.IDGen != "" {
		extra = "\n      id_generation: " + s.IDGen
	}
	return fmt.Sprintf(`instance_id: test
signing_key: {value: test-key}
pipelines:
  - name: orders
    database: {dsn: {value: %q}}
    outbox:
      table: outbox
      columns: %s%s
    relay: {kind: %s}
    canary: {lost_after: 5m}
    kafka: {brokers: [%s], topic: %q}
    budgets: %s
    watch: %s
`, s.DSN, s.Schema.Columns, extra, s.Schema.Kind, strings.Join(brokers, ", "),
		cmp.Or(s.Topic, "outbox.event.outbox-canary"), budgets, watch)
}

// LoadPipeline turns a spec into a validated, defaulted pipeline.
func LoadPipeline(t testing.TB, s PipelineSpec) *config.Pipeline {
	t.Helper()
	cfg, err := config.Load([]byte(s.YAML()))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, s.YAML())
	}
	return &cfg.Pipelines[0]
}

// FreshOutbox creates a database holding the schema's outbox table and
// returns its DSN and a pool on it, closed when the test ends.
func (s Stack) FreshOutbox(t testing.TB, schema Schema) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := s.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), schema.SQL); err != nil {
		t.Fatalf("load %s: %v", schema.Name, err)
	}
	return dsn, pool
}

// Execer is a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// InsertRow inserts one business row into a seed outbox; age backdates its
// created_at on the database clock.
func InsertRow(t testing.TB, q Execer, schema Schema, published bool, age time.Duration) {
	t.Helper()
	sql := fmt.Sprintf(`INSERT INTO outbox (%s, aggregate_id, payload, created_at, published_at)
		VALUES ('order', 'ord-1', '{}', clock_timestamp() - make_interval(secs => $1), CASE WHEN $2 THEN clock_timestamp() END)`, schema.Route)
	if _, err := q.Exec(context.Background(), sql, age.Seconds(), published); err != nil {
		t.Fatalf("insert an outbox row: %v", err)
	}
}

// ClosedAddr returns a local address nothing listens on.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}

// Eventually polls cond until it is true, or fails the test after within;
// cond returns whether it holds and, if not, what it saw instead.
func Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	EventuallyEvery(t, within, 50*time.Millisecond, what, cond)
}

// InnoDBTrxIdle is how long MariaDB and MySQL must see no read of
// information_schema.innodb_trx before they refresh it: a cache read more
// often than every 100 ms keeps the snapshot of its first fill (a committed
// transaction stays listed, a new one is never seen). Tests that poll it
// wait this long between reads.
const InnoDBTrxIdle = 250 * time.Millisecond

// EventuallyEvery is Eventually with its own interval between tries.
func EventuallyEvery(t testing.TB, within, every time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s; last: %s", what, within, last)
		}
		time.Sleep(every)
	}
}

// SyncBuffer is an io.Writer that tests can read while the code under test
// writes to it from other goroutines (logs, a command's output).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a debug-level text logger writing to the buffer.
func (b *SyncBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

var (
	buildMu  sync.Mutex
	builtBin = map[string]string{}
)

// BuildTags are the Makefile's TAGS, with which the binaries ship
// (deploy/check keeps the two and .goreleaser.yaml's equal).
const BuildTags = "nethttpomithttp2,nopgxregisterdefaulttypes"

// BuildCommand builds ./cmd/<name> of this module once per test binary and
// returns the path of the executable, so tests run what users run.
func BuildCommand(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := builtBin[name]; ok {
		return bin
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir, err := os.MkdirTemp("", "outbox-canary-bin-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	// Built as the image builds it (deploy/Dockerfile): statically, without
	// cgo, with the Makefile's build tags, so what tests and benchmarks
	// measure (its memory among it: libc alone maps 1.6 MB) is what ships.
	cmd := exec.Command(goBin, "build", "-trimpath", "-tags", BuildTags, "-o", bin, "./cmd/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	builtBin[name] = bin
	return bin
}

// FreeAddr returns a loopback address that was free a moment ago, for a
// server the test starts in another process.
func FreeAddr(t testing.TB) string { return ClosedAddr(t) }

// UnreachableConfig is a one-pipeline configuration whose servers do not
// exist (nothing connects), with one extra stamp "read" and budgets for
// end_to_end (2s) and commit_to_read (1s); extra YAML is appended to the
// pipeline. Unit tests drive the prober through it by hand.
func UnreachableConfig(t testing.TB, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(`
instance_id: unit
signing_key: {value: unit-key}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1"}}
    relay:
      kind: polling
      stamps: [{name: read, header: outbox-relay-read-at}]
    kafka: {brokers: ["127.0.0.1:1"], topic: canaries}
    budgets: {end_to_end: 2s, commit_to_read: 1s}
` + extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
