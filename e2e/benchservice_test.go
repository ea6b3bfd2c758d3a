package e2e

// TestBenchService measures what the whole service costs, from outside the
// process, and writes docs/benchmarks.json and docs/benchmarks.md. It is
// `make bench-service`, not part of `make test`: it runs only when
// OUTBOX_CANARY_BENCH_SERVICE names scenarios ("all", or some of steady,
// scale, foreign, consume), takes about 50 minutes for all four at their
// defaults, and asserts nothing about speed (the figures go to the doc, the
// targets beside them; a scenario fails only when it could not measure).
//
//	STACK_DIR=$PWD/.stack PG_PORT_BASE=58320 KAFKA_PORT_BASE=59092 CONNECT_PORT_BASE=58083 deploy/local/stack.sh up
//	STACK_DIR=$PWD/.stack make bench-service                      # all three, at the sizes
//	BENCH_MINUTES=2 BENCH_SCALE_MINUTES=1 BENCH_SCALE_PIPELINES=30 make bench-service   # a quick run
//
// Each canary scenario runs, in a fresh database of the stack: BENCH_RELAYS
// outbox tables (schema A, one PostgreSQL schema each) with one reference
// relay (bin/outbox-relay) each, the pipelines spread over them round-robin,
// each with its own aggregate type and canary topic; and the prober
// (bin/outbox-canary run) with every pipeline, connecting as a role of its
// own (bench_prober_…, one per run) so that its statements and sessions are told from the
// relays'. After a warm-up (every pipeline has received a canary, then
// BENCH_WARMUP more) it samples /proc/<pid> every 5 s for the run and cuts
// the run into windows of BENCH_WINDOW_MINUTES:
//
//   - CPU % of one core: utime+stime (/proc/<pid>/stat) over the window;
//   - VmRSS (largest sample) and VmHWM (/proc/<pid>/status);
//   - bytes written to storage per second: write_bytes (/proc/<pid>/io);
//   - PostgreSQL connections: the prober's ESTABLISHED sockets to the
//     PostgreSQL port (its fds matched to /proc/net/tcp), and the sessions
//     of its role in pg_stat_activity; largest sample;
//   - Kafka connections per broker: its ESTABLISHED sockets to each broker
//     port, largest sample;
//   - from /metrics: canaries sent, received, late, lost, insert failures,
//     the segments unjudged because of the prober's own lag (prober_lag),
//     and the p99 of insert_to_commit from the native histogram (within
//     the histogram's 10% bucket growth; the classic buckets when there is
//     no native one).
//
// Over the whole run, statements per canary: pg_stat_statements (reset when
// the measurement starts) for the prober's role, divided by the canaries
// sent. Then, separately because tracing slows the process, fsyncs and new
// connections per second: `strace -f -e
// trace=fsync,fdatasync,sync_file_range,syncfs,connect -p <pid>` for
// BENCH_STRACE_SECONDS, each connect counted by its destination port.
//
// The foreign scenario: one pipeline on a topic of its own; once the prober
// has received a canary (its readers are positioned), it is stopped
// (SIGSTOP), BENCH_FOREIGN_MESSAGES business events (not canaries, ~200
// bytes of JSON each) are produced to the topic with kcat, and the prober
// is continued (SIGCONT): the time and the CPU seconds until its skip
// counter has counted them all give its skip rate and cost. kcat -C reads
// the same topic from the beginning to the end, and its CPU seconds (user +
// system, from wait4) are the comparison.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/procfs"
	"github.com/segmentio/kafka-go"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
	"github.com/outbox-canary/outbox-canary/slo"
)

const (
	benchServiceEnv        = "OUTBOX_CANARY_BENCH_SERVICE"
	benchServiceCommandEnv = "OUTBOX_CANARY_BENCH_SERVICE_COMMAND"

	benchSteady  = "steady"
	benchScale   = "scale"
	benchForeign = "foreign"
	benchConsume = "consume" // benchconsume_test.go

	// benchProberRole begins the role the prober connects as, one per
	// run (bench.proberRole): its statements and sessions are those of
	// this role, the relays' are the superuser's. A role per run, because
	// a run sets its role's password: two runs on one stack sharing a role
	// locked each other's prober out of new connections (and mixed their
	// statements).
	benchProberRole = "bench_prober"
	// benchSampleEvery is the /proc sampling period.
	benchSampleEvery = 5 * time.Second
	// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
	// 100 on every Linux architecture Go supports.
	userHZ = 100.0
)

var benchScenarioOrder = []string{benchSteady, benchScale, benchForeign, benchConsume}

// benchSettings are the knobs of a run, from BENCH_* variables.
type benchSettings struct {
	Steady, Scale      canaryScenario
	Partitions         int
	Window             time.Duration
	Warmup             time.Duration
	StraceSeconds      int
	ForeignMessages    int
	ForeignPartitions  int
	ProberLogLevel     string
	RelayPollInterval  time.Duration
	ReceiveFirstWithin time.Duration
	// ProfileSeconds > 0 starts the prober with --web.enable-pprof and
	// saves a CPU profile of that many seconds from the start of each
	// scenario's measured span (the foreign one's from SIGCONT: make it
	// longer than the skipping takes), and a heap profile at its end, in
	// the run's log directory (for finding where the cost is; the
	// profiling itself costs CPU, so not for the figures).
	ProfileSeconds int
	// ScrapeEvery > 0 scrapes /metrics through the measured span as
	// Prometheus would (protobuf, gzip), every ScrapeEvery: the windows'
	// CPU and memory then include what scrapes cost, as a prober in
	// service pays it (the harness's own scrapes at the window ends stay
	// left out).
	ScrapeEvery time.Duration
}

// canaryScenario is one N-pipelines-for-M-minutes run.
type canaryScenario struct {
	Name      string
	Pipelines int
	Relays    int
	Schedule  string
	Duration  time.Duration
}

// benchScaleMinutes: a canary is remembered 2 x lost_after (5 m here) after
// its commit, so the 300 pipelines' memory grows for 10 minutes; the last
// window (minutes 10-12) is the steady state.
const benchScaleMinutes = 12

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

func envIntOrZero(t *testing.T, key string) int {
	t.Helper()
	if os.Getenv(key) == "" {
		return 0
	}
	return envInt(t, key, 0)
}

func envMinutes(t *testing.T, key string, def float64) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return time.Duration(def * float64(time.Minute))
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		t.Fatalf("%s=%q: want a positive number of minutes", key, v)
	}
	return time.Duration(f * float64(time.Minute))
}

func envString(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a duration such as 30s", key, v)
	}
	return d
}

