package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/coreos/go-systemd/v22/activation"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/outbox-canary/outbox-canary/internal/compactvec"
	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/lint"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/internal/statuspage"
	"github.com/outbox-canary/outbox-canary/internal/watch"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

const runHelp = `Run the prober service.

On each pipeline's schedule insert a signed canary row into its outbox table,
read it back from the canary topic, and export each segment of its delay
against its budget as Prometheus metrics; beside it, sample each pipeline's
watchers (backlog, open transactions, replication slot, consumer lag,
connector).

Serves /metrics, /healthz (liveness), /readyz (readiness), /api/status (JSON)
and / (a status page). /readyz answers 200 once this process works: the
configuration is loaded, HTTP serves and the canary schedules run. It never
depends on a pipeline's database or Kafka: their outages are what the
canaries measure, reported in outbox_canary_dependency_up and on the status
page, so they neither restart nor unready the prober. Unreachable servers
are retried with backoff, never fatal. On SIGTERM or SIGINT it stops sending, lets
in-flight inserts finish (5s at most), flushes the in-flight state to the
state directory, and stops the HTTP server (5s at most).

A fleet too large for one prober, or one that must survive losing a node,
runs it several times: --shard.count splits the file's pipelines by a hash
of their names, --shard.index or --shard.ordinal (a StatefulSet pod name)
says which share this one measures, and --instance.id gives each replica
its own instance id. docs/fleet.md explains the design.

--web.config.file's TLS and basic auth cover every path, /healthz and
/readyz too, and a kubelet's HTTP probe sends no credentials: with basic
auth, add --web.probe-address (e.g. :9466), a plain HTTP listener that
serves /healthz and /readyz and nothing else, and probe that.

The Go garbage collector runs with GOGC=60 unless the GOGC environment
variable says otherwise: most of the heap is long-lived (remembered
canaries, metric series), so the default 100 would keep as much again in
garbage.

Example:
  OUTBOX_CANARY_SIGNING_KEY=... OUTBOX_CANARY_PG_DSN=postgres://... \
    outbox-canary run --config.file=/etc/outbox-canary.yml --web.listen-address=:9465`

// defaultGCPercent is the GC target the service runs with when GOGC is not
// set. Most of its heap lives long (the canaries remembered for lost_after
// + forget, the metric series), and Go's default of 100 lets garbage grow
// to the size of all of it before a collection. Prometheus has run at 75
// since 2.53 for the same reason; 60 here, because at 300 pipelines 75
// left the peak RSS (VmHWM) just over issue 27's 100 MiB (101.5 MiB, with
// a scrape every 15 s), for a few per cent more of the prober's CPU in
// the collector. What it saves and costs is in docs/benchmarks.md.
const defaultGCPercent = 60

