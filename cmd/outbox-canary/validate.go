package main

import (
	"context"
	"errors"
	"io"
)

// PLACEHOLDER: replaced by the engineer who owns this subcommand.
func validateCommand(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("validate: not built yet")
}
