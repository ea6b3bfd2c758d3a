package e2e

// TestImageRunsAsTheChartRunsIt runs the container image that `make image`
// builds (deploy/image.sh: the static binary on an empty base) with podman
// or docker, against the local stack, the way the Helm chart runs it: as
// 65532, a read-only root file system, no capabilities, the configuration
// and the secrets mounted read-only as files, the state directory a volume.
// `make test` builds the image first and names it in OUTBOX_CANARY_IMAGE;
// without it the test builds one. Where no container engine runs it skips
// (fails in CI).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// imageEnv names an image already built (by `make image`).
const imageEnv = "OUTBOX_CANARY_IMAGE"

// imageWait bounds each wait on the container: a start, a canary through
// the pipeline, a graceful stop. Measured here: a start to /readyz in
// under 2 s, a canary in 1 s; the rest is headroom for a loaded machine.
const imageWait = 90 * time.Second

// containerEngine runs docker or podman with deploy/image.sh's settings.
type containerEngine struct {
	name string
	env  []string
}

func (e containerEngine) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, e.name, args...)
	c.Env = append(os.Environ(), e.env...)
	return c
}

// run runs the engine and returns its output; it fails the test on an
// error.
func (e containerEngine) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.try(args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", e.name, strings.Join(args, " "), err, out)
	}
	return out
}

func (e containerEngine) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), imageWait)
	defer cancel()
	var out bytes.Buffer
	c := e.cmd(ctx, args...)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