// applyDefaultGCPercent sets defaultGCPercent unless GOGC is set (the
// runtime has applied it then), and returns the GC target in force and
// whether it came from GOGC.
func applyDefaultGCPercent() (percent int, fromEnv bool) {
	if os.Getenv("GOGC") != "" {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p, true
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent, false
}

// httpShutdownTimeout bounds how long open HTTP requests may delay exit.
const httpShutdownTimeout = 5 * time.Second

// privilegesCheckTimeout bounds the privileges check at the start.
const privilegesCheckTimeout = 15 * time.Second

// defaultStateDir is where in-flight canaries are kept when neither the
// flag nor the file says: systemd's StateDirectory= when the unit has one.
func defaultStateDir() string {
	return cmp.Or(os.Getenv("STATE_DIRECTORY"), "/var/lib/outbox-canary")
}

func runCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "run", runHelp)
	configPath := configFlag(cmd)
	webFlags := kingpinflag.AddFlags(cmd, ":9465")
	stateDirSet := false
	stateDir := cmd.Flag("state.dir", "The directory for the in-flight canary state that survives restarts. Default: the file's state_dir, else $STATE_DIRECTORY (systemd), else /var/lib/outbox-canary.").
		PlaceHolder("DIR").IsSetByUser(&stateDirSet).Default(defaultStateDir()).String()
	printCanaries := cmd.Flag("print-canaries", "Print a line per canary to stdout when it is final: each segment against its budget (the demo uses it).").Bool()
	instanceID := cmd.Flag("instance.id", "This prober's instance id, instead of the file's instance_id: each replica of a redundant or sharded fleet needs its own (the chart sets it to the pod's name).").
		Envar("OUTBOX_CANARY_INSTANCE_ID").PlaceHolder("ID").String()
	shards := addShardFlags(cmd)
	probeAddr := cmd.Flag("web.probe-address", "Also serve /healthz and /readyz, and nothing else, on this address in plain HTTP without --web.config.file's TLS and auth: for a kubelet's probes, which send no credentials. Default: off.").PlaceHolder(":9466").String()
	pprof := cmd.Flag("web.enable-pprof", "Also serve Go's profiles under /debug/pprof/ (CPU, heap, goroutines), behind the same TLS and auth as /metrics: for measuring what the prober itself costs.").Bool()
	return func(ctx context.Context) error {
		logger := c.logger(false)
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		sh, err := shards.resolve()
		if err != nil {
			return usagef(c, "%v", err)
		}
		if *instanceID != "" {
			if strings.ContainsAny(*instanceID, " \t\n") {
				return usagef(c, "--instance.id %q must not contain whitespace", *instanceID)
			}
			cfg.InstanceID = *instanceID
		}
		if total := keepShard(cfg, sh); sh.Sharded() {
			logger.Info("shard", "shard", sh.Index, "shards", sh.Count, "pipelines", len(cfg.Pipelines), "of", total, "instance_id", cfg.InstanceID)
			if len(cfg.Pipelines) == 0 {
				// Still served: its build_info keeps the dead man quiet and
				// its replicas' count right while the fleet is resized.
				logger.Warn("no pipeline of the file hashes to this shard; serving metrics only", "shard", sh.Index, "shards", sh.Count)
			}
		}
		gogc, fromEnv := applyDefaultGCPercent()
		logger.Debug("Go garbage collector target", "gogc", gogc, "from_env", fromEnv)
		// Every secret and DSN now, all problems at once, rather than one
		// pipeline's at its first connection.
		if err := cfg.CheckSecrets(); err != nil {
			return fmt.Errorf("run: config %s: %w", *configPath, err)
		}
		for _, w := range cfg.Warnings() {
			logger.Warn("configuration: "+w.Message, "file", *configPath, "line", w.Line, "field", w.Path)
		}
		if *webFlags.WebConfigFile != "" {
			// Fail at start, not at the first scrape, on a bad TLS or auth file.
			if err := web.Validate(*webFlags.WebConfigFile); err != nil {
				return fmt.Errorf("run: --web.config.file %s: %w", *webFlags.WebConfigFile, err)
			}
		}
		dir := *stateDir
		if !stateDirSet && cfg.StateDir != "" {
			dir = cfg.StateDir
		}
		return serve(ctx, c, logger, cfg, webFlags, *probeAddr, dir, *printCanaries, *pprof)
	}
}

