package check

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/mod/modfile"
)

// deploy/Dockerfile needs a registry for its base images, which the
// machines this is tested on cannot reach, so it is checked the way
// BuildKit reads it, without building it: its syntax and BuildKit's
// parse-time build checks, its base images, what .dockerignore keeps out
// of the build context, and that it makes the image `make image` builds
// and e2e/image_test.go runs (deploy/image/Containerfile).

const repoRoot = "../.."

func parseDockerfile(t *testing.T) []instructions.Stage {
	t.Helper()
	return parseFile(t, "deploy/Dockerfile")
}

// parseFile parses a Dockerfile of the repository as BuildKit does, with
// its build checks.
func parseFile(t *testing.T, path string) []instructions.Stage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	result, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	for _, w := range result.Warnings {
		t.Errorf("%s line %d: %s", path, w.Location.Start.Line, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, description, url, msg string, location []parser.Range) {
		line := 0
		if len(location) > 0 {
			line = location[0].Start.Line
		}
		t.Errorf("%s line %d: BuildKit check %s: %s", path, line, rule, msg)
	}})
	stages, _, err := instructions.Parse(result.AST, lint)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return stages
}

// imageConfig is what a final stage sets in the image's configuration.
type imageConfig struct {
	user, entrypoint, cmd, expose string
	labels                        map[string]string
	stateDirOwner                 string // COPY --chown to /var/lib/outbox-canary
}

func finalStage(t *testing.T, path string) imageConfig {
	t.Helper()
	stages := parseFile(t, path)
	c := imageConfig{labels: map[string]string{}}
	for _, cmd := range stages[len(stages)-1].Commands {
		switch x := cmd.(type) {
		case *instructions.UserCommand:
			c.user = x.User
		case *instructions.EntrypointCommand:
			c.entrypoint = strings.Join(x.CmdLine, " ")
		case *instructions.CmdCommand:
			c.cmd = strings.Join(x.CmdLine, " ")
		case *instructions.ExposeCommand:
			c.expose = strings.Join(x.Ports, " ")
		case *instructions.LabelCommand:
			for _, kv := range x.Labels {
				c.labels[kv.Key] = kv.Value
			}
		case *instructions.CopyCommand:
			if strings.TrimSuffix(x.DestPath, "/") == "/var/lib/outbox-canary" {
				c.stateDirOwner = x.Chown
			}
		}
	}
	return c
}

// TestLocalImageMatchesTheRegistryImage: `make image` (on an empty base,
// without a registry) and deploy/Dockerfile (on distroless, for registry
// builds) must make the same image to the chart: the user it runs as, the
// entrypoint and command, the port, the labels and the state directory.
func TestLocalImageMatchesTheRegistryImage(t *testing.T) {
	registry, local := finalStage(t, "deploy/Dockerfile"), finalStage(t, "deploy/image/Containerfile")
	if local.user != "65532:65532" || local.user != registry.user {
		t.Errorf("USER: local %q, registry %q, want 65532:65532 in both", local.user, registry.user)
	}
	for _, f := range []struct{ what, local, registry string }{
		{"ENTRYPOINT", local.entrypoint, registry.entrypoint},
		{"CMD", local.cmd, registry.cmd},
		{"EXPOSE", local.expose, registry.expose},
		{"the state directory's owner", local.stateDirOwner, registry.stateDirOwner},
	} {
		if f.local == "" || f.local != f.registry {
			t.Errorf("%s: local %q, registry %q", f.what, f.local, f.registry)
		}
	}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision",
		"org.opencontainers.image.source", "org.opencontainers.image.created"} {
		if local.labels[k] == "" {
			t.Errorf("the local image has no label %s", k)
		}
	}
	for k, v := range registry.labels {
		if local.labels[k] != v {
			t.Errorf("label %s: local %q, registry %q", k, local.labels[k], v)
		}
	}
}

// A base image is fully qualified (a registry host first) and pinned by a
// digest, literal or from a build argument.
var pinnedImage = regexp.MustCompile(`^[a-z0-9.-]+\.[a-z]+/[a-z0-9./_-]+:[A-Za-z0-9._-]+@(sha256:[a-f0-9]{64}|\$\{[A-Z_]+_DIGEST\})$`)

