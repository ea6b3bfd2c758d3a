package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// inlineSecrets is a valid configuration with every secret inline; each
// secret contains "s3cr3t", which nothing else in it does.
const inlineSecrets = `
instance_id: test-1
signing_key: {value: s3cr3t-signing-key}
pipelines:
  - name: orders
    database: {dsn: {value: "postgres://canary:s3cr3t-db-password@db/orders"}}
    kafka:
      brokers: ["k:9092"]
      sasl: {mechanism: plain, username: canary, password: {value: s3cr3t-sasl}}
    budgets: {end_to_end: 2s}
`

func TestASecretNeverPrintsItself(t *testing.T) {
	cfg, err := Load([]byte(inlineSecrets))
	if err != nil {
		t.Fatal(err)
	}
	key := cfg.SigningKey
	jsonOf := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return unescapeJSON(string(b))
	}
	yamlOf := func(v any) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	logOf := func(h func(*bytes.Buffer) slog.Handler, v any) string {
		var buf bytes.Buffer
		slog.New(h(&buf)).Info("config", "value", v)
		return unescapeJSON(buf.String())
	}
	text := func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }
	jsonH := func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }

	shownAsSecret := []struct{ name, out string }{
		{"String", key.String()},
		{"GoString", key.GoString()},
		{"%v", fmt.Sprintf("%v", key)},
		{"%+v", fmt.Sprintf("%+v", key)},
		{"%#v", fmt.Sprintf("%#v", key)},
		{"%s", fmt.Sprintf("%s", key)},
		{"%q", fmt.Sprintf("%q", key)},
		{"%x", fmt.Sprintf("%x", key)},
		{"%v of a pointer", fmt.Sprintf("%v", &key)},
		{"JSON", jsonOf(key)},
		{"YAML", yamlOf(key)},
		{"slog text", logOf(text, key)},
		{"slog JSON", logOf(jsonH, key)},
	}
	for _, tc := range shownAsSecret {
		t.Run("a secret printed with "+tc.name+" shows <secret>", func(t *testing.T) {
			if strings.Contains(tc.out, "s3cr3t") || !strings.Contains(tc.out, "<secret>") {
				t.Fatalf("got %s", tc.out)
			}
		})
	}
	wholeConfig := []struct{ name, out string }{
		{"%v", fmt.Sprintf("%v", cfg)},
		{"%+v", fmt.Sprintf("%+v", *cfg)},
		{"%#v", fmt.Sprintf("%#v", cfg)},
		{"JSON", jsonOf(cfg)},
		{"YAML", yamlOf(cfg)},
		{"slog text", logOf(text, cfg)},
		{"slog JSON", logOf(jsonH, cfg)},
		{"%+v of a pipeline", fmt.Sprintf("%+v", cfg.Pipelines[0])},
	}
	for _, tc := range wholeConfig {
		t.Run("a whole config printed with "+tc.name+" hides its three secrets", func(t *testing.T) {
			if strings.Contains(tc.out, "s3cr3t") || strings.Count(tc.out, "<secret>") < 1 {
				t.Fatalf("got %s", tc.out)
			}
		})
	}
	t.Run("an unset secret prints as empty, not as <secret>", func(t *testing.T) {
		if got := fmt.Sprintf("%v|%q|%s", Secret{}, Secret{}, jsonOf(Secret{})); got != `|""|""` {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("the secrets still resolve", func(t *testing.T) {
		if v, err := cfg.SigningKey.Resolve(); err != nil || v != "s3cr3t-signing-key" {
			t.Fatalf("Resolve() = %q, %v", v, err)
		}
	})
}

// A secret written in the wrong shape is refused without being repeated:
// yaml.v3 alone would quote up to ten of its characters.
func TestAMistypedSecretIsNeverRepeated(t *testing.T) {
	cases := []struct{ name, signingKey, want string }{
		{"a plain scalar", "s3cr3tKey", "line 3: signing_key: expected a mapping with value, env or file, got a string"},
		{"a quoted scalar", `"s3cr3tKey"`, "line 3: signing_key: expected a mapping with value, env or file, got a string"},
		{"a number", "123456789", "line 3: signing_key: expected a mapping with value, env or file, got a number"},
		{"a list", "[s3cr3tKey]", "line 3: signing_key: expected a mapping with value, env or file, got a list"},
		{"a flow mapping of the secret alone", "{s3cr3tKey}", "line 3: signing_key: unknown key; a secret is a mapping with value, env or file"},
		{"the secret as a key", "{s3cr3tKey: x}", "line 3: signing_key: unknown key; a secret is a mapping with value, env or file"},
		{"a value that is a list", "{value: [s3cr3tKey]}", "line 3: signing_key.value: expected a string, got a list"},
		{"a value written twice", "{value: s3cr3tKey, value: s3cr3tKey2}", "line 3: signing_key: a key is written twice (first at line 3)"},
		{"two sources", "{value: s3cr3tKey, env: KEY}", "line 3: signing_key: set only one of value, env and file"},
		{"an alias to nothing", "*s3cr3tKey", "not valid YAML: unknown anchor referenced"},
		{"a tagged scalar", "!s3cr3tKey x", "line 3: signing_key: expected a mapping with value, env or file, got a tagged value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(inlineSecrets, "{value: s3cr3t-signing-key}", tc.signingKey, 1)
			_, err := Load([]byte(data))
			if err == nil {
				t.Fatalf("Load accepted signing_key: %s", tc.signingKey)
			}
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "123456789") {
				t.Fatalf("the error repeats the secret: %v", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("error:\n  got  %v\n  want %s", err, tc.want)
			}
		})
	}
	t.Run("a DSN written as a scalar", func(t *testing.T) {
		data := strings.Replace(inlineSecrets, `{dsn: {value: "postgres://canary:s3cr3t-db-password@db/orders"}}`, `{dsn: "postgres://canary:s3cr3t-db-password@db/orders"}`, 1)
		_, err := Load([]byte(data))
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "database.dsn: expected a mapping with value, env or file, got a string") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a secret decoded by yaml.v3 directly", func(t *testing.T) {
		var v struct {
			Key Secret `yaml:"key"`
		}
		err := yaml.Unmarshal([]byte("key: s3cr3tKey\n"), &v)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "config.") {
			t.Fatalf("got %v", err)
		}
		if err := yaml.Unmarshal([]byte("key: {env: K}\n"), &v); err != nil || v.Key.Env != "K" {
			t.Fatalf("the mapping form: %+v, %v", v.Key.Env, err)
		}
	})
}

// unescapeJSON undoes encoding/json's HTML escaping of < and >.
func unescapeJSON(s string) string {
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(s)
}
