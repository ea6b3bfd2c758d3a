package config

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a configuration file: where it is and
// what is wrong. Its message never contains a secret.
type Problem struct {
	// Line is the 1-based line of the field in the file, 0 when the field
	// is missing from the file (or the Config was not read from YAML).
	Line int
	// Path is the field's path in the YAML schema, with list indexes:
	// "pipelines[0].budgets.commit_to_publish". Empty for the document.
	Path string
	// Message says what is wrong and, where it can, what would be right.
	Message string

	pipeline string // the name of the pipeline Path is in, for display
}

// Error prints the problem as
// `line 12: pipelines[0] "orders": budgets.commit_to_publish: must be positive`.
func (p Problem) Error() string { return located(p.Line, p.Path, p.pipeline, p.Message) }

// Problems is every problem found in a configuration, in file order.
// Load and Validate return it as their error; errors.As reaches it, and
// each Problem through Unwrap.
type Problems []Problem

// Error prints one problem per line, under a count when there are several.
func (ps Problems) Error() string {
	if len(ps) == 1 {
		return ps[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(ps))
	for _, p := range ps {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap gives each problem to errors.Is and errors.As.
func (ps Problems) Unwrap() []error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errs
}

// err returns the problems as an error, nil when there are none, sorted by
// line (problems of missing fields, line 0, first).
func (ps Problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
	return ps
}

// Warning is a setting that is accepted but almost surely not what was
// meant: the prober runs, but not as the file suggests.
type Warning struct {
	// Line is the 1-based line of the field, 0 when unknown.
	Line int
	// Path is the field's path in the YAML schema, as in Problem.
	Path string
	// Message says what is odd and what the prober does instead.
	Message string

	pipeline string
}

// String prints the warning like a Problem.
func (w Warning) String() string { return located(w.Line, w.Path, w.pipeline, w.Message) }

var pipelinePathRE = regexp.MustCompile(`^(pipelines\[[0-9]+\])(?:\.(.*))?$`)

// located formats a message at a path: the pipeline's index and name
// first, since a name is what a reader looks for.
func located(line int, path, pipeline, msg string) string {
	var b strings.Builder
	if line > 0 {
		b.WriteString("line " + strconv.Itoa(line) + ": ")
	}
	if m := pipelinePathRE.FindStringSubmatch(path); m != nil && pipeline != "" {
		b.WriteString(m[1] + " " + strconv.Quote(pipeline))
		if m[2] != "" {
			b.WriteString(": " + m[2])
		}
		b.WriteString(": ")
	} else if path != "" {
		b.WriteString(path + ": ")
	}
	b.WriteString(msg)
	return b.String()
}

// positions maps a field path to the line it was written on.
type positions map[string]int

// line returns the line of path, or of its nearest ancestor written in the
// file (a missing field is reported where its parent is), or 0.
func (ps positions) line(path string) int {
	for path != "" {
		if l, ok := ps[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return 0
}

// has reports whether path was written in the file.
func (ps positions) has(path string) bool {
	_, ok := ps[path]
	return ok
}

// parentPath strips the last element of a path: a.b[1].c -> a.b[1] -> a.b.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// within reports whether path is at or below prefix.
func within(path, prefix string) bool {
	if prefix == "" || path == prefix {
		return true
	}
	return strings.HasPrefix(path, prefix) && (path[len(prefix)] == '.' || path[len(prefix)] == '[')
}

// joinPath appends a field name to a path.
func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// PipelineProblem is a problem with a pipeline's field that is found
// outside this package (the SLO model knows the burn windows a window must
// hold): it carries the field's line and path as Load's problems do.
func (c *Config) PipelineProblem(i int, field, format string, args ...any) Problem {
	path := joinPath(fmt.Sprintf("pipelines[%d]", i), field)
	return Problem{Line: c.pos.line(path), Path: path, Message: fmt.Sprintf(format, args...), pipeline: c.Pipelines[i].Name}
}
