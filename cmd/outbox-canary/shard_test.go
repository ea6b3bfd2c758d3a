package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/relay"
	"github.com/outbox-canary/outbox-canary/internal/shard"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// fleetConfig writes a configuration of n pipelines p000... on one
// database and topic, canaries every `every`.
func fleetConfig(t *testing.T, n int, dsn, brokers, topic, every string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "instance_id: fleet\nsigning_key: {value: k}\npipelines:\n")
	for i := range n {
		fmt.Fprintf(&b, `  - name: p%03d
    database: {dsn: {value: %q}}
    canary: {schedule: "@every %s"}
    kafka: {brokers: [%s], topic: %s}
    budgets: {end_to_end: 30s}
`, i, dsn, every, brokers, topic)
	}
	path := filepath.Join(t.TempDir(), "fleet.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidatePrintsTheShardAssignment(t *testing.T) {
	path := fleetConfig(t, 30, "postgres://u@127.0.0.1:1/db", "127.0.0.1:1", "canaries", "10s")
	shard0 := "  shard 0: 14 pipelines: p001, p002, p003, p004, p006, p008, p011, p013, p017, p021, p025, p027, p028, p029\n"
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    []string
		wantNot []string
	}{
		{name: "Without shard flags nothing about shards is printed.",
			wantNot: []string{"shards:"}},
		{name: "--shard.count alone prints every shard's pipelines.", args: []string{"--shard.count", "3"},
			want:    []string{"shards: 3, by hashmod of the pipeline name (docs/fleet.md)\n", shard0, "  shard 1: 9 pipelines: ", "  shard 2: 7 pipelines: "},
			wantNot: []string{"this prober"}},
		{name: "A StatefulSet pod name in the environment says which shard this prober is.",
			env:  map[string]string{envShardCount: "3", envShardOrdinal: "outbox-canary-4"},
			want: []string{"this prober is shard 1\n", shard0, "  shard 1 (this prober): 9 pipelines: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if err := Run(context.Background(), append([]string{"validate", "--config.file", path}, tc.args...), &stdout, &stderr); err != nil {
				t.Fatalf("validate: %v\n%s", err, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(stdout.String(), w) {
					t.Errorf("output has %q:\n%s", w, stdout.String())
				}
			}
		})
	}
}

func TestBadShardFlagsAreUsageErrorsThatNameTheFlag(t *testing.T) {
	path := fleetConfig(t, 3, "postgres://u@127.0.0.1:1/db", "127.0.0.1:1", "canaries", "10s")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"A zero count.", []string{"--shard.count", "0"}, nil,
			"--shard.count (OUTBOX_CANARY_SHARD_COUNT): 0: the shard count must be at least 1"},
		{"An index past the count.", []string{"--shard.count", "3", "--shard.index", "3"}, nil,
			`--shard.index (OUTBOX_CANARY_SHARD_INDEX): "3" with count 3: the shard index must be a whole number from 0 to count-1`},
		{"A Deployment's pod name, which has no ordinal.", []string{"--shard.count", "3"},
			map[string]string{envShardOrdinal: "outbox-canary-5d8f7b9c4-abcde"},
			`--shard.ordinal (OUTBOX_CANARY_SHARD_ORDINAL): "outbox-canary-5d8f7b9c4-abcde": not an ordinal`},
		{"Index and ordinal together.", []string{"--shard.count", "3", "--shard.index", "1", "--shard.ordinal", "outbox-canary-1"}, nil,
			"--shard.index (OUTBOX_CANARY_SHARD_INDEX) and --shard.ordinal (OUTBOX_CANARY_SHARD_ORDINAL): give the shard index or the ordinal, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			for _, cmd := range []string{"validate", "run"} {
				var stdout, stderr bytes.Buffer
				err := Run(context.Background(), append([]string{cmd, "--config.file", path}, tc.args...), &stdout, &stderr)
				if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("%s: err %v, stderr %q; want a usage error saying %q", cmd, err, stderr.String(), tc.want)
				}
			}
		})
	}
	t.Run("An instance id with whitespace is refused, as the file's instance_id is.", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), []string{"run", "--config.file", path, "--instance.id", "pod 1"}, &stdout, &stderr)
		if want := `--instance.id "pod 1" must not contain whitespace`; !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), want) {
			t.Errorf("err %v, stderr %q; want a usage error saying %q", err, stderr.String(), want)
		}
	})
	t.Run("run with several shards and no place among them says how to give one.", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), []string{"run", "--config.file", path, "--shard.count", "3"}, &stdout, &stderr)
		want := "--shard.count 3 needs --shard.index or --shard.ordinal (OUTBOX_CANARY_SHARD_INDEX or OUTBOX_CANARY_SHARD_ORDINAL; in a StatefulSet, the pod's name)"
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), want) {
			t.Errorf("err %v, stderr %q; want a usage error saying %q", err, stderr.String(), want)
		}
	})
}

