// Integration tests of stacktest on the real local stack; start it with
// `make stack-up`. Without it they skip (or fail when CI=true).
// TestDisruptive* restarts the servers: run it alone, as `make test` does.
package stacktest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestLoadFindsTheServersAndTools(t *testing.T) {
	s := stacktest.Load(t)
	if len(s.KafkaBrokers) == 0 || s.KafkaBrokers[0] == "" {
		t.Errorf("no Kafka brokers in %v", s.Env)
	}
	for name, path := range map[string]string{
		"kcat": s.KcatPath, "promtool": s.PromtoolPath, "prometheus": s.PrometheusPath,
		"alertmanager": s.AlertmanagerPath, "stack.sh": s.ScriptPath,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode()&0o111 == 0 {
			t.Errorf("%s: %s is not executable", name, path)
		}
	}
}

func TestNewDatabaseGivesAnEmptyDatabaseAndDropsIt(t *testing.T) {
	s := stacktest.Load(t)
	ctx := t.Context()
	var name string
	t.Run("inner", func(t *testing.T) {
		dsn := s.NewDatabase(t)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "test_") {
			t.Errorf("database %q lacks the test_ prefix", name)
		}
		// The settings the prober and Debezium rely on.
		for setting, want := range map[string]string{"wal_level": "logical", "track_commit_timestamp": "on"} {
			var got string
			if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s = %q, want %q", setting, got, want)
			}
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE outbox (id bigserial PRIMARY KEY, payload jsonb)"); err != nil {
			t.Fatal(err)
		}
		// The connection stays open on purpose: the drop must not wait for it.
	})
	conn, err := pgx.Connect(ctx, s.PGAdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %q still exists after its test ended", name)
	}
}

// The message goes in with kafka-go and comes out with both kafka-go and
// kcat, an independent client (librdkafka), headers included.
func TestNewTopicRoundTripsAMessage(t *testing.T) {
	s := stacktest.Load(t)
	topic := s.NewTopic(t, 1, nil)
	sent := kafka.Message{
		Key:     []byte("order-1"),
		Value:   []byte("hello"),
		Headers: []kafka.Header{{Key: "id", Value: []byte("42")}},
	}
	produce(t, s, topic, sent)

	got := consume(t, s, topic)
	if string(got.Key) != "order-1" || string(got.Value) != "hello" {
		t.Errorf("kafka-go read key %q value %q, want order-1 hello", got.Key, got.Value)
	}
	if len(got.Headers) != 1 || got.Headers[0].Key != "id" || string(got.Headers[0].Value) != "42" {
		t.Errorf("kafka-go read headers %v, want id=42", got.Headers)
	}

	out := s.Kcat(t, topic, "%k %s %h\n")
	if want := "order-1 hello id=42"; out != want {
		t.Errorf("kcat read %q, want %q", out, want)
	}
}

