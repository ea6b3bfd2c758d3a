package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readyTimeout bounds the wait for a server's /-/ready. Generous: the
// machine has two cores shared with other test runs.
const readyTimeout = 60 * time.Second

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// server is a Prometheus or Alertmanager process started by the test.
type server struct {
	name, addr, logPath string
}

// startServer runs bin with args in a process group of its own, its output
// in a log file. When the test ends the whole group is killed (the servers
// keep nothing the test needs), and the log is printed if the test failed.
func startServer(t *testing.T, name, bin, addr string, args ...string) *server {
	t.Helper()
	dir := t.TempDir() // registered before the kill below, so removed after it
	s := &server{name: name, addr: addr, logPath: filepath.Join(dir, name+".log")}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s (%s): %v", name, bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Negative pid: the process group, so no child outlives the test.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) did not exit after SIGKILL", name, cmd.Process.Pid)
		}
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(s.logPath)
			t.Logf("%s log (%s):\n%s", name, s.logPath, out)
		}
	})
	return s
}

// waitReady polls the server's /-/ready until it answers 200.
func (s *server) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	var last string
	for {
		resp, err := http.Get("http://" + s.addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s not ready within %s: %s", s.name, s.addr, readyTimeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promAlert is one entry of Prometheus's /api/v1/alerts.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"` // pending or firing
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

// promAlerts returns the alerts that Prometheus holds as pending or firing.
func promAlerts(ctx context.Context, addr string) ([]promAlert, error) {
	var out struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := promAPI(ctx, addr, "/api/v1/alerts", &out); err != nil {
		return nil, err
	}
	return out.Alerts, nil
}

// promSample is one series of an instant vector.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// promQuery evaluates an instant query that returns a vector.
func promQuery(ctx context.Context, addr, query string) ([]promSample, error) {
	var out struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"` // [unix time, "value"]
		} `json:"result"`
	}
	if err := promAPI(ctx, addr, "/api/v1/query?query="+url.QueryEscape(query), &out); err != nil {
		return nil, err
	}
	if out.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %q, want vector", query, out.ResultType)
	}
	samples := make([]promSample, 0, len(out.Result))
	for _, r := range out.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", query, r.Value[1], err)
		}
		samples = append(samples, promSample{Metric: r.Metric, Value: v})
	}
	return samples, nil
}

// promSeries is one series of a range vector or a range query.
type promSeries struct {
	Metric map[string]string
	Values []promPoint
}

type promPoint struct {
	T time.Time
	V float64
}

// promMatrix evaluates an instant query that returns a range vector.
func promMatrix(ctx context.Context, addr, query string) ([]promSeries, error) {
	return promMatrixAPI(ctx, addr, "/api/v1/query?query="+url.QueryEscape(query), query)
}

// promQueryRange evaluates query at every step from start to end.
func promQueryRange(ctx context.Context, addr, query string, start, end time.Time, step time.Duration) ([]promSeries, error) {
	q := url.Values{"query": {query}, "start": {formatPromTime(start)}, "end": {formatPromTime(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	return promMatrixAPI(ctx, addr, "/api/v1/query_range?"+q.Encode(), query)
}

func formatPromTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// promMatrixAPI GETs an API path whose result is a matrix.
func promMatrixAPI(ctx context.Context, addr, path, query string) ([]promSeries, error) {
	var out struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"` // [unix time, "value"]
		} `json:"result"`
	}
	if err := promAPI(ctx, addr, path, &out); err != nil {
		return nil, err
	}
	if out.ResultType != "matrix" {
		return nil, fmt.Errorf("query %s: result type %q, want matrix", query, out.ResultType)
	}
	var series []promSeries
	for _, r := range out.Result {
		s := promSeries{Metric: r.Metric}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("query %s: value %v: %w", query, v[1], err)
			}
			s.Values = append(s.Values, promPoint{time.UnixMilli(int64(math.Round(ts * 1000))), f})
		}
		series = append(series, s)
	}
	return series, nil
}

// apiTimeout bounds one call to Prometheus's or Alertmanager's API. The
// callers poll and fail the test on an error, so it is room for a server
// slowed by a loaded machine, not a deadline for a behaviour.
const apiTimeout = 20 * time.Second

// promAPI GETs a Prometheus API path and decodes the data of its envelope.
func promAPI(ctx context.Context, addr, path string, data any) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, env.Error)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("GET %s: data: %w", path, err)
	}
	return nil
}

// notification is one alert of an Alertmanager webhook call (webhook
// payload version 4), with the moment the test received it and the
// receiver and group it was sent for.
type notification struct {
	Received time.Time
	Receiver string
	GroupKey string
	Status   string            `json:"status"` // firing or resolved
	Labels   map[string]string `json:"labels"`
	StartsAt time.Time         `json:"startsAt"`
	EndsAt   time.Time         `json:"endsAt"`
}

