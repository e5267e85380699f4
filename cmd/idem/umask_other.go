//go:build !unix

package main

// restrictUmask does nothing where there is no umask; protect the data dir
// with the platform's access control.
func restrictUmask() {}
