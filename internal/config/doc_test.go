package config

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md")

const referencePath = "../../docs/configuration.md"

// docs/configuration.md is generated from the schema: paths and types by
// reflection over Config, meanings from the fields' doc comments, defaults
// from testdata/doc-minimal.yml loaded, and "required" from which of that
// file's fields cannot be removed.
func TestConfigurationReferenceIsUpToDate(t *testing.T) {
	ref := buildReference(t)
	if *update {
		if err := os.WriteFile(referencePath, ref, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/config/ -run TestConfigurationReference -update)", err)
	}
	if !bytes.Equal(have, ref) {
		t.Fatalf("%s drifted from the schema; run go test ./internal/config/ -run TestConfigurationReference -update", referencePath)
	}
}

// A field without a doc comment would be a row without a meaning.
func TestEveryFieldIsDocumented(t *testing.T) {
	g := newReference(t)
	g.walk(reflect.TypeFor[Config](), "")
	for _, missing := range g.undocumented {
		t.Errorf("%s has no doc comment: write one above the field; it becomes its description in docs/configuration.md", missing)
	}
	if len(g.sections) < 10 {
		t.Fatalf("only %d sections: the walk is broken", len(g.sections))
	}
}

// The minimal file must say nothing that is not required, or its values
// would be printed as defaults.
func TestTheMinimalFileSetsOnlyRequiredFields(t *testing.T) {
	g := newReference(t)
	for _, leaf := range g.leaves {
		if !g.required[leaf] {
			t.Errorf("testdata/doc-minimal.yml sets %s, which is not required: remove it", leaf)
		}
	}
	for _, path := range []string{"signing_key", "pipelines", "pipelines[].name", "pipelines[].database.dsn", "pipelines[].kafka.brokers", "pipelines[].budgets"} {
		if !g.required[path] {
			t.Errorf("%s is not found required", path)
		}
	}
}

type reference struct {
	docs         map[string]map[string]string // type -> field -> comment
	polling, cdc reflect.Value                // defaulted minimal configs
	required     map[string]bool              // paths, [] for indexes
	// without holds, for each optional field the minimal file writes
	// (only to show what the items of a list require), the config
	// loaded without it: its default is read there.
	without      map[string]reflect.Value
	leaves       []string // scalar fields the minimal file sets
	sections     []*section
	undocumented []string
}

type section struct {
	title, intro string
	rows         []row
}

type row struct{ path, typ, def, desc string }

// derivedDefaults are defaults that depend on where the prober runs.
var derivedDefaults = map[string]string{
	"instance_id": "the host name",
}

func newReference(t *testing.T) *reference {
	t.Helper()
	g := &reference{docs: fieldComments(t), required: map[string]bool{}, without: map[string]reflect.Value{}}
	minimal, err := os.ReadFile("testdata/doc-minimal.yml")
	if err != nil {
		t.Fatal(err)
	}
	polling, err := Load(minimal)
	if err != nil {
		t.Fatalf("testdata/doc-minimal.yml: %v", err)
	}
	cdcYAML := bytes.Replace(minimal, []byte("    relay:\n"), []byte("    relay:\n      kind: cdc\n"), 1)
	cdc, err := Load(cdcYAML)
	if err != nil || cdc.Pipelines[0].Relay.Kind != RelayCDC {
		t.Fatalf("the cdc variant of testdata/doc-minimal.yml: %v", err)
	}
	g.polling, g.cdc = reflect.ValueOf(*polling), reflect.ValueOf(*cdc)
	g.findRequired(t, minimal)
	return g
}

// fieldComments reads the doc and line comments of every struct field in
// the package's (non-test) sources.
func fieldComments(t *testing.T) map[string]map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			fields := map[string]string{}
			for _, fld := range st.Fields.List {
				text := strings.Join(strings.Fields(fld.Doc.Text()+" "+fld.Comment.Text()), " ")
				for _, id := range fld.Names {
					fields[id.Name] = text
				}
			}
			docs[ts.Name.Name] = fields
			return true
		})
	}
	return docs
}

