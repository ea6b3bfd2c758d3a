// Command outbox-canary measures how late the events of a transactional
// outbox are, stage by stage, and generates the SLO rules and dashboards
// that judge it. Each command lives in a file of its own; this one wires
// the kingpin application, the shared flags and the exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/version"
)

const appHelp = `Per-stage lag of a transactional outbox, judged against budgets.

outbox-canary writes signed canary rows into each pipeline's outbox table on a
schedule, reads them back from the canary topic, and reports every segment of
their delay (commit -> publish -> consume, and any stamp the relay adds)
against its own budget as Prometheus metrics. From the same configuration it
generates the alerting rules and Grafana dashboards that judge those metrics.

Run 'outbox-canary <command> --help' for a command's flags and an example.`

// usageTemplate is kingpin's default, except that the list of commands
// shows each command's one-line summary and a command's own help shows its
// long text (HelpLong) with the flags.
const usageTemplate = `{{define "FormatCommand" -}}
{{if .FlagSummary}} {{.FlagSummary}}{{end -}}
{{range .Args}}{{if not .Hidden}} {{if not .Required}}[{{end}}{{if .PlaceHolder}}{{.PlaceHolder}}{{else}}<{{.Name}}>{{end}}{{if .Value|IsCumulative}}...{{end}}{{if not .Required}}]{{end}}{{end}}{{end -}}
{{end -}}

{{define "FormatCommands" -}}
{{range .FlattenedCommands -}}
{{if not .Hidden -}}
  {{.FullCommand}}{{if .Default}}*{{end}}{{template "FormatCommand" .}}
{{.Help|Wrap 4}}
{{end -}}
{{end -}}
{{end -}}

{{define "FormatUsage" -}}
{{template "FormatCommand" .}}{{if .Commands}} <command> [<args> ...]{{end}}
{{if .Help}}
{{.Help|Wrap 0 -}}
{{end -}}

{{end -}}

{{define "FormatCommandUsage" -}}
{{template "FormatCommand" .}}{{if .Commands}} <command> [<args> ...]{{end}}
{{if .HelpLong}}
{{.HelpLong|Wrap 0 -}}
{{else if .Help}}
{{.Help|Wrap 0 -}}
{{end -}}

{{end -}}

{{if .Context.SelectedCommand -}}
usage: {{.App.Name}} {{.Context.SelectedCommand}}{{template "FormatCommandUsage" .Context.SelectedCommand}}
{{ else -}}
usage: {{.App.Name}}{{template "FormatUsage" .App}}
{{end}}
{{if .Context.Flags -}}
Flags:
{{.Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}
{{end -}}
{{if .Context.Args -}}
Args:
{{.Context.Args|ArgsToTwoColumns|FormatTwoColumns}}
{{end -}}
{{if .Context.SelectedCommand -}}
{{if len .Context.SelectedCommand.Commands -}}
Subcommands:
{{template "FormatCommands" .Context.SelectedCommand}}
{{end -}}
{{else if .App.Commands -}}
Commands:
{{template "FormatCommands" .App}}
{{end -}}
`

// command registers a command with its one-line summary and its long help,
// whose first line is the summary.
func command(app *kingpin.Application, name, help string) *kingpin.CmdClause {
	summary, _, _ := strings.Cut(help, "\n")
	return app.Command(name, summary).HelpLong(help)
}

// errUsage marks an error already explained on stderr: main exits 2 and
// prints nothing more.
var errUsage = errors.New("usage")

// exitError carries a specific exit code (for example check's "over budget").
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// cli is what every command shares: the output streams and the global
// flags, read once the command line has been parsed.
type cli struct {
	stdout, stderr io.Writer
	logLevel       *promslog.Level
	logFormat      *promslog.Format
	logLevelSet    bool // --log.level given: one-shot commands then log at it, not at warn
}

// logger returns the logger of the --log.* flags, writing to stderr. The
// one-shot commands (check) pass oneShot so that, unless --log.level was
// given, the prober's progress lines do not drown their report.
func (c *cli) logger(oneShot bool) *slog.Logger {
	level := c.logLevel
	if oneShot && !c.logLevelSet {
		level = promslog.NewLevel()
		_ = level.Set("warn")
	}
	return promslog.New(&promslog.Config{Level: level, Format: c.logFormat, Writer: c.stderr})
}

