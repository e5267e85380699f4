package ttl

import (
	"time"

	"golang.org/x/sys/unix"
)

// monotonicRaw reads CLOCK_MONOTONIC_RAW: the hardware clock, which neither
// steps nor is slewed by NTP (see Clock).
func monotonicRaw() (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