func loadBenchSettings(t *testing.T) benchSettings {
	steadyN := envInt(t, "BENCH_PIPELINES", 10)
	scaleN := envInt(t, "BENCH_SCALE_PIPELINES", 300)
	return benchSettings{
		Steady: canaryScenario{Name: benchSteady, Pipelines: steadyN, Relays: envInt(t, "BENCH_RELAYS", min(steadyN, 10)),
			Schedule: envString("BENCH_SCHEDULE", "@every 1s"), Duration: envMinutes(t, "BENCH_MINUTES", 15)},
		Scale: canaryScenario{Name: benchScale, Pipelines: scaleN, Relays: envInt(t, "BENCH_SCALE_RELAYS", min(scaleN, 10)),
			Schedule: envString("BENCH_SCALE_SCHEDULE", "@every 10s"), Duration: envMinutes(t, "BENCH_SCALE_MINUTES", benchScaleMinutes)},
		Partitions:         envInt(t, "BENCH_PARTITIONS", 3),
		Window:             envMinutes(t, "BENCH_WINDOW_MINUTES", 5),
		Warmup:             envDuration(t, "BENCH_WARMUP", 30*time.Second),
		StraceSeconds:      envInt(t, "BENCH_STRACE_SECONDS", 30),
		ForeignMessages:    envInt(t, "BENCH_FOREIGN_MESSAGES", 2_000_000),
		ForeignPartitions:  envInt(t, "BENCH_FOREIGN_PARTITIONS", 3),
		ProberLogLevel:     envString("BENCH_PROBER_LOG_LEVEL", "warn"),
		RelayPollInterval:  envDuration(t, "BENCH_RELAY_POLL_INTERVAL", 100*time.Millisecond),
		ReceiveFirstWithin: envDuration(t, "BENCH_FIRST_CANARY_WITHIN", 3*time.Minute),
		ProfileSeconds:     envIntOrZero(t, "BENCH_PROFILE_SECONDS"),
		ScrapeEvery:        envDuration(t, "BENCH_SCRAPE_EVERY", 0),
	}
}

func TestBenchService(t *testing.T) {
	want := os.Getenv(benchServiceEnv)
	if want == "" {
		t.Skipf("runs the whole service on the stack for about 40 minutes: set %s=all (or some of %s), as `make bench-service` does",
			benchServiceEnv, strings.Join(benchScenarioOrder, ","))
	}
	var run []string
	for _, name := range strings.Split(want, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all":
			run = append(run, benchScenarioOrder...)
		case slices.Contains(benchScenarioOrder, name):
			run = append(run, name)
		default:
			t.Fatalf("%s=%q: unknown scenario %q (want all or some of %s)", benchServiceEnv, want, name, strings.Join(benchScenarioOrder, ","))
		}
	}
	// Asked for by name, a missing stack is an error, not a skip.
	t.Setenv("CI", "true")
	b := setUpBench(t)
	for _, name := range benchScenarioOrder {
		if !slices.Contains(run, name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var res *benchResult
			switch name {
			case benchSteady:
				res = b.runCanaryScenario(t, b.settings.Steady)
			case benchScale:
				res = b.runCanaryScenario(t, b.settings.Scale)
			case benchForeign:
				res = b.runForeign(t)
			case benchConsume:
				res = b.runConsume(t)
			}
			doc, err := readBenchDoc(benchJSON)
			if errors.Is(err, os.ErrNotExist) {
				doc, err = &benchDoc{}, nil
			}
			if err != nil {
				t.Fatal(err)
			}
			doc.merge(res, benchScenarioOrder)
			if err := writeBenchDoc(benchJSON, doc); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(benchMD, renderBench(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s written", benchMD)
		})
	}
}

// bench is what the scenarios share: the stack, the binaries, the logs.
type bench struct {
	s                   stacktest.Stack
	dir                 string
	canaryBin, relayBin string
	proberRole          string // benchProberRole and the run's own suffix
	settings            benchSettings
	machine, command    string
	revision            string
	proc                procfs.FS
	pgPort              uint64
	brokerPorts         map[uint64]string // port -> host:port
	// admin is the harness's session for the scenario under way, opened
	// before the prober starts: a prober that takes every connection the
	// server allows must not keep the harness from measuring it.
	admin *pgx.Conn
}

// dropProberRole drops the run's role, if it made one; a failure is
// only logged (a role left over costs nothing).
func (b *bench) dropProberRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.s.PGAdminDSN)
	if err != nil {
		t.Logf("drop role %s: %v", b.proberRole, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+b.proberRole); err != nil {
		t.Logf("drop role %s: %v", b.proberRole, err)
	}
}

// openAdmin opens the scenario's session, closed when the test ends.
func (b *bench) openAdmin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.s.PGAdminDSN)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	b.admin = conn
	t.Cleanup(func() {
		_ = conn.Close(context.Background())
		b.admin = nil
	})
}

func setUpBench(t *testing.T) *bench {
	s := stacktest.Load(t)
	b := &bench{s: s, settings: loadBenchSettings(t), machine: machine(), brokerPorts: map[uint64]string{},
		proberRole: benchProberRole + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	// Registered first, so it runs last, after the scenarios' databases
	// (which hold the role's grants) are dropped.
	t.Cleanup(func() { b.dropProberRole(t) })
	var err error
	if b.proc, err = procfs.NewDefaultFS(); err != nil {
		t.Fatalf("/proc: %v", err)
	}
	if b.pgPort, err = strconv.ParseUint(s.Env["OUTBOX_CANARY_PG_PORT"], 10, 16); err != nil {
		t.Fatalf("OUTBOX_CANARY_PG_PORT: %v", err)
	}
	for _, br := range s.KafkaBrokers {
		_, port, err := net.SplitHostPort(br)
		if err != nil {
			t.Fatalf("broker %q: %v", br, err)
		}
		p, _ := strconv.ParseUint(port, 10, 16)
		b.brokerPorts[p] = br
	}
	if s.KcatPath == "" {
		t.Fatal("the stack names no kcat (OUTBOX_CANARY_KCAT): run deploy/local/stack.sh up")
	}
	// A directory of its own even for runs started in the same second (a
	// before and an after side by side): two probers on one state
	// directory read each other's offsets and journals.
	logs := filepath.Join(s.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(logs, "bench-"+time.Now().UTC().Format("20060102T150405")+"-")
	if err != nil {
		t.Fatal(err)
	}
	b.dir = dir
	t.Logf("logs, configurations and raw samples in %s", b.dir)
	b.canaryBin = stacktest.BuildCommand(t, "outbox-canary")
	b.relayBin = stacktest.BuildCommand(t, "outbox-relay")
	if out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		b.revision = strings.TrimSpace(string(out))
	}
	// Another revision's prober under this harness, for a before and
	// after measured alike (TestBenchCompare): BENCH_CANARY_BIN, built as
	// stacktest.BuildCommand builds (CGO_ENABLED=0 go build -trimpath), and
	// BENCH_CANARY_REVISION, what the doc calls it.
	if bin := os.Getenv("BENCH_CANARY_BIN"); bin != "" {
		b.canaryBin = bin
		b.revision = envString("BENCH_CANARY_REVISION", bin)
	}
	b.command = os.Getenv(benchServiceCommandEnv)
	if b.command == "" {
		b.command = fmt.Sprintf("OUTBOX_CANARY_STACK_ENV=%s %s=%s go test -count=1 -v -timeout 0 -run '^TestBenchService$' ./e2e/",
			filepath.Join(s.Dir, "env"), benchServiceEnv, os.Getenv(benchServiceEnv))
	}
	b.ensurePGStatStatements(t)
	return b
}

// ensurePGStatStatements creates the extension in the postgres database,
// where the harness reads it; it needs shared_preload_libraries, which
// deploy/local/postgres/postgresql.conf.in sets (a stack initialised before
// that needs `deploy/local/stack.sh down` and `up`).
func (b *bench) ensurePGStatStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.s.PGAdminDSN)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	var libs string
	if err := conn.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&libs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(libs, "pg_stat_statements") {
		t.Fatalf("the stack's PostgreSQL does not preload pg_stat_statements (shared_preload_libraries = %q); "+
			"this stack predates deploy/local/postgres/postgresql.conf.in's setting: recreate it with deploy/local/stack.sh down && up", libs)
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		t.Fatalf("create extension pg_stat_statements: %v", err)
	}
}

