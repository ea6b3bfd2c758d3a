package config

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// Duration is a YAML duration in Prometheus notation ("500ms", "2s", "1m",
// "30d"). Parse errors carry the line, because yaml.v3 loses the position of
// errors returned by custom unmarshalers.
type Duration time.Duration

// UnmarshalYAML parses the Prometheus duration notation.
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	var s string
	if err := node.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration: %w", node.Line, err)
	}
	parsed, err := model.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration: write a positive number and a unit (ms, s, m, h, d, w), e.g. 500ms, 2s, 30d", node.Line, s)
	}
	*d = Duration(parsed)
	return nil
}

// MarshalYAML writes the duration back in the same notation.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String prints the duration in Prometheus notation.
func (d Duration) String() string { return model.Duration(d).String() }