// serve runs the prober, the watchers and the HTTP server until ctx is done.
func serve(ctx context.Context, c *cli, logger *slog.Logger, cfg *config.Config, webFlags *web.FlagConfig, probeAddr, stateDir string, printCanaries, pprof bool) error {
	// The compact vectors' families are written one at a time at a
	// scrape (compactvec.Registry): a scrape of 300 pipelines no longer
	// holds all its series at once.
	reg := compactvec.NewRegistry()
	for _, col := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("run: register runtime metrics: %w", err)
		}
	}
	// One pool per database and one Kafka transport per cluster, shared by
	// the prober, the watchers and the privileges check.
	conns, err := prober.OpenConnections(ctx, cfg.Pipelines)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer conns.Close()
	for _, pi := range conns.Pools.Info() {
		logger.Info("database pool", "database", pi.Database, "pipelines", pi.Users, "max_conns", pi.MaxConns,
			"application_name", postgres.ApplicationName)
	}
	opts := prober.Options{Config: cfg, Registerer: reg, Now: time.Now, Logger: logger, StateDir: stateDir, Connections: conns}
	if printCanaries {
		var mu sync.Mutex
		opts.OnCanaryDone = func(r prober.Report) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(c.stdout, formatCanaryLine(cfg, r))
		}
	}
	svc, err := prober.New(opts)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer svc.Close()

	// Everything that can fail is built before anything starts, so that an
	// error returns with nothing left running.
	wm, err := watch.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	// Pipelines on one database share its watchers' questions, whatever
	// its family (watch.OpenSet): one sampler per database; their consumer
	// lag is their own.
	watchers, err := watch.OpenSet(cfg.Pipelines, conns.Watched, conns.Clusters, wm, logger)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	// lint's privilege checks are the family's own.
	var onPostgres, onMySQL []config.Pipeline
	for _, p := range cfg.Pipelines {
		if kind, _ := p.Database.Family(); kind == config.KindPostgres {
			onPostgres = append(onPostgres, p)
		} else {
			onMySQL = append(onMySQL, p)
		}
	}
	// The status page judges a stall as the generated alert does, from the
	// same SLO model.
	model := svc.Model()
	listeners, err := listen(webFlags)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	var probeListener net.Listener
	if probeAddr != "" {
		if probeListener, err = net.Listen("tcp", probeAddr); err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return fmt.Errorf("run: --web.probe-address %s: %w", probeAddr, err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	handler := statuspage.NewHandler(svc, model, reg, logger, time.Now)
	if pprof {
		handler = withProfiles(handler)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() {
		err := web.ServeMultiple(listeners, srv, webFlags, quiet(logger))
		if !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server failed; stopping", "err", err)
			cancel()
		}
		serveErr <- err
	}()
	addrs := make([]string, len(listeners))
	for i, l := range listeners {
		addrs[i] = l.Addr().String()
	}
	logger.Info("serving /metrics, /healthz, /readyz, /api/status and the status page",
		"addresses", strings.Join(addrs, ","), "tls_or_auth", *webFlags.WebConfigFile != "", "pipelines", len(cfg.Pipelines), "state_dir", stateDir)
	var probeSrv *http.Server
	probeErr := make(chan error, 1)
	if probeListener != nil {
		probeSrv = &http.Server{Handler: statuspage.NewProbeHandler(svc), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			err := probeSrv.Serve(probeListener)
			if !errors.Is(err, http.ErrServerClosed) {
				logger.Error("HTTP probe server failed; stopping", "err", err)
				cancel()
			}
			probeErr <- err
		}()
		logger.Info("serving /healthz and /readyz without TLS or auth", "address", probeListener.Addr().String())
	}

	var wg sync.WaitGroup
	for i := range onPostgres {
		wg.Add(1)
		go func() { defer wg.Done(); reportPrivileges(ctx, &onPostgres[i], conns.Pools, logger) }()
	}
	for i := range onMySQL {
		wg.Add(1)
		go func() { defer wg.Done(); reportMySQLPrivileges(ctx, &onMySQL[i], conns.MySQL, logger) }()
	}
	wg.Go(func() { watchers.Run(ctx) })
	runErr := svc.Run(ctx)
	wg.Wait()

	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("HTTP server did not shut down in time", "err", err)
	}
	if probeSrv != nil {
		if err := probeSrv.Shutdown(sctx); err != nil {
			logger.Warn("HTTP probe server did not shut down in time", "err", err)
		}
		if err := <-probeErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			runErr = errors.Join(fmt.Errorf("HTTP probe server: %w", err), runErr)
		}
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(fmt.Errorf("run: HTTP server: %w", err), runErr)
	}
	if runErr != nil {
		return fmt.Errorf("run: %w", runErr)
	}
	return nil
}

// reportPrivileges logs, once at the start, what lint's privileges check
// says about the prober's own role: a role that cannot insert canaries
// fails every tick, and one outside pg_monitor blinds the open-transaction
// watcher without an error. A database that is down is reported by the
// prober itself; the check is then skipped.
func reportPrivileges(ctx context.Context, p *config.Pipeline, pools *postgres.Pools, logger *slog.Logger) {
	log := logger.With("pipeline", p.Name)
	ctx, cancel := context.WithTimeout(ctx, privilegesCheckTimeout)
	defer cancel()
	// The watchers' share of the pool: a hundred pipelines' checks at the
	// start queue behind each other, not in front of the first canaries.
	db, err := pools.Limited(p.Database)
	if err == nil {
		var f lint.Finding
		if f, err = lint.ProberPrivileges(ctx, db, p); err == nil {
			logPrivileges(log, f)
			return
		}
	}
	log.Debug("privileges not checked at the start", "err", err)
}

// reportMySQLPrivileges is reportPrivileges on MySQL or MariaDB: lint's
// privilege probes (which change nothing) for the pipeline's user, each
// missing privilege logged with what it blinds.
func reportMySQLPrivileges(ctx context.Context, p *config.Pipeline, pools *mysql.Pools, logger *slog.Logger) {
	log := logger.With("pipeline", p.Name)
	ctx, cancel := context.WithTimeout(ctx, privilegesCheckTimeout)
	defer cancel()
	db, err := pools.DB(p.Database)
	if err == nil {
		var refused mysql.Refusals
		if refused, err = db.ProbePrivileges(ctx, p.Outbox.Table, p.Outbox.Columns.ID, p.Canary.DeleteAfterInsert); err == nil {
			logPrivileges(log, lint.MySQLPrivileges(p, refused))
			return
		}
		err = db.Explain(err)
	}
	log.Debug("privileges not checked at the start", "err", err)
}

