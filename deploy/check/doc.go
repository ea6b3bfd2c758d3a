// Package check holds the tests of what deploy/ ships: the Helm chart
// (rendered with Helm's own packages, decoded strictly into the Kubernetes and
// Prometheus Operator types, linted, checked against Pod Security
// "restricted" and scored by kube-score) and the systemd unit
// (systemd-analyze verify and security).
//
// It is a Go module of its own so that Helm, client-go and kube-score stay
// out of the service's module: the outbox-canary binary never links them.
// Run it with `make test-deploy` (part of `make test`).
package check