// This pins a fact the prober depends on (see DESIGN.md): kafka-go v0.4.51
// reports a record's CreateTime in Message.Time even on a topic with
// message.timestamp.type=LogAppendTime, where the broker's append time is the
// record's real timestamp (as kcat shows). The prober does not depend on it
// any more: its record parser (internal/kafkaclient/records.go) reads the
// batch's timestamp type and max timestamp itself.
func TestKafkaGoMessageTimeIsCreateTimeEvenOnLogAppendTimeTopics(t *testing.T) {
	s := stacktest.Load(t)
	created := time.Date(2020, 1, 2, 3, 4, 5, 678e6, time.UTC)

	t.Run("CreateTime topic", func(t *testing.T) {
		topic := s.NewTopic(t, 1, nil)
		produce(t, s, topic, kafka.Message{Key: []byte("k"), Value: []byte("v"), Time: created})
		if got := consume(t, s, topic).Time; !got.Equal(created) {
			t.Errorf("kafka-go Message.Time = %v, want the CreateTime %v", got.UTC(), created)
		}
		if got := kcatTime(t, s, topic); !got.Equal(created) {
			t.Errorf("kcat %%T = %v, want the CreateTime %v", got, created)
		}
	})

	t.Run("LogAppendTime topic", func(t *testing.T) {
		topic := s.NewTopic(t, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
		before := time.Now().Add(-time.Second)
		produce(t, s, topic, kafka.Message{Key: []byte("k"), Value: []byte("v"), Time: created})
		after := time.Now().Add(time.Second)

		appended := kcatTime(t, s, topic)
		if appended.Before(before) || appended.After(after) {
			t.Errorf("kcat %%T = %v, want the broker's append time in [%v, %v]", appended, before, after)
		}
		got := consume(t, s, topic).Time
		t.Logf("LogAppendTime topic: kafka-go Message.Time = %v, kcat %%T (append time) = %v", got.UTC(), appended)
		if !got.Equal(created) {
			t.Errorf("kafka-go Message.Time = %v, want the CreateTime %v (kafka-go ignores the timestamp type)", got.UTC(), created)
		}
	})
}

func TestScriptRunsStackCommands(t *testing.T) {
	s := stacktest.Load(t)
	s.Script(t, "status")
}

// Restarting the servers disturbs every other test that uses them at the same
// time: `make test` runs TestDisruptive* tests last, one package at a time.
func TestDisruptiveScriptRestartsTheServers(t *testing.T) {
	s := stacktest.Load(t)
	dsn := s.NewDatabase(t)
	topic := s.NewTopic(t, 1, nil)
	produce(t, s, topic, kafka.Message{Value: []byte("before")})

	s.Script(t, "restart-postgres")
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect after restart-postgres: %v", err)
	}
	conn.Close(context.Background())

	if _, ok := s.Env["OUTBOX_CANARY_MYSQL_DSN"]; ok {
		s.Script(t, "restart-mysql")
		if err := stacktest.OpenMySQL(t, s.MySQL(t).DSN).PingContext(t.Context()); err != nil {
			t.Fatalf("MariaDB after restart-mysql: %v", err)
		}
	}

	s.Script(t, "restart-kafka")
	// The script returns once the broker answers; the topic's partition
	// gets its leader back a moment later, however long that takes here.
	stacktest.Eventually(t, time.Minute, "a produce after restart-kafka", func() (bool, string) {
		err := writeMessages(t, s, topic, kafka.Message{Value: []byte("after")})
		if err != nil && !noLeaderYet(err) {
			t.Fatalf("kafka-go Writer after restart-kafka: %v", err)
		}
		return err == nil, fmt.Sprint(err)
	})
	if out := s.Kcat(t, topic, "%s\n"); out != "before\nafter" {
		t.Errorf("after restart-kafka kcat read %q, want both messages", out)
	}
}

func produce(t *testing.T, s stacktest.Stack, topic string, msgs ...kafka.Message) {
	t.Helper()
	if err := writeMessages(t, s, topic, msgs...); err != nil {
		t.Fatalf("kafka-go Writer: %v", err)
	}
}

// writeMessages writes msgs to topic with a kafka-go Writer, all replicas
// acknowledging.
func writeMessages(t *testing.T, s stacktest.Stack, topic string, msgs ...kafka.Message) error {
	w := &kafka.Writer{
		Addr:         kafka.TCP(s.KafkaBrokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, // one message: do not wait 1 s for a batch
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return w.WriteMessages(ctx, msgs...)
}

// noLeaderYet reports whether a Writer's error says nothing was written
// because a partition had no leader yet, as just after a broker restart.
func noLeaderYet(err error) bool {
	var we kafka.WriteErrors
	if !errors.As(err, &we) {
		return false
	}
	for _, e := range we {
		if e != nil && !errors.Is(e, protocol.ErrNoLeader) {
			return false
		}
	}
	return true
}

// consume reads the first message of partition 0 with a partition reader (no
// consumer group).
func consume(t *testing.T, s stacktest.Stack, topic string) kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.KafkaBrokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(kafka.FirstOffset); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("kafka-go Reader: %v", err)
	}
	return m
}

// kcatTime returns the timestamp that kcat reports (%T, milliseconds) for
// the topic's only message.
func kcatTime(t *testing.T, s stacktest.Stack, topic string) time.Time {
	t.Helper()
	out := s.Kcat(t, topic, "%T\n")
	ms, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		t.Fatalf("kcat %%T printed %q: %v", out, err)
	}
	return time.UnixMilli(ms).UTC()
}
