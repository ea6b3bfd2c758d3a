package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// stageOf returns the named stage of a diagnosis.
func stageOf(t *testing.T, d Diagnosis, name string) StageResult {
	t.Helper()
	for _, s := range d.Stages {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no stage %q in %+v", name, d)
	return StageResult{}
}

func logDiagnosis(t *testing.T, d Diagnosis) {
	t.Helper()
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatalf("json: %v", err)
	}
	t.Logf("diagnosis:\n%s", out)
}

// assertFirstUnhealthy checks the walk stopped at stage: every stage before
// it checked and not unhealthy, it unhealthy with evidence and a next step,
// every stage after it not checked.
func assertFirstUnhealthy(t *testing.T, d Diagnosis, stage string) {
	t.Helper()
	if d.Healthy || d.FirstUnhealthy != stage {
		t.Fatalf("healthy %t, first unhealthy %q; want stage %q", d.Healthy, d.FirstUnhealthy, stage)
	}
	order := []string{StageCommit, StageRelay, StageSlot, StageBroker, StageConsumers}
	if len(d.Stages) != len(order) {
		t.Fatalf("%d stages, want %d", len(d.Stages), len(order))
	}
	after := false
	for i, s := range d.Stages {
		switch {
		case s.Name != order[i]:
			t.Errorf("stage %d is %q, want %q", i+1, s.Name, order[i])
		case s.Name == stage:
			after = true
			if s.Status != StatusUnhealthy || s.Healthy || len(s.Evidence) == 0 || s.NextStep == "" {
				t.Errorf("stage %q: %+v, want unhealthy with evidence and a next step", s.Name, s)
			}
		case after && s.Status != StatusNotChecked:
			t.Errorf("stage %q after the unhealthy one was checked: %+v", s.Name, s)
		case !after && (!s.Healthy || s.Status == StatusUnhealthy):
			t.Errorf("stage %q before the unhealthy one: %+v", s.Name, s)
		}
	}
}

func TestDiagnoseNamesTheCommitStageWhenTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: "postgres://u:hunter2@" + stacktest.ClosedAddr(t) + "/x", Schema: stacktest.SeedA,
		Brokers: []string{stacktest.ClosedAddr(t)}})
	d := Pipeline(context.Background(), p, Options{StageTimeout: 5 * time.Second})
	logDiagnosis(t, d)
	assertFirstUnhealthy(t, d, StageCommit)
	s := stageOf(t, d, StageCommit)
	if !strings.Contains(strings.Join(s.Evidence, "\n"), "connect") {
		t.Errorf("the evidence does not carry the connection error: %q", s.Evidence)
	}
	if !strings.Contains(s.NextStep, "DSN") {
		t.Errorf("next step %q does not point at the DSN", s.NextStep)
	}
	if out, _ := json.Marshal(d); strings.Contains(string(out), "hunter2") {
		t.Errorf("the diagnosis shows the password: %s", out)
	}
}

func TestDiagnoseOfACDCPipeline(t *testing.T) {
	t.Parallel()
	st := stacktest.Load(t)
	connectorState := func(state string) string {
		return fmt.Sprintf(`{"name":"outbox","connector":{"state":"RUNNING","worker_id":"w"},"tasks":[{"id":0,"state":%q,"worker_id":"w","trace":"boom"}],"type":"source"}`, state)
	}
	cases := []struct {
		name      string
		task      string // the connector task's state
		slot      bool   // create an inactive slot
		wantStage string // "" for healthy
	}{
		{"A failed connector task names the relay stage.", "FAILED", true, StageRelay},
		{"A running connector with an inactive slot names the replication slot stage.", "RUNNING", true, StageSlot},
		{"A running connector without any slot names the replication slot stage.", "RUNNING", false, StageSlot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/connectors/outbox/status" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, connectorState(tc.task))
			}))
			t.Cleanup(connect.Close)
			dsn, pool := st.FreshOutbox(t, stacktest.SeedDebezium)
			if tc.slot {
				slot := "diag_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
				if _, err := pool.Exec(context.Background(), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
					t.Fatalf("create slot: %v", err)
				}
				stacktest.DropSlotOnCleanup(t, pool, slot)
			}
			p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedDebezium, Brokers: st.KafkaBrokers, IDGen: "uuid",
				Watch: fmt.Sprintf("{connect_url: %q, connector: outbox}", connect.URL)})
			d := Pipeline(context.Background(), p, Options{})
			logDiagnosis(t, d)
			assertFirstUnhealthy(t, d, tc.wantStage)
		})
	}
}

func TestDiagnoseJudgesTheConfiguredSlotOnly(t *testing.T) {
	t.Parallel()
	sp := stacktest.Load(t).NewSlotPair(t)
	ctx := context.Background()
	for _, tc := range []struct {
		slot    string
		healthy bool
		seen    []string // slots named in the evidence
		unseen  []string
	}{
		{sp.Ours, true, []string{sp.Ours}, []string{sp.Leftover}},
		{"", false, []string{sp.Ours, sp.Leftover}, nil},
		{"missing_" + sp.Suffix, false, []string{"missing_" + sp.Suffix + " (watch.slot) does not exist"}, []string{sp.Ours, sp.Leftover}},
	} {
		spec := stacktest.PipelineSpec{DSN: sp.DSN, Schema: stacktest.SeedDebezium, IDGen: "uuid"}
		if tc.slot != "" {
			spec.Watch = fmt.Sprintf("{slot: %s}", tc.slot)
		}
		p := stacktest.LoadPipeline(t, spec)
		r := checkSlot(ctx, p, Probes{DB: sp.Pool}, Options{}.withDefaults())
		ev := strings.Join(r.Evidence, "\n")
		if r.Healthy != tc.healthy || (!r.Healthy && r.NextStep == "") {
			t.Errorf("watch.slot %q: healthy %t (next step %q), want %t:\n%s", tc.slot, r.Healthy, r.NextStep, tc.healthy, ev)
		}
		for _, s := range tc.seen {
			if !strings.Contains(ev, s) {
				t.Errorf("watch.slot %q: the evidence does not name %s:\n%s", tc.slot, s, ev)
			}
		}
		for _, s := range tc.unseen {
			if strings.Contains(ev, s) {
				t.Errorf("watch.slot %q: the evidence names %s, which is not the pipeline's slot:\n%s", tc.slot, s, ev)
			}
		}
	}
}
