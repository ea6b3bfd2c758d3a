package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/dashboards"
)

func TestDashboardsCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// wantErr is part of the error; empty means success.
		wantErr string
		// wantUsage is true when the error has been explained by the usage
		// text (exit code 2).
		wantUsage bool
		// wantStderr is part of what is printed on stderr.
		wantStderr string
	}{
		{
			name:       "Without --config.file the command says it is required.",
			args:       []string{"--out", "x"},
			wantUsage:  true,
			wantStderr: "required flag(s) '--config.file' not provided",
		},
		{
			name:       "Without --out the command says it is required.",
			args:       []string{"--config.file", "../../examples/outbox-canary.yml"},
			wantUsage:  true,
			wantStderr: "required flag(s) '--out' not provided",
		},
		{
			name:    "A configuration file that does not exist is named in the error.",
			args:    []string{"--config.file", "testdata/no-such-file.yml", "--out", "x"},
			wantErr: "dashboards: read config: open testdata/no-such-file.yml: no such file or directory",
		},
		{
			name:      "An unknown flag is a usage error.",
			args:      []string{"--config.file", "../../examples/outbox-canary.yml", "--bogus"},
			wantUsage: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), append([]string{"dashboards"}, tt.args...), &stdout, &stderr)
			switch {
			case tt.wantUsage:
				if !errors.Is(err, errUsage) {
					t.Fatalf("error %v, want a usage error", err)
				}
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

// The command writes what the package generates, where make generate puts
// it: the example files checked in are its output (the package's own test
// checks them for drift).
func TestDashboardsCommandWritesTheExampleFiles(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"dashboards", "--config.file", "../../examples/outbox-canary.yml", "--out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, name := range []string{
		dashboards.UIDSLOOverview + ".json",
		dashboards.UIDSegmentLatency + ".json",
		dashboards.UIDPipelineHealth + ".json",
		dashboards.ProvisioningDashboards,
		dashboards.ProvisioningDatasources,
	} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../../examples/dashboards", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from examples/dashboards/%s: run make generate", name, name)
		}
	}
	if !strings.Contains(stdout.String(), "wrote 5 ") {
		t.Errorf("stdout %q does not say what was written", stdout.String())
	}
}

// A configuration that does not validate is an error that names the file
// and the field, and nothing is written.
func TestDashboardsCommandRejectsAnInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(cfg, []byte("pipelines:\n  - name: orders\n    bogus_field: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"dashboards", "--config.file", cfg, "--out", out}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), "bogus_field") {
		t.Fatalf("error %v, want one naming %s and bogus_field", err, cfg)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the output directory was created for an invalid config: %v", err)
	}
}
