package stacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-canary/outbox-canary/internal/connect"
)

// ConnectURLVar is the env file key that `deploy/local/connect.sh up`
// writes: the REST URL of the stack's Kafka Connect worker.
const ConnectURLVar = "OUTBOX_CANARY_CONNECT_URL"

// RecommendedConnectorFile is the recommended Debezium connector
// configuration, relative to the module root: what docs/cdc.md explains,
// the demo runs and the CDC tests start from.
const RecommendedConnectorFile = "deploy/local/connect/outbox-connector.json"

// connectorWait bounds the waits for a connector's state. Only a bound:
// the waits end at the event. Creating a replication slot waits for every
// transaction open on the server to end, and tests running alongside hold
// some open on purpose.
const connectorWait = 3 * time.Minute

// ConnectURL returns the Kafka Connect worker's URL. Without one (not in
// the env file, or not answering) the test is skipped, or fails with
// CI=true.
func (s Stack) ConnectURL(t testing.TB) string {
	t.Helper()
	u := s.Env[ConnectURLVar]
	why := ""
	if u == "" {
		why = ConnectURLVar + " is not in the stack's env file"
	} else if err := connectAnswers(u); err != nil {
		why = fmt.Sprintf("Kafka Connect at %s does not answer: %v", u, err)
	}
	if why == "" {
		return u
	}
	Unavailable(t, "stacktest: %s (run deploy/local/connect.sh up to run this test)", why)
	return ""
}

// ConnectMetricsURLVar is the env file key of the scrape URL of the
// worker's JMX exporter agent (Debezium's metrics), which
// `deploy/local/connect.sh up` writes beside ConnectURLVar.
const ConnectMetricsURLVar = "OUTBOX_CANARY_CONNECT_METRICS_URL"

// ConnectMetricsURL returns the scrape URL of the worker's JMX exporter.
// Without one (a stack set up before the exporter joined, or a worker
// started without it) the test is skipped, or fails with CI=true.
func (s Stack) ConnectMetricsURL(t testing.TB) string {
	t.Helper()
	u := s.Env[ConnectMetricsURLVar]
	why := ""
	if u == "" {
		why = ConnectMetricsURLVar + " is not in the stack's env file"
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if code, _, err := connectDo(ctx, http.MethodGet, u, nil); err != nil || code != http.StatusOK {
			why = fmt.Sprintf("the JMX exporter at %s does not answer: %d %v", u, code, err)
		}
	}
	if why == "" {
		return u
	}
	Unavailable(t, "stacktest: %s (run deploy/local/connect.sh up to run this test)", why)
	return ""
}

// connectAnswers asks the worker for its version, briefly: a test run
// without a worker skips at once.
func connectAnswers(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := connectDo(ctx, http.MethodGet, u+"/", nil)
	return err
}

// ConnectorNames are the unique names of one test's connector: its
// Connect name and topic prefix (dashes) and its slot and publication
// (underscores, as PostgreSQL wants them).
type ConnectorNames struct {
	Name        string
	TopicPrefix string
	Slot        string
}

// NewConnectorNames makes unique connector names from the test's name.
func NewConnectorNames(t testing.TB) ConnectorNames {
	name := "oc-" + uniqueName(t, "-", 60)
	return ConnectorNames{Name: name, TopicPrefix: name, Slot: "oc_" + uniqueName(t, "_", 48)}
}

// HeartbeatTopic is the topic Debezium writes this connector's heartbeats
// to under the default topic.heartbeat.prefix. The broker does not create
// topics, so a test that runs a connector with heartbeats creates it.
func (n ConnectorNames) HeartbeatTopic() string { return "__debezium-heartbeat." + n.TopicPrefix }

// RecommendedConnector reads the recommended connector configuration and
// fills in its placeholders: the database of dsn, the topic prefix and the
// slot (and publication) name.
func RecommendedConnector(t testing.TB, dsn string, names ConnectorNames) map[string]string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	path := filepath.Join(root, RecommendedConnectorFile)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("stacktest: recommended connector: %v", err)
	}
	cfg, err := RenderConnector(text, dsn, names)
	if err != nil {
		t.Fatalf("stacktest: %s: %v", path, err)
	}
	return cfg
}