// findRequired removes each key and list item of the minimal file in turn:
// the ones whose removal fails the load are required.
func (g *reference) findRequired(t *testing.T, minimal []byte) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(minimal, &root); err != nil {
		t.Fatal(err)
	}
	var visit func(n *yaml.Node, path string, at []int)
	visit = func(n *yaml.Node, path string, at []int) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				fp := joinPath(path, n.Content[i].Value)
				where := append(append([]int{}, at...), i)
				g.tryRemoving(t, minimal, fp, where)
				if v := n.Content[i+1]; v.Kind == yaml.ScalarNode || v.Kind == yaml.SequenceNode && len(v.Content) > 0 && v.Content[0].Kind == yaml.ScalarNode {
					g.leaves = append(g.leaves, indexless(fp))
				}
				visit(n.Content[i+1], fp, append(append([]int{}, at...), i+1))
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				visit(item, fmt.Sprintf("%s[%d]", path, i), append(append([]int{}, at...), i))
			}
		}
	}
	visit(root.Content[0], "", nil)
}

// tryRemoving loads the minimal file without the key at where (content
// indexes from the top mapping) and records path as required if it fails.
func (g *reference) tryRemoving(t *testing.T, minimal []byte, path string, where []int) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(minimal, &root); err != nil {
		t.Fatal(err)
	}
	n := root.Content[0]
	for _, i := range where[:len(where)-1] {
		n = n.Content[i]
	}
	k := where[len(where)-1]
	n.Content = append(n.Content[:k], n.Content[k+2:]...)
	out, err := yaml.Marshal(&root)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(out)
	if err != nil {
		g.required[indexless(path)] = true
	} else if _, seen := g.without[indexless(path)]; !seen {
		g.without[indexless(path)] = reflect.ValueOf(*cfg)
	}
}

var indexRE = regexp.MustCompile(`\[[0-9]+\]`)

// indexless turns pipelines[0].name into pipelines[].name.
func indexless(path string) string { return indexRE.ReplaceAllString(path, "[]") }

// walk adds the section of the struct type t found at path, then the
// sections of the structs below it.
func (g *reference) walk(t reflect.Type, path string) {
	sec := &section{title: "`" + path + "`"}
	if path == "" {
		sec.title = "Top level"
	}
	g.sections = append(g.sections, sec)
	type child struct {
		t    reflect.Type
		path string
	}
	var children []child
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fp := joinPath(path, name)
		desc := g.docs[t.Name()][f.Name]
		if desc == "" {
			g.undocumented = append(g.undocumented, fmt.Sprintf("%s (%s.%s)", fp, t.Name(), f.Name))
		}
		typ := typeName(f.Type)
		switch {
		case isSection(f.Type):
			children = append(children, child{f.Type, fp})
			typ = "[mapping](#" + anchor("`"+fp+"`") + ")"
		case f.Type.Kind() == reflect.Slice && isSection(f.Type.Elem()):
			children = append(children, child{f.Type.Elem(), fp + "[]"})
			typ = "list of [mappings](#" + anchor("`"+fp+"[]`") + ")"
		}
		sec.rows = append(sec.rows, row{path: fp, typ: typ, def: g.defaultOf(fp), desc: desc})
	}
	for _, c := range children {
		g.walk(c.t, c.path)
	}
}

// isSection reports whether a type is a mapping with its own section.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[Secret]() && t != reflect.TypeFor[Decimal]()
}

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Secret]():
		return "[secret](#secrets)"
	case reflect.TypeFor[Duration]():
		return "duration"
	case reflect.TypeFor[Decimal]():
		return "decimal"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "mapping of name to " + typeName(t.Elem())
	}
	return t.Kind().String()
}

