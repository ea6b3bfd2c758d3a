package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/prober"
	"github.com/outbox-canary/outbox-canary/slo"
)

const checkHelp = `Send one canary through each pipeline now and print where its time went.

Send one canary through each pipeline (or only --pipeline), wait for it on
the canary topic, and print every segment against its budget, the clock each
stamp was taken on (a Kafka record timestamp is the broker's on a
LogAppendTime topic, the relay's on CreateTime; a published_at column the
database's, with the clock offset it was converted with), then a verdict.
A canary that did not arrive is printed as it stands, with the segment it
is waiting in.

It does not disturb a running 'outbox-canary run' on the same topic: its
canaries carry the instance id "<instance_id>-check-<random>", which the
service counts as foreign and skips, and it keeps no state on disk.

Exit status: 0 when every canary arrived within every budget; 1 when one was
over a budget, or did not arrive before --timeout; 2 on a usage error.

Example:
  outbox-canary check --config.file=/etc/outbox-canary.yml --pipeline=orders --timeout=30s`

func checkCommand(app *kingpin.Application, c *cli) action {
	cmd := command(app, "check", checkHelp)
	configPath := configFlag(cmd)
	pipeline := cmd.Flag("pipeline", "Check only this pipeline (default: all).").PlaceHolder("NAME").String()
	timeout := cmd.Flag("timeout", "How long to wait for the servers and for the canaries.").Default("30s").Duration()
	return func(ctx context.Context) error {
		if *timeout <= 0 {
			return usagef(c, "--timeout %s: must be positive", *timeout)
		}
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		if _, err := selectPipelines(c, cfg, *pipeline, *configPath); err != nil {
			return err
		}
		return check(ctx, c, cfg, *pipeline, *timeout)
	}
}

func check(ctx context.Context, c *cli, cfg *config.Config, pipeline string, timeout time.Duration) error {
	stdout := c.stdout
	var only []string // all
	if pipeline != "" {
		only = []string{pipeline}
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return fmt.Errorf("check: instance id: %w", err)
	}
	svc, err := prober.New(prober.Options{
		Config: cfg, Registerer: prometheus.NewRegistry(), Now: time.Now, Logger: c.logger(true),
		InstanceID: cfg.InstanceID + "-check-" + hex.EncodeToString(suffix[:]),
		Pipelines:  only, NoSchedule: true, StateDir: "-",
	})
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer svc.Close()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	if err := waitDependencies(ctx, svc); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("check: %w", err)}
	}

	pipes := svc.Pipelines()
	results := make([]checkResult, len(pipes))
	var wg sync.WaitGroup
	for i, p := range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = checkPipeline(ctx, svc, p)
		}()
	}
	wg.Wait()

	failed := 0
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if !printCheck(stdout, pipes[i], r) {
			failed++
		}
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("check: %d of %d pipelines failed", failed, len(pipes))}
	}
	return nil
}

// waitDependencies waits until every pipeline's database and Kafka
// answer, so that a dead server is reported as such rather than as a lost
// canary.
func waitDependencies(ctx context.Context, svc *prober.Service) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		up, reasons := svc.Dependencies()
		if up {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not reachable before --timeout: %s", strings.Join(reasons, "; "))
		case <-t.C:
		}
	}
}

type checkResult struct {
	report prober.Report
	// recordType is the timestamp type of the canary's record, nil when
	// not known.
	recordType *kafkaclient.TimestampType
	// clock is the database clock offset the publish stamp was converted
	// with, nil when not measured.
	clock *prober.ClockOffset
	// err is why the canary has no final report; report, if it has an
	// ID, is then the canary in flight as it stood at now.
	err error
	now time.Time
}

func checkPipeline(ctx context.Context, svc *prober.Service, p *config.Pipeline) checkResult {
	c, err := svc.Send(ctx, p.Name)
	if err != nil {
		return checkResult{err: err}
	}
	tr, err := svc.Tracker(p.Name)
	if err != nil {
		return checkResult{err: err}
	}
	var res checkResult
	if rep, err := tr.Await(ctx, c.ID); err == nil {
		res.report = rep
	} else {
		// Where it is waiting, as the status page has it: the segment
		// that did not hand it on, not only that it did not arrive.
		res.err, res.now = fmt.Errorf("canary %s did not arrive before --timeout: %w", c.ID, err), time.Now()
		for _, r := range tr.InFlightReports() {
			if r.ID == c.ID {
				res.report = r
			}
		}
	}
	if typ, ok, err := svc.RecordTimestampType(p.Name); err == nil && ok {
		res.recordType = &typ
	}
	for _, v := range svc.Views() {
		if v.Pipeline.Name == p.Name {
			res.clock = v.ClockOffset
		}
	}
	return res
}

