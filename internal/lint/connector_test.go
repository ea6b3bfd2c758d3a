package lint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// recommendedInfo is the recommended connector configuration
// (deploy/local/connect/outbox-connector.json) for database "shop", as
// running, with its slot, publication and topics in place.
func recommendedInfo(t *testing.T) (*config.Pipeline, ConnectorInfo) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", stacktest.RecommendedConnectorFile))
	if err != nil {
		t.Fatal(err)
	}
	names := stacktest.ConnectorNames{Name: "shop-outbox", TopicPrefix: "shop", Slot: "shop_outbox"}
	cfg, err := stacktest.RenderConnector(text, "postgres://debezium:secret@db.internal:5432/shop", names)
	if err != nil {
		t.Fatal(err)
	}
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://x/shop", Schema: stacktest.SeedDebezium,
		Watch: "{connect_url: 'http://connect:8083', connector: shop-outbox, slot: shop_outbox}"})
	st := connect.Status{Name: "shop-outbox"}
	st.Connector.State = "RUNNING"
	st.Tasks = append(st.Tasks, struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	}{ID: 0, State: "RUNNING"})
	info := ConnectorInfo{Name: "shop-outbox", Config: cfg, Status: &st, Others: map[string]map[string]string{},
		DB: &ConnectorDB{Database: "shop", SlotDatabase: "shop", SlotPlugin: "pgoutput", PublicationExists: true,
			PublicationTables: []string{"public.outbox"}},
		Topics: map[string]bool{"outbox.event.outbox-canary": true, "__debezium-heartbeat.shop": true}}
	return p, info
}

func TestTheRecommendedConnectorPassesEveryCheck(t *testing.T) {
	p, info := recommendedInfo(t)
	findings := ConnectorChecks(p, info)
	if len(findings) < 14 {
		t.Errorf("%d findings, want one per check", len(findings))
	}
	for _, f := range findings {
		if f.Level != OK {
			t.Errorf("%s %s: %s (fix: %s)", f.Level, f.Check, f.Message, f.Fix)
		}
	}
}

