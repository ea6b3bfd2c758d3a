package main

// These tests need the project's PostgreSQL and Kafka: start them with
// `deploy/local/stack.sh up` (or `make test`). Without the stack they skip
// (and fail in CI).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// stackPipeline is a fresh schema A database with the reference relay
// routing every row to a fresh topic, and a config file for it.
func stackPipeline(t *testing.T, budget string) (configPath string, faults *relay.Faults) {
	t.Helper()
	return stackPipelineWith(t, "{end_to_end: "+budget+"}", "")
}

// stackPipelineWith is stackPipeline with the budgets' YAML and more YAML
// for the pipeline (canary: ...), if any.
func stackPipelineWith(t *testing.T, budgets, extra string) (configPath string, faults *relay.Faults) {
	t.Helper()
	s := stacktest.Load(t)
	ctx := context.Background()
	dsn, topic := s.NewDatabase(t), s.NewTopic(t, 1, nil)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, outboxsql.SchemaA); err != nil {
		t.Fatal(err)
	}
	w := relay.NewKafkaWriter(s.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.New(relay.Config{TopicTemplate: topic, PollInterval: 20 * time.Millisecond}, pool, w, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })

	dir := t.TempDir()
	configPath = filepath.Join(dir, "canary.yml")
	t.Setenv("CHECK_TEST_DSN", dsn)
	cfg := fmt.Sprintf(`instance_id: cmdtest
state_dir: %s
signing_key: {value: k}
pipelines:
  - name: orders
    database: {dsn: {env: CHECK_TEST_DSN}}
    canary: {schedule: "@every 1s"}
    kafka: {brokers: [%s], topic: %s}
    budgets: %s
%s`, filepath.Join(dir, "state"), strings.Join(s.KafkaBrokers, ","), topic, budgets, extra)
	if err := os.WriteFile(configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return configPath, r.Faults()
}

func TestCheckAgainstTheStack(t *testing.T) {
	cases := []struct {
		name     string
		budget   string
		pause    bool
		timeout  string
		wantCode int
		wantOut  []string
	}{
		// The healthy budget is one a loaded machine keeps: what is tested is
		// the report, not the stack's speed. The stalled check's timeout
		// also bounds its wait for the servers, so it leaves them time.
		{"A healthy pipeline passes and prints every segment against its budget.", "60s", false, "30s", 0,
			[]string{`pipeline "orders"`, "commit_to_publish", "publish_to_consume", "end_to_end", "1m0s", "PASS"}},
		{"A stalled relay makes check fail with exit code 1.", "500ms", true, "15s", 1,
			[]string{"FAIL"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, faults := stackPipeline(t, tc.budget)
			if tc.pause {
				faults.Pause()
			}
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), []string{"check", "--config.file", path, "--timeout", tc.timeout}, &stdout, &stderr)
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			code := 0
			var ee *exitError
			switch {
			case errors.As(err, &ee):
				code = ee.code
			case err != nil:
				t.Fatalf("check: %v", err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d (%v), want %d", code, err, tc.wantCode)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}

func TestRunServesUntilCancelledAndFlushesItsState(t *testing.T) {
	path, _ := stackPipeline(t, "10s")
	addr, stderr, cancel, done := startRun(t, path)
	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, body := get("/metrics")
		if code == 200 && strings.Contains(body, `outbox_canary_sli_events_total{outcome="good",pipeline="orders",segment="end_to_end"} 1`) ||
			code == 200 && strings.Contains(body, `outbox_canary_canaries_received_total{pipeline="orders"} 2`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no good canary on /metrics in time; last:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 200, "ready"},
		{"/api/status", 200, `"name": "orders"`},
		{"/", 200, `<table class="in-flight">`},
		{"/metrics", 200, "outbox_canary_build_info{"},
	} {
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d, want %d with %q:\n%.500s", tc.path, code, tc.code, tc.want, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s of cancel")
	}
	state, err := os.ReadFile(filepath.Join(filepath.Dir(path), "state", "orders.json"))
	if err != nil || !strings.Contains(string(state), `"next_offset_by_partition"`) {
		t.Errorf("state file after shutdown: %v\n%.300s", err, state)
	}
	if strings.Contains(stderr.String(), "CHECK_TEST_DSN") || strings.Contains(stderr.String(), "postgres://") {
		t.Errorf("the logs show the DSN:\n%s", stderr.String())
	}
}

func TestRunServesBehindBasicAuthWithAWebConfigFile(t *testing.T) {
	path, _ := stackPipeline(t, "10s")
	// exporter-toolkit's web config takes bcrypt hashes of the passwords.
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, stderr, cancel, done := startRun(t, path, "--web.config.file", webConfig)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v after cancel", err)
		}
	}()
	status := func(user, pass string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(20 * time.Second)
	for status("prometheus", "secret") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never answered 200 with the right password; stderr:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := status("", ""); got != http.StatusUnauthorized {
		t.Errorf("/metrics without credentials = %d, want 401", got)
	}
	if got := status("prometheus", "wrong"); got != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong password = %d, want 401", got)
	}
}

