package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decode reads one YAML document into cfg, strictly: an unknown field, a
// duplicate key or a value of the wrong kind is a Problem with its line and
// path, and decoding goes on, so every such problem is reported at once.
//
// yaml.v3 can reject unknown fields too, but its messages name Go types
// ("field x not found in type config.Pipeline"), carry no field path, echo
// mistyped values (a secret among them) and lose the line of errors from
// custom unmarshalers. Walking the node tree against the struct types
// keeps all of that in our hands; yaml.v3 still parses, and decodes the
// leaves.
//
// It returns the lines of the fields written, the paths whose values
// could not be decoded (validation stays quiet about those: their zero
// value would only add a second, misleading message) and the paths
// written with an empty value (unset, as if not written).
func decode(data []byte, cfg *Config) (positions, []string, map[string]bool, Problems) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil, Problems{{Message: "the file is empty: at least one pipeline is required"}}
		}
		return nil, nil, nil, Problems{syntaxProblem(err)}
	}
	d := &decoder{pos: positions{}, blank: map[string]bool{}}
	d.decode(&root, reflect.ValueOf(cfg).Elem(), "", "")
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add(extra.Line, "", "", "a second YAML document starts here; the configuration is one document")
	} else if !errors.Is(err, io.EOF) {
		d.problems = append(d.problems, syntaxProblem(err))
	}
	return d.pos, d.failed, d.blank, d.problems
}

var (
	syntaxLineRE = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)
	// yaml.v3 quotes anchor and tag names in some syntax errors; a secret
	// written as `*s3cr3t` would be one, so quoted names are dropped
	// (quoted punctuation, the expected token, is kept).
	syntaxQuotedRE = regexp.MustCompile(`\s*'[^']*[[:alnum:]][^']*'`)
)

// syntaxProblem turns a yaml.v3 parse error into a Problem with its line.
func syntaxProblem(err error) Problem {
	msg := err.Error()
	line := 0
	if m := syntaxLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	return Problem{Line: line, Message: "not valid YAML: " + syntaxQuotedRE.ReplaceAllString(msg, "")}
}

// maxDecodeNodes bounds the work of following aliases: a few lines of
// anchors can otherwise expand to billions of nodes.
const maxDecodeNodes = 1 << 20

// maxMergeDepth bounds merges of merges; a merge that includes itself
// would otherwise recurse until the stack runs out.
const maxMergeDepth = 32

type decoder struct {
	problems   Problems
	pos        positions
	failed     []string
	blank      map[string]bool
	nodes      int
	mergeDepth int
}

// budgetSpent counts one more node and reports (once) when the document
// expands past maxDecodeNodes.
func (d *decoder) budgetSpent(n *yaml.Node, path, pipeline string) bool {
	d.nodes++
	if d.nodes == maxDecodeNodes+1 {
		d.fail(n, path, pipeline, "the document expands (through aliases) to more than %d nodes", maxDecodeNodes)
	}
	return d.nodes > maxDecodeNodes
}

func (d *decoder) add(line int, path, pipeline, format string, args ...any) {
	d.problems = append(d.problems, Problem{Line: line, Path: path, Message: fmt.Sprintf(format, args...), pipeline: pipeline})
}

// fail records a value that could not be decoded.
func (d *decoder) fail(n *yaml.Node, path, pipeline, format string, args ...any) {
	d.add(n.Line, path, pipeline, format, args...)
	d.failed = append(d.failed, path)
}

