package main

import (
	"context"
	"errors"
	"io"
)

// PLACEHOLDER: replaced by the engineer who owns this subcommand.
func dashboardsCommand(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("dashboards: not built yet")
}