// printCheck prints one pipeline's canary and reports whether it passed.
func printCheck(w io.Writer, p *config.Pipeline, r checkResult) bool {
	fmt.Fprintf(w, "pipeline %q (table %s -> %s relay -> topic %s)\n", p.Name, p.Outbox.Table, p.Relay.Kind, p.Kafka.Topic)
	if r.err != nil && r.report.ID == "" {
		fmt.Fprintf(w, "  FAIL: %v\n", r.err)
		return false
	}
	rep := r.report
	fmt.Fprintf(w, "  canary %s committed %s, %s\n", rep.ID, rep.Committed.Format(time.RFC3339Nano), rep.State)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEGMENT\tTOOK\tBUDGET\tVERDICT")
	ok := rep.State == prober.StateArrived
	unjudged, stampOrder := 0, false
	for _, name := range append([]string{config.SegmentInsertToCommit}, p.Segments()...) {
		s, found := rep.Segments[name]
		if !found {
			continue
		}
		took, budget, verdict := s.Took(time.Microsecond), "-", "not budgeted"
		stampOrder = stampOrder || s.StampOrder
		if s.Budgeted {
			budget = s.Budget.String()
			// The verdict is the SLI event the metrics count, no other.
			switch s.Outcome {
			case slo.OutcomeGood:
				verdict = "ok"
			case slo.OutcomeBad:
				verdict = "OVER BUDGET"
				ok = false
			case "":
				verdict = "unmeasured"
			default:
				verdict = "not judged (" + s.Reason + ")"
				unjudged++
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.Segment, took, budget, verdict)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "  stamps: %s\n", strings.Join(stampClocks(p, r.recordType), "; "))
	if p.Relay.PublishedStamp == config.PublishedFromColumn {
		fmt.Fprintf(w, "  database clock: %s\n", databaseClock(p, r.clock))
	}
	if r.recordType != nil {
		if note := clockNote(p, *r.recordType); note != "" {
			fmt.Fprintln(w, "  "+strings.ReplaceAll(note, "\n", "\n  "))
		}
	}
	if stampOrder {
		fmt.Fprintf(w, "  NOTE: %s was written after the canary was consumed (stamp order, not clock skew): the relay marks rows\n"+
			"        after sending them, so it only bounds the publish from above and publish_to_consume is not measured.\n"+
			"        A better publish stamp: the relay's send time in a header (relay.published_stamp: header) or the\n"+
			"        record timestamp (relay.published_stamp: record_timestamp).\n", p.Outbox.Columns.PublishedAt)
	}
	switch {
	case r.err != nil:
		fmt.Fprintf(w, "  FAIL: %v\n        %s\n", r.err, stuckIn(p, rep, r.now))
		return false
	case rep.State == prober.StateLost:
		fmt.Fprintln(w, "  FAIL: canary lost")
	case !ok:
		fmt.Fprintln(w, "  FAIL: over budget")
	case unjudged > 0:
		fmt.Fprintf(w, "  PASS: no segment over budget (%d not judged)\n", unjudged)
	default:
		fmt.Fprintln(w, "  PASS: within every budget")
	}
	return ok
}

// stuckIn says where a canary in flight is waiting, as the status page
// does: the segment, against its deadline, and who owns it.
func stuckIn(p *config.Pipeline, rep prober.Report, now time.Time) string {
	if rep.Where == "" {
		return "it is waiting, segment unknown (the brokers were out of reach: the record may be in the relay's producer)"
	}
	owner := ""
	if o := p.Owner(rep.Where); o != "" {
		owner = " (owner " + o + ")"
	}
	if rep.Deadline.IsZero() {
		return fmt.Sprintf("it is waiting in %s, which has no budget%s", rep.Where, owner)
	}
	if past := now.Sub(rep.Deadline); past > 0 {
		return fmt.Sprintf("it is waiting in %s, past that segment's deadline by %s%s", rep.Where, past.Round(time.Millisecond), owner)
	}
	return fmt.Sprintf("it is waiting in %s, %s before that segment's deadline%s", rep.Where, rep.Deadline.Sub(now).Round(time.Millisecond), owner)
}
