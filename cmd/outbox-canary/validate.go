package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/shard"
	"github.com/outbox-canary/outbox-canary/slo"
)

const validateHelp = `Check a configuration file and print what it would do.

Check a configuration file and print what the prober would do with it: each
pipeline's table and column mapping, relay, the clock each stamp is taken on
(the prober's, the database's, the relay's or the broker's), canary schedule,
Kafka topic, and every segment with its budget and owner. Secrets are shown as <secret>; they
must resolve (their environment variable set, their file readable), or the
check fails. It connects to no server (see 'check' for that). With
--shard.count it also prints which shard measures each pipeline (and, with
--shard.index or --shard.ordinal, which one this prober would be): see
docs/fleet.md.

Exit status: 0 when the file is valid, 1 with an error naming the field
otherwise, 2 on a usage error.

Example:
  OUTBOX_CANARY_SIGNING_KEY=x OUTBOX_CANARY_PG_DSN=postgres://... \
  OUTBOX_CANARY_PG_DSN_PAYMENTS=postgres://... \
    outbox-canary validate --config.file=examples/outbox-canary.yml --shard.count=3`

func validateCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "validate", validateHelp)
	configPath := configFlag(cmd)
	shards := addShardFlags(cmd)
	return func(context.Context) error {
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("validate: %w", err)
		}
		sh, err := shards.resolve()
		switch {
		case errors.Is(err, shard.ErrUnplaced):
			// --shard.count alone: the whole assignment, no prober of it.
			sh = shard.Shard{Index: -1, Count: *shards.count}
		case err != nil:
			return usagef(c, "%v", err)
		}
		if err := cfg.CheckSecrets(); err != nil {
			return fmt.Errorf("validate: config %s: %w", *configPath, err)
		}
		model, err := slo.FromConfig(cfg)
		if err != nil {
			return fmt.Errorf("validate: config %s: %w", *configPath, err)
		}
		fmt.Fprintf(c.stdout, "config %s is valid\n", *configPath)
		describeConfig(c.stdout, cfg, model)
		describeShards(c.stdout, cfg, sh)
		if warnings := cfg.Warnings(); len(warnings) > 0 {
			fmt.Fprintln(c.stdout, "\nwarnings (accepted, but probably not what you meant):")
			for _, w := range warnings {
				fmt.Fprintf(c.stdout, "  - %s\n", w)
			}
		}
		if warnings := slo.Warnings(model); len(warnings) > 0 {
			fmt.Fprintln(c.stdout, "\nwarnings (the file works, but the alerts cannot judge it well):")
			for _, w := range warnings {
				fmt.Fprintf(c.stdout, "  - %s\n", w)
			}
		}
		return nil
	}
}

// secretSource says where a secret comes from, never its value.
func secretSource(s config.Secret) string {
	switch {
	case s.IsZero():
		return "(none)"
	case s.Env != "":
		return fmt.Sprintf("%s (from env %s)", s, s.Env)
	case s.File != "":
		return fmt.Sprintf("%s (from file %s)", s, s.File)
	}
	return fmt.Sprintf("%s (inline)", s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func describeConfig(w io.Writer, cfg *config.Config, model *slo.Model) {
	stateDir := cfg.StateDir
	if stateDir == "" {
		stateDir = defaultStateDir() + " (run's --state.dir default; not set in the file)"
	}
	fmt.Fprintf(w, "instance_id: %s\nstate_dir: %s\nsigning_key: %s\n", cfg.InstanceID, stateDir, secretSource(cfg.SigningKey))
	for i := range cfg.Pipelines {
		p := &cfg.Pipelines[i]
		mp := model.Pipelines[i]
		c := p.Outbox.Columns
		fmt.Fprintf(w, "\npipeline %q\n", p.Name)
		fmt.Fprintf(w, "  database:  dsn %s, clock offset re-estimated every %s\n", secretSource(p.Database.DSN), p.Database.ClockOffsetInterval)
		fmt.Fprintf(w, "  outbox:    table %s; columns id=%s (%s), route=%s, key=%s, payload=%s, event_type=%s, published_at=%s\n",
			p.Outbox.Table, c.ID, p.Outbox.IDGeneration, c.Route, c.Key, c.Payload, orDash(c.EventType), orDash(c.PublishedAt))
		var stamps []string
		for _, s := range p.Relay.Stamps {
			stamps = append(stamps, fmt.Sprintf("%s (header %s)", s.Name, s.Header))
		}
		publish := p.Relay.PublishedStamp
		if publish == config.PublishedFromHeader {
			publish += " " + p.Relay.PublishedHeader
		}
		fmt.Fprintf(w, "  relay:     %s; publish stamp from %s; extra stamps: %s\n", p.Relay.Kind, publish, orDash(strings.Join(stamps, ", ")))
		for i, c := range stampClocks(p, nil) {
			label := ""
			if i == 0 {
				label = "clocks:"
			}
			fmt.Fprintf(w, "  %-10s %s\n", label, c)
		}
		if unmeasured(p) {
			fmt.Fprintf(w, "             relay and broker clocks are not measured: a segment negative by more than relay.skew_tolerance (%s) is suspected skew,\n"+
				"             a stamp more than relay.max_clock_skew (%s) outside [commit, consume] is invalid; neither is judged\n",
				p.Relay.SkewTolerance, p.Relay.MaxClockSkew)
		}
		fmt.Fprintf(w, "  canary:    route value %q, key %q, schedule %q (at most %s apart), lost after %s, delete after insert %t\n",
			p.Canary.AggregateType, p.Canary.Key, p.Canary.Schedule, mp.CanaryInterval, p.Canary.LostAfter, p.Canary.DeleteAfterInsert)
		sasl := "none"
		if p.Kafka.SASL.Mechanism != "" {
			sasl = fmt.Sprintf("%s user %s password %s", p.Kafka.SASL.Mechanism, p.Kafka.SASL.Username, secretSource(p.Kafka.SASL.Password))
		}
		fmt.Fprintf(w, "  kafka:     topic %s on %s; tls %t; sasl %s\n", p.Kafka.Topic, strings.Join(p.Kafka.Brokers, ","), p.Kafka.TLS.Enabled, sasl)
		fmt.Fprintf(w, "  slo:       %v%% of canaries within budget over %s\n", p.SLO.Objective, p.SLO.Window)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SEGMENT\tBUDGET\tOWNER")
		for _, seg := range mp.Segments {
			budget := "-"
			if b, ok := p.Budget(seg); ok {
				budget = time.Duration(b).String()
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", seg, budget, orDash(p.Owner(seg)))
		}
		_ = tw.Flush()
	}
}
