package relay

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestTopicTemplate(t *testing.T) {
	tests := []struct {
		name     string
		template string
		data     TopicData
		want     string
		wantErr  string
	}{
		{
			name:     "The default template routes like Debezium's outbox event router.",
			template: DefaultTopicTemplate,
			data:     TopicData{Route: "order"},
			want:     "outbox.event.order",
		},
		{
			name:     "A template without actions sends every row to one topic.",
			template: "canary-topic",
			data:     TopicData{Route: "order"},
			want:     "canary-topic",
		},
		{
			name:     "A template can use the event type.",
			template: "{{.Route}}.{{.EventType}}",
			data:     TopicData{Route: "order", EventType: "OrderPaid"},
			want:     "order.OrderPaid",
		},
		{
			name:     "A template can branch on the route.",
			template: `{{if eq .Route "canary"}}outbox.canary{{else}}outbox.event.{{.Route}}{{end}}`,
			data:     TopicData{Route: "canary"},
			want:     "outbox.canary",
		},
		{
			name:     "A template that does not parse is rejected at start-up.",
			template: "outbox.{{.Route",
			wantErr:  "unclosed action",
		},
		{
			name:     "A template that names a missing field is rejected at start-up.",
			template: "outbox.{{.Aggregate}}",
			wantErr:  "can't evaluate field Aggregate",
		},
		{
			name:     "A template that renders an empty topic is rejected at start-up.",
			template: "{{if false}}x{{end}}",
			wantErr:  "empty topic",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := parseTopicTemplate(tt.template)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseTopicTemplate(%q) error = %v, want one containing %q", tt.template, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTopicTemplate(%q): %v", tt.template, err)
			}
			got, err := renderTopic(tmpl, tt.data)
			if err != nil {
				t.Fatalf("renderTopic: %v", err)
			}
			if got != tt.want {
				t.Errorf("topic = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildQueries(t *testing.T) {
	tests := []struct {
		name       string
		columns    Columns
		delete     bool
		wantClaim  string
		wantFinish string
		wantErr    string
	}{
		{
			name:       "Seed schema A claims by id and marks published_at with the database clock.",
			columns:    SchemaAColumns(),
			wantClaim:  `SELECT "id", "aggregate_type"::text, "aggregate_id"::text, "payload", "created_at" FROM "outbox" WHERE "published_at" IS NULL ORDER BY "id" LIMIT $1 FOR UPDATE SKIP LOCKED`,
			wantFinish: `UPDATE "outbox" SET "published_at" = clock_timestamp() WHERE "id" = ANY($1)`,
		},
		{
			name:       "Seed schema B routes by event_type and reads it a second time for the header.",
			columns:    SchemaBColumns(),
			wantClaim:  `SELECT "id", "event_type"::text, "aggregate_id"::text, "payload", "created_at", "event_type"::text FROM "outbox" WHERE "published_at" IS NULL ORDER BY "id" LIMIT $1 FOR UPDATE SKIP LOCKED`,
			wantFinish: `UPDATE "outbox" SET "published_at" = clock_timestamp() WHERE "id" = ANY($1)`,
		},
		{
			name:       "A schema-qualified table is quoted part by part.",
			columns:    Columns{Table: "sales.outbox"}.withDefaults(),
			wantClaim:  `SELECT "id", "aggregate_type"::text, "aggregate_id"::text, "payload", "created_at" FROM "sales"."outbox" WHERE "published_at" IS NULL ORDER BY "id" LIMIT $1 FOR UPDATE SKIP LOCKED`,
			wantFinish: `UPDATE "sales"."outbox" SET "published_at" = clock_timestamp() WHERE "id" = ANY($1)`,
		},
		{
			name:       "Identifiers with quotes and capitals cannot inject SQL.",
			columns:    Columns{Table: `Out"box`, Route: `x"; DROP TABLE outbox; --`}.withDefaults(),
			wantClaim:  `SELECT "id", "x""; DROP TABLE outbox; --"::text, "aggregate_id"::text, "payload", "created_at" FROM "Out""box" WHERE "published_at" IS NULL ORDER BY "id" LIMIT $1 FOR UPDATE SKIP LOCKED`,
			wantFinish: `UPDATE "Out""box" SET "published_at" = clock_timestamp() WHERE "id" = ANY($1)`,
		},
		{
			name:       "Deleting published rows replaces the update.",
			columns:    SchemaAColumns(),
			delete:     true,
			wantClaim:  `SELECT "id", "aggregate_type"::text, "aggregate_id"::text, "payload", "created_at" FROM "outbox" WHERE "published_at" IS NULL ORDER BY "id" LIMIT $1 FOR UPDATE SKIP LOCKED`,
			wantFinish: `DELETE FROM "outbox" WHERE "id" = ANY($1)`,
		},
		{
			name:    "A table name with three parts is rejected.",
			columns: Columns{Table: "db.sales.outbox"}.withDefaults(),
			wantErr: "want table or schema.table",
		},
		{
			name:    "A table name with an empty part is rejected.",
			columns: Columns{Table: "sales."}.withDefaults(),
			wantErr: "empty name part",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := buildQueries(tt.columns, tt.delete)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("buildQueries error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("buildQueries: %v", err)
			}
			if q.claim != tt.wantClaim {
				t.Errorf("claim query\n got: %s\nwant: %s", q.claim, tt.wantClaim)
			}
			if q.finish != tt.wantFinish {
				t.Errorf("finish query\n got: %s\nwant: %s", q.finish, tt.wantFinish)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{
			name: "A zero config polls seed schema A every 100ms in batches of 500.",
			check: func(t *testing.T, c Config) {
				if c.Columns != SchemaAColumns() || c.PollInterval != 100*time.Millisecond || c.BatchSize != 500 ||
					c.TopicTemplate != DefaultTopicTemplate || c.MaxBackoff != DefaultMaxBackoff || c.PublishTimeout != DefaultPublishTimeout {
					t.Errorf("defaults = %+v", c)
				}
			},
		},
		{
			name: "The backoff ceiling is never below the poll interval.",
			cfg:  Config{PollInterval: time.Minute, MaxBackoff: time.Second},
			check: func(t *testing.T, c Config) {
				if c.MaxBackoff != time.Minute {
					t.Errorf("MaxBackoff = %s, want 1m", c.MaxBackoff)
				}
			},
		},
		{name: "A negative poll interval is an error.", cfg: Config{PollInterval: -time.Second}, wantErr: "poll interval -1s: must not be negative"},
		{name: "A negative batch size is an error.", cfg: Config{BatchSize: -1}, wantErr: "batch size -1: must not be negative"},
		{name: "A negative publish timeout is an error.", cfg: Config{PublishTimeout: -time.Second}, wantErr: "publish timeout -1s: must not be negative"},
		{name: "A negative mark delay is an error.", cfg: Config{MarkDelay: -time.Second}, wantErr: "mark delay -1s: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.cfg.withDefaults()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestFaultPlans(t *testing.T) {
	tests := []struct {
		name      string
		drop, dup int
		batch     int
		want      faultPlan
		wantLeft  FaultState
		refund    bool
		wantAfter FaultState
	}{
		{
			name: "Drops come first, duplicates follow within the same batch.",
			drop: 1, dup: 2, batch: 5,
			want:     faultPlan{drop: 1, duplicate: 2},
			wantLeft: FaultState{},
		},
		{
			name: "A small batch consumes only part of the pending faults.",
			drop: 3, dup: 2, batch: 2,
			want:     faultPlan{drop: 2},
			wantLeft: FaultState{DropNext: 1, DuplicateNext: 2},
		},
		{
			name: "A rolled-back batch gives its faults back.",
			drop: 1, dup: 1, batch: 3, refund: true,
			want:      faultPlan{drop: 1, duplicate: 1},
			wantLeft:  FaultState{},
			wantAfter: FaultState{DropNext: 1, DuplicateNext: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFaults(nil)
			if err := f.DropNext(tt.drop); err != nil {
				t.Fatal(err)
			}
			if err := f.DuplicateNext(tt.dup); err != nil {
				t.Fatal(err)
			}
			p := f.take(tt.batch)
			if p != tt.want {
				t.Errorf("plan = %+v, want %+v", p, tt.want)
			}
			if got := f.State(); got != tt.wantLeft {
				t.Errorf("left = %+v, want %+v", got, tt.wantLeft)
			}
			if tt.refund {
				f.refund(p)
				if got := f.State(); got != tt.wantAfter {
					t.Errorf("after refund = %+v, want %+v", got, tt.wantAfter)
				}
			}
		})
	}
}

func TestAdminAPI(t *testing.T) {
	type step struct {
		method, target string
		wantStatus     int
		wantBody       string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "The state starts with no fault.",
			steps: []step{
				{"GET", "/admin/state", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
			},
		},
		{
			name: "Pause and resume flip the paused flag.",
			steps: []step{
				{"POST", "/admin/pause", 200, `{"paused":true,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
				{"GET", "/admin/state", 200, `{"paused":true,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
				{"POST", "/admin/resume", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
			},
		},
		{
			name: "A delay is set as a Go duration and cleared with zero.",
			steps: []step{
				{"POST", "/admin/delay?d=250ms", 200, `{"paused":false,"publish_delay":"250ms","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
				{"POST", "/admin/delay?d=0", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
			},
		},
		{
			name: "A mark delay is set as a Go duration and cleared with zero.",
			steps: []step{
				{"POST", "/admin/mark-delay?d=1s", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"1s","drop_next":0,"duplicate_next":0}`},
				{"POST", "/admin/mark-delay?d=0", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
			},
		},
		{
			name: "Drop and duplicate counts are set, and default to one.",
			steps: []step{
				{"POST", "/admin/drop?n=2", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":2,"duplicate_next":0}`},
				{"POST", "/admin/duplicate", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":2,"duplicate_next":1}`},
			},
		},
		{
			name: "Bad parameters are rejected with the reason and change nothing.",
			steps: []step{
				{"POST", "/admin/delay", 400, `{"error":"query parameter \"d\" is required, a Go duration such as 250ms"}`},
				{"POST", "/admin/delay?d=soon", 400, `{"error":"query parameter \"d\": time: invalid duration \"soon\""}`},
				{"POST", "/admin/delay?d=-1s", 400, `{"error":"query parameter \"d\": publish delay -1s: must not be negative"}`},
				{"POST", "/admin/mark-delay?d=-1s", 400, `{"error":"query parameter \"d\": mark delay -1s: must not be negative"}`},
				{"POST", "/admin/drop?n=two", 400, `{"error":"query parameter \"n\": strconv.Atoi: parsing \"two\": invalid syntax"}`},
				{"POST", "/admin/duplicate?n=-3", 400, `{"error":"query parameter \"n\": duplicate count -3: must not be negative"}`},
				{"GET", "/admin/state", 200, `{"paused":false,"publish_delay":"0s","mark_delay":"0s","drop_next":0,"duplicate_next":0}`},
			},
		},
		{
			name: "Changing state needs POST.",
			steps: []step{
				{"GET", "/admin/pause", 405, ""},
			},
		},
		{
			name: "Health answers ok.",
			steps: []step{
				{"GET", "/healthz", 200, "ok"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewAdminHandler(NewFaults(nil), prometheus.NewRegistry())
			for _, s := range tt.steps {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(s.method, s.target, nil))
				if rec.Code != s.wantStatus {
					t.Fatalf("%s %s: status %d, want %d (body %s)", s.method, s.target, rec.Code, s.wantStatus, rec.Body)
				}
				if got := strings.TrimSpace(rec.Body.String()); s.wantBody != "" && got != s.wantBody {
					t.Fatalf("%s %s: body\n got: %s\nwant: %s", s.method, s.target, got, s.wantBody)
				}
				if strings.HasPrefix(s.wantBody, "{") && !json.Valid(rec.Body.Bytes()) {
					t.Fatalf("%s %s: invalid JSON %s", s.method, s.target, rec.Body)
				}
			}
		})
	}
}

func TestMetricsAreLintCleanAndStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := NewFaults(nil)
	if _, err := newMetrics(reg, f); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	f.Pause()
	const want = `
# HELP outbox_relay_faults_injected_total Injected faults that took effect: pause per skipped poll, delay and mark_delay per delayed batch, drop and duplicate per row.
# TYPE outbox_relay_faults_injected_total counter
outbox_relay_faults_injected_total{fault="delay"} 0
outbox_relay_faults_injected_total{fault="drop"} 0
outbox_relay_faults_injected_total{fault="duplicate"} 0
outbox_relay_faults_injected_total{fault="mark_delay"} 0
outbox_relay_faults_injected_total{fault="pause"} 0
# HELP outbox_relay_paused 1 while the relay is paused by fault injection, else 0.
# TYPE outbox_relay_paused gauge
outbox_relay_paused 1
# HELP outbox_relay_poll_errors_total Polls that failed and were rolled back, leaving their rows unpublished, by the stage that failed (database or kafka).
# TYPE outbox_relay_poll_errors_total counter
outbox_relay_poll_errors_total{stage="database"} 0
outbox_relay_poll_errors_total{stage="kafka"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"outbox_relay_faults_injected_total", "outbox_relay_paused", "outbox_relay_poll_errors_total"); err != nil {
		t.Error(err)
	}
	if _, err := newMetrics(reg, f); err == nil {
		t.Error("registering the metrics twice on one registry succeeded, want an error")
	}
}

func TestAdminHandlerServesMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := NewFaults(nil)
	if _, err := newMetrics(reg, f); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	NewAdminHandler(f, reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "outbox_relay_polls_total 0") {
		t.Fatalf("GET /metrics: status %d, body:\n%s", rec.Code, rec.Body)
	}
}

func TestMessagesCarryKeyValueAndHeaders(t *testing.T) {
	tmpl, err := parseTopicTemplate(DefaultTopicTemplate)
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{topic: tmpl}
	str := func(s string) *string { return &s }
	created := time.Date(2025, 1, 2, 3, 4, 5, 600, time.FixedZone("CET", 3600))
	readAt := time.Date(2025, 1, 2, 2, 4, 6, 0, time.UTC)
	sentAt := readAt.Add(250 * time.Millisecond)
	rows := []row{
		{id: 1, route: "order", key: str("ord-1"), payload: []byte(`{"a":1}`), createdAt: created},
		{id: 2, route: "order", key: str("ord-2"), payload: []byte(`{"a":2}`), createdAt: created, eventType: str("OrderPaid")},
		{id: 3, route: "invoice", payload: []byte(`{"a":3}`), createdAt: created},
	}
	msgs, err := r.messages(rows, faultPlan{drop: 1, duplicate: 1}, readAt, sentAt)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		topic, key, value string
		headers           map[string]string
	}
	var gots []got
	for _, m := range msgs {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		if !m.Time.Equal(sentAt) {
			t.Errorf("message time %s, want the send time %s", m.Time, sentAt)
		}
		gots = append(gots, got{m.Topic, string(m.Key), string(m.Value), h})
	}
	headers := func(id string, extra ...string) map[string]string {
		h := map[string]string{
			HeaderID:        id,
			HeaderCreatedAt: "2025-01-02T02:04:05.0000006Z",
			HeaderReadAt:    "2025-01-02T02:04:06Z",
			HeaderSentAt:    "2025-01-02T02:04:06.25Z",
		}
		for i := 0; i < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	want := []got{
		{"outbox.event.order", "ord-2", `{"a":2}`, headers("2", HeaderEventType, "OrderPaid")},
		{"outbox.event.order", "ord-2", `{"a":2}`, headers("2", HeaderEventType, "OrderPaid")},
		{"outbox.event.invoice", "", `{"a":3}`, headers("3")},
	}
	if len(gots) != len(want) {
		t.Fatalf("got %d messages %+v, want %d (row 1 dropped, row 2 twice)", len(gots), gots, len(want))
	}
	for i := range want {
		if gots[i].topic != want[i].topic || gots[i].key != want[i].key || gots[i].value != want[i].value || len(gots[i].headers) != len(want[i].headers) {
			t.Errorf("message %d = %+v, want %+v", i, gots[i], want[i])
			continue
		}
		for k, v := range want[i].headers {
			if gots[i].headers[k] != v {
				t.Errorf("message %d header %s = %q, want %q", i, k, gots[i].headers[k], v)
			}
		}
	}
}
