//go:build !unix

package main

import "errors"

var errNoRlimit = errors.New("no RLIMIT_NOFILE on this system")

// raiseOpenFiles has nothing to raise here.
func raiseOpenFiles() (soft, hard uint64, err error) { return 0, 0, errNoRlimit }
