package watch

import (
	"fmt"
	"strings"

	"github.com/outbox-canary/outbox-canary/internal/connect"
)

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
func (r *restartTracker) observe(st connect.Status) []string {
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
