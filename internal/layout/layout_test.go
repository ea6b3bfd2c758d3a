package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/outbox-canary/outbox-canary"

// row is one line of the README's layout table.
type row struct {
	path    string
	imports []string // "*" for any
}

// readTable parses the README's "## Layout" table: path, job, may import.
func readTable(t *testing.T, readme string) map[string]row {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]row{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Layout"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("README layout row %q: want 3 cells", line)
		}
		path := strings.Trim(strings.TrimSpace(cells[0]), "`")
		r := row{path: path}
		allowed := strings.TrimSpace(cells[2])
		switch {
		case strings.HasPrefix(allowed, "any package"):
			r.imports = []string{"*"}
		default:
			for _, a := range strings.Split(allowed, ",") {
				if a = strings.Trim(strings.TrimSpace(a), "`"); strings.Contains(a, "/") || !strings.ContainsAny(a, " ()—") && a != "" {
					r.imports = append(r.imports, a)
				}
			}
		}
		if _, dup := rows[path]; dup {
			t.Errorf("README layout: %s listed twice", path)
		}
		rows[path] = r
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("README has no layout table under ## Layout")
	}
	return rows
}

type listedPackage struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	GoFiles      []string
}

// packages lists the module's packages with `go list`.
func packages(t *testing.T, root string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestTheREADMELayoutTableMatchesTheTreeAndItsImports(t *testing.T) {
	root := filepath.Join("..", "..")
	rows := readTable(t, filepath.Join(root, "README.md"))
	seen := map[string]bool{}
	for _, p := range packages(t, root) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		seen[rel] = true
		r, ok := rows[rel]
		if !ok {
			t.Errorf("package %s has no row in the README's layout table", rel)
			continue
		}
		var own []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				own = append(own, strings.TrimPrefix(imp, module+"/"))
			}
		}
		for _, imp := range own {
			if strings.HasPrefix(imp, "cmd/") {
				t.Errorf("%s imports %s: no package imports cmd/", rel, imp)
			}
			if !slices.Contains(r.imports, "*") && !slices.Contains(r.imports, imp) {
				t.Errorf("%s imports %s, which its README row does not allow (allowed: %v)", rel, imp, r.imports)
			}
		}
		// A test may use the test support, the package's own parts and
		// anything the package itself may import; never cmd/.
		for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
			if strings.HasPrefix(imp, module+"/cmd/") {
				t.Errorf("a test of %s imports %s: no package imports cmd/", rel, imp)
			}
		}
	}
	for path := range rows {
		if !seen[path] {
			t.Errorf("the README's layout table lists %s, which is not a package of the module", path)
		}
	}
}

// The checker must be able to fail: a row that forbids an import the tree
// has is reported.
func TestTheLayoutCheckerReadsTheAllowedImports(t *testing.T) {
	dir := t.TempDir()
	readme := filepath.Join(dir, "README.md")
	if err := os.WriteFile(readme, []byte("## Layout\n\n| path | job | may import |\n|---|---|---|\n| `slo` | math | — |\n| `alerts` | rules | `slo`, `internal/config` |\n| `cmd/x` | wiring | any package below |\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rows := readTable(t, readme)
	if got := rows["slo"].imports; len(got) != 0 {
		t.Errorf("slo may import %v, want nothing", got)
	}
	if got := rows["alerts"].imports; !slices.Equal(got, []string{"slo", "internal/config"}) {
		t.Errorf("alerts may import %v", got)
	}
	if got := rows["cmd/x"].imports; !slices.Equal(got, []string{"*"}) {
		t.Errorf("cmd/x may import %v, want any", got)
	}
}
