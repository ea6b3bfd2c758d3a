// Package connect reads the Kafka Connect REST API: a connector's status
// (for the watchers and diagnose) and its configuration (for lint).
package connect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Status is Kafka Connect's view of a connector
// (GET /connectors/{name}/status).
type Status struct {
	Name      string `json:"name"`
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"tasks"`
}

// Running reports whether the connector and every task run. A connector
// without tasks is not running: nothing reads the WAL.
func (s Status) Running() bool {
	if s.Connector.State != "RUNNING" || len(s.Tasks) == 0 {
		return false
	}
	for _, t := range s.Tasks {
		if t.State != "RUNNING" {
			return false
		}
	}
	return true
}

// FailedTasks counts tasks in state FAILED.
func (s Status) FailedTasks() int {
	n := 0
	for _, t := range s.Tasks {
		if t.State == "FAILED" {
			n++
		}
	}
	return n
}

// TraceLines are the shortened traces of the connector and of each task
// that has one, one line each: "connector trace: …", "task 0 trace: …".
func (s Status) TraceLines() []string {
	var lines []string
	if s.Connector.Trace != "" {
		lines = append(lines, "connector trace: "+TraceSummary(s.Connector.Trace))
	}
	for _, t := range s.Tasks {
		if t.Trace != "" {
			lines = append(lines, fmt.Sprintf("task %d trace: %s", t.ID, TraceSummary(t.Trace)))
		}
	}
	return lines
}

// Summary is a one-line description for logs and diagnose.
func (s Status) Summary() string {
	states := make([]string, 0, len(s.Tasks))
	for _, t := range s.Tasks {
		states = append(states, fmt.Sprintf("task %d %s", t.ID, t.State))
	}
	if len(states) == 0 {
		states = append(states, "no tasks")
	}
	return fmt.Sprintf("connector %s %s (%s)", s.Name, s.Connector.State, strings.Join(states, ", "))
}

// QueryStatus asks the Kafka Connect REST API for a connector's status.
func QueryStatus(ctx context.Context, client *http.Client, baseURL, connector string) (Status, error) {
	u := strings.TrimRight(baseURL, "/") + "/connectors/" + url.PathEscape(connector) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Status{}, fmt.Errorf("connector %s: %w", connector, err)
	}
	res, err := client.Do(req)
	if err != nil {
		return Status{}, fmt.Errorf("connector %s: Kafka Connect unreachable: %w", connector, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return Status{}, fmt.Errorf("connector %s: read status: %w", connector, err)
	}
	if res.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("connector %s: Kafka Connect answered %s: %s", connector, res.Status, strings.TrimSpace(string(body)))
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return Status{}, fmt.Errorf("connector %s: decode status: %w", connector, err)
	}
	return st, nil
}