// benchResult is one scenario's measurements, kept in docs/benchmarks.json.
type benchResult struct {
	Scenario    string         `json:"scenario"`
	Date        time.Time      `json:"date"`
	Revision    string         `json:"revision"`
	Machine     string         `json:"machine"`
	Command     string         `json:"command"`
	LoadBefore  float64        `json:"load_before"`
	LoadDuring  []float64      `json:"load_during"` // 1-minute load average, one per window (largest sample)
	Pipelines   int            `json:"pipelines,omitempty"`
	Relays      int            `json:"relays,omitempty"`
	Partitions  int            `json:"partitions,omitempty"`
	Schedule    string         `json:"schedule,omitempty"`
	Minutes     float64        `json:"minutes,omitempty"`
	Warmup      string         `json:"warmup,omitempty"`
	FirstCanary string         `json:"first_canary,omitempty"` // how long until every pipeline had received one, or how many had
	Windows     []benchWindow  `json:"windows,omitempty"`
	Statements  *benchStmts    `json:"statements,omitempty"`
	Fsync       *benchFsync    `json:"fsync,omitempty"`
	Scrapes     *benchScrapes  `json:"scrapes,omitempty"`
	Foreign     *benchForeignR `json:"foreign,omitempty"`
	Consume     *benchConsumeR `json:"consume,omitempty"`
	ProberLog   map[string]int `json:"prober_log,omitempty"`      // lines by level, over the whole scenario
	ProberMsgs  []string       `json:"prober_messages,omitempty"` // the most frequent WARN and ERROR messages, with counts
	Notes       []string       `json:"notes,omitempty"`
	// ScrapeEvery: the windows include a scrape of /metrics this often
	// (BENCH_SCRAPE_EVERY); "" when only the harness's own scraped.
	ScrapeEvery string `json:"scrape_every,omitempty"`
}

type benchWindow struct {
	FromMinute, ToMinute float64
	CPUPercent           float64 `json:"cpu_percent"`
	// CPUSystemPercent is the part of CPUPercent spent in the kernel:
	// syscalls, and the loopback network's work done on the prober's time.
	CPUSystemPercent float64 `json:"cpu_system_percent,omitempty"`
	RSSMaxBytes      uint64  `json:"rss_max_bytes"`
	RSSEndBytes      uint64  `json:"rss_end_bytes"`
	HWMBytes         uint64  `json:"hwm_bytes"`
	// The largest sample's VmRSS split: anonymous memory (heap, stacks)
	// and file-backed pages (the mapped binary), from /proc/<pid>/status.
	RSSAnonBytes uint64 `json:"rss_anon_bytes,omitempty"`
	RSSFileBytes uint64 `json:"rss_file_bytes,omitempty"`
	// The Go runtime at the window's end, from /metrics.
	Goroutines     float64 `json:"goroutines,omitempty"`
	HeapInuseBytes float64 `json:"heap_inuse_bytes,omitempty"`
	// GOGC is the garbage collector's target, go_gc_gogc_percent: the
	// prober's default unless the environment set GOGC.
	GOGC                float64 `json:"gogc,omitempty"`
	WriteBytesPerSec    float64 `json:"write_bytes_per_sec"`
	PGSocketsMax        int     `json:"pg_sockets_max"`
	PGSessionsMax       int     `json:"pg_sessions_max"`
	PGAppNames          string  `json:"pg_application_names"`
	KafkaPerBrokerMax   int     `json:"kafka_per_broker_max"`
	Sent                float64 `json:"sent"`
	Received            float64 `json:"received"`
	Late                float64 `json:"late"`
	Lost                float64 `json:"lost"`
	InsertFailures      float64 `json:"insert_failures"`
	ProberLag           float64 `json:"prober_lag"`
	InsertCommitP99     float64 `json:"insert_commit_p99_seconds"` // -1: no observation
	InsertCommitP99Kind string  `json:"insert_commit_p99_kind"`    // native or classic (an upper bound)
	InsertCommitMax     float64 `json:"insert_commit_over_1s"`     // observations above 1 s
	LoadMax             float64 `json:"load_max"`
}