// action is a command's entry point, run after the command line parsed.
type action func(ctx context.Context) error

// newApp builds the application and its commands; the returned map runs
// the command kingpin selected.
func newApp(c *cli) (*kingpin.Application, map[string]action) {
	app := kingpin.New("outbox-canary", appHelp).UsageWriter(c.stdout).ErrorWriter(c.stderr).UsageTemplate(usageTemplate)
	app.HelpFlag.Short('h')
	app.Version(fmt.Sprintf("outbox-canary %s (revision %s, %s)", version.Version, version.Revision, version.GoVersion()))
	c.logLevel, c.logFormat = promslog.NewLevel(), promslog.NewFormat()
	app.Flag(promslogflag.LevelFlagName, promslogflag.LevelFlagHelp).Default("info").
		HintOptions(promslog.LevelFlagOptions...).IsSetByUser(&c.logLevelSet).SetValue(c.logLevel)
	app.Flag(promslogflag.FormatFlagName, promslogflag.FormatFlagHelp).Default("logfmt").
		HintOptions(promslog.FormatFlagOptions...).SetValue(c.logFormat)
	actions := map[string]action{
		"run":        runCommand(app, c),
		"check":      checkCommand(app, c),
		"diagnose":   diagnoseCommand(app, c),
		"lint":       lintCommand(app, c),
		"validate":   validateCommand(app, c),
		"rules":      rulesCommand(app, c),
		"dashboards": dashboardsCommand(app, c),
		"version":    versionCommand(app, c),
	}
	return app, actions
}

// Run is the testable entry point: it parses args and runs the command.
// Help goes to stdout; usage errors are explained on stderr and returned
// wrapping errUsage.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	c := &cli{stdout: stdout, stderr: stderr}
	app, actions := newApp(c)
	if len(args) == 0 {
		app.Usage(nil)
		return fmt.Errorf("no command given: %w", errUsage)
	}
	// kingpin terminates the process after printing help or the version;
	// we return instead, so that tests and deferred cleanups run.
	app.Terminate(func(code int) { panic(terminated{code}) })
	defer func() {
		if r := recover(); r != nil {
			t, ok := r.(terminated)
			if !ok {
				panic(r)
			}
			if t.code != 0 {
				err = fmt.Errorf("exit %d: %w", t.code, errUsage)
			}
		}
	}()
	selected, err := app.Parse(args)
	if err != nil {
		return usagef(c, "%v", err)
	}
	return actions[selected](ctx)
}

// terminated is how kingpin's Terminate unwinds Run.
type terminated struct{ code int }

// usagef explains a usage error on stderr, as kingpin does its own, and
// returns it as one (exit 2).
func usagef(c *cli, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(c.stderr, "outbox-canary: error: %s, try --help\n", msg)
	return fmt.Errorf("%s: %w", msg, errUsage)
}

// configFlag adds the --config.file flag every command but version takes.
func configFlag(cmd *kingpin.CmdClause) *string {
	return cmd.Flag("config.file", "The outbox-canary configuration file.").PlaceHolder("FILE").Required().String()
}

// loadConfig loads the configuration file named by --config.file.
func loadConfig(path string) (*config.Config, error) {
	return config.LoadFile(path)
}

// selectPipelines returns every pipeline, or only the named one; a name not
// in the file is a usage error.
func selectPipelines(c *cli, cfg *config.Config, name, path string) ([]*config.Pipeline, error) {
	if name != "" {
		p, ok := cfg.Pipeline(name)
		if !ok {
			names := make([]string, len(cfg.Pipelines))
			for i := range cfg.Pipelines {
				names[i] = cfg.Pipelines[i].Name
			}
			return nil, usagef(c, "--pipeline %q: not in %s (its pipelines: %s)", name, path, strings.Join(names, ", "))
		}
		return []*config.Pipeline{p}, nil
	}
	out := make([]*config.Pipeline, len(cfg.Pipelines))
	for i := range cfg.Pipelines {
		out[i] = &cfg.Pipelines[i]
	}
	return out, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	if !errors.Is(err, errUsage) {
		fmt.Fprintf(os.Stderr, "outbox-canary: %v\n", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is the process's exit status for Run's error: 0 for none, 2 for
// a usage error (already explained on stderr), an exitError's own code,
// else 1.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ee):
		return ee.code
	}
	return 1
}
