package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Limits are the request limits of docs/API.md, each a server flag.
type Limits struct {
	MaxScopeBytes          int           // principal, endpoint, key: 1..N bytes
	MaxFingerprintChars    int           // hex, 2..N characters, even
	MaxIDBytes             int           // claim_id, correlation_id, reason
	MinLease               time.Duration // lease_ms lower bound
	MaxLease               time.Duration // lease_ms upper bound
	MaxRequestBytes        int64         // whole request body
	MaxResponseBytes       int           // stored response body, decoded
	MaxResponseHeaders     int           // stored response headers, entries
	MaxResponseHeaderBytes int           // stored response headers, names+values together
	MaxKeysPerPrincipal    int64         // live keys of one principal
	MaxPrincipals          int64         // principals holding live keys, cluster wide

	// What protects the node itself (limits_conn.go); not published.
	MaxInFlight     int           // requests handled at once, /healthz and /readyz aside
	BodyReadTimeout time.Duration // the whole request body must arrive within it
	// MaxInFlightBytes bounds the request bodies the node holds at once,
	// in bytes: a body counts its Content-Length (MaxRequestBytes when it
	// has none) from its headers to the end of its answer. A body larger
	// than the whole bound counts as the bound: it is taken when nothing
	// else is held. 0 turns the bound off.
	MaxInFlightBytes int64
}

// DefaultMaxInFlightBytes is the default of Limits.MaxInFlightBytes: 256
// bodies of the default --max-request-bytes (1 MiB) at once, about 512 MiB
// of memory (a body takes about twice its size while read and decoded).
// Ordinary traffic never reaches it: --max-inflight requests of a few KiB
// each hold a few MiB.
const DefaultMaxInFlightBytes = 256 << 20

// DefaultLimits are docs/docs/API.md's defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxScopeBytes:          255,
		MaxFingerprintChars:    128,
		MaxIDBytes:             255,
		MinLease:               100 * time.Millisecond,
		MaxLease:               time.Hour,
		MaxRequestBytes:        1 << 20,
		MaxResponseBytes:       65536,
		MaxResponseHeaders:     32,
		MaxResponseHeaderBytes: 8 << 10,
		MaxKeysPerPrincipal:    100000,
		MaxPrincipals:          1_000_000,
		MaxInFlight:            2048,
		BodyReadTimeout:        10 * time.Second,
		MaxInFlightBytes:       DefaultMaxInFlightBytes,
	}
}

// Validate reports every impossible limit at once.
func (l Limits) Validate() error {
	var errs []error
	pos := func(name string, v int64) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("api: %s must be at least 1 (got %d)", name, v))
		}
	}
	pos("--max-scope-bytes", int64(l.MaxScopeBytes))
	pos("--max-id-bytes", int64(l.MaxIDBytes))
	pos("--max-request-bytes", l.MaxRequestBytes)
	pos("--max-response-bytes", int64(l.MaxResponseBytes))
	pos("--max-response-headers", int64(l.MaxResponseHeaders))
	pos("--max-response-header-bytes", int64(l.MaxResponseHeaderBytes))
	pos("--max-keys-per-principal", l.MaxKeysPerPrincipal)
	pos("--max-principals", l.MaxPrincipals)
	pos("--max-inflight", int64(l.MaxInFlight))
	pos("--max-inflight-bytes", l.MaxInFlightBytes)
	if l.MaxInFlightBytes >= 1 && l.MaxRequestBytes >= 1 && l.MaxInFlightBytes < l.MaxRequestBytes {
		errs = append(errs, fmt.Errorf("api: --max-inflight-bytes %d is less than --max-request-bytes %d: a body of the largest size could be read only while the node holds no other; raise --max-inflight-bytes or lower --max-request-bytes",
			l.MaxInFlightBytes, l.MaxRequestBytes))
	}
	if l.BodyReadTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("api: --body-read-timeout must be at least 10ms (got %s)", l.BodyReadTimeout))
	}
	if l.MaxFingerprintChars < 2 {
		errs = append(errs, fmt.Errorf("api: --max-fingerprint-chars must be at least 2 (got %d)", l.MaxFingerprintChars))
	}
	if l.MinLease < time.Millisecond || l.MaxLease < l.MinLease {
		errs = append(errs, fmt.Errorf("api: lease bounds must satisfy 1ms <= --min-lease (%s) <= --max-lease (%s)", l.MinLease, l.MaxLease))
	}
	return errors.Join(errs...)
}

// limitsJSON is how /v1/config publishes the limits.
type limitsJSON struct {
	MaxScopeBytes          int   `json:"max_scope_bytes"`
	MaxFingerprintChars    int   `json:"max_fingerprint_chars"`
	MaxIDBytes             int   `json:"max_id_bytes"`
	MinLeaseMs             int64 `json:"min_lease_ms"`
	MaxLeaseMs             int64 `json:"max_lease_ms"`
	MaxRequestBytes        int64 `json:"max_request_bytes"`
	MaxResponseBytes       int   `json:"max_response_bytes"`
	MaxResponseHeaders     int   `json:"max_response_headers"`
	MaxResponseHeaderBytes int   `json:"max_response_header_bytes"`
	MaxKeysPerPrincipal    int64 `json:"max_keys_per_principal"`
	MaxPrincipals          int64 `json:"max_principals"`
	// MaxBatchOps is --max-batch-ops, a server flag outside Limits: set
	// by /v1/config only (Published leaves it out, so a peer's drift
	// check compares what it did).
	MaxBatchOps int `json:"max_batch_ops,omitempty"`
}

func (l Limits) json() limitsJSON {
	return limitsJSON{MaxScopeBytes: l.MaxScopeBytes, MaxFingerprintChars: l.MaxFingerprintChars,
		MaxIDBytes: l.MaxIDBytes, MinLeaseMs: l.MinLease.Milliseconds(), MaxLeaseMs: l.MaxLease.Milliseconds(),
		MaxRequestBytes: l.MaxRequestBytes, MaxResponseBytes: l.MaxResponseBytes,
		MaxResponseHeaders: l.MaxResponseHeaders, MaxResponseHeaderBytes: l.MaxResponseHeaderBytes,
		MaxKeysPerPrincipal: l.MaxKeysPerPrincipal, MaxPrincipals: l.MaxPrincipals}
}

// Published is the limits as GET /v1/config publishes them, by name
// (max_keys_per_principal, min_lease_ms, ...): what a node compares with
// its peers' answers.
func (l Limits) Published() map[string]int64 {
	b, _ := json.Marshal(l.json())
	var out map[string]int64
	json.Unmarshal(b, &out)
	return out
}