// benchScrapes is what the harness's scrapes of /metrics at the window
// ends cost the prober, left out of the windows: its CPU ticks from the
// sample before each scrape to the one after (USER_HZ, so a scrape under
// 10 ms may read as none).
type benchScrapes struct {
	Count      int     `json:"count"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

func (s *benchScrapes) add(before, after procSample) *benchScrapes {
	if s == nil {
		s = &benchScrapes{}
	}
	s.Count++
	s.CPUSeconds += float64(after.cpuTicks-before.cpuTicks) / userHZ
	return s
}

// PerScrape is the mean CPU seconds of one scrape.
func (s *benchScrapes) PerScrape() float64 { return s.CPUSeconds / float64(s.Count) }

// CoreShare is the per cent of one core that scrapes every scrapeInterval
// cost.
func (s *benchScrapes) CoreShare() float64 { return s.PerScrape() / scrapeInterval.Seconds() * 100 }

// scrapeInterval is the Prometheus scrape interval the scrape's share of
// a core is given at: the common 15 s.
const scrapeInterval = 15 * time.Second

type benchStmts struct {
	Canaries  float64         `json:"canaries"`
	Total     float64         `json:"total"`
	PerCanary float64         `json:"per_canary"`
	Top       []benchStmtLine `json:"top"`
}

type benchStmtLine struct {
	Query     string  `json:"query"`
	Calls     float64 `json:"calls"`
	PerCanary float64 `json:"per_canary"`
}

type benchFsync struct {
	Seconds      float64 `json:"seconds"`
	Calls        map[string]int
	Connects     map[string]int // connect calls by destination
	PerSecond    float64        `json:"per_second"`
	CanariesSent float64        `json:"canaries_sent"`
	Method       string         `json:"method"`
}

type benchForeignR struct {
	Messages         int     `json:"messages"`
	ProduceSeconds   float64 `json:"produce_seconds"`
	ProberSeconds    float64 `json:"prober_seconds"`
	ProberCPUSeconds float64 `json:"prober_cpu_seconds"`
	ProberRate       float64 `json:"prober_rate"`
	KcatSeconds      float64 `json:"kcat_seconds"`
	KcatCPUSeconds   float64 `json:"kcat_cpu_seconds"`
	KcatMessages     int     `json:"kcat_messages"`
	KcatRate         float64 `json:"kcat_rate"`
	CPURatio         float64 `json:"cpu_ratio"`
	SkipReasons      map[string]float64
}

// ---------------------------------------------------------------- setup

// benchPipelines creates a database with relays tables (rN.outbox, schema
// A), the prober's role with what it needs there, a topic per pipeline,
// starts a relay per table, and returns the configuration of the prober.
type benchSetup struct {
	configPath string
	names      []string
	topics     []string
}

func (b *bench) setUpPipelines(t *testing.T, tag string, n, relays, partitions int, schedule string) benchSetup {
	return b.setUpPipelinesWith(t, tag, n, relays, partitions, schedule, benchPipelineKnobs{})
}

// benchPipelineKnobs change what setUpPipelinesWith makes; the zero value
// is what the cost scenarios measure.
type benchPipelineKnobs struct {
	// topicConfig is every canary topic's configuration.
	topicConfig map[string]string
	// publishedStamp is relay.published_stamp ("": the polling default,
	// published_at).
	publishedStamp string
}

func (b *bench) setUpPipelinesWith(t *testing.T, tag string, n, relays, partitions int, schedule string, knobs benchPipelineKnobs) benchSetup {
	ctx := context.Background()
	dsn := b.s.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	password := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	adminConn, err := pgx.Connect(ctx, b.s.PGAdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer adminConn.Close(ctx)
	var exists bool
	if err := adminConn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", b.proberRole).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		if _, err := adminConn.Exec(ctx, "CREATE ROLE "+b.proberRole+" LOGIN"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adminConn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'; GRANT pg_monitor TO %[1]s", b.proberRole, password)); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < relays; r++ {
		schema := fmt.Sprintf("r%d", r)
		sql := fmt.Sprintf("CREATE SCHEMA %[1]s; SET search_path TO %[1]s; %[2]s; RESET search_path;"+
			"GRANT USAGE ON SCHEMA %[1]s TO %[3]s; GRANT SELECT, INSERT, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[3]s;"+
			"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %[1]s TO %[3]s", schema, outboxsql.SchemaA, b.proberRole)
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("outbox table %s: %v", schema, err)
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(b.proberRole, password)
	proberDSN := u.String()

	prefix := "bench-" + tag + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st := benchSetup{}
	for i := 0; i < n; i++ {
		st.names = append(st.names, fmt.Sprintf("p%03d", i))
		st.topics = append(st.topics, prefix+"."+st.names[i])
	}
	b.createTopics(t, st.topics, partitions, knobs.topicConfig)

	for r := 0; r < relays; r++ {
		addr := stacktest.FreeAddr(t)
		startProcess(t, filepath.Join(b.dir, fmt.Sprintf("%s-relay-%d.log", tag, r)), []string{"OUTBOX_RELAY_DSN=" + dsn},
			b.relayBin, "--brokers", strings.Join(b.s.KafkaBrokers, ","), "--schema", "a", "--table", fmt.Sprintf("r%d.outbox", r),
			"--topic-template", prefix+".{{.Route}}", "--poll-interval", b.settings.RelayPollInterval.String(),
			"--admin.listen-address", addr, "--log.level", "warn")
		waitHTTP(t, "http://"+addr+"/healthz", fmt.Sprintf("relay %d", r))
	}

	relay := "{kind: polling}"
	if knobs.publishedStamp != "" {
		relay = "{kind: polling, published_stamp: " + knobs.publishedStamp + "}"
	}
	var yml strings.Builder
	fmt.Fprintf(&yml, "instance_id: bench\nstate_dir: %s\nsigning_key: {value: bench-signing-key-not-for-production}\npipelines:\n",
		filepath.Join(b.dir, tag+"-state"))
	for i, name := range st.names {
		fmt.Fprintf(&yml, `  - name: %s
    database: {dsn: {value: %q}}
    outbox: {table: r%d.outbox}
    relay: %s
    canary: {aggregate_type: %s, schedule: %q, lost_after: 5m}
    kafka: {brokers: [%s], topic: %q}
    budgets: {end_to_end: 5s, commit_to_publish: 2s, publish_to_consume: 1s}
`, name, proberDSN, i%relays, relay, name, schedule, strings.Join(b.s.KafkaBrokers, ", "), st.topics[i])
	}
	if _, err := config.Load([]byte(yml.String())); err != nil {
		t.Fatalf("bench configuration: %v\n%s", err, yml.String())
	}
	st.configPath = filepath.Join(b.dir, tag+".yml")
	if err := os.WriteFile(st.configPath, []byte(yml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return st
}

// createTopics creates the topics in one request (hundreds of them one by
// one take minutes), each with configs (nil: the broker's defaults), waits
// until every partition has a leader, and deletes them when the test ends.
func (b *bench) createTopics(t *testing.T, topics []string, partitions int, configs map[string]string) {
	client := b.s.KafkaClient()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req := &kafka.CreateTopicsRequest{}
	for _, name := range topics {
		tc := kafka.TopicConfig{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}
		for k, v := range configs {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
		}
		req.Topics = append(req.Topics, tc)
	}
	res, err := client.CreateTopics(ctx, req)
	if err != nil {
		t.Fatalf("create %d topics: %v", len(topics), err)
	}
	for name, err := range res.Errors {
		if err != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := b.s.KafkaClient().DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics}); err != nil {
			t.Errorf("delete %d topics: %v", len(topics), err)
		}
	})
	stacktest.Eventually(t, 3*time.Minute, fmt.Sprintf("%d topics to have leaders", len(topics)), func() (bool, string) {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, tp := range md.Topics {
			ok := tp.Error == nil && len(tp.Partitions) == partitions
			for _, p := range tp.Partitions {
				ok = ok && p.Error == nil && p.Leader.Host != ""
			}
			if ok {
				ready++
			}
		}
		return ready == len(topics), fmt.Sprintf("%d of %d ready", ready, len(topics))
	})
}

// startProber starts `outbox-canary run` and returns its pid and address.
func (b *bench) startProber(t *testing.T, tag, configPath string) (int, string) {
	return b.startProberLogging(t, tag, configPath, b.settings.ProberLogLevel)
}

// startProberLogging is startProber at log level level.
func (b *bench) startProberLogging(t *testing.T, tag, configPath, level string) (int, string) {
	addr := stacktest.FreeAddr(t)
	logPath := filepath.Join(b.dir, tag+"-prober.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--config.file", configPath, "--web.listen-address", addr, "--log.level", level}
	if b.settings.ProfileSeconds > 0 {
		args = append(args, "--web.enable-pprof")
	}
	cmd := exec.Command(b.canaryBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the prober: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT) // in case the foreign scenario failed while it was stopped
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logFile.Close()
	})
	waitHTTP(t, "http://"+addr+"/readyz", "the prober")
	return cmd.Process.Pid, addr
}

// awaitFirstCanaries waits until every pipeline has received a canary, or
// gives up after ReceiveFirstWithin and says how many had (a prober that
// cannot serve every pipeline is a result, not a reason to stop).
func (b *bench) awaitFirstCanaries(t *testing.T, addr string, n int) string {
	start := time.Now()
	deadline := start.Add(b.settings.ReceiveFirstWithin)
	for {
		m, err := scrapeRetry(t, addr)
		if err != nil {
			t.Fatalf("prober /metrics: %v", err)
		}
		got := 0
		for _, v := range m.byPipeline(slo.MetricCanariesReceived) {
			if v > 0 {
				got++
			}
		}
		if got >= n {
			return fmt.Sprintf("every pipeline had received a canary %s after /readyz", time.Since(start).Round(time.Second))
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("only %d of %d pipelines had received a canary %s after /readyz", got, n, b.settings.ReceiveFirstWithin)
			t.Log(msg)
			return msg
		}
		time.Sleep(2 * time.Second)
	}
}

// ---------------------------------------------------------------- canary scenarios

func (b *bench) runCanaryScenario(t *testing.T, sc canaryScenario) *benchResult {
	res := &benchResult{Scenario: sc.Name, Date: time.Now().UTC(), Revision: b.revision, Machine: b.machine, Command: b.command,
		Pipelines: sc.Pipelines, Relays: sc.Relays, Partitions: b.settings.Partitions, Schedule: sc.Schedule,
		Minutes: sc.Duration.Minutes(), Warmup: b.settings.Warmup.String(), LoadBefore: loadAvg()}
	t.Logf("%s: %d pipelines at %q, %d relays, %d partitions per topic, %s; load before %.2f",
		sc.Name, sc.Pipelines, sc.Schedule, sc.Relays, b.settings.Partitions, sc.Duration, res.LoadBefore)
	st := b.setUpPipelines(t, sc.Name, sc.Pipelines, sc.Relays, b.settings.Partitions, sc.Schedule)
	b.openAdmin(t)
	var maxConns string
	if err := b.admin.QueryRow(context.Background(), "SHOW max_connections").Scan(&maxConns); err != nil {
		t.Fatal(err)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("PostgreSQL's max_connections is %s; the relays connect as the superuser, the prober as a role of its own (%s_…, one per run).", maxConns, benchProberRole))
	pid, addr := b.startProber(t, sc.Name, st.configPath)
	res.FirstCanary = b.awaitFirstCanaries(t, addr, sc.Pipelines)
	time.Sleep(b.settings.Warmup)

	b.resetStatements(t)
	samplesPath := filepath.Join(b.dir, sc.Name+"-samples.tsv")
	samples, err := os.Create(samplesPath)
	if err != nil {
		t.Fatal(err)
	}
	defer samples.Close()
	fmt.Fprintln(samples, "elapsed_s\tcpu_ticks\trss_bytes\thwm_bytes\twrite_bytes\tpg_sockets\tpg_sessions\tkafka_max_per_broker\tload1")

	profiled := b.startProfiles(t, sc.Name, addr)
	defer profiled()
	if every := b.settings.ScrapeEvery; every > 0 {
		res.ScrapeEvery = every.String()
		stop := scrapeEvery(t, addr, every)
		defer stop()
	}
	start := time.Now()
	first, err := scrapeRetry(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	runStart := first
	prev := b.sampleProc(t, pid)
	prev.at = start
	b.writeSample(samples, start, prev)
	win := b.newWindow(0, prev, first)
	for windowEnd := min(b.settings.Window, sc.Duration); ; {
		time.Sleep(benchSampleEvery)
		cur := b.sampleProc(t, pid)
		b.writeSample(samples, start, cur)
		win.add(cur)
		prev = cur
		elapsed := time.Since(start)
		if elapsed < windowEnd-time.Second/2 && elapsed < sc.Duration {
			continue
		}
		m, err := scrapeRetry(t, addr)
		if err != nil {
			t.Fatal(err)
		}
		// The harness's own scrape is no part of the scenario: the window
		// closes on the sample before it and the next opens on one after
		// it, and what it cost is reported apart (a scrape of 300
		// pipelines is a tenth of a second of CPU, more than two minutes
		// of a short last window would show otherwise).
		scraped := b.sampleProc(t, pid)
		res.Scrapes = res.Scrapes.add(cur, scraped)
		w := win.close(elapsed, cur, m)
		res.Windows = append(res.Windows, w)
		res.LoadDuring = append(res.LoadDuring, w.LoadMax)
		t.Logf("%s: minutes %.1f-%.1f: CPU %.2f%% (kernel %.2f%%), RSS max %.1f MiB, HWM %.1f MiB, writes %.1f KB/s, PG sockets %d (sessions %d), Kafka %d per broker, sent %.0f, insert->commit p99 %s, prober_lag %.0f, insert failures %.0f",
			sc.Name, w.FromMinute, w.ToMinute, w.CPUPercent, w.CPUSystemPercent, mib(w.RSSMaxBytes), mib(w.HWMBytes), w.WriteBytesPerSec/1000,
			w.PGSocketsMax, w.PGSessionsMax, w.KafkaPerBrokerMax, w.Sent, fmtSeconds(w.InsertCommitP99), w.ProberLag, w.InsertFailures)
		if elapsed >= sc.Duration-time.Second/2 {
			res.Statements = b.readStatements(t, m.sum(slo.MetricCanariesSent)-runStart.sum(slo.MetricCanariesSent))
			break
		}
		win = b.newWindow(elapsed, scraped, m)
		windowEnd = min(windowEnd+b.settings.Window, sc.Duration)
	}
	res.Fsync = b.traceFsyncs(t, pid, addr, sc.Name)
	res.ProberLog, res.ProberMsgs = countLogLevels(filepath.Join(b.dir, sc.Name+"-prober.log"))
	return res
}

// startProfiles, when asked for, fetches a CPU profile of ProfileSeconds
// now, in the background, and returns what fetches the heap profile at
// the end and waits for the CPU one.
func (b *bench) startProfiles(t *testing.T, tag, addr string) func() {
	if b.settings.ProfileSeconds <= 0 {
		return func() {}
	}
	save := func(name, url string, timeout time.Duration) {
		client := http.Client{Timeout: timeout}
		resp, err := client.Get(url)
		if err != nil {
			t.Logf("profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		path := filepath.Join(b.dir, tag+"-"+name+".pprof")
		f, err := os.Create(path)
		if err != nil {
			t.Logf("profile %s: %v", name, err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			t.Logf("profile %s: %v", name, err)
			return
		}
		t.Logf("profile %s written to %s", name, path)
	}
	done := make(chan struct{})
	secs := b.settings.ProfileSeconds
	go func() {
		defer close(done)
		save("cpu", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), time.Duration(secs)*time.Second+time.Minute)
	}()
	return func() {
		save("heap", "http://"+addr+"/debug/pprof/heap", time.Minute)
		<-done
	}
}

// procSample is one look at /proc/<pid> and the prober's sessions.
type procSample struct {
	at               time.Time
	cpuTicks         uint64
	systemTicks      uint64 // of cpuTicks, in the kernel
	rss, hwm         uint64
	rssAnon, rssFile uint64
	writeBytes       uint64
	pgSockets        int
	pgSessions       int
	pgAppNames       string
	kafkaPerBroker   map[string]int
	load1            float64
	sessionsSampled  bool
	socketsReadError string
}

func (b *bench) sampleProc(t *testing.T, pid int) procSample {
	p, err := b.proc.Proc(pid)
	if err != nil {
		t.Fatalf("prober pid %d: %v (did it exit? see its log in %s)", pid, err, b.dir)
	}
	s := procSample{at: time.Now(), kafkaPerBroker: map[string]int{}, load1: loadAvg()}
	stat, err := p.Stat()
	if err != nil {
		t.Fatalf("prober /proc/%d/stat: %v (did it exit? see its log in %s)", pid, err, b.dir)
	}
	s.cpuTicks = uint64(stat.UTime + stat.STime)
	s.systemTicks = uint64(stat.STime)
	status, err := p.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	s.rss, s.hwm = status.VmRSS, status.VmHWM
	s.rssAnon, s.rssFile = status.RssAnon, status.RssFile
	pio, err := p.IO()
	if err != nil {
		t.Fatal(err)
	}
	s.writeBytes = pio.WriteBytes

	inodes := socketInodes(pid)
	for _, read := range []func() (procfs.NetTCP, error){b.proc.NetTCP, b.proc.NetTCP6} {
		lines, err := read()
		if err != nil {
			continue // no IPv6 in this namespace
		}
		for _, l := range lines {
			if l.St != 1 || !inodes[l.Inode] { // 1: ESTABLISHED
				continue
			}
			switch {
			case l.RemPort == b.pgPort:
				s.pgSockets++
			case b.brokerPorts[l.RemPort] != "":
				s.kafkaPerBroker[b.brokerPorts[l.RemPort]]++
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b.admin != nil {
		var names []string
		err := b.admin.QueryRow(ctx, `SELECT count(*), coalesce(array_agg(DISTINCT application_name), '{}')
			FROM pg_stat_activity WHERE usename = $1`, b.proberRole).Scan(&s.pgSessions, &names)
		s.pgAppNames = strings.Join(names, ",")
		s.sessionsSampled = err == nil
	}
	return s
}

// socketInodes are the inodes of the process's sockets (fd -> socket:[N]).
func socketInodes(pid int) map[uint64]bool {
	out := map[uint64]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(target, "socket:[") {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]"), 10, 64); err == nil {
			out[n] = true
		}
	}
	return out
}

func (b *bench) writeSample(w io.Writer, start time.Time, s procSample) {
	maxBroker := 0
	for _, n := range s.kafkaPerBroker {
		maxBroker = max(maxBroker, n)
	}
	fmt.Fprintf(w, "%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\n", s.at.Sub(start).Seconds(), s.cpuTicks, s.rss, s.hwm, s.writeBytes,
		s.pgSockets, s.pgSessions, maxBroker, s.load1)
}

// windowAcc accumulates the samples of one window.
type windowAcc struct {
	from        time.Duration
	first       procSample
	metrics     benchMetrics
	w           benchWindow
	appNames    map[string]bool
	firstSample time.Time
}

func (b *bench) newWindow(from time.Duration, first procSample, m benchMetrics) *windowAcc {
	a := &windowAcc{from: from, first: first, metrics: m, appNames: map[string]bool{}, firstSample: first.at}
	a.add(first)
	return a
}

func (a *windowAcc) add(s procSample) {
	if s.rss >= a.w.RSSMaxBytes {
		a.w.RSSMaxBytes, a.w.RSSAnonBytes, a.w.RSSFileBytes = s.rss, s.rssAnon, s.rssFile
	}
	a.w.PGSocketsMax = max(a.w.PGSocketsMax, s.pgSockets)
	a.w.PGSessionsMax = max(a.w.PGSessionsMax, s.pgSessions)
	for _, n := range s.kafkaPerBroker {
		a.w.KafkaPerBrokerMax = max(a.w.KafkaPerBrokerMax, n)
	}
	for _, name := range strings.Split(s.pgAppNames, ",") {
		a.appNames[name] = true
	}
	a.w.LoadMax = max(a.w.LoadMax, s.load1)
}

func (a *windowAcc) close(elapsed time.Duration, last procSample, m benchMetrics) benchWindow {
	w := a.w
	w.FromMinute, w.ToMinute = roundTenth(a.from.Minutes()), roundTenth(elapsed.Minutes())
	secs := last.at.Sub(a.firstSample).Seconds()
	w.CPUPercent = float64(last.cpuTicks-a.first.cpuTicks) / userHZ / secs * 100
	w.CPUSystemPercent = float64(last.systemTicks-a.first.systemTicks) / userHZ / secs * 100
	w.RSSEndBytes, w.HWMBytes = last.rss, last.hwm
	w.Goroutines, w.HeapInuseBytes = m.sum("go_goroutines"), m.sum("go_memstats_heap_inuse_bytes")
	w.GOGC = m.sum("go_gc_gogc_percent")
	w.WriteBytesPerSec = float64(last.writeBytes-a.first.writeBytes) / secs
	var names []string
	for n := range a.appNames {
		if n == "" {
			n = `""`
		}
		names = append(names, n)
	}
	sort.Strings(names)
	w.PGAppNames = strings.Join(names, " ")
	d := func(name string) float64 { return m.sum(name) - a.metrics.sum(name) }
	w.Sent, w.Received, w.Late, w.Lost = d(slo.MetricCanariesSent), d(slo.MetricCanariesReceived), d(slo.MetricCanariesLate), d(slo.MetricCanariesLost)
	w.InsertFailures = d(slo.MetricCanaryInsertFailures)
	w.ProberLag = m.sumWhere(slo.MetricCanariesUnjudged, slo.LabelReason, "prober_lag") - a.metrics.sumWhere(slo.MetricCanariesUnjudged, slo.LabelReason, "prober_lag")
	w.InsertCommitP99, w.InsertCommitP99Kind, w.InsertCommitMax = insertCommitP99(a.metrics, m)
	return w
}

func roundTenth(f float64) float64 { return math.Round(f*10) / 10 }
func mib(b uint64) float64         { return float64(b) / (1 << 20) }

// ---------------------------------------------------------------- statements

func (b *bench) resetStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The run's role's alone: another run on the stack counts its own.
	if _, err := b.admin.Exec(ctx, "SELECT pg_stat_statements_reset((SELECT oid FROM pg_roles WHERE rolname = $1), 0, 0)", b.proberRole); err != nil {
		t.Fatalf("pg_stat_statements_reset: %v", err)
	}
}

// readStatements reads the prober role's statements since the reset: all of
// them, per canary sent, and the most frequent ones.
func (b *bench) readStatements(t *testing.T, canaries float64) *benchStmts {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One line per statement whatever table it names: the pipelines'
	// tables differ only by schema (r0, r1, ...).
	rows, err := b.admin.Query(ctx, `SELECT regexp_replace(regexp_replace(query, '\s+', ' ', 'g'), '"r[0-9]+"\.', '"rN".', 'g'), sum(calls)::float8
		FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
		WHERE r.rolname = $1 GROUP BY 1 ORDER BY 2 DESC`, b.proberRole)
	if err != nil {
		t.Fatalf("pg_stat_statements: %v", err)
	}
	out := &benchStmts{Canaries: canaries}
	for rows.Next() {
		var l benchStmtLine
		if err := rows.Scan(&l.Query, &l.Calls); err != nil {
			t.Fatal(err)
		}
		out.Total += l.Calls
		if canaries > 0 {
			l.PerCanary = l.Calls / canaries
		}
		if len(l.Query) > 160 {
			l.Query = l.Query[:157] + "..."
		}
		out.Top = append(out.Top, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if canaries > 0 {
		out.PerCanary = out.Total / canaries
	}
	if len(out.Top) > 12 {
		out.Top = out.Top[:12]
	}
	return out
}

// ---------------------------------------------------------------- fsyncs

// traceFsyncs counts the prober's fsync-family calls with strace -c over a
// window of their own, after the measured windows: tracing stops the process
// at every traced call, which would show in its CPU and latencies.
func (b *bench) traceFsyncs(t *testing.T, pid int, addr, tag string) *benchFsync {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Logf("no strace on PATH (Debian's package strace): fsyncs not counted")
		return nil
	}
	out := filepath.Join(b.dir, tag+"-strace.txt")
	before, err := scrapeRetry(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(strace, "-f", "-qq", "-o", out, "-e", "trace="+straceCalls, "-p", strconv.Itoa(pid))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	start := time.Now()
	time.Sleep(time.Duration(b.settings.StraceSeconds) * time.Second)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	secs := time.Since(start).Seconds()
	after, err := scrapeRetry(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("strace wrote no summary (%v): %s", err, stderr.String())
	}
	res := &benchFsync{Seconds: roundTenth(secs), Calls: map[string]int{}, Connects: map[string]int{},
		CanariesSent: after.sum(slo.MetricCanariesSent) - before.sum(slo.MetricCanariesSent),
		Method:       fmt.Sprintf("strace -f -e trace=%s -p <pid> for %d s, after the measured windows", straceCalls, b.settings.StraceSeconds)}
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // a "<... resumed>" line: its call was counted when it started
		}
		if m[1] != "connect" {
			res.Calls[m[1]]++
			total++
			continue
		}
		port := "other"
		if pm := stracePort.FindStringSubmatch(sc.Text()); pm != nil {
			n, _ := strconv.ParseUint(pm[1], 10, 16)
			switch {
			case n == b.pgPort:
				port = "postgres"
			case b.brokerPorts[n] != "":
				port = "kafka " + b.brokerPorts[n]
			}
		}
		res.Connects[port]++
	}
	res.PerSecond = float64(total) / secs
	return res
}

// straceCalls are the calls traced: the fsync family, and connect to count
// new connections (a sampled socket table misses short-lived ones).
const straceCalls = "fsync,fdatasync,sync_file_range,syncfs,connect"

var (
	straceLine = regexp.MustCompile(`^\d+\s+(fsync|fdatasync|sync_file_range|syncfs|connect)\(`)
	stracePort = regexp.MustCompile(`sin6?_port=htons\((\d+)\)`)
)

// countLogLevels counts the prober's log lines by slog level, and returns
// its five most frequent WARN and ERROR messages with their counts.
func countLogLevels(path string) (map[string]int, []string) {
	out := map[string]int{}
	msgs := map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		return out, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "level=")
		if i < 0 {
			continue
		}
		lvl, _, _ := strings.Cut(line[i+len("level="):], " ")
		out[lvl]++
		if lvl != "WARN" && lvl != "ERROR" {
			continue
		}
		if m := logMsg.FindStringSubmatch(line); m != nil {
			msg := m[1] + m[2]
			if len(msg) > 120 {
				msg = msg[:117] + "..."
			}
			msgs[lvl+" "+msg]++
		}
	}
	var top []string
	for m := range msgs {
		top = append(top, m)
	}
	sort.Slice(top, func(i, j int) bool {
		if msgs[top[i]] != msgs[top[j]] {
			return msgs[top[i]] > msgs[top[j]]
		}
		return top[i] < top[j]
	})
	if len(top) > 5 {
		top = top[:5]
	}
	for i, m := range top {
		top[i] = fmt.Sprintf("%d× %s", msgs[m], m)
	}
	return out, top
}

var logMsg = regexp.MustCompile(`msg="((?:[^"\\]|\\.)*)"|msg=(\S+)`)

