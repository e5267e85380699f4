package api

import (
	"strconv"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/ttl"
)

// timeLayout is RFC 3339 UTC with milliseconds, as docs/API.md requires.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(ms int64) string { return ttl.Time(ms).Format(timeLayout) }

func fmtTimePtr(ms int64) *string {
	if ms == 0 {
		return nil
	}
	s := fmtTime(ms)
	return &s
}

// recordJSON is a record as docs/docs/API.md'shows it. Tokens are never shown.
type recordJSON struct {
	Principal      string        `json:"principal"`
	Endpoint       string        `json:"endpoint"`
	Key            string        `json:"key"`
	State          string        `json:"state"`
	Fingerprint    string        `json:"fingerprint"`
	Attempt        uint32        `json:"attempt"`
	CorrelationID  string        `json:"correlation_id,omitempty"`
	CreatedAt      string        `json:"created_at"`
	ExpiresAt      string        `json:"expires_at"`
	LeaseExpiresAt *string       `json:"lease_expires_at,omitempty"`
	CompletedAt    *string       `json:"completed_at,omitempty"`
	Response       *responseBody `json:"response,omitempty"`
}

func toJSON(r *engine.Record) *recordJSON {
	j := &recordJSON{
		Principal: r.Principal, Endpoint: r.Endpoint, Key: r.Key, State: r.State.String(),
		Fingerprint: r.Fingerprint, Attempt: r.Attempt, CorrelationID: r.CorrelationID,
		CreatedAt: fmtTime(r.CreatedMs), ExpiresAt: fmtTime(r.ExpiresMs),
	}
	if r.State == engine.StateInProgress {
		j.LeaseExpiresAt = fmtTimePtr(r.LeaseMs)
	}
	if r.State == engine.StateCompleted && r.Response != nil {
		j.CompletedAt = fmtTimePtr(r.CompletedMs)
		body := r.Response.Body
		if body == nil {
			body = []byte{}
		}
		// A response stored without headers replays "headers":{} as it was
		// sent, not null.
		headers := r.Response.Headers
		if headers == nil {
			headers = map[string]string{}
		}
		j.Response = &responseBody{Status: r.Response.Status, ContentType: r.Response.ContentType,
			Headers: headers, Body: body}
	}
	return j
}

type claimedJSON struct {
	Outcome        string `json:"outcome"`
	Token          string `json:"token"`
	Attempt        uint32 `json:"attempt"`
	CreatedAt      string `json:"created_at"`
	ExpiresAt      string `json:"expires_at"`
	LeaseExpiresAt string `json:"lease_expires_at"`
}

func claimed(r *engine.Record) claimedJSON {
	return claimedJSON{Outcome: "claimed", Token: strconv.FormatUint(r.Token, 10), Attempt: r.Attempt,
		CreatedAt: fmtTime(r.CreatedMs), ExpiresAt: fmtTime(r.ExpiresMs), LeaseExpiresAt: fmtTime(r.LeaseMs)}
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
}

func durationSeconds(d time.Duration) int64 { return int64(d / time.Second) }