// delivery is one webhook call: what an on-call engineer is sent at once.
type delivery struct {
	Received time.Time
	Receiver string         `json:"receiver"`
	Status   string         `json:"status"` // firing while any alert of the group fires
	GroupKey string         `json:"groupKey"`
	Alerts   []notification `json:"alerts"`
}

// webhook is the Alertmanager receiver: it records every notification, so
// the test sees what an on-call engineer would be sent.
type webhook struct {
	srv *httptest.Server
	mu  sync.Mutex
	all []delivery
	bad []string // payloads that did not decode
}

func newWebhook(t *testing.T) *webhook {
	t.Helper()
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var d delivery
		if err == nil {
			err = json.Unmarshal(body, &d)
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.bad = append(w.bad, fmt.Sprintf("%v: %s", err, body))
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		d.Received = now
		for i := range d.Alerts {
			d.Alerts[i].Received, d.Alerts[i].Receiver, d.Alerts[i].GroupKey = now, d.Receiver, d.GroupKey
		}
		w.all = append(w.all, d)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// url is where the receiver named name posts: the path only tells
// receivers apart in the server's log; the payload names the receiver.
func (w *webhook) url(name string) string { return w.srv.URL + "/" + name }

// deliveries returns the webhook calls received so far, and the payloads
// that did not decode.
func (w *webhook) deliveries() ([]delivery, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]delivery(nil), w.all...), append([]string(nil), w.bad...)
}

// notifications returns every alert of every call received so far, and
// the payloads that did not decode.
func (w *webhook) notifications() ([]notification, []string) {
	ds, bad := w.deliveries()
	var out []notification
	for _, d := range ds {
		out = append(out, d.Alerts...)
	}
	return out, bad
}

// amAlert is one entry of Alertmanager's /api/v2/alerts.
type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State       string   `json:"state"` // active, suppressed or unprocessed
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status"`
}

// amAlerts returns the alerts Alertmanager holds, with whether each is
// suppressed (inhibited or silenced).
func amAlerts(ctx context.Context, addr string) ([]amAlert, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v2/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /api/v2/alerts: %s: %s", resp.Status, body)
	}
	var out []amAlert
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET /api/v2/alerts: %w", err)
	}
	return out, nil
}

// promRuleGroups returns the last evaluation time of each rule group.
func promRuleGroups(ctx context.Context, addr string) (map[string]time.Time, error) {
	var out struct {
		Groups []struct {
			Name           string    `json:"name"`
			LastEvaluation time.Time `json:"lastEvaluation"`
		} `json:"groups"`
	}
	if err := promAPI(ctx, addr, "/api/v1/rules", &out); err != nil {
		return nil, err
	}
	m := map[string]time.Time{}
	for _, g := range out.Groups {
		m[g.Name] = g.LastEvaluation
	}
	return m, nil
}

// promConfig is what a test's Prometheus scrapes and evaluates.
type promConfig struct {
	// scrape and eval are the global scrape and evaluation intervals.
	scrape, eval time.Duration
	ruleFiles    []string
	// job and targets: the prober, scraped under the job the generated
	// dead man watches.
	job     string
	targets []string
	// alertmanager is the address alerts are sent to, and
	// moreAlertmanagers others that get them too.
	alertmanager      string
	moreAlertmanagers []string
}

// startPrometheus starts Prometheus on a free loopback port with a data
// directory of its own, so every start is a fresh server.
func startPrometheus(t *testing.T, bin string, c promConfig) *server {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	var rules, targets []string
	for _, r := range c.ruleFiles {
		rules = append(rules, strconv.Quote(r))
	}
	for _, a := range c.targets {
		targets = append(targets, strconv.Quote(a))
	}
	var ams []string
	for _, a := range append([]string{c.alertmanager}, c.moreAlertmanagers...) {
		ams = append(ams, strconv.Quote(a))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
  evaluation_interval: %s
rule_files: [%s]
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%s]
scrape_configs:
  - job_name: %q
    static_configs:
      - targets: [%s]
`, c.scrape, min(c.scrape, 10*time.Second), c.eval, strings.Join(rules, ", "), strings.Join(ams, ", "), c.job, strings.Join(targets, ", "))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	return startServer(t, "prometheus", bin, addr,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info")
}

// startAlertmanager starts Alertmanager with the configuration cfg on a
// free loopback port, with a data directory of its own and no gossip.
func startAlertmanager(t *testing.T, bin string, cfg []byte) *server {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	return startServer(t, "alertmanager", bin, addr,
		"--config.file="+cfgPath,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=", // no gossip: a single instance
		"--log.level=info")
}
