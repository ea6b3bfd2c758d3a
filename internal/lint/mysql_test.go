package lint

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
)

func TestTheBinlogIsJudgedForLogCaptureOnly(t *testing.T) {
	cdc := &config.Pipeline{Relay: config.Relay{Kind: config.RelayCDC}}
	polling := &config.Pipeline{Relay: config.Relay{Kind: config.RelayPolling}}
	row := outboxdb.CaptureLog{Enabled: true, Format: "ROW/FULL", RetainedFiles: 2, RetainedBytes: 4096, Expiry: 7 * 24 * time.Hour}
	cases := []struct {
		name string
		p    *config.Pipeline
		log  outboxdb.CaptureLog
		want []string // level and the start of each message
	}{
		{"A row-based binlog with full images, kept a week, is OK.", cdc, row,
			[]string{"OK log_bin ON, binlog_format=ROW, binlog_row_image=FULL, 2 files (4096 bytes) kept, purged after 168h0m0s"}},
		{"A statement-based binlog is a FAIL that names the setting.", cdc, outboxdb.CaptureLog{Enabled: true, Format: "STATEMENT/FULL"},
			[]string{"FAIL binlog_format=STATEMENT: the binlog holds statements, not rows; log capture needs binlog_format=ROW"}},
		{"A mixed binlog with minimal images fails twice.", cdc, outboxdb.CaptureLog{Enabled: true, Format: "MIXED/MINIMAL"},
			[]string{"FAIL binlog_format=MIXED", "FAIL binlog_row_image=MINIMAL"}},
		{"A server without a binlog fails.", cdc, outboxdb.CaptureLog{Format: "ROW/FULL"},
			[]string{"FAIL log_bin is OFF"}},
		{"Binlog files purged within hours are a warning.", cdc, outboxdb.CaptureLog{Enabled: true, Format: "ROW/FULL", Expiry: time.Hour},
			[]string{"WARN binlog_expire_logs_seconds=3600"}},
		{"A polling relay does not read the binlog: no finding.", polling, outboxdb.CaptureLog{Format: "STATEMENT/MINIMAL"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Binlog(tc.p, tc.log)
			if len(got) != len(tc.want) {
				t.Fatalf("findings %+v, want %d", got, len(tc.want))
			}
			for i, f := range got {
				line := f.Level + " " + f.Message
				if f.Check != CheckBinlog || !strings.HasPrefix(line, tc.want[i]) {
					t.Errorf("finding %q (%s), want it to start with %q", line, f.Check, tc.want[i])
				}
				if f.Level != OK && f.Fix == "" {
					t.Errorf("finding %q has no fix", line)
				}
			}
		})
	}
}
