//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package api

import (
	"net"
	"syscall"
)

// unreadBytes reports, without blocking, whether the kernel holds bytes
// of c that no Read has taken yet: a request the server has not got to.
// False when it cannot tell.
func unreadBytes(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	var buf [1]byte
	raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = err == nil && n > 0
	})
	return pending
}
