package check

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

const (
	unitFile   = "../systemd/outbox-canary.service"
	unitConfig = "../systemd/outbox-canary.yml"
	// maxExposure is the highest `systemd-analyze security` exposure the
	// unit may have (0 = fully sandboxed, 10 = not at all).
	maxExposure = 2.0
	credentials = "/run/credentials/outbox-canary.service/"
)

// systemdAnalyze finds systemd-analyze (Debian's systemd package; `make
// test-deploy` installs it). Without it the test fails in CI and skips
// elsewhere.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		stacktest.Unavailable(t, "systemd-analyze not found (install Debian's systemd package, or run make test-deploy): %v", err)
	}
	return path
}

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the unit in a
// scratch root holding the distribution's units (for network-online.target
// and the rest) and an executable at ExecStart's path: verify checks that
// the path is an executable, not what it runs. verify exits 0 even on an
// unknown directive or a bad value, so any output fails the test too.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := t.TempDir()
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(root, "usr/lib/systemd/system"), os.DirFS("/usr/lib/systemd/system")); err != nil {
		t.Fatalf("copy the distribution's units: %v", err)
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "etc/systemd/system/outbox-canary.service"), unit, 0o644)
	writeFile(t, filepath.Join(root, "usr/local/bin/outbox-canary"), []byte("#!/bin/sh\nexit 0\n"), 0o755)

	out, err := exec.Command(analyze, "verify", "--root="+root, "outbox-canary.service").CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

var overallExposure = regexp.MustCompile(`Overall exposure level for outbox-canary\.service: ([0-9.]+) `)

func TestSystemdUnitExposureIsLow(t *testing.T) {
	analyze := systemdAnalyze(t)
	out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", unitFile).CombinedOutput()
	t.Logf("systemd-analyze security --offline=true %s:\n%s", unitFile, out)
	if err != nil {
		t.Fatalf("systemd-analyze security: %v", err)
	}
	m := overallExposure.FindSubmatch(out)
	if m == nil {
		t.Fatal("no overall exposure level in the output above")
	}
	exposure, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	if exposure > maxExposure {
		t.Errorf("exposure %.1f, want at most %.1f: a directive was loosened (table above)", exposure, maxExposure)
	}
}

// unitDirectives reads a unit file into directive -> values (in order),
// joining continued lines.
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	directives := map[string][]string{}
	var line strings.Builder
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for scanner.Scan() {
		text := strings.TrimSpace(scanner.Text())
		if line.Len() == 0 && (text == "" || strings.HasPrefix(text, "#") || strings.HasPrefix(text, ";") || strings.HasPrefix(text, "[")) {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		key, value, _ := strings.Cut(line.String(), "=")
		directives[key] = append(directives[key], value)
		line.Reset()
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return directives
}

func TestSystemdUnitKeepsStateInItsStateDirectory(t *testing.T) {
	d := unitDirectives(t, unitFile)
	if got := d["StateDirectory"]; !slices.Equal(got, []string{"outbox-canary"}) {
		t.Errorf("StateDirectory = %q, want outbox-canary", got)
	}
	if exec := strings.Join(d["ExecStart"], " "); !strings.Contains(exec, "--state.dir=${STATE_DIRECTORY}") {
		t.Errorf("ExecStart %q does not pass --state.dir=${STATE_DIRECTORY}", exec)
	}
}

// TestSystemdCredentialsMatchTheConfig loads the example configuration with
// the service's loader and checks that every secret it reads from the
// credentials directory is a LoadCredential= of the unit, and every
// credential is read.
func TestSystemdCredentialsMatchTheConfig(t *testing.T) {
	text, err := os.ReadFile(unitConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(text); err != nil {
		t.Fatalf("%s does not load: %v", unitConfig, err)
	}
	var loaded []string
	for _, v := range unitDirectives(t, unitFile)["LoadCredential"] {
		id, _, _ := strings.Cut(v, ":")
		loaded = append(loaded, id)
	}
	var read []string
	for _, f := range secretFiles(t, string(text)) {
		id, ok := strings.CutPrefix(f, credentials)
		if !ok {
			t.Errorf("%s reads the secret %s from outside %s", unitConfig, f, credentials)
			continue
		}
		read = append(read, id)
	}
	slices.Sort(loaded)
	slices.Sort(read)
	if !slices.Equal(loaded, read) {
		t.Errorf("the unit loads the credentials %q, the config reads %q", loaded, read)
	}
}
