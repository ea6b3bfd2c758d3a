package main

import (
	"context"
	"errors"
	"io"
)

// PLACEHOLDER: replaced by the engineer who owns this subcommand.
func checkCommand(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("check: not built yet")
}