// The generated rules and dashboards are the whole file's: a sharded
// prober's environment (as the chart's StatefulSet sets it) changes
// nothing in them, so every shard's pod, or a CI job, writes the same.
func TestRulesAndDashboardsDoNotChangeWithSharding(t *testing.T) {
	generate := func(t *testing.T) (rules, dashboards string) {
		t.Helper()
		dir := t.TempDir()
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), []string{"rules", "--config.file", "../../examples/outbox-canary.yml", "--format", "rules", "--out", filepath.Join(dir, "rules.yml")}, &stdout, &stderr); err != nil {
			t.Fatalf("rules: %v\n%s", err, stderr.String())
		}
		if err := Run(context.Background(), []string{"dashboards", "--config.file", "../../examples/outbox-canary.yml", "--out", filepath.Join(dir, "dashboards")}, &stdout, &stderr); err != nil {
			t.Fatalf("dashboards: %v\n%s", err, stderr.String())
		}
		r, err := os.ReadFile(filepath.Join(dir, "rules.yml"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := os.ReadFile(filepath.Join(dir, "dashboards", "outbox-canary-slo-overview.json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(r), string(d)
	}
	rules, dashboards := generate(t)
	t.Setenv(envShardCount, "3")
	t.Setenv(envShardOrdinal, "outbox-canary-4")
	t.Setenv("OUTBOX_CANARY_INSTANCE_ID", "outbox-canary-4")
	shardedRules, shardedDashboards := generate(t)
	if shardedRules != rules {
		t.Error("the rules differ in a sharded prober's environment")
	}
	if shardedDashboards != dashboards {
		t.Error("the dashboards differ in a sharded prober's environment")
	}
	// And the assignment of the example's pipelines spreads them over the
	// three shards, so this is not the trivial case of one shard owning all.
	if got := shard.Assign([]string{"orders", "payments", "shipments"}, 3); len(got[1]) != 1 || len(got[2]) != 2 {
		t.Errorf("the example's pipelines among 3 shards: %v", got)
	}
}

// Three shards of two replicas on the stack, as the chart's sharded mode
// runs them: six services in this process, each told its place by a
// StatefulSet pod name, on 30 pipelines sharing one outbox table, one
// reference relay and one canary topic. Each pipeline's canaries must come
// from exactly two instances (its shard's replicas), each instance must
// insert canaries for all of its shard's pipelines and no other's, and
// each must judge its own canaries good end to end, whatever the other
// five put on the topic.
func TestThreeShardsOfTwoReplicasOnTheStackMeasureEveryPipelineTwice(t *testing.T) {
	s := stacktest.Load(t)
	const shards, replicas, pipelines = 3, 2, 30
	dsn, pool := s.FreshOutbox(t, stacktest.SeedA)
	topic := s.NewTopic(t, 1, nil)
	w := relay.NewKafkaWriter(s.KafkaBrokers)
	t.Cleanup(func() { _ = w.Close() })
	r, err := relay.New(relay.Config{TopicTemplate: topic, PollInterval: 20 * time.Millisecond}, pool, w, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = r.Run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })
	path := fleetConfig(t, pipelines, dsn, strings.Join(s.KafkaBrokers, ","), topic, "2s")

	want := map[string][]string{} // pipeline -> the instances that must measure it
	names := make([]string, pipelines)
	for i := range names {
		names[i] = fmt.Sprintf("p%03d", i)
	}
	var stops []func()
	addrs := map[string]string{}  // pod -> its HTTP address
	owns := map[string][]string{} // pod -> its pipelines
	for ordinal := range shards * replicas {
		pod := fmt.Sprintf("outbox-canary-%d", ordinal)
		owns[pod] = (shard.Shard{Index: ordinal % shards, Count: shards}).Select(names)
		for _, n := range owns[pod] {
			want[n] = append(want[n], pod)
		}
		addr, stderr, cancel, done := startRun(t, path, "--shard.count", fmt.Sprint(shards), "--shard.ordinal", pod,
			"--instance.id", pod, "--state.dir", filepath.Join(t.TempDir(), pod))
		addrs[pod] = addr
		stops = append(stops, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: run: %v\n%s", pod, err, stderr.String())
			}
		})
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()

	// Canaries every 2s at each pipeline's own phase. Done when every
	// pipeline has two canaries from each of two instances: by then every
	// instance has been through all its pipelines' schedules twice, so one
	// that inserted for another shard's pipeline would have shown it. The
	// deadline is for a loaded machine; idle, it takes a few seconds.
	got := map[string][]string{}
	deadline := time.Now().Add(90 * time.Second)
	for {
		rows, err := pool.Query(context.Background(),
			`SELECT payload->>'pipeline', payload->>'instance', count(*) FROM outbox GROUP BY 1, 2 ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string][]string{}
		twice := map[string]int{} // pipeline -> instances with two canaries or more
		for rows.Next() {
			var p, instance string
			var n int
			if err := rows.Scan(&p, &instance, &n); err != nil {
				t.Fatal(err)
			}
			got[p] = append(got[p], instance)
			if n >= 2 {
				twice[p]++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		complete := true
		for _, n := range names {
			complete = complete && twice[n] >= replicas
		}
		if complete || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, n := range names {
		w := want[n]
		slices.Sort(w)
		if !slices.Equal(got[n], w) {
			t.Errorf("pipeline %s: canaries inserted by %v, want exactly %v", n, got[n], w)
		}
	}
	if len(got) != pipelines {
		t.Errorf("canaries of %d pipelines, want %d: %v", len(got), pipelines, got)
	}
	t.Logf("30 pipelines, 3 shards × 2 replicas: %v", got)

	// Each prober judges its own canaries through the relay and the shared
	// topic: a good end-to-end event for each of its pipelines, and no
	// series at all for another shard's.
	good := regexp.MustCompile(`outbox_canary_sli_events_total\{outcome="good",pipeline="(p\d+)",segment="end_to_end"\} [1-9]`)
	series := regexp.MustCompile(`pipeline="(p\d+)"`)
	for pod, addr := range addrs {
		stacktest.Eventually(t, 90*time.Second, pod+"'s pipelines judged good", func() (bool, string) {
			_, body := httpGet("http://" + addr + "/metrics")
			judged := map[string]bool{}
			for _, m := range good.FindAllStringSubmatch(body, -1) {
				judged[m[1]] = true
			}
			var missing []string
			for _, n := range owns[pod] {
				if !judged[n] {
					missing = append(missing, n)
				}
			}
			for _, m := range series.FindAllStringSubmatch(body, -1) {
				if !slices.Contains(owns[pod], m[1]) {
					t.Errorf("%s exports series of %s, another shard's pipeline", pod, m[1])
					return true, ""
				}
			}
			return len(missing) == 0, "no good end_to_end event yet for " + strings.Join(missing, ", ")
		})
	}
}

// A shard that no pipeline hashes to (more shards than pipelines, or an
// unlucky split) still serves: its build_info keeps the dead man quiet
// and its readiness lets a rollout of the StatefulSet go on.
func TestAShardWithoutPipelinesServesMetricsOnly(t *testing.T) {
	path := fleetConfig(t, 1, "postgres://u@"+stacktest.ClosedAddr(t)+"/db", stacktest.ClosedAddr(t), "canaries", "10s")
	// p000 is shard 1 of 3 (TestThreeShardsOfTwoReplicasMeasureEveryPipelineExactlyTwice's split): shard 0 has none.
	addr, stderr, cancel, done := startRun(t, path, "--shard.count", "3", "--shard.index", "0", "--state.dir", t.TempDir())
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v\n%s", err, stderr.String())
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := httpGet("http://" + addr + "/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q; want 200 in time\n%s", code, body, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := httpGet("http://" + addr + "/metrics"); code != 200 || !strings.Contains(body, "outbox_canary_build_info{") || strings.Contains(body, `pipeline="p000"`) {
		t.Errorf("/metrics = %d, want build_info and no series of p000:\n%.2000s", code, body)
	}
	if !strings.Contains(stderr.String(), "no pipeline of the file hashes to this shard") {
		t.Errorf("no warning that the shard is empty:\n%s", stderr.String())
	}
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