// nodeDecoder is implemented by the scalar types with their own notation
// (Duration, Decimal). Its error is a message without line or path.
type nodeDecoder interface {
	decodeNode(n *yaml.Node) error
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path, pipeline string) {
	if d.budgetSpent(n, path, pipeline) {
		return
	}
	n = resolve(n)
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		d.decode(n.Content[0], v, path, pipeline)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		// An empty value leaves the field unset, as if not written.
		if d.blank != nil {
			d.blank[path] = true
		}
		return
	}
	t := v.Type()
	if t == reflect.TypeFor[Secret]() {
		d.decodeSecret(n, v.Addr().Interface().(*Secret), path, pipeline)
		return
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[nodeDecoder]()) {
		if err := v.Addr().Interface().(nodeDecoder).decodeNode(n); err != nil {
			d.fail(n, path, pipeline, "%s", err.Error())
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path, pipeline)
	case reflect.Slice:
		d.decodeSlice(n, v, path, pipeline)
	case reflect.Map:
		d.decodeMap(n, v, path, pipeline)
	case reflect.String, reflect.Bool, reflect.Int, reflect.Float64:
		d.decodeScalar(n, v, path, pipeline)
	default:
		// Only reached if a field of a new kind is added to the schema
		// without teaching the decoder; TestEveryFieldIsDocumented walks
		// the same types.
		d.fail(n, path, pipeline, "this field cannot be decoded (%s): report a bug", t.Kind())
	}
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// describe names a node's kind in the user's words, never its value.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!null":
		return "nothing"
	case "!!timestamp":
		return "a date"
	case "!!binary":
		return "binary data"
	}
	return "a tagged value" // the tag is not named: it could be a mistyped secret
}

type entry struct {
	key     string
	keyLine int
	value   *yaml.Node
}

// entries lists a mapping's keys and values, with the keys of `<<: *anchor`
// merges first so that keys written out override them, as in yaml.v3.
// A duplicate key written out is a problem: yaml.v3 keeps the last one
// silently when it decodes into a node tree.
func (d *decoder) entries(n *yaml.Node, path, pipeline string, hideKeys bool) []entry {
	var merged, own []entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, pipeline, "a key is %s; keys are plain names", describe(k))
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergeEntries(val, path, pipeline, hideKeys)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			name := strconv.Quote(k.Value)
			if hideKeys {
				name = "a key"
			}
			d.add(k.Line, path, pipeline, "%s is written twice (first at line %d)", name, first)
			continue
		}
		seen[k.Value] = k.Line
		own = append(own, entry{key: k.Value, keyLine: k.Line, value: val})
	}
	out := make([]entry, 0, len(merged)+len(own))
	for _, e := range merged {
		if _, overridden := seen[e.key]; !overridden {
			out = append(out, e)
		}
	}
	return append(out, own...)
}

