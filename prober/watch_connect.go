package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ConnectorStatus is Kafka Connect's view of a connector
// (GET /connectors/{name}/status).
type ConnectorStatus struct {
	Name      string `json:"name"`
	Connector struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

// Running reports whether the connector and every task run. A connector
// without tasks is not running: nothing reads the WAL.
func (s ConnectorStatus) Running() bool {
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
func (s ConnectorStatus) FailedTasks() int {
	n := 0
	for _, t := range s.Tasks {
		if t.State == "FAILED" {
			n++
		}
	}
	return n
}

// Summary is a one-line description for logs and diagnose.
func (s ConnectorStatus) Summary() string {
	states := make([]string, 0, len(s.Tasks))
	for _, t := range s.Tasks {
		states = append(states, fmt.Sprintf("task %d %s", t.ID, t.State))
	}
	if len(states) == 0 {
		states = append(states, "no tasks")
	}
	return fmt.Sprintf("connector %s %s (%s)", s.Name, s.Connector.State, strings.Join(states, ", "))
}

// QueryConnector asks the Kafka Connect REST API for a connector's status.
func QueryConnector(ctx context.Context, client *http.Client, baseURL, connector string) (ConnectorStatus, error) {
	u := strings.TrimRight(baseURL, "/") + "/connectors/" + url.PathEscape(connector) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ConnectorStatus{}, fmt.Errorf("connector %s: %w", connector, err)
	}
	res, err := client.Do(req)
	if err != nil {
		return ConnectorStatus{}, fmt.Errorf("connector %s: Kafka Connect unreachable: %w", connector, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return ConnectorStatus{}, fmt.Errorf("connector %s: read status: %w", connector, err)
	}
	if res.StatusCode != http.StatusOK {
		return ConnectorStatus{}, fmt.Errorf("connector %s: Kafka Connect answered %s: %s", connector, res.Status, strings.TrimSpace(string(body)))
	}
	var st ConnectorStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return ConnectorStatus{}, fmt.Errorf("connector %s: decode status: %w", connector, err)
	}
	return st, nil
}
