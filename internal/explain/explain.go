// Package explain holds the one error type the client packages use to
// reword a connection failure for the operator: the sentence names what
// to fix, and the cause stays reachable through errors.Is and errors.As.
package explain

import (
	"errors"
	"strings"
)

// Error is an error rewritten for the operator.
type Error struct {
	msg string
	err error
}

// Wrap rewords err as msg, keeping err as the cause.
func Wrap(msg string, err error) error { return &Error{msg: msg, err: err} }

// Done says whether err, or an error it wraps, was reworded already.
func Done(err error) bool { return errors.As(err, new(*Error)) }

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.err }

// OneLine folds a multi-line message (a server's error, a Java trace) into
// one line for a log attribute or a checklist row.
func OneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
