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

// Kafka Connect states (connector and task) that the restart count reads.
const (
	connectRunning    = "RUNNING"
	connectFailed     = "FAILED"
	connectUnassigned = "UNASSIGNED"
	connectRestarting = "RESTARTING"
	// connectAbsent stands for a task that a status listed before and no
	// longer lists: Connect stopped it.
	connectAbsent = ""
)

// restartTracker counts the restarts of a connector and its tasks that
// sampling GET /connectors/{name}/status can see, for
// outbox_canary_connector_restarts_total. An instance (the connector, or
// one task) counts one restart when a sample sees it RUNNING and the
// previous sample that reached Connect saw it
//
//   - FAILED or RESTARTING: a failed instance only runs again once it is
//     restarted;
//   - UNASSIGNED or (a task) not listed at all, after it had been seen
//     RUNNING: it was stopped and started again (a first start, from
//     UNASSIGNED to RUNNING, is not a restart);
//   - RUNNING on another worker_id: it was stopped on one worker and
//     started on another (a rebalance, or a worker's death).
//
// It is a lower bound, not a count of every restart: a restart that
// completes between two samples on the same worker is invisible to
// polling, and so is one while Connect cannot be reached (a failed sample
// keeps the last state seen, so FAILED, unreachable, RUNNING still counts
// once). The first sample only sets the baseline, and resuming a PAUSED or
// STOPPED connector is an operator's action, not counted.
type restartTracker struct {
	last map[string]connectInstance // "connector", "task 0", ...
}

type connectInstance struct {
	state, worker string
	ran           bool // seen RUNNING in this or an earlier sample
}

// observe records a status and returns the instances that it shows
// restarted since the previous one, e.g. ["task 0"].
func (r *restartTracker) observe(st ConnectorStatus) []string {
	type seen struct{ key, state, worker string }
	cur := []seen{{"connector", st.Connector.State, st.Connector.WorkerID}}
	for _, t := range st.Tasks {
		cur = append(cur, seen{fmt.Sprintf("task %d", t.ID), t.State, t.WorkerID})
	}
	next := make(map[string]connectInstance, len(cur))
	var restarted []string
	for _, c := range cur {
		prev, ok := r.last[c.key]
		now := connectInstance{state: c.state, worker: c.worker, ran: prev.ran || c.state == connectRunning}
		if ok && restartedBetween(prev, now) {
			restarted = append(restarted, c.key)
		}
		next[c.key] = now
	}
	// A task the status no longer lists has been stopped.
	for key, prev := range r.last {
		if _, ok := next[key]; !ok && strings.HasPrefix(key, "task ") {
			next[key] = connectInstance{state: connectAbsent, ran: prev.ran}
		}
	}
	r.last = next
	return restarted
}

func restartedBetween(prev, cur connectInstance) bool {
	if cur.state != connectRunning {
		return false
	}
	switch prev.state {
	case connectFailed, connectRestarting:
		return true
	case connectUnassigned, connectAbsent:
		return prev.ran
	case connectRunning:
		return prev.worker != "" && cur.worker != "" && prev.worker != cur.worker
	}
	return false
}