func TestDockerfileBaseImagesAreQualifiedAndPinned(t *testing.T) {
	for _, stage := range parseDockerfile(t) {
		if !pinnedImage.MatchString(stage.BaseName) {
			t.Errorf("FROM %s: want registry/repository:tag@digest", stage.BaseName)
		}
	}
}

func TestDockerfileGoMatchesGoMod(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := mod.Go.Version
	if mod.Toolchain != nil {
		want = strings.TrimPrefix(mod.Toolchain.Name, "go")
	}
	build := parseDockerfile(t)[0]
	if !strings.Contains(build.BaseName, "/golang:"+want+"-") {
		t.Errorf("the build stage uses %s, go.mod asks for Go %s", build.BaseName, want)
	}
}

func TestDockerfileBuildsTrimmedAndVersionedAndRunsAsNonRoot(t *testing.T) {
	stages := parseDockerfile(t)
	var run string
	for _, cmd := range stages[0].Commands {
		if r, ok := cmd.(*instructions.RunCommand); ok {
			run += strings.Join(r.CmdLine, " ") + "\n"
		}
	}
	for _, want := range []string{"-trimpath", "make build", `VERSION="${VERSION}"`, `REVISION="${REVISION}"`, "CGO_ENABLED=0"} {
		if !strings.Contains(run, want) {
			t.Errorf("the build stage's RUN lacks %s:\n%s", want, run)
		}
	}
	var user string
	for _, cmd := range stages[len(stages)-1].Commands {
		if u, ok := cmd.(*instructions.UserCommand); ok {
			user = u.User
		}
	}
	if user != "65532:65532" {
		t.Errorf("the final stage's USER = %q, want 65532:65532", user)
	}
}

// TestBinariesAreBuiltWithTheSameTags: the Makefile's TAGS (which `make
// build`, so deploy/Dockerfile and `make image`, use), the release
// binaries' and the ones the tests run (internal/stacktest) leave out the
// same code; a binary built without them would still work, but it would not
// be the one tested and measured for the image's size.
func TestBinariesAreBuiltWithTheSameTags(t *testing.T) {
	read := func(path string, re *regexp.Regexp) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no build tags matching %s", path, re)
		}
		return string(m[1])
	}
	makefile := read("Makefile", regexp.MustCompile(`(?m)^TAGS := (\S+)$`))
	if makefile == "" {
		t.Fatal("the Makefile's TAGS is empty")
	}
	for path, re := range map[string]*regexp.Regexp{
		".goreleaser.yaml":              regexp.MustCompile(`(?m)^\s+- -tags=(\S+)$`),
		"internal/stacktest/support.go": regexp.MustCompile(`(?m)^const BuildTags = "([^"]*)"$`),
	} {
		if got := read(path, re); got != makefile {
			t.Errorf("%s builds with tags %q, the Makefile with %q", path, got, makefile)
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"outbox-canary", "outbox-relay"} {
		if !regexp.MustCompile(`(?m)^\t\$\(GO\) build .*-tags '\$\(TAGS\)' .*\./cmd/` + cmd + `$`).Match(b) {
			t.Errorf("make build does not build ./cmd/%s with -tags '$(TAGS)'", cmd)
		}
	}
}

// TestDockerignoreKeepsTheContextToTheSources checks the patterns the way
// docker and BuildKit apply them: the local stack, .git and binaries stay
// out; every file of every package the binaries are built from stays in.
func TestDockerignoreKeepsTheContextToTheSources(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(path string) bool {
		t.Helper()
		m, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, path := range []string{".stack/pg/base/1/112", ".stack/kafka/libs/kafka_2.13-4.4.0.jar", ".git/HEAD", "bin/outbox-canary", "outbox-canary", "prober/prober.test", "deploy/local/kafka/pom.xml", "deploy/check/go.mod"} {
		if !excluded(path) {
			t.Errorf("%s is in the build context", path)
		}
	}
	must := []string{"go.mod", "go.sum", "Makefile"}
	out, err := exec.Command("go", "-C", repoRoot, "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", "./cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module from the module cache, downloaded in the build
		}
		files, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if !file.IsDir() && !strings.HasSuffix(file.Name(), "_test.go") {
				must = append(must, filepath.ToSlash(filepath.Join(rel, file.Name())))
			}
		}
	}
	for _, path := range must {
		if excluded(path) {
			t.Errorf("%s is needed to build the binaries but .dockerignore leaves it out", path)
		}
	}
}
