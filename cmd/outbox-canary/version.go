package main

import (
	"context"
	"fmt"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/internal/version"
)

func versionCommand(app *kingpin.Application, c *cli) action {
	app.Command("version", "Print the version, the git revision and the Go release of this build (as --version does).")
	return func(context.Context) error {
		fmt.Fprintf(c.stdout, "outbox-canary %s (revision %s, %s)\n", version.Version, version.Revision, version.GoVersion())
		return nil
	}
}