// ---------------------------------------------------------------- foreign messages

func (b *bench) runForeign(t *testing.T) *benchResult {
	n := b.settings.ForeignMessages
	res := &benchResult{Scenario: benchForeign, Date: time.Now().UTC(), Revision: b.revision, Machine: b.machine, Command: b.command,
		Pipelines: 1, Relays: 1, Partitions: b.settings.ForeignPartitions, Schedule: "@every 10s", LoadBefore: loadAvg()}
	st := b.setUpPipelines(t, benchForeign, 1, 1, b.settings.ForeignPartitions, "@every 10s")
	topic := st.topics[0]
	pid, addr := b.startProber(t, benchForeign, st.configPath)
	res.FirstCanary = b.awaitFirstCanaries(t, addr, 1)
	if !strings.HasPrefix(res.FirstCanary, "every") {
		t.Fatalf("the foreign pipeline received no canary, so its readers may not be positioned: %s", res.FirstCanary)
	}

	// The business events, written once to a file kcat reads.
	input := filepath.Join(b.dir, "foreign-messages.txt")
	f, err := os.Create(input)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "order-%d|{\"orderId\":\"order-%d\",\"status\":\"SHIPPED\",\"customerId\":\"c-%d\",\"amount\":%d,\"currency\":\"EUR\",\"items\":[{\"sku\":\"sku-%d\",\"qty\":%d}],\"updatedAt\":\"2026-01-01T00:00:00Z\"}\n",
			i%10007, i, i%997, 1000+i%9000, i%503, 1+i%5)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	before, err := scrapeRetry(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	skippedBefore := before.sum(slo.MetricMessagesSkipped)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	produceStart := time.Now()
	in, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	produce := exec.Command(b.s.KcatPath, "-P", "-b", strings.Join(b.s.KafkaBrokers, ","), "-t", topic, "-K", "|",
		"-X", "linger.ms=20", "-X", "batch.num.messages=10000", "-X", "queue.buffering.max.messages=1000000")
	produce.Stdin = in
	if out, err := produce.CombinedOutput(); err != nil {
		in.Close()
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	in.Close()
	res.Foreign = &benchForeignR{Messages: n, ProduceSeconds: roundTenth(time.Since(produceStart).Seconds())}
	t.Logf("foreign: %d messages produced in %.1f s while the prober was stopped", n, res.Foreign.ProduceSeconds)

	p, err := b.proc.Proc(pid)
	if err != nil {
		t.Fatal(err)
	}
	ticks := func() uint64 {
		st, err := p.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return uint64(st.UTime + st.STime)
	}
	// The profile is asked for while the prober is stopped: the kernel
	// accepts the connection and holds the request, so the profile starts
	// as the prober resumes and covers the skipping from its first message.
	profiled := b.startProfiles(t, benchForeign, addr)
	if b.settings.ProfileSeconds > 0 {
		time.Sleep(time.Second) // for the request to reach the prober's socket
	}
	cpu0 := ticks()
	resumed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	var last benchMetrics
	stacktest.Eventually(t, 30*time.Minute, fmt.Sprintf("the prober to skip %d foreign messages", n), func() (bool, string) {
		time.Sleep(150 * time.Millisecond)
		m, err := scrapeBench(context.Background(), addr)
		if err != nil {
			return false, err.Error()
		}
		last = m
		got := m.sum(slo.MetricMessagesSkipped) - skippedBefore
		return got >= float64(n), fmt.Sprintf("%.0f skipped", got)
	})
	elapsed := time.Since(resumed).Seconds()
	cpu := float64(ticks()-cpu0) / userHZ
	if p := b.settings.ProfileSeconds; p > 0 && float64(p) < elapsed {
		t.Logf("foreign: the CPU profile covers the first %d s of the %.1f s of skipping (BENCH_PROFILE_SECONDS)", p, elapsed)
	}
	profiled()
	res.Foreign.ProberSeconds, res.Foreign.ProberCPUSeconds, res.Foreign.ProberRate = elapsed, cpu, float64(n)/elapsed
	res.Foreign.SkipReasons = map[string]float64{}
	for _, s := range last.series(slo.MetricMessagesSkipped) {
		res.Foreign.SkipReasons[s.labels[slo.LabelReason]] += s.value
	}

	// kcat over the same topic, start to end.
	var kout bytes.Buffer
	kcat := exec.Command(b.s.KcatPath, "-C", "-b", strings.Join(b.s.KafkaBrokers, ","), "-t", topic, "-o", "beginning", "-e", "-q")
	kcat.Stdout = &countingWriter{w: io.Discard, lines: &res.Foreign.KcatMessages}
	kcat.Stderr = &kout
	kstart := time.Now()
	if err := kcat.Run(); err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, kout.String())
	}
	res.Foreign.KcatSeconds = time.Since(kstart).Seconds()
	res.Foreign.KcatCPUSeconds = (kcat.ProcessState.UserTime() + kcat.ProcessState.SystemTime()).Seconds()
	res.Foreign.KcatRate = float64(res.Foreign.KcatMessages) / res.Foreign.KcatSeconds
	if res.Foreign.KcatCPUSeconds > 0 {
		res.Foreign.CPURatio = res.Foreign.ProberCPUSeconds / res.Foreign.KcatCPUSeconds
	}
	res.LoadDuring = []float64{loadAvg()}
	res.ProberLog, res.ProberMsgs = countLogLevels(filepath.Join(b.dir, benchForeign+"-prober.log"))
	res.Notes = append(res.Notes, "kcat prints every payload, a line each, to a pipe the harness counts and discards; the prober's time runs from SIGCONT to the scrape that counted the last skip (scrapes every ~150 ms)")
	t.Logf("foreign: prober %.0f msg/s, %.2f CPU s; kcat %.0f msg/s, %.2f CPU s (%d messages); ratio %.2f",
		res.Foreign.ProberRate, res.Foreign.ProberCPUSeconds, res.Foreign.KcatRate, res.Foreign.KcatCPUSeconds, res.Foreign.KcatMessages, res.Foreign.CPURatio)
	return res
}

