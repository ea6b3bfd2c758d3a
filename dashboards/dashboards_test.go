package dashboards

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/slo"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const (
	exampleConfig = "../examples/outbox-canary.yml"
	exampleDir    = "../examples/dashboards"
)

// configs are the configurations every test generates from: the checked-in
// example (two polling pipelines) and a CDC pipeline with its own burn
// windows.
var configs = []string{exampleConfig, "testdata/cdc.yml"}

func loadModel(t *testing.T, path string) *slo.Model {
	t.Helper()
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := slo.FromConfig(cfg)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func generate(t *testing.T, path string) []File {
	t.Helper()
	files, err := Generate(loadModel(t, path), DefaultOptions())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return files
}

// dashboardFiles decodes the generated dashboards (not the provisioning
// files) into generic JSON.
func dashboardFiles(t *testing.T, files []File) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, f := range files {
		if !strings.HasSuffix(f.Name, ".json") {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal(f.Data, &d); err != nil {
			t.Fatalf("%s is not JSON: %v", f.Name, err)
		}
		out[f.Name] = d
	}
	if len(out) != 3 {
		t.Fatalf("got %d dashboards, want 3", len(out))
	}
	return out
}

// The checked-in examples are what `make generate` writes; a change to the
// generator or the example config that is not regenerated fails here.
func TestExampleDashboardsAreUpToDate(t *testing.T) {
	files := generate(t, exampleConfig)
	want := map[string][]byte{}
	for _, f := range files {
		want[f.Name] = f.Data
	}
	got := map[string][]byte{}
	err := filepath.WalkDir(exampleDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(exampleDir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		got[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatalf("%v: run make generate", err)
	}
	for name, data := range want {
		have, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s/%s is missing: run make generate", exampleDir, name)
		case !bytes.Equal(have, data):
			t.Errorf("%s/%s differs from what %s generates (first difference at line %d): run make generate",
				exampleDir, name, exampleConfig, firstDiffLine(have, data))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s/%s is no longer generated: delete it and run make generate", exampleDir, name)
		}
	}
}

func firstDiffLine(a, b []byte) int {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(la), len(lb)) {
		if !bytes.Equal(la[i], lb[i]) {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// Golden files of the CDC configuration: the sections the example leaves
// collapsed, and custom burn windows.
func TestCDCDashboardsMatchGoldenFiles(t *testing.T) {
	for _, f := range generate(t, "testdata/cdc.yml") {
		golden := filepath.Join("testdata", "cdc", filepath.FromSlash(f.Name))
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./dashboards -update)", err)
		}
		if !bytes.Equal(f.Data, want) {
			t.Errorf("%s differs at line %d (run go test ./dashboards -update and review the diff)", golden, firstDiffLine(f.Data, want))
		}
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	for _, path := range configs {
		a, b := generate(t, path), generate(t, path)
		if len(a) != len(b) {
			t.Fatalf("%s: %d files, then %d", path, len(a), len(b))
		}
		for i := range a {
			if a[i].Name != b[i].Name || !bytes.Equal(a[i].Data, b[i].Data) {
				t.Errorf("%s: %s differs between two runs", path, a[i].Name)
			}
		}
	}
}

func TestGeneratedFilesAreMarkedAsGenerated(t *testing.T) {
	for _, path := range configs {
		files := generate(t, path)
		for name, d := range dashboardFiles(t, files) {
			desc, _ := d["description"].(string)
			if !strings.HasPrefix(desc, GeneratedNotice) {
				t.Errorf("%s: description %q does not start with %q", name, desc, GeneratedNotice)
			}
		}
		for _, f := range files {
			if strings.HasSuffix(f.Name, ".yml") && !bytes.HasPrefix(f.Data, []byte("# "+GeneratedNotice+"\n")) {
				t.Errorf("%s does not start with the generated notice", f.Name)
			}
		}
	}
}

func TestDashboardsHaveStableUIDsAndVariables(t *testing.T) {
	d := dashboardFiles(t, generate(t, exampleConfig))
	for _, uid := range []string{UIDSLOOverview, UIDSegmentLatency, UIDPipelineHealth} {
		got, ok := d[uid+".json"]
		if !ok {
			t.Fatalf("no file %s.json", uid)
		}
		if got["uid"] != uid {
			t.Errorf("%s.json: uid %v", uid, got["uid"])
		}
		vars := variablesOf(got)
		if vars[varDatasource]["type"] != "datasource" || vars[varDatasource]["query"] != "prometheus" {
			t.Errorf("%s: datasource variable is %v", uid, vars[varDatasource])
		}
		p := vars[varPipeline]
		if p["query"] != `label_values(outbox_canary_canaries_sent_total{job=~"$job",instance=~"$instance"}, pipeline)` {
			t.Errorf("%s: pipeline variable query is %v", uid, p["query"])
		}
		cur, _ := p["current"].(map[string]any)
		if uid == UIDSLOOverview {
			// The review starts from the whole fleet.
			if p["multi"] != true || p["includeAll"] != true || fmt.Sprint(cur["value"]) != "[$__all]" {
				t.Errorf("%s: pipeline variable is %v, want multi-value with All chosen", uid, p)
			}
			continue
		}
		// The first pipeline of the example is preselected.
		if cur["value"] != "orders" {
			t.Errorf("%s: pipeline variable current is %v, want orders", uid, p["current"])
		}
	}
}

// variablesOf maps a dashboard's variables by name.
func variablesOf(d map[string]any) map[string]map[string]any {
	vars := map[string]map[string]any{}
	for _, v := range d["templating"].(map[string]any)["list"].([]any) {
		v := v.(map[string]any)
		vars[v["name"].(string)] = v
	}
	return vars
}

// panelsOf lists every panel of a dashboard, those inside collapsed rows
// included, rows excluded.
func panelsOf(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func([]any)
	walk = func(ps []any) {
		for _, p := range ps {
			p := p.(map[string]any)
			if p["type"] == "row" {
				inner, _ := p["panels"].([]any)
				walk(inner)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d["panels"].([]any))
	return out
}

type rect struct{ x, y, w, h int }

func gridPos(p map[string]any) rect {
	g := p["gridPos"].(map[string]any)
	return rect{int(g["x"].(float64)), int(g["y"].(float64)), int(g["w"].(float64)), int(g["h"].(float64))}
}

func (a rect) overlaps(b rect) bool {
	return a.x < b.x+b.w && b.x < a.x+a.w && a.y < b.y+b.h && b.y < a.y+a.h
}

// Grafana renders overlapping or off-grid panels in a mess and drops
// panels with a duplicate id.
func TestPanelsHaveUniqueIDsAndDoNotOverlap(t *testing.T) {
	for _, path := range configs {
		for name, d := range dashboardFiles(t, generate(t, path)) {
			ids := map[float64]bool{}
			var placed []rect
			all := d["panels"].([]any)
			for _, p := range all {
				p := p.(map[string]any)
				id := p["id"].(float64)
				if ids[id] {
					t.Errorf("%s %s: id %v used twice", path, name, id)
				}
				ids[id] = true
				r := gridPos(p)
				if r.x+r.w > gridWidth || r.w == 0 || r.h == 0 {
					t.Errorf("%s %s: panel %q at %+v is off the grid", path, name, p["title"], r)
				}
				for _, q := range placed {
					if r.overlaps(q) {
						t.Errorf("%s %s: panel %q at %+v overlaps another at %+v", path, name, p["title"], r, q)
					}
				}
				placed = append(placed, r)
				inner, _ := p["panels"].([]any)
				for _, ip := range inner {
					id := ip.(map[string]any)["id"].(float64)
					if ids[id] {
						t.Errorf("%s %s: id %v used twice", path, name, id)
					}
					ids[id] = true
				}
			}
			if len(panelsOf(d)) < 5 {
				t.Errorf("%s %s: only %d panels", path, name, len(panelsOf(d)))
			}
		}
	}
}

// The slot and connector rows only fill with data for CDC relays: they
// start collapsed when no pipeline uses one, open otherwise.
func TestCDCSectionsAreCollapsedOnlyWithoutCDCPipelines(t *testing.T) {
	tests := []struct {
		name, config  string
		wantCollapsed bool
	}{
		{"A configuration of polling relays only collapses the CDC rows.", "../internal/config/testdata/valid-minimal.yml", true},
		{"A configuration with a CDC relay opens the CDC rows.", "testdata/cdc.yml", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dashboardFiles(t, generate(t, tt.config))[UIDPipelineHealth+".json"]
			var seen []string
			for _, p := range d["panels"].([]any) {
				p := p.(map[string]any)
				title, _ := p["title"].(string)
				if p["type"] != "row" || !strings.Contains(title, "CDC") {
					continue
				}
				seen = append(seen, title)
				if p["collapsed"] != tt.wantCollapsed {
					t.Errorf("row %q collapsed = %v, want %v", title, p["collapsed"], tt.wantCollapsed)
				}
			}
			sort.Strings(seen)
			if strings.Join(seen, ",") != "Debezium (CDC relays),Kafka Connect (CDC relays),Replication slot (CDC relays)" {
				t.Errorf("CDC rows: %v", seen)
			}
		})
	}
}

// The fleet table has one burn-rate column per window the rules record:
// the configured burn windows, not a fixed list.
func TestFleetTableFollowsTheConfiguredWindows(t *testing.T) {
	tests := []struct {
		name, config string
		want         []time.Duration
	}{
		{"The SRE Workbook's windows are the default.", exampleConfig, []time.Duration{5 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 24 * time.Hour, 72 * time.Hour}},
		{"Configured burn windows replace them.", "testdata/cdc.yml", []time.Duration{5 * time.Minute, time.Hour, 2 * time.Hour, 24 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dashboardFiles(t, generate(t, tt.config))[UIDSLOOverview+".json"]
			tables := fleetTables(d)
			if len(tables) == 0 {
				t.Fatal("no fleet table")
			}
			for _, p := range tables {
				cols := columnsOf(t, p)
				var got []string
				for _, c := range cols {
					if strings.HasPrefix(c.name, burnColumn) {
						got = append(got, c.expr)
					}
				}
				if len(got) != len(tt.want) {
					t.Fatalf("%s: %d burn columns, want one per window %v:\n%s", p["title"], len(got), tt.want, strings.Join(got, "\n"))
				}
				for i, w := range tt.want {
					if !strings.Contains(got[i], slo.RecordSLIError(w)+"{") {
						t.Errorf("%s: burn column %d reads %s, want the %s window", p["title"], i, got[i], slo.PromDuration(w))
					}
				}
			}
		})
	}
}

func TestGenerateRejectsAnEmptyModel(t *testing.T) {
	if _, err := Generate(&slo.Model{}, DefaultOptions()); err == nil {
		t.Fatal("Generate of a model without pipelines succeeded")
	}
}

func TestWriteFilesCreatesDirectories(t *testing.T) {
	dir := t.TempDir()
	files := []File{{Name: "a.json", Data: []byte("{}\n")}, {Name: "provisioning/dashboards/x.yml", Data: []byte("x: 1\n")}}
	if err := WriteFiles(dir, files); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("%s: %q, %v", f.Name, got, err)
		}
	}
	// A file where a directory must go is an error, not a silent skip.
	if err := WriteFiles(filepath.Join(dir, "a.json"), files); err == nil {
		t.Error("writing under a regular file succeeded")
	}
}

func TestUnescapeHTML(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"Escaped comparison operators become plain characters.", `{"expr":"a \u003e 1 \u003c 2 \u0026"}`, `{"expr":"a > 1 < 2 &"}`},
		{"An escaped backslash before u003e is left alone.", `{"s":"\\u003e"}`, `{"s":"\\u003e"}`},
		{"Other escapes are left alone.", `{"s":"\"\n\u00e9"}`, `{"s":"\"\n\u00e9"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(unescapeHTML([]byte(tt.in))); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