func TestRunRefusesABrokenWebConfigFileAtStart(t *testing.T) {
	path, _ := stackPipeline(t, "10s")
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"run", "--config.file", path, "--web.listen-address", "127.0.0.1:0", "--web.config.file", webConfig}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--web.config.file") {
		t.Fatalf("run with a broken web config = %v, want an error naming --web.config.file", err)
	}
}

// startRun starts `outbox-canary run` on a free loopback port; cancel stops
// it and done yields its result.
func startRun(t *testing.T, configPath string, extraArgs ...string) (addr string, stderr *stacktest.SyncBuffer, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout stacktest.SyncBuffer
	stderr = &stacktest.SyncBuffer{}
	result := make(chan error, 1)
	args := append([]string{"run", "--config.file", configPath, "--web.listen-address", addr, "--log.level", "warn"}, extraArgs...)
	go func() { result <- Run(ctx, args, &stdout, stderr) }()
	return addr, stderr, cancel, result
}

func TestRunSaysAtStartWhatItsDatabaseRoleLacks(t *testing.T) {
	for _, tc := range []struct {
		name, grant string
		inRoles     []string
		want        []string
	}{
		{name: "A role outside pg_monitor is warned about: the open-transaction watcher cannot see the application's transactions.",
			grant: "GRANT INSERT, SELECT ON outbox TO %[1]s; GRANT USAGE ON SEQUENCE outbox_id_seq TO %[1]s",
			want:  []string{"level=WARN", "is not a member of pg_monitor", "fix=\"GRANT pg_monitor TO"}},
		{name: "A role that cannot insert canaries is an error, with the grant that fixes it.", inRoles: []string{"pg_monitor"},
			grant: "GRANT SELECT ON outbox TO %[1]s",
			want:  []string{"level=ERROR", "the database role cannot do what the prober needs", "lacks INSERT on", "USAGE on the id's sequence", "fix=\"GRANT INSERT ON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := stackPipeline(t, "10s")
			dsn := os.Getenv("CHECK_TEST_DSN")
			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close) // after RoleDSN's cleanup, which drops the role through it
			roleDSN := stacktest.Load(t).RoleDSN(t, pool, dsn, tc.inRoles...)
			u, err := url.Parse(roleDSN)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(context.Background(), fmt.Sprintf(tc.grant, u.User.Username())); err != nil {
				t.Fatalf("grant: %v", err)
			}
			t.Setenv("CHECK_TEST_DSN", roleDSN)
			_, stderr, cancel, done := startRun(t, path)
			defer func() { cancel(); <-done }()
			deadline := time.Now().Add(60 * time.Second)
			for !strings.Contains(stderr.String(), tc.want[1]) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q in the log within 60s:\n%s", tc.want[1], stderr.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			var line string
			for _, l := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(l, tc.want[1]) {
					line = l
				}
			}
			t.Logf("the log says: %s", line)
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("the log line lacks %q:\n%s", w, line)
				}
			}
		})
	}
}