// countingWriter counts newlines written through it.
type countingWriter struct {
	w     io.Writer
	lines *int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	*c.lines += bytes.Count(p, []byte{'\n'})
	return c.w.Write(p)
}

// ---------------------------------------------------------------- /metrics

// benchMetrics is one scrape of the prober's /metrics, in protobuf so that
// native histograms come through.
type benchMetrics map[string]*dto.MetricFamily

type benchSeries struct {
	labels map[string]string
	value  float64
	m      *dto.Metric
}

// scrapeRetry scrapes, retrying a scrape that failed: a prober with
// hundreds of pipelines on a loaded machine can take longer than a timeout
// to answer once, which is worth a line in the log, not the run.
func scrapeRetry(t *testing.T, addr string) (benchMetrics, error) {
	t.Helper()
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		var m benchMetrics
		if m, err = scrapeBench(context.Background(), addr); err == nil {
			return m, nil
		}
		t.Logf("scrape %d of the prober's /metrics failed: %v", attempt, err)
		time.Sleep(2 * time.Second)
	}
	return nil, err
}

// scrapeEvery scrapes addr's /metrics every interval as Prometheus does
// (protobuf, gzip), the body read and dropped, until the returned stop.
func scrapeEvery(t *testing.T, addr string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		failed := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
			if err != nil {
				return
			}
			req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				if failed++; failed == 1 && ctx.Err() == nil {
					t.Logf("a scrape every %s: %v", every, err)
				}
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	return func() { cancel(); <-done }
}

