package stacktest

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// These tests need no servers.

func TestReadEnv(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    map[string]string
		wantErr string
	}{
		{
			name:    "key value lines are read and comments and blank lines skipped",
			content: "# header\n\nA=1\nB=postgres://u:p@h:1/db?sslmode=disable\n",
			want:    map[string]string{"A": "1", "B": "postgres://u:p@h:1/db?sslmode=disable"},
		},
		{
			name:    "a line without '=' is an error that names the line",
			content: "A=1\nnonsense\n",
			wantErr: `:2: want KEY=value, got "nonsense"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "env")
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readEnv(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestLoadWithoutAStackSaysWhy(t *testing.T) {
	t.Run("a missing env file is named", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "missing")
		t.Setenv(EnvVar, p)
		_, err := load()
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("err = %v, want it to name %s", err, p)
		}
	})
	t.Run("servers that do not answer are reported", func(t *testing.T) {
		// A port that was just free is very likely still free.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).AddrPort().Port()
		l.Close()
		p := filepath.Join(t.TempDir(), "env")
		env := strings.Join([]string{
			"OUTBOX_CANARY_STACK_DIR=/nonexistent",
			"OUTBOX_CANARY_STACK_SCRIPT=/nonexistent/stack.sh",
			"OUTBOX_CANARY_PG_DSN=postgres://x@127.0.0.1/x",
			"OUTBOX_CANARY_PG_ADMIN_DSN=postgres://x@127.0.0.1/postgres",
			"OUTBOX_CANARY_PG_HOST=127.0.0.1",
			"OUTBOX_CANARY_PG_PORT=" + strconv.Itoa(int(port)),
			"OUTBOX_CANARY_KAFKA_BROKERS=127.0.0.1:" + strconv.Itoa(int(port)),
		}, "\n")
		if err := os.WriteFile(p, []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv(EnvVar, p)
		_, err = load()
		if err == nil || !strings.Contains(err.Error(), "does not answer") {
			t.Fatalf("err = %v, want 'does not answer'", err)
		}
	})
}

func TestUniqueName(t *testing.T) {
	a, b := uniqueName(t, "-", 20), uniqueName(t, "-", 20)
	if a == b {
		t.Errorf("two calls gave the same name %q", a)
	}
	if !regexp.MustCompile(`^testuniquename-[0-9a-f]{8}$`).MatchString(a) {
		t.Errorf("name %q does not look like <test name>-<8 hex digits>", a)
	}
	if got := uniqueName(t, "_", 4); !regexp.MustCompile(`^test_[0-9a-f]{8}$`).MatchString(got) {
		t.Errorf("name %q is not cut to 4 characters of the test name", got)
	}
}
