package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/relay"
)

func TestParseFlags(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	withDSN := env(map[string]string{dsnEnv: "postgres://app@db/orders"})
	tests := []struct {
		name    string
		args    []string
		getenv  func(string) string
		check   func(t *testing.T, o options)
		wantErr string
	}{
		{
			name:   "The defaults read seed schema A and take the DSN from the environment.",
			getenv: withDSN,
			check: func(t *testing.T, o options) {
				if o.dsn != "postgres://app@db/orders" || o.cfg.Columns != relay.SchemaAColumns() ||
					o.cfg.PollInterval != 100*time.Millisecond || o.cfg.BatchSize != 500 || o.listenAddress != "127.0.0.1:9466" ||
					o.cfg.TopicTemplate != "outbox.event.{{.Route}}" {
					t.Errorf("options = %+v", o)
				}
			},
		},
		{
			name:   "The --dsn flag wins over the environment.",
			args:   []string{"--dsn=postgres://other@db/x"},
			getenv: withDSN,
			check: func(t *testing.T, o options) {
				if o.dsn != "postgres://other@db/x" {
					t.Errorf("dsn = %q", o.dsn)
				}
			},
		},
		{
			name:   "The schema B preset routes by event_type, and single flags override it.",
			args:   []string{"--schema=b", "--table=sales.outbox", "--column.key=order_id", "--topic-template=sales.events", "--delete-published"},
			getenv: withDSN,
			check: func(t *testing.T, o options) {
				want := relay.SchemaBColumns()
				want.Table, want.Key = "sales.outbox", "order_id"
				if o.cfg.Columns != want || o.cfg.TopicTemplate != "sales.events" || !o.cfg.DeletePublished {
					t.Errorf("config = %+v, want columns %+v", o.cfg, want)
				}
			},
		},
		{
			name:   "Spaces around the brokers of the list are not part of their addresses.",
			args:   []string{"--brokers=a:9092, b:9092 "},
			getenv: withDSN,
			check: func(t *testing.T, o options) {
				if want := []string{"a:9092", "b:9092"}; !slices.Equal(o.brokers, want) {
					t.Errorf("brokers = %q, want %q", o.brokers, want)
				}
			},
		},
		{
			name:   "A mark delay marks published_at that long after the batch's ack.",
			args:   []string{"--mark-delay=750ms"},
			getenv: withDSN,
			check: func(t *testing.T, o options) {
				if o.cfg.MarkDelay != 750*time.Millisecond {
					t.Errorf("mark delay = %s, want 750ms", o.cfg.MarkDelay)
				}
			},
		},
		{name: "A negative mark delay is an error.", args: []string{"--mark-delay=-1s"}, getenv: withDSN, wantErr: "--mark-delay -1s: must not be negative"},
		{name: "No database is an error that names both sources.", getenv: env(nil), wantErr: "--dsn: no database given (set --dsn or $OUTBOX_RELAY_DSN)"},
		{name: "An unknown schema preset is an error.", args: []string{"--schema=c"}, getenv: withDSN, wantErr: `--schema "c": want a or b`},
		{name: "A zero poll interval is an error, not a busy loop.", args: []string{"--poll-interval=0s"}, getenv: withDSN, wantErr: "--poll-interval 0s: must be positive"},
		{name: "A zero batch size is an error.", args: []string{"--batch-size=0"}, getenv: withDSN, wantErr: "--batch-size 0: must be positive"},
		{name: "An empty broker in the list is an error.", args: []string{"--brokers=a:9092,,b:9092"}, getenv: withDSN, wantErr: `--brokers "a:9092,,b:9092": empty broker address`},
		{name: "Positional arguments are an error.", args: []string{"extra"}, getenv: withDSN, wantErr: `unexpected arguments ["extra"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseFlags(tt.args, tt.getenv, &stderr)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestHelpExplainsFlagsAndExamples(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"-dsn", "OUTBOX_RELAY_DSN", "-column.route", "-admin.listen-address", "POST /admin/drop?n=2", "-mark-delay", "POST /admin/mark-delay", "Examples:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
}

func TestVersionNeedsNoDatabase(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "outbox-relay ") {
		t.Errorf("--version printed %q", stdout.String())
	}
}