func scrapeBench(ctx context.Context, addr string) (benchMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	out := benchMetrics{}
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode /metrics: %w", err)
		}
		if have, ok := out[mf.GetName()]; ok {
			// One family per pipeline for the latency histograms.
			have.Metric = append(have.Metric, mf.Metric...)
			continue
		}
		out[mf.GetName()] = mf
	}
}

func (m benchMetrics) series(name string) []benchSeries {
	mf := m[name]
	if mf == nil {
		return nil
	}
	var out []benchSeries
	for _, x := range mf.Metric {
		s := benchSeries{labels: map[string]string{}, m: x}
		for _, lp := range x.GetLabel() {
			s.labels[lp.GetName()] = lp.GetValue()
		}
		switch {
		case x.Counter != nil:
			s.value = x.GetCounter().GetValue()
		case x.Gauge != nil:
			s.value = x.GetGauge().GetValue()
		case x.Untyped != nil:
			s.value = x.GetUntyped().GetValue()
		}
		out = append(out, s)
	}
	return out
}

func (m benchMetrics) sum(name string) float64 {
	total := 0.0
	for _, s := range m.series(name) {
		total += s.value
	}
	return total
}

func (m benchMetrics) sumWhere(name, label, value string) float64 {
	total := 0.0
	for _, s := range m.series(name) {
		if s.labels[label] == value {
			total += s.value
		}
	}
	return total
}

