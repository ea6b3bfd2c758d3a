// Package stacktest gives integration tests the local stack that
// deploy/local/stack.sh starts: a PostgreSQL 15 server, a single-node Kafka
// 4.4.0 broker, and the paths of kcat, promtool, prometheus and alertmanager.
//
// Start the stack once with `make stack-up`; every test then calls Load and
// asks for what it needs:
//
//	s := stacktest.Load(t)          // skips (or, with CI=true, fails) without a stack
//	dsn := s.NewDatabase(t)         // a fresh database, dropped after the test
//	topic := s.NewTopic(t, 3, nil)  // a fresh topic, deleted after the test
//
// s.Secured(t) gives the secured side beside the plaintext servers: Kafka's
// SASL_SSL listener (SCRAM-SHA-512), PostgreSQL over TLS as a role that
// must use it, the CA file both certificates chain to, and the password
// files.
//
// Tests that stop or restart a server (s.Script(t, "restart-kafka")) disturb
// every other test that uses the stack at the same time: name them
// TestDisruptive*, which `make test` runs last, one package at a time.
package stacktest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

// EnvVar names a file to read instead of <repo>/.stack/env (for a stack
// started elsewhere, with STACK_DIR set).
const EnvVar = "OUTBOX_CANARY_STACK_ENV"

// dialTimeout bounds the check that the servers answer, so that a test run
// without a stack skips at once instead of hanging.
const dialTimeout = 2 * time.Second

// Stack describes the running local stack, as written by `stack.sh up` to
// its env file.
type Stack struct {
	// Dir is the stack directory (data, logs, Kafka jars): STACK_DIR.
	Dir string
	// PGDSN connects as the superuser "canary" (password "canary") to the
	// database "canary". Prefer NewDatabase, which isolates a test.
	PGDSN string
	// PGAdminDSN connects as the same superuser to the database "postgres",
	// for creating and dropping databases, roles and replication slots.
	PGAdminDSN string
	// KafkaBrokers are the bootstrap addresses, host:port.
	KafkaBrokers []string
	// KcatPath, PromtoolPath, PrometheusPath and AlertmanagerPath are
	// absolute paths of the Debian binaries.
	KcatPath         string
	PromtoolPath     string
	PrometheusPath   string
	AlertmanagerPath string
	// ScriptPath is deploy/local/stack.sh, which Script runs.
	ScriptPath string
	// Env holds every KEY=value of the env file, including the keys above
	// (OUTBOX_CANARY_KAFKA_LIBS, OUTBOX_CANARY_JAVA, ...).
	Env map[string]string
}

// InCI reports whether the tests run in CI: the environment variable CI is
// "true", as .ci/run and the common CI services set it. It is the one rule
// for "required in CI" in every test of the project.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable stops a test that cannot run here: it skips with the reason,
// or fails in CI (InCI), which always starts the stack and installs every
// tool the tests use, so a missing one there is a bug, not a reason to skip.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI=true: required in CI)", msg)
	}
	t.Skip(msg)
}

// Load returns the running stack. When there is none (no env file, or its
// servers do not answer) the test is Unavailable.
func Load(t testing.TB) Stack {
	t.Helper()
	s, err := load()
	if err != nil {
		Unavailable(t, "stacktest: %v (run `make stack-up` to run this test)", err)
	}
	return s
}

func load() (Stack, error) {
	path, err := envPath()
	if err != nil {
		return Stack{}, err
	}
	env, err := readEnv(path)
	if err != nil {
		return Stack{}, err
	}
	s := Stack{
		Dir:              env["OUTBOX_CANARY_STACK_DIR"],
		PGDSN:            env["OUTBOX_CANARY_PG_DSN"],
		PGAdminDSN:       env["OUTBOX_CANARY_PG_ADMIN_DSN"],
		KafkaBrokers:     strings.Split(env["OUTBOX_CANARY_KAFKA_BROKERS"], ","),
		KcatPath:         env["OUTBOX_CANARY_KCAT"],
		PromtoolPath:     env["OUTBOX_CANARY_PROMTOOL"],
		PrometheusPath:   env["OUTBOX_CANARY_PROMETHEUS"],
		AlertmanagerPath: env["OUTBOX_CANARY_ALERTMANAGER"],
		ScriptPath:       env["OUTBOX_CANARY_STACK_SCRIPT"],
		Env:              env,
	}
	for _, k := range []string{"OUTBOX_CANARY_STACK_DIR", "OUTBOX_CANARY_PG_DSN", "OUTBOX_CANARY_PG_ADMIN_DSN",
		"OUTBOX_CANARY_PG_HOST", "OUTBOX_CANARY_PG_PORT", "OUTBOX_CANARY_KAFKA_BROKERS", "OUTBOX_CANARY_STACK_SCRIPT"} {
		if env[k] == "" {
			return Stack{}, fmt.Errorf("env file %s: %s is missing", path, k)
		}
	}
	addrs := append([]string{net.JoinHostPort(env["OUTBOX_CANARY_PG_HOST"], env["OUTBOX_CANARY_PG_PORT"])}, s.KafkaBrokers...)
	for _, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			return Stack{}, fmt.Errorf("stack of %s does not answer: %w", path, err)
		}
		c.Close()
	}
	return s, nil
}

