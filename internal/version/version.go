// Package version carries the build's version, set by the Makefile through
// -ldflags "-X github.com/outbox-canary/outbox-canary/internal/version.Version=...".
package version

import "runtime"

// Set at link time; the defaults describe a plain `go build`.
var (
	Version  = "dev"
	Revision = "unknown"
)

// GoVersion is the Go release the binary was built with.
func GoVersion() string { return runtime.Version() }
