package prober

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStateWriteIsAtomicAndLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.json")
	for _, content := range []string{`{"version":1}`, `{"version":1,"pipeline":"orders"}`} {
		if err := writeFileAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want only the state file", len(entries))
	}
}

func TestStateWriteFailsWithItsCause(t *testing.T) {
	err := writeFileAtomic(filepath.Join(t.TempDir(), "missing-dir", "orders.json"), []byte("{}"))
	if err == nil || !strings.Contains(err.Error(), "create temporary state file") {
		t.Fatalf("err = %v, want the failing step named", err)
	}
}

func TestLoadState(t *testing.T) {
	cases := []struct {
		name    string
		content string // "" = no file
		wantErr string
		wantNil bool
	}{
		{name: "A missing file is no state and no error.", wantNil: true},
		{name: "A damaged file is refused with its path and what to do.", content: `{"version":1,`, wantErr: "move it away to start afresh"},
		{name: "A file of another version is refused.", content: `{"version":99}`, wantErr: "version 99, this build reads 1"},
		{name: "A valid file is loaded.", content: `{"version":1,"pipeline":"orders","next_offset_by_partition":{"0":5}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "orders.json")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st, err := loadState(path)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want it to name %s and say %q", err, path, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case tc.wantNil != (st == nil):
				t.Fatalf("state = %+v, want nil: %v", st, tc.wantNil)
			case st != nil && st.NextOffsets[0] != 5:
				t.Fatalf("next offsets = %v, want partition 0 at 5", st.NextOffsets)
			}
		})
	}
}
