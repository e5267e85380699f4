package api

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ackedBytes returns a function that reads how many bytes of c the peer
// has acknowledged (TCP_INFO's tcpi_bytes_acked), nil when c is not a TCP
// connection whose kernel says. A peer acknowledges only what its kernel
// buffered for it, so the count stops when the client stops reading.
func ackedBytes(c net.Conn) func() (uint64, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	read := func() (uint64, bool) {
		var n uint64
		var gerr error
		if err := raw.Control(func(fd uintptr) {
			var info *unix.TCPInfo
			if info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); gerr == nil {
				n = info.Bytes_acked
			}
		}); err != nil || gerr != nil {
			return 0, false
		}
		return n, true
	}
	if _, ok := read(); !ok {
		return nil
	}
	return read
}
