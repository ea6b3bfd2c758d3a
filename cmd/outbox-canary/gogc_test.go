package main

import (
	"runtime/debug"
	"testing"
)

// The service's GC target is 75 unless GOGC says otherwise, and GOGC,
// which the runtime applied at start, is left as it is.
func TestDefaultGCPercentYieldsToGOGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "")
	if p, fromEnv := applyDefaultGCPercent(); p != defaultGCPercent || fromEnv {
		t.Errorf("without GOGC: %d (from GOGC: %t), want %d", p, fromEnv, defaultGCPercent)
	}
	if p := debug.SetGCPercent(100); p != defaultGCPercent {
		t.Errorf("without GOGC the runtime's target is %d, want %d", p, defaultGCPercent)
	}

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // as the runtime does at start with GOGC=150
	if p, fromEnv := applyDefaultGCPercent(); p != 150 || !fromEnv {
		t.Errorf("with GOGC=150: %d (from GOGC: %t), want 150 from GOGC", p, fromEnv)
	}
	if p := debug.SetGCPercent(100); p != 150 {
		t.Errorf("with GOGC=150 the runtime's target is %d, want it left at 150", p)
	}
}
