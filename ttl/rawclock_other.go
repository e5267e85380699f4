//go:build !linux

package ttl

import "time"

// monotonicRaw is Linux's CLOCK_MONOTONIC_RAW; elsewhere Clock uses Go's
// monotonic clock alone.
func monotonicRaw() (time.Duration, bool) { return 0, false }