func TestConnectorChecksNameEachMisconfiguration(t *testing.T) {
	failedTask := `org.apache.kafka.connect.errors.ConnectException: Unrecoverable exception from producer send callback
	at org.apache.kafka.connect.runtime.WorkerSourceTask.maybeThrowProducerSendException(WorkerSourceTask.java:348)
Caused by: org.apache.kafka.common.errors.TimeoutException: Topic x not present in metadata after 60000 ms.`
	cases := []struct {
		name  string
		edit  func(p *config.Pipeline, info *ConnectorInfo)
		check string
		level string
		// want is in the message, fix in the fix.
		want, fix string
	}{
		{"A failed task fails with its trace summary and the restart call.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Status.Tasks[0].State, i.Status.Tasks[0].Trace = "FAILED", failedTask
		}, CheckConnector, Fail, "task 0 trace: ConnectException: Unrecoverable exception from producer send callback; caused by: TimeoutException: Topic x", "restart?includeTasks=true&onlyFailed=true"},
		{"A connector other than Debezium's PostgreSQL connector is named, not checked.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["connector.class"] = "io.confluent.connect.jdbc.JdbcSourceConnector"
		}, CheckConnector, Warn, "not one of Debezium's PostgreSQL, MariaDB or MySQL connectors", "watch.connector"},
		{"A converter left to the worker warns: the REST API does not show the worker's.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "value.converter")
		}, CheckConverter, Warn, "not set on the connector", "value.converter=org.apache.kafka.connect.json.JsonConverter"},
		{"Confluent's Avro converter fails: every canary would be unsupported_encoding.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["value.converter"] = "io.confluent.connect.avro.AvroConverter"
		}, CheckConverter, Fail, "unsupported_encoding", "value.converter=org.apache.kafka.connect.json.JsonConverter"},
		{"Apicurio's Protobuf converter fails too.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["value.converter"] = "io.apicurio.registry.utils.converter.ProtobufConverter"
		}, CheckConverter, Fail, "schema registry", "value.converter="},
		{"ByteArrayConverter fails: the router's payload is no byte array.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["value.converter"] = "org.apache.kafka.connect.converters.ByteArrayConverter"
		}, CheckConverter, Fail, "accepts bytes only", "value.converter="},
		{"JsonConverter with schemas passes: the prober unwraps the envelope.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["value.converter.schemas.enable"] = "true"
		}, CheckConverter, OK, "with schemas", ""},
		{"StringConverter with an expanded payload warns: Struct text is no JSON for business consumers.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["value.converter"] = "org.apache.kafka.connect.storage.StringConverter"
			i.Config["transforms.outbox.table.expand.json.payload"] = "true"
		}, CheckConverter, Warn, "Struct text", "transforms.outbox.table.expand.json.payload=false"},
		{"Debezium's default decoding plugin fails on a stock server.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "plugin.name")
			i.Status.Tasks[0].State = "FAILED"
		}, CheckPlugin, Fail, "decoderbufs (Debezium's default)", "plugin.name=pgoutput"},
		{"decoderbufs on a server that has it only warns.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["plugin.name"] = "decoderbufs"
			i.DB.SlotPlugin = "decoderbufs"
		}, CheckPlugin, Warn, "installed on this server", "plugin.name=pgoutput"},
		{"Debezium's default slot name warns.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "slot.name")
			i.DB.SlotDatabase = ""
		}, CheckSlot, Warn, `Debezium's default "debezium"`, "slot.name="},
		{"A slot name another connector on the same server uses fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Others["billing-outbox"] = map[string]string{"connector.class": postgresConnector, "database.hostname": "DB.internal",
				"database.dbname": "billing", "slot.name": "shop_outbox"}
		}, CheckSlot, Fail, "also the slot of connector billing-outbox", "slot.name="},
		{"The same slot name on another server is no collision.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Others["billing-outbox"] = map[string]string{"connector.class": postgresConnector, "database.hostname": "other.internal",
				"slot.name": "shop_outbox"}
		}, CheckSlot, OK, "shared with no other connector", ""},
		{"A slot of the same name in another database fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.DB.SlotDatabase = "billing"
		}, CheckSlot, Fail, "exists for database billing", "slot.name="},
		{"A slot made with another plugin fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.DB.SlotPlugin = "wal2json"
		}, CheckSlot, Fail, "created with plugin wal2json", "pg_drop_replication_slot"},
		{"Debezium's default publication name warns.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "publication.name")
		}, CheckPublication, Warn, "dbz_publication", "publication.name="},
		{"A publication another connector of the same database uses fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Others["shop-audit"] = map[string]string{"connector.class": postgresConnector, "database.hostname": "db.internal",
				"database.port": "5432", "database.dbname": "shop", "publication.name": "shop_outbox", "slot.name": "audit"}
		}, CheckPublication, Fail, "also the publication of connector shop-audit", "publication.name="},
		{"Debezium's default all_tables publication warns.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "publication.autocreate.mode")
		}, CheckPublicationMode, Warn, "FOR ALL TABLES", "publication.autocreate.mode=filtered"},
		{"A disabled autocreate with a publication missing the outbox fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["publication.autocreate.mode"] = "disabled"
			i.DB.PublicationTables = []string{"public.orders"}
		}, CheckPublicationMode, Fail, "does not publish public.outbox", "ALTER PUBLICATION shop_outbox ADD TABLE public.outbox"},
		{"A disabled autocreate without the publication fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["publication.autocreate.mode"] = "disabled"
			i.DB.PublicationExists, i.DB.PublicationTables = false, nil
		}, CheckPublicationMode, Fail, "does not exist", "CREATE PUBLICATION shop_outbox FOR TABLE public.outbox"},
		{"Debezium's default initial snapshot warns: it publishes old rows again.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "snapshot.mode")
		}, CheckSnapshot, Warn, "again", "snapshot.mode=no_data"},
		{"A snapshot at every start fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["snapshot.mode"] = "always"
		}, CheckSnapshot, Fail, "every restart", "snapshot.mode=no_data"},
		{"A snapshot that never streams fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["snapshot.mode"] = "initial_only"
		}, CheckSnapshot, Fail, "never streams", "snapshot.mode=no_data"},
		{"An include list without the outbox table fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["table.include.list"] = "public.orders,inventory\\..*"
		}, CheckCapture, Fail, "does not capture public.outbox", `table.include.list=public\.outbox`},
		{"An include pattern that covers the outbox table passes, ignoring case as Debezium does.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["table.include.list"] = "PUBLIC\\.out.*"
		}, CheckCapture, OK, "captures public.outbox", ""},
		{"An exclude list with the outbox table fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["table.exclude.list"] = "public\\.outbox"
		}, CheckCapture, Fail, "excludes public.outbox", "remove public.outbox from table.exclude.list"},
		{"A connector on another database than the pipeline's fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["database.dbname"] = "shop_old"
		}, CheckCapture, Fail, "captures database shop_old", "database.dbname=shop"},
		{"No EventRouter fails: canary rows would arrive as change events.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms"] = "unwrap"
			i.Config["transforms.unwrap.type"] = "io.debezium.transforms.ExtractNewRecordState"
		}, CheckRouter, Fail, "no outbox EventRouter", "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter"},
		{"A router that routes by another column than outbox.columns.route fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.route.by.field"] = "type"
		}, CheckRouter, Fail, "routes by column type", "transforms.outbox.route.by.field=aggregatetype"},
		{"A router reading another payload column fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.table.field.event.payload"] = "body"
		}, CheckRouter, Fail, "payload from column body", "transforms.outbox.table.field.event.payload=payload"},
		{"A router without predicate on a connector capturing every table fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "transforms.outbox.predicate")
			delete(i.Config, "table.include.list")
		}, CheckRouterScope, Fail, "Unable to find payload field", "predicates.isOutboxTable.pattern=shop\\.public\\.outbox"},
		{"A router without predicate passes when only the outbox is captured.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "transforms.outbox.predicate")
		}, CheckRouterScope, OK, "captures public.outbox only", ""},
		{"A predicate that does not match the outbox table's topic fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["predicates.isOutboxTable.pattern"] = "shop\\.public\\.orders"
		}, CheckRouterScope, Fail, "keeps the router off shop.public.outbox", "predicates.isOutboxTable.pattern="},
		{"A negated predicate matching the outbox table fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.negate"] = "true"
		}, CheckRouterScope, Fail, "negate true", "predicate"},
		{"Routing to another topic than kafka.topic fails.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.route.topic.replacement"] = "events.${routedByValue}"
		}, CheckCanaryTopic, Fail, "to events.outbox-canary; the prober reads outbox.event.outbox-canary", "kafka.topic: events.outbox-canary"},
		{"A custom regex that captures part of the route value is followed.", func(p *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.route.topic.regex"] = "outbox-(?<kind>.*)"
			i.Config["transforms.outbox.route.topic.replacement"] = "outbox.event.outbox-${kind}"
		}, CheckCanaryTopic, OK, "go to outbox.event.outbox-canary, which exists", ""},
		{"A canary topic that does not exist fails: brokers rarely create topics.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Topics["outbox.event.outbox-canary"] = false
		}, CheckCanaryTopic, Fail, "does not exist", "kafka-topics.sh --create --topic outbox.event.outbox-canary"},
		{"A missing canary topic that Connect creates passes.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Topics["outbox.event.outbox-canary"] = false
			i.Config["topic.creation.default.partitions"] = "1"
			i.Config["topic.creation.default.replication.factor"] = "3"
		}, CheckCanaryTopic, OK, "Kafka Connect creates", ""},
		{"A record timestamp taken from a row column fails a record_timestamp pipeline.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.table.field.event.timestamp"] = "created_at"
		}, CheckRecordTimestamp, Fail, "column created_at", "remove transforms.outbox.table.field.event.timestamp"},
		{"No heartbeat warns about WAL retention.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "heartbeat.interval.ms")
		}, CheckHeartbeat, Warn, "retains every byte of WAL", "heartbeat.action.query=SELECT pg_logical_emit_message"},
		{"A heartbeat without an action query warns with what was measured.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "heartbeat.action.query")
		}, CheckHeartbeat, Warn, "20 MB retained", "heartbeat.action.query="},
		{"Logical messages that Debezium would publish to a missing topic fail.", func(_ *config.Pipeline, i *ConnectorInfo) {
			delete(i.Config, "message.prefix.exclude.list")
		}, CheckHeartbeat, Fail, "shop.message", "message.prefix.exclude.list=outbox-canary-heartbeat"},
		{"Heartbeats to a missing topic fail.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Topics["__debezium-heartbeat.shop"] = false
		}, CheckHeartbeat, Fail, "does not exist", "kafka-topics.sh --create --topic __debezium-heartbeat.shop"},
		{"More than one task warns: the connector runs one.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["tasks.max"] = "4"
		}, CheckTasks, Warn, "runs one task", "tasks.max=1"},
		{"Tombstones on empty payloads are explained, not failed: canaries always carry a payload.", func(_ *config.Pipeline, i *ConnectorInfo) {
			i.Config["transforms.outbox.route.tombstone.on.empty.payload"] = "true"
		}, CheckTombstones, OK, "canary rows always have a payload", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, info := recommendedInfo(t)
			tc.edit(p, &info)
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
			if got.Level != OK && got.Fix == "" {
				t.Errorf("a %s without a fix", got.Level)
			}
			for _, f := range findings {
				if strings.Contains(f.Message+f.Fix, "secret") {
					t.Errorf("a finding shows the database password: %+v", f)
				}
			}
		})
	}
}