var placeholderRE = regexp.MustCompile(`@[A-Z_]+@`)

// RenderConnector fills the @PLACEHOLDERS@ of a connector configuration
// in JSON, as deploy/local/demo.sh does with sed.
func RenderConnector(text []byte, dsn string, names ConnectorNames) (map[string]string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	pass, _ := u.User.Password()
	vars := map[string]string{
		"@PG_HOST@": u.Hostname(), "@PG_PORT@": u.Port(), "@PG_USER@": u.User.Username(), "@PG_PASSWORD@": pass,
		"@PG_DBNAME@": strings.TrimPrefix(u.Path, "/"), "@TOPIC_PREFIX@": names.TopicPrefix, "@SLOT@": names.Slot,
	}
	var unknown []string
	filled := placeholderRE.ReplaceAllFunc(text, func(p []byte) []byte {
		v, ok := vars[string(p)]
		if !ok {
			unknown = append(unknown, string(p))
			return p
		}
		quoted, _ := json.Marshal(v) // a string always marshals
		return quoted[1 : len(quoted)-1]
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown placeholders %v", unknown)
	}
	var cfg map[string]string
	if err := json.Unmarshal(filled, &cfg); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return cfg, nil
}

// Connector is one test's connector on the stack's worker. NewConnector
// creates it; when the test ends it is deleted and its replication slot
// dropped (an active slot blocks DROP DATABASE, a forgotten one pins WAL on
// the shared server forever).
type Connector struct {
	URL  string
	Name string
	// Slot is the replication slot dropped after the test. A test whose
	// connector names another connector's slot (to show the collision)
	// clears it, so that only the slot's owner waits for it and drops it.
	Slot   string
	Config map[string]string
	admin  string // the superuser DSN, for the slot
}

// NewConnector creates a connector with cfg (its slot.name is the slot
// dropped after the test) and returns at once: WaitRunning or
// WaitTaskFailed wait for what the test expects.
func (s Stack) NewConnector(t testing.TB, name string, cfg map[string]string) *Connector {
	t.Helper()
	c := &Connector{URL: s.ConnectURL(t), Name: name, Slot: cfg["slot.name"], Config: cfg, admin: s.PGAdminDSN}
	t.Cleanup(func() { c.delete(t) })
	c.Put(t)
	return c
}

// Put creates the connector, or gives it its configuration again (a
// standalone worker forgets connectors created over REST when it
// restarts; the connector then resumes from its stored offsets).
func (c *Connector) Put(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), connectorWait)
	defer cancel()
	code, body, err := connectDo(ctx, http.MethodPut, c.URL+"/connectors/"+url.PathEscape(c.Name)+"/config", c.Config)
	if err != nil || (code != http.StatusCreated && code != http.StatusOK) {
		t.Fatalf("stacktest: create connector %s: %d %s %v", c.Name, code, body, err)
	}
}

// Status is the connector's status now.
func (c *Connector) Status(ctx context.Context) (connect.Status, error) {
	return connect.QueryStatus(ctx, http.DefaultClient, c.URL, c.Name)
}

// WaitRunning waits until the connector and its task run and its slot is
// active (it streams), and returns how long that took. A task that fails
// fails the test with its trace.
func (c *Connector) WaitRunning(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	Eventually(t, connectorWait, "connector "+c.Name+" to run", func() (bool, string) {
		st, err := c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		c.fatalIfTaskFailed(t, st)
		return st.Running(), st.Summary()
	})
	if c.Slot != "" {
		Eventually(t, connectorWait, "slot "+c.Slot+" to be active", func() (bool, string) {
			active, exists, err := c.slotActive(ctx)
			return err == nil && active, fmt.Sprintf("exists %t, active %t, err %v", exists, active, err)
		})
	}
	took := time.Since(start)
	t.Logf("connector %s running, slot %s active, after %s", c.Name, c.Slot, took.Round(time.Millisecond))
	return took
}

