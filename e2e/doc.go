// Package e2e holds end-to-end tests on a real pipeline (PostgreSQL ->
// reference relay -> Kafka -> prober): the generated alert rules in real
// Prometheus and Alertmanager servers, and the status page in a real
// headless Chromium. It has no code of its own: see the tests, and their
// file headers for how to run them.
// TestDetect (`make detect`, not part of `make test`) measures detection
// at production settings and writes docs/detection.md.
package e2e
