package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/prober"
)

const runDescription = `
Run the prober service: on each pipeline's schedule insert a signed canary row
into its outbox table, read it back from the canary topic, and export each
segment of its delay against its budget as Prometheus metrics.

Serves /metrics, /healthz (liveness), /readyz (every pipeline's database and
Kafka reachable), /api/status (JSON) and / (a status page). Unreachable servers
are retried with backoff and reported by /readyz, never fatal. On SIGTERM or
SIGINT it stops sending, lets in-flight inserts finish (5s at most), flushes
the in-flight state to state_dir, and stops the HTTP server (5s at most).

Example:
  OUTBOX_CANARY_SIGNING_KEY=... OUTBOX_CANARY_PG_DSN=postgres://... \
    outbox-canary run --config examples/outbox-canary.yml --web.listen-address :9465
`

// httpShutdownTimeout bounds how long open HTTP requests may delay exit.
const httpShutdownTimeout = 5 * time.Second

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "--config FILE [--web.listen-address :9465]", runDescription, stderr)
	configPath := fs.String("config", "", "configuration file (required)")
	listen := fs.String("web.listen-address", ":9465", "address to serve /metrics, /healthz, /readyz and the status page on")
	webConfig := fs.String("web.config.file", "", "exporter-toolkit web configuration file for TLS and basic auth (https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md); empty serves plain HTTP")
	logLevel := fs.String("log.level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log.format", "logfmt", "log format: logfmt or json")
	printCanaries := fs.Bool("print-canaries", false, "print a line per canary to stdout when it is final: each segment against its budget (the demo uses it)")
	if helped, err := parseFlags(fs, args); helped || err != nil {
		return err
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	cfg, err := loadConfig(fs, *configPath)
	if err != nil {
		return err
	}
	if *webConfig != "" {
		// Fail at start, not at the first scrape, on a bad TLS or auth file.
		if err := web.Validate(*webConfig); err != nil {
			return fmt.Errorf("run: --web.config.file %s: %w", *webConfig, err)
		}
	}

	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("run: register runtime metrics: %w", err)
		}
	}
	opts := prober.Options{Config: cfg, Registerer: reg, Now: time.Now, Logger: logger}
	if *printCanaries {
		var mu sync.Mutex
		opts.OnCanaryDone = func(r prober.Report) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(stdout, formatCanaryLine(cfg, r))
		}
	}
	svc, err := prober.New(opts)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("run: --web.listen-address: %w", err)
	}
	srv := &http.Server{Handler: prober.NewHandler(svc, reg), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 1)
	noSystemdSocket := false
	webFlags := &web.FlagConfig{WebListenAddresses: &[]string{*listen}, WebSystemdSocket: &noSystemdSocket, WebConfigFile: webConfig}
	go func() {
		err := web.Serve(ln, srv, webFlags, logger)
		if !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server failed; stopping", "err", err)
			cancel()
		}
		serveErr <- err
	}()
	logger.Info("listening", "address", ln.Addr().String())
	fmt.Fprintf(stdout, "outbox-canary: serving on %s\n", ln.Addr())

	runErr := svc.Run(ctx)

	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("HTTP server did not shut down in time", "err", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(fmt.Errorf("run: HTTP server: %w", err), runErr)
	}
	if runErr != nil {
		return fmt.Errorf("run: %w", runErr)
	}
	return nil
}

// newLogger returns a slog logger writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "logfmt", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log.format: %q must be logfmt or json", format)
}

// formatCanaryLine renders a final canary as one line: its verdict, then
// each segment of its pipeline in order against its budget.
func formatCanaryLine(cfg *config.Config, r prober.Report) string {
	var b strings.Builder
	verdict := "OK  "
	for _, s := range r.Segments {
		if s.Outcome == "bad" {
			verdict = "OVER"
		}
	}
	if r.State == prober.StateLost {
		verdict = "LOST"
	}
	fmt.Fprintf(&b, "%s %s %-10s %.8s", r.Committed.Format("15:04:05.000"), verdict, r.Pipeline, r.ID)
	p, ok := cfg.Pipeline(r.Pipeline)
	if !ok {
		return b.String()
	}
	segments := append([]string{config.SegmentInsertToCommit}, p.Segments()...)
	for _, name := range segments {
		s, ok := r.Segments[name]
		if !ok || !s.Measured {
			fmt.Fprintf(&b, "  %s=-", name)
			continue
		}
		fmt.Fprintf(&b, "  %s=%s", name, s.Duration.Round(100*time.Microsecond))
		if s.Budgeted {
			fmt.Fprintf(&b, "/%s", s.Budget)
		}
		if s.Skew {
			b.WriteString("(skew?)")
		}
	}
	return b.String()
}
