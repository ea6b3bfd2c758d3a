package lint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// recommendedMariaDBInfo is the recommended MariaDB connector
// configuration (deploy/local/connect/outbox-connector-mariadb.json) for
// database "shop" on db.internal, running, its topics in place.
func recommendedMariaDBInfo(t *testing.T) (*config.Pipeline, ConnectorInfo) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", stacktest.RecommendedMariaDBConnectorFile))
	if err != nil {
		t.Fatal(err)
	}
	filled := strings.NewReplacer("@MYSQL_HOST@", "db.internal", "@MYSQL_PORT@", "3306", "@MYSQL_USER@", "debezium",
		"@MYSQL_PASSWORD@", "secret", "@SERVER_ID@", "4242", "@TOPIC_PREFIX@", "shop", "@MYSQL_DBNAME@", "shop",
		"@BROKERS@", "kafka:9092", "@SCHEMA_HISTORY_TOPIC@", "schema-history.shop").Replace(string(text))
	var cfg map[string]string
	if err := json.Unmarshal([]byte(filled), &cfg); err != nil {
		t.Fatal(err)
	}
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "mysql://canary:x@db.internal:3306/shop", Schema: stacktest.MySQLSeedDebezium, IDGen: "uuid",
		Watch: "{connect_url: 'http://connect:8083', connector: shop-outbox}"})
	st := connect.Status{Name: "shop-outbox"}
	st.Connector.State = "RUNNING"
	st.Tasks = append(st.Tasks, struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	}{ID: 0, State: "RUNNING"})
	info := ConnectorInfo{Name: "shop-outbox", Config: cfg, Status: &st, Others: map[string]map[string]string{},
		DB:     &ConnectorDB{Database: "shop", ServerID: 1},
		Topics: map[string]bool{"outbox.event.outbox-canary": true, "__debezium-heartbeat.shop": true}}
	return p, info
}

func TestTheRecommendedMariaDBConnectorPassesEveryCheck(t *testing.T) {
	p, info := recommendedMariaDBInfo(t)
	findings := ConnectorChecks(p, info)
	if len(findings) < 12 {
		t.Errorf("%d findings, want one per check", len(findings))
	}
	for _, f := range findings {
		if f.Level != OK {
			t.Errorf("%s %s: %s (fix: %s)", f.Level, f.Check, f.Message, f.Fix)
		}
	}
}

func TestMariaDBConnectorChecksNameEachMisconfiguration(t *testing.T) {
	cases := []struct {
		name      string
		edit      func(i *ConnectorInfo)
		check     string
		level     string
		want, fix string
	}{
		{"The server's own server_id as database.server.id fails.", func(i *ConnectorInfo) {
			i.DB.ServerID = 4242
		}, CheckServerID, Fail, "the server's own server_id", "database.server.id="},
		{"Another connector on the same server with the same id fails.", func(i *ConnectorInfo) {
			i.Others["billing-outbox"] = map[string]string{"connector.class": mariadbConnector, "database.hostname": "DB.internal", "database.server.id": "4242"}
		}, CheckServerID, Fail, "also that of billing-outbox", "database.server.id="},
		{"The same id on another server is not shared.", func(i *ConnectorInfo) {
			i.Others["billing-outbox"] = map[string]string{"connector.class": mariadbConnector, "database.hostname": "other.internal", "database.server.id": "4242"}
		}, CheckServerID, OK, "of its own", ""},
		{"No schema history fails: the connector does not start.", func(i *ConnectorInfo) {
			delete(i.Config, "schema.history.internal.kafka.topic")
		}, CheckSchemaHistory, Fail, "does not start", "schema.history.internal.kafka.topic="},
		{"A schema history topic shared with another connector fails.", func(i *ConnectorInfo) {
			i.Others["billing-outbox"] = map[string]string{"schema.history.internal.kafka.topic": "schema-history.shop"}
		}, CheckSchemaHistory, Fail, "shared with billing-outbox", "schema.history.internal.kafka.topic="},
		{"A database.include.list without the outbox's database fails.", func(i *ConnectorInfo) {
			i.Config["database.include.list"] = "billing"
		}, CheckCapture, Fail, `"billing" does not capture shop.outbox`, "database.include.list=shop"},
		{"A table.include.list without the outbox fails.", func(i *ConnectorInfo) {
			i.Config["table.include.list"] = "shop.orders"
		}, CheckCapture, Fail, "does not capture shop.outbox", `table.include.list=shop\.outbox`},
		{"No heartbeat warns: the committed file ages towards expiry.", func(i *ConnectorInfo) {
			delete(i.Config, "heartbeat.interval.ms")
		}, CheckHeartbeat, Warn, "ages towards binlog expiry", "heartbeat.interval.ms=10000"},
		{"A predicate that misses the outbox table's topic fails.", func(i *ConnectorInfo) {
			i.Config["predicates.isOutboxTable.pattern"] = `shop\.public\.outbox`
		}, CheckRouterScope, Fail, "shop.shop.outbox", "predicates.isOutboxTable.pattern=shop\\.shop\\.outbox"},
		{"A snapshot of every start warns, in the binlog's terms.", func(i *ConnectorInfo) {
			i.Config["snapshot.mode"] = "when_needed"
		}, CheckSnapshot, Warn, "publishes every row still in the outbox table again", "snapshot.mode=no_data"},
		{"More than one task warns, in the binlog's terms.", func(i *ConnectorInfo) {
			i.Config["tasks.max"] = "3"
		}, CheckTasks, Warn, "the binlog connector runs one task whatever tasks.max says (one binlog stream)", "tasks.max=1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, info := recommendedMariaDBInfo(t)
			tc.edit(&info)
			var got *Finding
			findings := ConnectorChecks(p, info)
			for i := range findings {
				if findings[i].Check == tc.check && (got == nil || findings[i].Level != OK) {
					got = &findings[i]
				}
			}
			if got == nil {
				t.Fatalf("no finding of check %s in %+v", tc.check, findings)
			}
			if got.Level != tc.level || !strings.Contains(got.Message, tc.want) || !strings.Contains(got.Fix, tc.fix) {
				t.Errorf("%s %s: %s\n  fix: %s\nwant %s with %q, fix with %q", got.Level, got.Check, got.Message, got.Fix, tc.level, tc.want, tc.fix)
			}
			for _, f := range findings {
				if strings.Contains(f.Message+f.Fix, "secret") {
					t.Errorf("a finding shows the database password: %+v", f)
				}
			}
		})
	}
}
