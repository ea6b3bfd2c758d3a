package main

import (
	"context"
	"errors"
	"io"
)

// PLACEHOLDER: replaced by the engineer who owns this subcommand.
func rulesCommand(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("rules: not built yet")
}
