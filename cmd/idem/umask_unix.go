//go:build unix

package main

import "syscall"

// restrictUmask makes every file `idem serve` creates 0600 and every
// directory 0700, whatever the libraries ask for (Pebble opens its files
// 0666, raft's snapshot store makes 0755 directories): the data dir holds
// principals, keys, fingerprints and (without an encryption key) responses,
// and only the user idem runs as should read it. Data dirs written before
// are tightened at start (raftfsm).
func restrictUmask() { syscall.Umask(0o077) }
