// Command outbox-canary measures how late the events of a transactional
// outbox are, stage by stage, and generates the SLO rules and dashboards
// that judge it. Each subcommand lives in a file of its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// command is one subcommand: its one-line summary and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"run":        {"run the prober service: send canaries, measure them, serve /metrics", runCommand},
		"validate":   {"check a configuration file and print what it would do", validateCommand},
		"check":      {"send one canary per pipeline and print where its time went", checkCommand},
		"diagnose":   {"walk the runbook and name the first unhealthy stage of each pipeline", diagnoseCommand},
		"lint":       {"check the outbox table's schema and hygiene: indexes, ids, clocks, cleanup", lintCommand},
		"rules":      {"generate Prometheus recording and alerting rules", rulesCommand},
		"dashboards": {"generate Grafana dashboards and provisioning files", dashboardsCommand},
		"version":    {"print the version", versionCommand},
	}
}

// errUsage marks an error already explained by the usage text.
var errUsage = errors.New("usage")

// exitError carries a specific exit code (for example check's "over budget").
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Run is the testable entry point: it dispatches args[0] to a subcommand.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout, cmds)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		printUsage(stderr, cmds)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func printUsage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "outbox-canary: per-stage lag of a transactional outbox, judged against budgets.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: outbox-canary <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'outbox-canary <command> --help' for the flags of a command.")
}

// newFlagSet returns a flag set whose --help prints the command's
// description, usage line and flags.
func newFlagSet(name, usage, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: outbox-canary %s %s\n\n%s\n\nFlags:\n", name, usage, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; --help is not an error.
func parseFlags(fs *flag.FlagSet, args []string) (helped bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, errUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return false, nil
}

// loadConfig loads the --config file that every command but version
// requires. Without one it prints the usage and returns a usage error.
func loadConfig(fs *flag.FlagSet, path string) (*config.Config, error) {
	if path == "" {
		fs.Usage()
		return nil, usageError(fs, "%s: --config is required", fs.Name())
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fs.Name(), err)
	}
	return cfg, nil
}

// usageError explains a bad flag value on the flag set's output, since
// main prints nothing for usage errors, and returns it as one (exit 2).
func usageError(fs *flag.FlagSet, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(fs.Output(), msg)
	return fmt.Errorf("%s: %w", msg, errUsage)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if errors.Is(err, errUsage) {
		code = 2
	} else {
		fmt.Fprintf(os.Stderr, "outbox-canary: %v\n", err)
	}
	os.Exit(code)
}
