package main

// This test needs the project's PostgreSQL and Kafka, as stack_test.go's.

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Basic auth in --web.config.file covers /healthz and /readyz too, and a
// kubelet's probe sends no credentials: --web.probe-address serves those
// two paths, and only them, without TLS or auth.
func TestKubeletProbesAnswerWithoutCredentialsOnTheProbeAddress(t *testing.T) {
	path, _ := stackPipeline(t, "10s")
	// exporter-toolkit's web config takes bcrypt hashes of the passwords.
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	probeAddr := freeAddr(t)
	addr, stderr, cancel, done := startRun(t, path, "--web.config.file", webConfig, "--web.probe-address", probeAddr)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v after cancel", err)
		}
	}()
	get := func(addr, path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// /readyz turns 200 once the schedules run, soon after HTTP serves.
	deadline := time.Now().Add(20 * time.Second)
	for _, path := range []string{"/healthz", "/readyz"} {
		for got := get(probeAddr, path); got != http.StatusOK; got = get(probeAddr, path) {
			if time.Now().After(deadline) {
				t.Fatalf("%s without credentials on the probe address = %d, want 200; stderr:\n%s", path, got, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got := get(addr, path); got != http.StatusUnauthorized {
			t.Errorf("%s without credentials on the main address = %d, want 401 (as documented)", path, got)
		}
	}
	for _, path := range []string{"/metrics", "/api/status", "/"} {
		if got := get(probeAddr, path); got != http.StatusNotFound {
			t.Errorf("%s on the probe address = %d, want 404: it serves the probes only", path, got)
		}
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
