// Package retry is the one backoff of outbox-canary: exponential, doubling,
// capped, with ±50% jitter so that many canaries, readers or relays that
// failed together do not retry in lockstep against a recovering server.
package retry

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff returns a fresh backoff whose first wait is about initial and
// whose waits double up to about max (the jitter may exceed max by half).
// NextBackOff gives the next wait; Reset starts again after a success. Not
// safe for concurrent use: each retrying loop owns one.
func Backoff(initial, max time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         max,
	}
}
