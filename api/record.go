package api

import (
	"strconv"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/ttl"
	"github.com/idem-store/idem/wire"
)

// timeLayout is RFC 3339 UTC with milliseconds, as docs/API.md requires.
const timeLayout = wire.TimeLayout

func fmtTime(ms int64) string { return ttl.Time(ms).Format(timeLayout) }

// recordJSON is a record as docs/API.md shows it (wire's definition).
// Tokens are never shown.
type recordJSON = wire.Record

func toJSON(r *engine.Record) *recordJSON {
	j := &recordJSON{
		Principal: r.Principal, Endpoint: r.Endpoint, Key: r.Key, State: r.State.String(),
		Fingerprint: r.Fingerprint, Attempt: int(r.Attempt), CorrelationID: r.CorrelationID,
		CreatedAt: ttl.Time(r.CreatedMs), ExpiresAt: ttl.Time(r.ExpiresMs),
	}
	if r.State == engine.StateInProgress && r.LeaseMs != 0 {
		j.LeaseExpiresAt = ttl.Time(r.LeaseMs)
	}
	if r.State == engine.StateCompleted && r.Response != nil {
		if r.CompletedMs != 0 {
			j.CompletedAt = ttl.Time(r.CompletedMs)
		}
		// A response stored without headers replays "headers":{} as it
		// was sent, not null; wire writes an absent body as "".
		headers := r.Response.Headers
		if headers == nil && len(r.Response.HeaderLists) == 0 {
			headers = map[string]string{}
		}
		j.Response = &responseBody{Status: r.Response.Status, ContentType: r.Response.ContentType,
			Headers: headers, HeaderLists: r.Response.HeaderLists, Body: r.Response.Body}
	}
	return j
}

type claimedJSON = wire.ClaimResponse

func claimed(r *engine.Record) claimedJSON {
	return claimedJSON{Outcome: wire.OutcomeClaimed, Token: strconv.FormatUint(r.Token, 10), Attempt: int(r.Attempt),
		CreatedAt: ttl.Time(r.CreatedMs), ExpiresAt: ttl.Time(r.ExpiresMs), LeaseExpiresAt: ttl.Time(r.LeaseMs)}
}

type outcomeJSON struct {
	Outcome        string      `json:"outcome"`
	Record         *recordJSON `json:"record,omitempty"`
	LeaseExpiresAt string      `json:"lease_expires_at,omitempty"`
}

type configJSON struct {
	Retention        string     `json:"retention"`
	RetentionSeconds int64      `json:"retention_seconds"`
	LeaseDefaultMs   int64      `json:"lease_default_ms"`
	Scope            string     `json:"scope"`
	BucketWidth      string     `json:"bucket_width"`
	Limits           limitsJSON `json:"limits"`
	// AuthFileDigest is Credentials.Digest of the --auth-file in force,
	// "none" without one: what idem cluster status and a starting node
	// compare among the members.
	AuthFileDigest string `json:"auth_file_digest"`
	// AuthFileReloadError is why the last SIGHUP did not reload the
	// --auth-file (the tokens loaded before stay in force), absent when
	// it did or none was sent.
	AuthFileReloadError string `json:"auth_file_reload_error,omitempty"`
	// TLSReloadError is why the last SIGHUP did not reload the --tls-*
	// files (the certificates and CAs loaded before stay in force: after
	// a CA rotation's last step, the old CA is still trusted there),
	// absent when it did or none was sent.
	TLSReloadError string `json:"tls_reload_error,omitempty"`
	// CommitTimeoutMs is this node's --commit-timeout: how long it waits,
	// leading, for a write to be committed, and, following, what a forward
	// waits beyond LeaderWait (commitExtra). Compared among the members by
	// idem cluster status and a starting node: a follower left at the
	// default cut a write it forwarded at 3 s (503, outcome unknown) while
	// a leader raised to 30 s went on waiting for it.
	CommitTimeoutMs int64 `json:"commit_timeout_ms"`
}

func durationSeconds(d time.Duration) int64 { return int64(d / time.Second) }