// defaultOf prints the default of a path: required, derived, or the
// defaulted minimal configs' value (per relay kind when they differ).
func (g *reference) defaultOf(path string) string {
	if g.required[path] {
		return "required"
	}
	if d, ok := derivedDefaults[path]; ok {
		return d
	}
	p, c := valueAt(g.polling, path), valueAt(g.cdc, path)
	if cfg, written := g.without[path]; written {
		p = valueAt(cfg, path)
		c = p
	}
	if !p.IsValid() || isSection(p.Type()) {
		return ""
	}
	ps, cs := show(p), show(c)
	if ps == cs {
		return ps
	}
	return ps + " (polling), " + cs + " (cdc)"
}

// valueAt follows a path (list indexes as [] take the first item).
func valueAt(v reflect.Value, path string) reflect.Value {
	for _, part := range strings.Split(path, ".") {
		name, list := strings.CutSuffix(part, "[]")
		f, ok := yamlFields(v.Type()).byName[name]
		if !ok {
			return reflect.Value{}
		}
		v = v.Field(f)
		if list {
			if v.Len() == 0 {
				return reflect.Value{}
			}
			v = v.Index(0)
		}
	}
	return v
}

func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case Duration:
		return "`" + x.String() + "`"
	case Secret, Decimal:
		return "—"
	case string:
		if x == "" {
			return "—"
		}
		return "`" + x + "`"
	case bool:
		return "`" + strconv.FormatBool(x) + "`"
	}
	if (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0 {
		return "—"
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// anchor is GitHub's anchor of a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func buildReference(t *testing.T) []byte {
	g := newReference(t)
	g.walk(reflect.TypeFor[Config](), "")
	if len(g.undocumented) > 0 {
		t.Fatalf("undocumented fields (see TestEveryFieldIsDocumented): %s", strings.Join(g.undocumented, ", "))
	}
	secrets := &section{title: "Secrets", intro: secretsIntro}
	st := reflect.TypeFor[Secret]()
	for i := range st.NumField() {
		f := st.Field(i)
		name := f.Tag.Get("yaml")
		secrets.rows = append(secrets.rows, row{path: name, typ: "string", def: "—", desc: g.docs["Secret"][f.Name]})
	}
	g.sections = append(g.sections, secrets)

	var b bytes.Buffer
	b.WriteString(referenceIntro)
	for _, sec := range g.sections {
		fmt.Fprintf(&b, "\n## %s\n\n", sec.title)
		if sec.intro != "" {
			b.WriteString(sec.intro + "\n\n")
		}
		b.WriteString("| Field | Type | Default | Description |\n|---|---|---|---|\n")
		for _, r := range sec.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.path, r.typ, r.def, strings.ReplaceAll(r.desc, "|", `\|`))
		}
	}
	return b.Bytes()
}

var referenceIntro = `<!-- Code generated by "go test ./internal/config/ -run TestConfigurationReference -update" from the field comments in internal/config. DO NOT EDIT. -->

# Configuration reference

outbox-canary reads one YAML file (` + "`--config.file`" + `). Every field is listed
below with its path, type, default and meaning; ` + "`pipelines[]`" + ` stands
for each item of the list. A field marked *required* must be written; any
other may be left out, and gets its default. ` + "`outbox-canary validate`" + `
checks a file, reports every problem at once with its line, resolves the
secrets, and warns about settings that are accepted but ignored. See
` + "[examples/outbox-canary.yml](../examples/outbox-canary.yml)" + ` for a
complete file.

Notation:

- *duration*: a number and a unit, as in Prometheus: ` + "`500ms`, `2s`, `1m`, `1h`, `30d`, `1w`" + `.
- *decimal*: a number kept exactly as written, ` + "`2` or `0.5`" + `.
- *secret*: a mapping with exactly one of ` + "`value`, `env` and `file`" + `
  (see [Secrets](#secrets)); never printed, in errors or elsewhere.
- Unknown fields are errors, so a misspelt field cannot be silently ignored.
- Defaults that differ by ` + "`relay.kind`" + ` are given for both kinds;
  — means none.
`

const secretsIntro = "A secret is written as a mapping with exactly one of these keys, e.g.\n" +
	"`signing_key: {env: OUTBOX_CANARY_SIGNING_KEY}`. A plain string is refused (without being\n" +
	"repeated), so a secret pasted in by mistake never reaches an error or a log."