func logPrivileges(log *slog.Logger, f lint.Finding) {
	switch {
	case f.Check != lint.CheckPrivileges: // the table is missing: no role is to blame
		log.Error(f.Message, "fix", f.Fix)
	case f.Level == lint.Fail:
		log.Error("the database role cannot do what the prober needs: "+f.Message, "fix", f.Fix)
	case f.Level == lint.Warn:
		log.Warn(f.Message, "fix", f.Fix)
	default:
		log.Debug(f.Message)
	}
}

// listen opens the --web.listen-address listeners, or takes systemd's
// with --web.systemd-socket. Listening here rather than in exporter-toolkit
// lets the one startup line give the real addresses (":0" in tests).
func listen(f *web.FlagConfig) ([]net.Listener, error) {
	if f.WebSystemdSocket != nil && *f.WebSystemdSocket {
		ls, err := systemdListeners()
		if err != nil {
			return nil, fmt.Errorf("--web.systemd-socket: %w", err)
		}
		return ls, nil
	}
	var ls []net.Listener
	for _, addr := range *f.WebListenAddresses {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, open := range ls {
				_ = open.Close()
			}
			return nil, fmt.Errorf("--web.listen-address %s: %w", addr, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// quiet hands exporter-toolkit a logger that keeps its warnings and errors
// but not its per-listener info lines: the service announces itself once.
func quiet(l *slog.Logger) *slog.Logger {
	return slog.New(minLevel{l.Handler(), slog.LevelWarn})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}
func (h minLevel) WithGroup(g string) slog.Handler { return minLevel{h.Handler.WithGroup(g), h.min} }

// formatCanaryLine renders a final canary as one line: its verdict, then
// each segment of its pipeline in order against its budget.
func formatCanaryLine(cfg *config.Config, r prober.Report) string {
	var b strings.Builder
	// The verdict is the SLI events the metrics counted: a segment left
	// unjudged (the prober's own downtime, a stamp it cannot trust) is
	// neither OK nor OVER, however long it measured.
	verdict := "OK      "
	for _, s := range r.Segments {
		switch {
		case s.Outcome == slo.OutcomeBad:
			verdict = "OVER    "
		case s.Reason != "" && verdict != "OVER    ": // a Reason only when unjudged
			verdict = "UNJUDGED"
		}
	}
	if r.State == prober.StateLost {
		verdict = "LOST    "
	}
	fmt.Fprintf(&b, "%s %s %-10s %s", r.Committed.UTC().Format("15:04:05.000Z"), verdict, r.Pipeline, shortID(r.ID))
	p, ok := cfg.Pipeline(r.Pipeline)
	if !ok {
		return b.String()
	}
	segments := append([]string{config.SegmentInsertToCommit}, p.Segments()...)
	for _, name := range segments {
		s, ok := r.Segments[name]
		switch {
		case ok && s.StampOrder:
			// Measured as 0 within the tolerance, or not at all: no
			// latency, so the demo's summary leaves it out.
			fmt.Fprintf(&b, "  %s=order", name)
		case ok && s.Measured:
			// An upper bound is marked, so the demo's summary leaves it out.
			bound := ""
			if s.Bound {
				bound = "<="
			}
			fmt.Fprintf(&b, "  %s=%s%s", name, bound, s.Duration.Round(100*time.Microsecond))
		case ok && s.Skew:
			fmt.Fprintf(&b, "  %s=skew?", name)
		default:
			fmt.Fprintf(&b, "  %s=-", name)
			continue
		}
		if s.Budgeted {
			fmt.Fprintf(&b, "/%s", s.Budget)
		}
		if s.Reason != "" {
			// Marked so the demo's summary leaves it out: not the
			// pipeline's latency.
			fmt.Fprintf(&b, "(%s)", s.Reason)
		}
	}
	return b.String()
}

// shortID is the last 8 characters of a canary id: a UUID v7 begins with
// its millisecond timestamp, the same for a minute of canaries, and ends
// with random bits.
func shortID(id string) string { return id[max(0, len(id)-8):] }

// systemdListeners takes the sockets systemd passed (a .socket unit).
func systemdListeners() ([]net.Listener, error) {
	passed, err := activation.Listeners()
	if err != nil {
		return nil, err
	}
	var ls []net.Listener
	for _, l := range passed {
		if l != nil {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return nil, errors.New("systemd passed no listening socket (start the service from a .socket unit, or drop the flag)")
	}
	return ls, nil
}

// withProfiles serves Go's profiles under /debug/pprof/ beside h.
func withProfiles(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	mux.Handle("/", h)
	return mux
}
