package watch

// The connector's committed binlog position against the server's: a unit
// test of the comparison, and Debezium's MariaDB connector on the local
// stack (skips without it, fails in CI).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestConnectorBinlogLagCountsBytesAndFilesBehindAndThePurgeRisk(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	server := outboxdb.CaptureLog{Expiry: time.Hour, Written: 300 + 50 + 20, Files: []outboxdb.LogFile{
		{Name: "bin.000007", Size: 300}, {Name: "bin.000008", Size: 50}, {Name: "bin.000009", Size: 20}}}
	cases := []struct {
		name string
		pos  connect.BinlogPosition
		want connect.BinlogLag
	}{
		{"A connector on the current file is behind by bytes only, and its file is not at risk.",
			connect.BinlogPosition{File: "bin.000009", Pos: 15, EventsAt: now.Add(-2 * time.Hour)},
			connect.BinlogLag{Position: 365, BehindBytes: 5}},
		{"A connector two files back is behind by the rest of its file and the files after, with expiry's headroom from its last event.",
			connect.BinlogPosition{File: "bin.000007", Pos: 100, EventsAt: now.Add(-20 * time.Minute)},
			connect.BinlogLag{Position: 100, BehindBytes: 270, BehindFiles: 2, Headroom: 40 * time.Minute, HasHeadroom: true}},
		{"A connector whose file the server no longer keeps cannot resume: purged, no byte count.",
			connect.BinlogPosition{File: "bin.000005", Pos: 4, EventsAt: now.Add(-2 * time.Hour)},
			connect.BinlogLag{Purged: true, BehindFiles: 4, Headroom: -time.Hour, HasHeadroom: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := connect.ConnectorBinlogLag(server, tc.pos, now)
			if err != nil || got != tc.want {
				t.Errorf("ConnectorBinlogLag = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := connect.ConnectorBinlogLag(server, connect.BinlogPosition{File: "bin.000010"}, now); err == nil {
		t.Error("a connector ahead of the server's current file: no error")
	}
}

func TestAMariaDBConnectorsBinlogPositionIsWatchedFallingBehindAndCatchingUp(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	url := s.ConnectURL(t)
	names := stacktest.NewConnectorNames(t)
	dsn, admin := m.FreshOutbox(t, stacktest.MySQLSeedDebezium)
	agg := names.Name + "-canary"
	s.NewTopicNamed(t, "outbox.event."+agg, 1, nil)
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	s.NewTopicNamed(t, names.SchemaHistoryTopic(), 1, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"})
	cfg := m.MariaDBConnector(t, s, dsn, names)
	user, password := m.NewCDCUser(t)
	cfg["database.user"], cfg["database.password"] = user, password
	c := s.NewConnector(t, names.Name, cfg)
	c.WaitRunning(t)
	m.StreamingBinlog(t, c, user)

	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.MySQLSeedDebezium, IDGen: "uuid"})
	p.Watch.ConnectURL, p.Watch.Connector = url, names.Name
	db := openMySQL(t, p.Database, 2)
	w, mt := newWatcher(t, Options{Pipeline: p, DB: db})
	ctx := context.Background()
	insert := func() {
		t.Helper()
		if _, err := admin.ExecContext(ctx, "INSERT INTO outbox VALUES (UUID(), ?, 'k', 'created', '{}')", agg); err != nil {
			t.Fatal(err)
		}
	}
	series := func() (up, pos, bytes, files, purged float64, headroom int) {
		return testutil.ToFloat64(mt.Up.WithLabelValues(p.Name, WatcherBinlogConnector)),
			testutil.ToFloat64(mt.BinlogConnectorPosition.WithLabelValues(p.Name, names.Name)),
			testutil.ToFloat64(mt.BinlogConnectorBehindBytes.WithLabelValues(p.Name, names.Name)),
			testutil.ToFloat64(mt.BinlogConnectorBehindFiles.WithLabelValues(p.Name, names.Name)),
			testutil.ToFloat64(mt.BinlogConnectorFilePurged.WithLabelValues(p.Name, names.Name)),
			testutil.CollectAndCount(mt.BinlogConnectorPurgeHeadroom)
	}
	describe := func() string {
		up, pos, bytes, files, purged, headroom := series()
		return fmt.Sprintf("up %v, position %v, behind %v bytes and %v files, purged %v, %d headroom series", up, pos, bytes, files, purged, headroom)
	}

	// Running: the connector commits the position of the row it read
	// (Connect flushes offsets every second on the stack's worker).
	insert()
	stacktest.EventuallyEvery(t, time.Minute, stacktest.InnoDBTrxIdle, "the connector's committed position on the current file", func() (bool, string) {
		w.Sample(ctx)
		up, pos, _, files, purged, headroom := series()
		return up == 1 && pos > 0 && files == 0 && purged == 0 && headroom == 0, describe()
	})
	t.Logf("running: %s", describe())

	// Paused: Connect stops polling the task, so no offset is committed;
	// the server writes on and rotates its binlog: the connector is behind
	// in bytes and by a file, and its file now has expiry's headroom.
	c.Pause(t)
	w.Sample(ctx)
	_, pos0, _, _, _, _ := series()
	for range 3 {
		insert()
	}
	if _, err := admin.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	insert()
	stacktest.EventuallyEvery(t, time.Minute, stacktest.InnoDBTrxIdle, "the paused connector behind by a file", func() (bool, string) {
		w.Sample(ctx)
		up, _, bytes, files, purged, headroom := series()
		return up == 1 && bytes > 0 && files >= 1 && purged == 0 && headroom == 1, describe()
	})
	t.Logf("paused, after a rotation: %s", describe())
	if _, pos, _, _, _, _ := series(); pos != pos0 {
		t.Errorf("the paused connector's position moved from %v to %v", pos0, pos)
	}
	h := testutil.ToFloat64(mt.BinlogConnectorPurgeHeadroom.WithLabelValues(p.Name, names.Name))
	if expiry := testutil.ToFloat64(mt.BinlogExpiry.WithLabelValues(p.Name)); h <= 0 || h > expiry {
		t.Errorf("purge headroom %vs, want within (0, binlog expiry %vs]", h, expiry)
	}

	// Resumed: it reads the new file and commits there.
	c.Resume(t)
	insert()
	stacktest.EventuallyEvery(t, time.Minute, stacktest.InnoDBTrxIdle, "the resumed connector back on the current file", func() (bool, string) {
		w.Sample(ctx)
		up, _, _, files, _, headroom := series()
		return up == 1 && files == 0 && headroom == 0, describe()
	})
	t.Logf("resumed: %s", describe())
}
