package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Secret is a value read from the environment, a file, or (for tests and
// demos) inline. It never prints its value: String and MarshalYAML give
// "<secret>".
type Secret struct {
	Value string `yaml:"value"`
	Env   string `yaml:"env"`
	File  string `yaml:"file"`
}

// IsZero reports whether no source is set.
func (s Secret) IsZero() bool { return s.Value == "" && s.Env == "" && s.File == "" }

// String hides the value.
func (s Secret) String() string {
	if s.IsZero() {
		return ""
	}
	return "<secret>"
}

// MarshalYAML hides the value.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// Resolve returns the secret's value. A file's trailing newline is dropped.
func (s Secret) Resolve() (string, error) {
	switch {
	case s.Value != "":
		return s.Value, nil
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
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", errors.New("no value, env or file set")
}

func (s Secret) validate(path string) error {
	n := 0
	for _, v := range []string{s.Value, s.Env, s.File} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%s: set only one of value, env and file", path)
	}
	return nil
}