// envPath is $OUTBOX_CANARY_STACK_ENV, or .stack/env beside the go.mod that
// encloses the working directory (go test runs in the package's directory).
func envPath() (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".stack", "env"), nil
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// readEnv parses the KEY=value lines of the env file; # starts a comment.
func readEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("env file %s:%d: want KEY=value, got %q", path, n, line)
		}
		env[k] = v
	}
	return env, sc.Err()
}

// NewDatabase creates an empty database with a unique name, owned by the
// superuser of PGDSN, and returns a DSN for it. The database is dropped when
// the test ends, even if connections to it are still open.
func (s Stack) NewDatabase(t testing.TB) string {
	t.Helper()
	name := "test_" + uniqueName(t, "_", 40)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("stacktest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// The test's own context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("stacktest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(s.PGDSN)
	if err != nil {
		t.Fatalf("stacktest: OUTBOX_CANARY_PG_DSN: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// admin runs one statement on the postgres database as the superuser.
// CREATE/DROP DATABASE cannot run inside a transaction, hence Exec on a
// plain connection.
func (s Stack) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.PGAdminDSN)
	if err != nil {
		return fmt.Errorf("connect as admin: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

// NewTopic creates a topic named test.<test name>.<random> with the given
// number of partitions, one replica and the given topic configs (for example
// "message.timestamp.type": "LogAppendTime"), waits until every partition has
// a leader, and deletes the topic when the test ends.
func (s Stack) NewTopic(t testing.TB, partitions int, configs map[string]string) string {
	t.Helper()
	// Dots and dashes only: Kafka warns about names that mix '.' and '_'
	// because both become '_' in metric names.
	name := "test." + uniqueName(t, "-", 120)
	s.NewTopicNamed(t, name, partitions, configs)
	return name
}

// NewTopicNamed is NewTopic with a name of the caller's choice, for topics
// whose name a relay derives (Debezium's outbox.event.<aggregate type>,
// __debezium-heartbeat.<topic prefix>); the caller makes it unique.
func (s Stack) NewTopicNamed(t testing.TB, name string, partitions int, configs map[string]string) {
	t.Helper()
	client := s.KafkaClient()
	defer closeClient(client)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tc := kafka.TopicConfig{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	// Client.CreateTopics negotiates the protocol version with the broker;
	// Kafka 4 no longer accepts the versions that the older Conn API sends.
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err == nil {
		err = res.Errors[name]
	}
	if err != nil {
		t.Fatalf("stacktest: create topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		// A fresh client: the test may have restarted Kafka, which leaves
		// the creating client's pooled connection dead (unexpected EOF).
		client := s.KafkaClient()
		defer closeClient(client)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			var res *kafka.DeleteTopicsResponse
			res, err = client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{name}})
			if err == nil {
				err = res.Errors[name]
			}
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("stacktest: delete topic %s: %v", name, err)
		}
	})

	// Creation returns before the partitions have leaders; producing then
	// fails with LeaderNotAvailable, so wait until metadata shows them all.
	awaitTopic(ctx, t, client, name, partitions)
	if err := s.announceTopic(ctx, name); err != nil {
		t.Fatalf("stacktest: topic %s: %v", name, err)
	}
}

// announceTopic makes kafka-go's DefaultTransport, which every Writer and
// Client without a Transport of its own shares, learn about a new topic now.
// That transport answers metadata from a cache that it refreshes only every
// few seconds (and after topic creation through itself), and a Writer fails
// at once with "Unknown Topic Or Partition" for a topic missing from it. A
// metadata request that allows auto-creation bypasses the cache when the
// topic is not in it and refreshes it; the broker runs with
// auto.create.topics.enable=false, so nothing is created by it.
func (s Stack) announceTopic(ctx context.Context, name string) error {
	addr := kafka.TCP(s.KafkaBrokers...)
	for {
		r, err := kafka.DefaultTransport.RoundTrip(ctx, addr, &metadata.Request{TopicNames: []string{name}, AllowAutoTopicCreation: true})
		// An error is retried: after a test restarted Kafka, the shared
		// transport's pooled connection fails once (unexpected EOF) and
		// then reconnects.
		if err == nil {
			if m, ok := r.(*metadata.Response); ok && len(m.Topics) == 1 && m.Topics[0].ErrorCode == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("refresh kafka-go's default transport: %w", err)
			}
			return fmt.Errorf("kafka-go's default transport does not see it: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func topicReady(ctx context.Context, client *kafka.Client, name string, partitions int) error {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{name}})
	if err != nil {
		return err
	}
	for _, tp := range md.Topics {
		if tp.Name != name {
			continue
		}
		if tp.Error != nil {
			return tp.Error
		}
		if len(tp.Partitions) != partitions {
			return fmt.Errorf("%d of %d partitions", len(tp.Partitions), partitions)
		}
		for _, p := range tp.Partitions {
			if p.Error != nil {
				return fmt.Errorf("partition %d: %w", p.ID, p.Error)
			}
			if p.Leader.Host == "" {
				return fmt.Errorf("partition %d has no leader", p.ID)
			}
		}
		return nil
	}
	return errors.New("not in metadata")
}

// KafkaClient returns a kafka-go admin client for the stack's brokers, with a
// kafka.Transport of its own: kafka-go's default one is shared by the whole
// test binary and keeps pooled connections that a Kafka restart kills. Its
// connections and metadata goroutine live until
// client.Transport.(*kafka.Transport).CloseIdleConnections().
func (s Stack) KafkaClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(s.KafkaBrokers...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
}

// closeClient releases the connections and goroutine of a KafkaClient.
func closeClient(c *kafka.Client) {
	if tr, ok := c.Transport.(*kafka.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// Kcat reads topic from its beginning to its end with kcat, an independent
// client, and returns kcat's output: one format (kcat -f, for example
// "%k|%h|%s\n") per message, without the trailing newline. It fails the test
// with kcat's stderr if kcat fails.
func (s Stack) Kcat(t testing.TB, topic, format string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.KcatPath, "-C", "-b", strings.Join(s.KafkaBrokers, ","),
		"-t", topic, "-e", "-q", "-o", "beginning", "-f", format).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("stacktest: kcat -t %s: %v\n%s", topic, err, ee.Stderr)
		}
		t.Fatalf("stacktest: kcat -t %s: %v", topic, err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// Script runs deploy/local/stack.sh with args, for example "restart-postgres"
// or "stop-kafka", and fails the test with the script's output if it fails.
// The restart commands wait until the server is ready again.
func (s Stack) Script(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{s.ScriptPath}, args...)...)
	cmd.Env = append(os.Environ(), "STACK_DIR="+s.Dir)
	// The servers that the script starts get their own output files, but
	// should anything keep our pipe open, do not wait for it forever.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stacktest: stack.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("stack.sh %s:\n%s", strings.Join(args, " "), out)
}

// uniqueName turns the test's name into an identifier of at most maxLen
// characters ([a-z0-9] and sep) followed by sep and 8 random hex digits, so
// that parallel tests and repeated runs never collide and a leftover database
// or topic still says which test made it.
func uniqueName(t testing.TB, sep string, maxLen int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), sep):
			b.WriteString(sep)
		}
	}
	base := strings.TrimSuffix(b.String(), sep)
	if len(base) > maxLen {
		base = strings.TrimSuffix(base[:maxLen], sep)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base + sep + hex.EncodeToString(rnd[:])
}

// ProduceAged writes n business messages to topic, each with a record
// timestamp age ago.
func (s Stack) ProduceAged(t testing.TB, topic string, n int, age time.Duration) {
	t.Helper()
	// A transport of its own: kafka-go's shared default transport caches
	// metadata from before the topic existed and answers "unknown topic".
	w := &kafka.Writer{Addr: kafka.TCP(s.KafkaBrokers...), Topic: topic, Balancer: &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Transport: &kafka.Transport{}}
	defer w.Close()
	stamp := time.Now().Add(-age)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("business event"), Time: stamp}
	}
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce %d messages to %s: %v", n, topic, err)
	}
}

// RecreateTopic deletes a topic made by NewTopic and creates it again,
// empty, with the same name and partitions, as an operator might while
// the prober reads it.
func (s Stack) RecreateTopic(t testing.TB, name string, partitions int) {
	t.Helper()
	client := s.KafkaClient()
	defer closeClient(client)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{name}})
	if err == nil {
		err = res.Errors[name]
	}
	if err != nil {
		t.Fatalf("stacktest: delete topic %s: %v", name, err)
	}
	// Deletion is asynchronous: create until the broker accepts the name.
	for {
		res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}}})
		if err == nil {
			err = res.Errors[name]
		}
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stacktest: recreate topic %s: %v", name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	awaitTopic(ctx, t, client, name, partitions)
}

// awaitTopic waits until every partition of a new topic has a leader.
func awaitTopic(ctx context.Context, t testing.TB, client *kafka.Client, name string, partitions int) {
	t.Helper()
	for {
		err := topicReady(ctx, client, name, partitions)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stacktest: topic %s not ready: %v", name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
