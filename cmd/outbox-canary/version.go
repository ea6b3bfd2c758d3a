package main

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-canary/outbox-canary/internal/version"
)

func versionCommand(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", "Print the version, the git revision and the Go release of this build.", stderr)
	if helped, err := parseFlags(fs, args); helped || err != nil {
		return err
	}
	fmt.Fprintf(stdout, "outbox-canary %s (revision %s, %s)\n", version.Version, version.Revision, version.GoVersion())
	return nil
}
