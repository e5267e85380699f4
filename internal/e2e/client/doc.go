// Package e2eclient holds the client package's tests that need a running
// store (internal/idemtest). They live outside client/ because a module
// that imports the client loads the client's tests (go mod tidy does), and
// these would bring in the store and its dependencies (raft, Pebble), which
// an application that only talks to idem must never need.
package e2eclient