func (m benchMetrics) byPipeline(name string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.series(name) {
		out[s.labels[slo.LabelPipeline]] += s.value
	}
	return out
}

// insertCommitP99 is the p99 of insert_to_commit over every pipeline
// between two scrapes: from the native histograms (bucket upper bound,
// within 10%), or from the classic buckets (their upper bound) when the
// exposition has no native buckets; -1 when nothing was observed. The third
// value counts observations above 1 s.
func insertCommitP99(from, to benchMetrics) (float64, string, float64) {
	native := map[int64]float64{} // bucket index -> count (schema of the first series)
	var zero float64
	schema := int32(math.MinInt32)
	classic := map[float64]float64{} // upper bound -> cumulative count
	nativeOK := true
	var total float64
	collect := func(m benchMetrics, sign float64) {
		for _, s := range m.series(slo.MetricSegmentLatency) {
			if s.labels[slo.LabelSegment] != config.SegmentInsertToCommit {
				continue
			}
			h := s.m.GetHistogram()
			if h == nil {
				continue
			}
			total += sign * float64(h.GetSampleCount())
			for _, bk := range h.GetBucket() {
				classic[bk.GetUpperBound()] += sign * float64(bk.GetCumulativeCount())
			}
			if len(h.GetPositiveSpan()) == 0 && h.GetZeroCount() == 0 {
				if h.GetSampleCount() > 0 {
					nativeOK = false
				}
				continue
			}
			if schema == math.MinInt32 {
				schema = h.GetSchema()
			} else if schema != h.GetSchema() {
				nativeOK = false // a schema reduced under the bucket cap: fall back
			}
			zero += sign * float64(h.GetZeroCount())
			idx, cnt := int64(0), int64(0)
			di := 0
			for _, sp := range h.GetPositiveSpan() {
				idx += int64(sp.GetOffset())
				for j := uint32(0); j < sp.GetLength(); j++ {
					cnt += h.GetPositiveDelta()[di]
					di++
					native[idx] += sign * float64(cnt)
					idx++
				}
			}
		}
	}
	collect(to, 1)
	collect(from, -1)
	over1s := 0.0
	if c, ok := classic[math.Inf(1)]; ok {
		le1 := 0.0
		for ub, n := range classic {
			if ub <= 1 && n > le1 {
				le1 = n
			}
		}
		over1s = c - le1
	}
	if total <= 0 {
		return -1, "", over1s
	}
	rank := 0.99 * total
	if nativeOK && schema != math.MinInt32 {
		idxs := make([]int64, 0, len(native))
		for i := range native {
			idxs = append(idxs, i)
		}
		slices.Sort(idxs)
		cum := zero
		if cum >= rank {
			return 0, "native", over1s
		}
		base := math.Pow(2, math.Pow(2, -float64(schema)))
		for _, i := range idxs {
			cum += native[i]
			if cum >= rank {
				return math.Pow(base, float64(i)), "native", over1s
			}
		}
	}
	ubs := make([]float64, 0, len(classic))
	for ub := range classic {
		ubs = append(ubs, ub)
	}
	slices.Sort(ubs)
	for _, ub := range ubs {
		if classic[ub] >= rank {
			return ub, "classic", over1s
		}
	}
	return math.Inf(1), "classic", over1s
}

func fmtSeconds(s float64) string {
	switch {
	case s < 0:
		return "–"
	case math.IsInf(s, 1):
		return "> last bucket"
	case s < 1:
		return strconv.FormatFloat(s*1000, 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(s, 'f', 2, 64) + " s"
	}
}