func TestRoutedTopicFollowsKafkasRegexRouter(t *testing.T) {
	cases := []struct {
		name, regex, replacement, value, want string
	}{
		{"Debezium's defaults prefix the route value.", "", "", "orders", "outbox.event.orders"},
		{"A regex that does not match the whole value leaves it as the topic.", "order", "x.$0", "orders", "orders"},
		{"Numbered groups are expanded.", "(.*)-(.*)", "$2.$1", "a-b", "b.a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]string{"transforms": "r", "transforms.r.type": eventRouter}
			if tc.regex != "" {
				cfg["transforms.r.route.topic.regex"] = tc.regex
				cfg["transforms.r.route.topic.replacement"] = tc.replacement
			}
			got, err := routedTopic(ConnectorInfo{Config: cfg}, "r", tc.value)
			if err != nil || got != tc.want {
				t.Errorf("routedTopic = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Every check of the list exists in what ConnectorChecks reports for a
// record_timestamp pipeline, so the docs' list and the code agree.
func TestConnectorChecksCoverTheDocumentedList(t *testing.T) {
	p, info := recommendedInfo(t)
	seen := map[string]bool{}
	for _, f := range ConnectorChecks(p, info) {
		seen[f.Check] = true
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cdc.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{CheckConnector, CheckConverter, CheckPlugin, CheckSlot, CheckPublication, CheckPublicationMode,
		CheckSnapshot, CheckCapture, CheckRouter, CheckRouterScope, CheckCanaryTopic, CheckRecordTimestamp, CheckHeartbeat, CheckTasks, CheckTombstones} {
		if !seen[c] {
			t.Errorf("check %q not reported", c)
		}
		if !strings.Contains(string(doc), fmt.Sprintf("`%s`", c)) {
			t.Errorf("docs/cdc.md does not explain check `%s`", c)
		}
	}
}

// docs/cdc.md shows the recommended connector configuration as the file
// holds it, so what users copy is what the demo and the tests run.
func TestDocsShowTheRecommendedConnectorAsItIs(t *testing.T) {
	file, err := os.ReadFile(filepath.Join("..", "..", stacktest.RecommendedConnectorFile))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cdc.md"))
	if err != nil {
		t.Fatal(err)
	}
	if block := "```json\n" + string(file) + "```\n"; !strings.Contains(string(doc), block) {
		t.Errorf("docs/cdc.md does not show %s as it is; copy it into the ```json block", stacktest.RecommendedConnectorFile)
	}
}