func (d *decoder) mergeEntries(val *yaml.Node, path, pipeline string, hideKeys bool) []entry {
	if d.budgetSpent(val, path, pipeline) {
		return nil
	}
	if d.mergeDepth >= maxMergeDepth {
		d.fail(val, path, pipeline, "merges (<<) nest more than %d deep; does a merge include itself?", maxMergeDepth)
		return nil
	}
	d.mergeDepth++
	defer func() { d.mergeDepth-- }()
	val = resolve(val)
	switch val.Kind {
	case yaml.MappingNode:
		return d.entries(val, path, pipeline, hideKeys)
	case yaml.SequenceNode:
		// Earlier maps in the list win, as in yaml.v3.
		var out []entry
		seen := map[string]bool{}
		for _, item := range val.Content {
			if resolve(item).Kind != yaml.MappingNode {
				d.fail(item, path, pipeline, "a merge (<<) takes a mapping or a list of mappings, got %s in the list", describe(resolve(item)))
				continue
			}
			for _, e := range d.mergeEntries(item, path, pipeline, hideKeys) {
				if !seen[e.key] {
					seen[e.key] = true
					out = append(out, e)
				}
			}
		}
		return out
	}
	d.fail(val, path, pipeline, "a merge (<<) takes a mapping or a list of mappings, got %s", describe(val))
	return nil
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path, pipeline string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, pipeline, "expected a mapping, got %s", describe(n))
		return
	}
	fields := yamlFields(v.Type())
	for _, e := range d.entries(n, path, pipeline, false) {
		f, ok := fields.byName[e.key]
		if !ok {
			d.add(e.keyLine, path, pipeline, "unknown field %q%s", e.key, suggest(e.key, fields.names))
			continue
		}
		fp := joinPath(path, e.key)
		d.pos[fp] = e.keyLine
		d.decode(e.value, v.Field(f), fp, pipeline)
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path, pipeline string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, pipeline, "expected a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		d.pos[ip] = item.Line
		itemPipeline := pipeline
		if v.Type().Elem() == reflect.TypeFor[Pipeline]() {
			itemPipeline = nameOf(item)
		}
		d.decode(item, s.Index(i), ip, itemPipeline)
	}
	v.Set(s)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path, pipeline string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, pipeline, "expected a mapping, got %s", describe(n))
		return
	}
	m := reflect.MakeMap(v.Type())
	for _, e := range d.entries(n, path, pipeline, false) {
		fp := joinPath(path, e.key)
		d.pos[fp] = e.keyLine
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(e.value, elem, fp, pipeline)
		m.SetMapIndex(reflect.ValueOf(e.key).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path, pipeline string) {
	var want string
	switch v.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "true or false"
	case reflect.Int:
		want = "a whole number"
		if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!int" {
			// yaml.v3 would truncate 1.5 to 1; that is a mistake, not a value.
			d.fail(n, path, pipeline, "expected %s, got %s", want, describe(n))
			return
		}
	case reflect.Float64:
		want = "a number"
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, pipeline, "expected %s, got %s", want, describe(n))
		return
	}
	// yaml.v3 decodes the leaf; its error text (which echoes the value and
	// names the Go type) is replaced by ours.
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.fail(n, path, pipeline, "expected %s, got %s", want, describe(n))
	}
}

// decodeSecret reads the mapping form of a secret. Nothing it reports
// repeats what was written: a scalar may be the secret itself, and so may
// a key (`signing_key: {s3cr3t}` is a mapping with one key).
func (d *decoder) decodeSecret(n *yaml.Node, s *Secret, path, pipeline string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, pipeline, "expected a mapping with value, env or file, got %s", describe(n))
		return
	}
	for _, e := range d.entries(n, path, pipeline, true) {
		var dst *string
		switch e.key {
		case "value":
			dst = &s.value
		case "env":
			dst = &s.Env
		case "file":
			dst = &s.File
		default:
			d.add(e.keyLine, path, pipeline, "unknown key; a secret is a mapping with value, env or file")
			d.failed = append(d.failed, path)
			continue
		}
		fp := joinPath(path, e.key)
		d.pos[fp] = e.keyLine
		val := resolve(e.value)
		if val.Kind != yaml.ScalarNode {
			d.fail(val, fp, pipeline, "expected a string, got %s", describe(val))
			continue
		}
		if val.ShortTag() == "!!null" {
			continue
		}
		*dst = val.Value
	}
}

// nameOf returns a pipeline node's name, for messages about it.
func nameOf(n *yaml.Node) string {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := resolve(n.Content[i]), resolve(n.Content[i+1]); k.Value == "name" && v.Kind == yaml.ScalarNode {
			return v.Value
		}
	}
	return ""
}

// fieldSet is a struct's YAML field names and field indexes.
type fieldSet struct {
	byName map[string]int
	names  []string
}

// yamlFields lists the fields of a struct that the YAML schema has: the
// exported fields with a yaml tag.
func yamlFields(t reflect.Type) fieldSet {
	fs := fieldSet{byName: map[string]int{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fs.byName[name] = i
		fs.names = append(fs.names, name)
	}
	return fs
}

// suggest names the known field closest to a misspelt one, if one is close.
func suggest(name string, known []string) string {
	best, bestDist := "", 3 // at most two edits away
	for _, k := range known {
		if dist := editDistance(name, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Levenshtein distance between two short names.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
