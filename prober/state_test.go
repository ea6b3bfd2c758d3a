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
