// Package e2emiddleware holds the middleware package's tests that need a
// running store (internal/idemtest). They live outside middleware/ because
// a module that imports the middleware loads the middleware's tests (go mod
// tidy does), and these would bring in the store and its dependencies
// (raft, Pebble), which an application that only talks to idem must never
// need.
package e2emiddleware
