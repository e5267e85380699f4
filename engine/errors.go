package engine

import "errors"

var (
	// ErrClosed is returned by a closed DB.
	ErrClosed = errors.New("engine: closed")
	// ErrCorrupt is returned when a stored value cannot be decoded.
	ErrCorrupt = errors.New("engine: corrupt value")
	// ErrSnapshot is returned when a snapshot stream is malformed.
	ErrSnapshot = errors.New("engine: bad snapshot stream")
)