// imageScript runs deploy/image.sh.
func imageScript(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "deploy", "image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command("bash", append([]string{script}, args...)...)
	c.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err = c.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("deploy/image.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// testImage returns the engine that runs here and the image to test,
// building it when OUTBOX_CANARY_IMAGE does not name one.
func testImage(t *testing.T) (containerEngine, string) {
	t.Helper()
	conf, err := filepath.Abs(filepath.Join("..", "deploy", "image", "containers.conf"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"CONTAINERS_CONF=" + conf}
	name, err := imageScript(t, env, "engine")
	if err != nil {
		stacktest.Unavailable(t, "no container engine runs here: %v", err)
	}
	e := containerEngine{name: strings.TrimSpace(name), env: env}
	image := os.Getenv(imageEnv)
	if image != "" {
		if out, err := e.try("image", "inspect", image); err != nil {
			t.Fatalf("%s=%s: %v\n%s", imageEnv, image, err, out)
		}
		return e, image
	}
	image = "localhost/outbox-canary:e2e-test"
	t.Logf("%s unset: building %s with deploy/image.sh build", imageEnv, image)
	if _, err := imageScript(t, append(env, "IMAGE="+image), "build"); err != nil {
		t.Fatal(err)
	}
	return e, image
}

func TestImageRunsAsTheChartRunsIt(t *testing.T) {
	t.Parallel()
	s := stacktest.Load(t)
	e, image := testImage(t)

	t.Run("--help and version exit 0", func(t *testing.T) {
		if out := e.run(t, "run", "--rm", "--network", "none", image, "--help"); !strings.Contains(out, "run") {
			t.Errorf("--help does not list the run command:\n%s", out)
		}
		want := e.run(t, "image", "inspect", "--format", `{{index .Config.Labels "org.opencontainers.image.version"}}`, image)
		if out := e.run(t, "run", "--rm", "--network", "none", image, "version"); !strings.Contains(out, strings.TrimSpace(want)) {
			t.Errorf("version says %q, the image's label %q", out, want)
		}
	})

	t.Run("run serves a good canary, as the chart runs it, and keeps its state across a restart", func(t *testing.T) {
		faults, cfg, _ := startPipeline(t, s)
		// The chart names the database by a file of the mounted Secret,
		// owned by the container's user: a copy of the file startPipeline
		// wrote.
		dsn, err := cfg.Pipelines[0].Database.DSN.Resolve()
		if err != nil {
			t.Fatal(err)
		}
		topic := cfg.Pipelines[0].Kafka.Topic
		dir := t.TempDir()
		configDir, secretDir := filepath.Join(dir, "config"), filepath.Join(dir, "secrets")
		for _, d := range []string{configDir, secretDir} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeOwned := func(path, content string, mode os.FileMode) {
			t.Helper()
			if err := os.WriteFile(path, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
			// As Kubernetes' fsGroup makes a Secret's files the pod's: the
			// container's user reads them, nobody else.
			if err := os.Chown(path, 65532, 65532); err != nil {
				t.Fatal(err)
			}
		}
		writeOwned(filepath.Join(secretDir, "signing-key"), "image-test-signing-key", 0o400)
		writeOwned(filepath.Join(secretDir, "orders-dsn"), dsn, 0o400)
		writeOwned(filepath.Join(configDir, "outbox-canary.yml"), fmt.Sprintf(`instance_id: image-test
signing_key: {file: /etc/outbox-canary/secrets/signing-key}
pipelines:
  - name: orders
    database: {dsn: {file: /etc/outbox-canary/secrets/orders-dsn}}
    canary: {schedule: "@every 2s"}
    kafka: {brokers: [%s], topic: %s}
    budgets: {end_to_end: 2m}
`, strings.Join(s.KafkaBrokers, ","), topic), 0o444)

		suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
		name, volume := "outbox-canary-test-"+suffix, "outbox-canary-state-"+suffix
		e.run(t, "volume", "create", volume)
		t.Cleanup(func() {
			if out, err := e.try("rm", "-f", "-t", "0", name); err != nil {
				t.Logf("rm %s: %v\n%s", name, err, out)
			}
			if out, err := e.try("volume", "rm", "-f", volume); err != nil {
				t.Logf("volume rm %s: %v\n%s", volume, err, out)
			}
		})
		// The chart's pod and container security contexts, and its mounts.
		e.run(t, "create", "--name", name, "--network", "host",
			"--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
			"-v", configDir+":/etc/outbox-canary/config:ro",
			"-v", secretDir+":/etc/outbox-canary/secrets:ro",
			"-v", volume+":/var/lib/outbox-canary",
			image, "run", "--config.file=/etc/outbox-canary/config/outbox-canary.yml",
			"--web.listen-address=127.0.0.1:0", "--state.dir=/var/lib/outbox-canary", "--log.level=info")

		e.run(t, "start", name)
		addr := containerAddr(t, e, name, 1)
		waitReady(t, e, name, addr)
		checkConfinement(t, e, name)
		waitMetric(t, e, name, addr, `outbox_canary_sli_events_total{outcome="good",pipeline="orders",segment="end_to_end"}`, 1)

		// Canaries in flight at the restart: the relay holds them until
		// the container is back, so only the state volume can make them
		// known canaries of this prober rather than foreign messages.
		faults.Pause()
		waitMetric(t, e, name, addr, `outbox_canary_canaries_in_flight{pipeline="orders"}`, 2)
		inFlight := inFlightIDs(t, addr)
		e.run(t, "stop", "-t", strconv.Itoa(int(imageWait.Seconds())), name)
		if code := strings.TrimSpace(e.run(t, "inspect", "--format", "{{.State.ExitCode}}", name)); code != "0" {
			t.Errorf("the container exited %s after SIGTERM, want 0:\n%s", code, e.run(t, "logs", name))
		}
		e.run(t, "start", name)
		addr = containerAddr(t, e, name, 2)
		waitReady(t, e, name, addr)
		if logs := e.run(t, "logs", name); !regexp.MustCompile(`msg="tracker state loaded".* canaries=[1-9]`).MatchString(logs) {
			t.Errorf("the restarted container did not load the state the first left in the volume:\n%s", logs)
		}
		faults.Resume()
		for _, id := range inFlight {
			stacktest.Eventually(t, imageWait, "canary "+id+", in flight at the restart, arrived", func() (bool, string) {
				state := canaryState(t, addr, id)
				return state == "arrived" || state == "late", "state " + state
			})
		}
		waitMetric(t, e, name, addr, `outbox_canary_sli_events_total{outcome="good",pipeline="orders",segment="end_to_end"}`, 1)
		if lost := metricValue(t, addr, `outbox_canary_canaries_lost_total{pipeline="orders"}`); lost != 0 {
			t.Errorf("%v canaries lost across the restart", lost)
		}
	})
}

// containerAddr reads the address run serves on from the container's log:
// the nth "serving" line (one per start).
func containerAddr(t *testing.T, e containerEngine, name string, nth int) string {
	t.Helper()
	serving := regexp.MustCompile(`msg="serving [^"]*" addresses=(127\.0\.0\.1:\d+)`)
	var addr string
	stacktest.Eventually(t, imageWait, "the container's start number "+strconv.Itoa(nth)+" serving", func() (bool, string) {
		logs, _ := e.try("logs", name)
		m := serving.FindAllStringSubmatch(logs, -1)
		if len(m) < nth {
			return false, logs
		}
		addr = m[nth-1][1]
		return true, ""
	})
	return addr
}

func httpGet(addr, path string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitReady(t *testing.T, e containerEngine, name, addr string) {
	t.Helper()
	stacktest.Eventually(t, imageWait, "/readyz 200", func() (bool, string) {
		code, body := httpGet(addr, "/readyz")
		if code == http.StatusOK {
			return true, ""
		}
		logs, _ := e.try("logs", "--tail", "20", name)
		return false, fmt.Sprintf("%d %s; log:\n%s", code, body, logs)
	})
}

// metricValue reads one sample of /metrics, 0 when absent.
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	_, body := httpGet(addr, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

func waitMetric(t *testing.T, e containerEngine, name, addr, series string, atLeast float64) {
	t.Helper()
	stacktest.Eventually(t, imageWait, fmt.Sprintf("%s >= %g", series, atLeast), func() (bool, string) {
		if v := metricValue(t, addr, series); v >= atLeast {
			return true, ""
		}
		logs, _ := e.try("logs", "--tail", "20", name)
		return false, "log:\n" + logs
	})
}

// apiStatus is the part of /api/status the test reads.
type apiStatus struct {
	Pipelines []struct {
		InFlight []struct {
			ID string `json:"id"`
		} `json:"in_flight_canaries"`
		Recent []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"recent"`
	} `json:"pipelines"`
}

func readStatus(t *testing.T, addr string) apiStatus {
	t.Helper()
	code, body := httpGet(addr, "/api/status")
	var st apiStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || len(st.Pipelines) != 1 {
		t.Fatalf("/api/status = %d:\n%.1000s", code, body)
	}
	return st
}

func inFlightIDs(t *testing.T, addr string) []string {
	t.Helper()
	var ids []string
	for _, c := range readStatus(t, addr).Pipelines[0].InFlight {
		ids = append(ids, c.ID)
	}
	if len(ids) == 0 {
		t.Fatal("/api/status lists no canary in flight")
	}
	return ids
}

// canaryState is a canary's state on /api/status, "" when it is not there.
func canaryState(t *testing.T, addr, id string) string {
	t.Helper()
	st := readStatus(t, addr)
	for _, c := range st.Pipelines[0].InFlight {
		if c.ID == id {
			return "in_flight"
		}
	}
	for _, c := range st.Pipelines[0].Recent {
		if c.ID == id {
			return c.State
		}
	}
	return ""
}

// checkConfinement reads, from the host's /proc, what the container's
// process runs as: user 65532, no effective capabilities, a read-only root.
func checkConfinement(t *testing.T, e containerEngine, name string) {
	t.Helper()
	pid := strings.TrimSpace(e.run(t, "inspect", "--format", "{{.State.Pid}}", name))
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatalf("the container's process: %v", err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`),
		regexp.MustCompile(`(?m)^Gid:\s+65532\s+65532\s+65532\s+65532$`),
		regexp.MustCompile(`(?m)^CapEff:\s+0+$`),
		regexp.MustCompile(`(?m)^CapPrm:\s+0+$`),
		regexp.MustCompile(`(?m)^NoNewPrivs:\s+1$`),
	} {
		if !want.Match(status) {
			t.Errorf("the container's process status lacks %s:\n%s", want, status)
		}
	}
	mounts, err := os.ReadFile(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	root := regexp.MustCompile(`(?m)^\S+ \S+ \S+ \S+ / (ro|rw)[, ]`).FindSubmatch(mounts)
	if root == nil || string(root[1]) != "ro" {
		t.Errorf("the container's root file system is not read-only:\n%s", mounts)
	}
}