// fatalIfTaskFailed fails the test with a failed task's trace: a task
// that failed does not recover, so waiting on it only spends the deadline.
func (c *Connector) fatalIfTaskFailed(t testing.TB, st connect.Status) {
	t.Helper()
	for _, task := range st.Tasks {
		if task.State == "FAILED" {
			t.Fatalf("stacktest: connector %s: task %d FAILED:\n%s", c.Name, task.ID, task.Trace)
		}
	}
}

// WaitTaskFailed waits until a task of the connector has FAILED and
// returns the status.
func (c *Connector) WaitTaskFailed(t testing.TB) connect.Status {
	t.Helper()
	var st connect.Status
	Eventually(t, connectorWait, "a task of connector "+c.Name+" to fail", func() (bool, string) {
		var err error
		st, err = c.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return st.FailedTasks() > 0, st.Summary()
	})
	return st
}

// slotActive looks the connector's slot up in the connector's database
// only: a slot of that name in another database is not this test's.
func (c *Connector) slotActive(ctx context.Context) (active, exists bool, err error) {
	conn, err := pgx.Connect(ctx, c.admin)
	if err != nil {
		return false, false, err
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND database = $2`,
		c.Slot, c.Config["database.dbname"]).Scan(&active)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	return active, err == nil, err
}

// delete removes the connector, waits until its walsender has let go of
// the slot, and drops the slot.
func (c *Connector) delete(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), connectorWait)
	defer cancel()
	code, body, err := connectDo(ctx, http.MethodDelete, c.URL+"/connectors/"+url.PathEscape(c.Name), nil)
	if err != nil || (code != http.StatusNoContent && code != http.StatusNotFound) {
		t.Errorf("stacktest: delete connector %s: %d %s %v", c.Name, code, body, err)
	}
	if c.Slot == "" {
		return
	}
	for {
		active, exists, err := c.slotActive(ctx)
		switch {
		case err != nil:
			t.Errorf("stacktest: slot %s: %v", c.Slot, err)
			return
		case !exists:
			return // never created (a task that failed first), or someone else's with the same name is gone
		case !active:
			conn, err := pgx.Connect(ctx, c.admin)
			if err != nil {
				t.Errorf("stacktest: drop slot %s: %v", c.Slot, err)
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, c.Slot); err != nil {
				t.Errorf("stacktest: drop slot %s: %v", c.Slot, err)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("stacktest: slot %s still active %s after deleting its connector", c.Slot, connectorWait)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connectDo sends one request to the worker's REST API and returns the
// status code and body.
func connectDo(ctx context.Context, method, u string, body any) (int, string, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, "", err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	// PUT validates the configuration, which for Debezium means connecting
	// to the database: slow on a loaded machine.
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if method == http.MethodGet && res.StatusCode != http.StatusOK {
		return res.StatusCode, string(b), fmt.Errorf("GET %s: %s", u, res.Status)
	}
	return res.StatusCode, string(b), nil
}

// Pause pauses the connector through the REST API, as an operator would,
// and waits until the connector and its tasks say PAUSED: its offsets stay,
// nothing is read meanwhile.
func (c *Connector) Pause(t testing.TB) { c.setState(t, "pause", "PAUSED") }

// Resume resumes a paused connector and waits until it runs.
func (c *Connector) Resume(t testing.TB) { c.setState(t, "resume", "RUNNING") }

func (c *Connector) setState(t testing.TB, verb, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), connectorWait)
	defer cancel()
	code, body, err := connectDo(ctx, http.MethodPut, c.URL+"/connectors/"+url.PathEscape(c.Name)+"/"+verb, nil)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("stacktest: %s connector %s: %d %s %v", verb, c.Name, code, body, err)
	}
	Eventually(t, connectorWait, "connector "+c.Name+" to be "+want, func() (bool, string) {
		st, err := c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		ok := st.Connector.State == want && len(st.Tasks) > 0
		for _, task := range st.Tasks {
			ok = ok && task.State == want
		}
		return ok, st.Summary()
	})
}
