package ttl

import (
	"syscall"
	"time"
	"unsafe"
)

// clockMonotonicRaw is CLOCK_MONOTONIC_RAW of <linux/time.h>.
const clockMonotonicRaw = 4

// monotonicRaw reads CLOCK_MONOTONIC_RAW: the hardware clock, which neither
// steps nor is slewed by NTP (see Clock). A system call: the standard
// library's vDSO path reads CLOCK_MONOTONIC only.
func monotonicRaw() (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonicRaw, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
