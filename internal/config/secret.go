package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Secret is a value read from the environment, a file, or (for tests and
// demos) written inline. Exactly one of value, env and file is set.
//
// A Secret never prints its value: String, GoString, every fmt verb, JSON,
// YAML and slog all give "<secret>" (or "" when it is unset). Resolve is
// the one way to read it. Decoding reports a mistyped secret without
// repeating it.
type Secret struct {
	// The secret itself, inline. Convenient for tests and demos; in
	// production use env or file, so the file can be shared.
	value string `yaml:"value"`
	// The name of an environment variable holding the secret.
	Env string `yaml:"env"`
	// The path of a file holding the secret; one trailing newline is
	// ignored.
	File string `yaml:"file"`
}

// InlineSecret returns a secret whose value is written in the
// configuration (as `value:` is), for tests.
func InlineSecret(value string) Secret { return Secret{value: value} }

// IsZero reports whether no source is set.
func (s Secret) IsZero() bool { return s.value == "" && s.Env == "" && s.File == "" }

// IsInline reports whether the value is written in the configuration, so
// it can be checked at load time.
func (s Secret) IsInline() bool { return s.value != "" }

// String hides the value.
func (s Secret) String() string {
	if s.IsZero() {
		return ""
	}
	return "<secret>"
}

// GoString hides the value from %#v.
func (s Secret) GoString() string { return s.String() }

// Format hides the value from every fmt verb, including %v, %+v, %#v, %s
// and %q of a struct that holds the Secret.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		fmt.Fprintf(f, "%q", s.String())
		return
	}
	_, _ = io.WriteString(f, s.String())
}

// LogValue hides the value from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON hides the value.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// MarshalYAML hides the value.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// UnmarshalYAML reads the mapping form (value, env or file) for callers
// that decode with yaml.v3 directly; Load reports the same problems with
// their field path. A plain scalar is rejected without being repeated.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	d := &decoder{pos: positions{}}
	var out Secret
	d.decodeSecret(resolve(n), &out, "", "")
	if len(d.problems) > 0 {
		return d.problems.err()
	}
	*s = out
	return nil
}

// Resolve returns the secret's value. A file's trailing newline is dropped.
// Its errors name the variable or file, never the value.
func (s Secret) Resolve() (string, error) {
	switch {
	case s.value != "":
		return s.value, nil
	case s.Env != "":
		v, ok := os.LookupEnv(s.Env)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s is not set", s.Env)
		}
		return v, nil
	case s.File != "":
		b, err := os.ReadFile(s.File)
		if err != nil {
			return "", fmt.Errorf("secret file: %w", err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("secret file %s is empty", s.File)
		}
		return v, nil
	}
	return "", errors.New("no value, env or file set")
}

// sources counts the sources set; exactly one is valid.
func (s Secret) sources() int {
	n := 0
	for _, v := range []string{s.value, s.Env, s.File} {
		if v != "" {
			n++
		}
	}
	return n
}
