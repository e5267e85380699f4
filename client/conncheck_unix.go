//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package client

import (
	"errors"
	"net"
	"syscall"
)

// canPeek: alive can tell a closed idle connection without blocking.
const canPeek = true

// alive peeks at an idle connection without blocking: a node that closed
// it (or reset it) shows as end of file or an error, a live one as
// nothing to read. Unsolicited bytes make it unusable too.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	live := false
	var buf [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		// 0 bytes and no error is the end of file; bytes are unsolicited.
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		live = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true // done either way: never wait for readiness
	}); err != nil {
		return false
	}
	return live
}
