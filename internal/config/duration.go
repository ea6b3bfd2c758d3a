package config

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// Duration is a YAML duration in Prometheus notation ("500ms", "2s", "1m",
// "30d").
type Duration time.Duration

// decodeNode parses the Prometheus duration notation.
func (d *Duration) decodeNode(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration such as 2s, got %s", describe(node))
	}
	parsed, err := model.ParseDuration(node.Value)
	if err != nil {
		return fmt.Errorf("%q is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d", node.Value)
	}
	*d = Duration(parsed)
	return nil
}

// UnmarshalYAML parses the Prometheus duration notation for callers that
// decode with yaml.v3 directly. Its errors carry the line, because yaml.v3
// loses the position of errors returned by custom unmarshalers.
func (d *Duration) UnmarshalYAML(node *yaml.Node) error { return withLine(node, d.decodeNode(node)) }

// MarshalYAML writes the duration back in the same notation.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String prints the duration in Prometheus notation.
func (d Duration) String() string { return model.Duration(d).String() }

// withLine prefixes an error with the node's line.
func withLine(node *yaml.Node, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("line %d: %w", node.Line, err)
}
