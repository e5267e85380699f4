//go:build unix

package main

import (
	"errors"
	"syscall"
)

var errNoRlimit = errors.New("no RLIMIT_NOFILE on this system")

// raiseOpenFiles raises the soft open-files limit to the hard one, as
// servers commonly do (Go's runtime does it too on some systems), and
// returns both limits.
func raiseOpenFiles() (soft, hard uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, err
	}
	if l.Cur < l.Max {
		want := l
		want.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			l = want
		}
	}
	return uint64(l.Cur), uint64(l.Max), nil
}
