//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package client

import "net"

// canPeek: alive cannot peek without blocking here, so the Client keeps
// net/http's Transport, whose read goroutine notices a closed idle
// connection (NewTransport).
const canPeek = false

func alive(net.Conn) bool { return true }
