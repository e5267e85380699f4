package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The operations of POST /v1/batch: the "op" member of each names the route
// whose body the other members are.
const (
	OpClaim    = "claim"    // POST /v1/claim
	OpComplete = "complete" // POST /v1/complete
	OpRelease  = "release"  // POST /v1/release
	OpExtend   = "extend"   // POST /v1/extend
	OpGet      = "get"      // GET /v1/records (members: its query parameters)
)

// BatchRequest is the body of POST /v1/batch: operations decided in order,
// each exactly as if it had been sent alone.
type BatchRequest struct {
	Ops []BatchOp `json:"ops"`
}

// BatchOp is one operation: Op names the route and Body is that route's
// body: *ClaimRequest, *CompleteRequest, *ReleaseRequest, *ExtendRequest,
// or *Lookup for OpGet. On the wire it is the body's object with "op" first.
type BatchOp struct {
	Op   string
	Body any
}

// Lookup is the operation of a get: the query parameters of GET
// /v1/records. Consistency is "linearizable" (the default) or "stale".
type Lookup struct {
	Principal   string `json:"principal"`
	Endpoint    string `json:"endpoint"`
	Key         string `json:"key"`
	Consistency string `json:"consistency,omitempty"`
}

// MarshalJSON writes the body's members after "op".
func (o BatchOp) MarshalJSON() ([]byte, error) {
	if c, ok := o.Body.(*ClaimRequest); ok && c != nil && o.Op == OpClaim {
		if b, ok := appendClaimOp(make([]byte, 0, 160), c); ok {
			return b, nil
		}
	}
	return o.marshalReflect()
}

// marshalReflect is MarshalJSON through encoding/json, for any body.
func (o BatchOp) marshalReflect() ([]byte, error) {
	op, err := Marshal(o.Op)
	if err != nil {
		return nil, err
	}
	body, err := Marshal(o.Body)
	if err != nil {
		return nil, err
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("wire: batch op %q: the body must be a JSON object, not %.20s", o.Op, body)
	}
	out := make([]byte, 0, len(body)+len(op)+8)
	out = append(out, `{"op":`...)
	out = append(out, op...)
	if len(body) > 2 {
		out = append(out, ',')
	}
	return append(out, body[1:]...), nil
}

// BatchResponse is the answer to POST /v1/batch (200): one result per op,
// in the order of the ops.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
}

// BatchResult is one op's answer: the status and body its own route would
// have answered (a problem document for an error), and RetryAfter, the
// seconds of the Retry-After header that route would have sent.
type BatchResult struct {
	Status     int             `json:"status"`
	Body       json.RawMessage `json:"body"`
	RetryAfter int             `json:"retry_after,omitempty"`
}

// appendClaimOp appends a claim op exactly as the encoding/json path of
// MarshalJSON writes it, when every string is printable ASCII that JSON
// writes as it is; it reports false otherwise. Claims are most of a
// batch, and the reflecting encoder was an eighth of a batching client's
// CPU.
func appendClaimOp(b []byte, c *ClaimRequest) ([]byte, bool) {
	for _, s := range [...]string{c.Principal, c.Endpoint, c.Key, c.Fingerprint, c.ClaimID, c.CorrelationID} {
		if !plainJSON(s) {
			return nil, false
		}
	}
	b = append(b, `{"op":"claim","principal":"`...)
	b = append(b, c.Principal...)
	b = append(b, `","endpoint":"`...)
	b = append(b, c.Endpoint...)
	b = append(b, `","key":"`...)
	b = append(b, c.Key...)
	b = append(b, `","fingerprint":"`...)
	b = append(b, c.Fingerprint...)
	b = append(b, '"')
	if c.LeaseMs != 0 {
		b = append(b, `,"lease_ms":`...)
		b = strconv.AppendInt(b, c.LeaseMs, 10)
	}
	if c.ClaimID != "" {
		b = append(b, `,"claim_id":"`...)
		b = append(b, c.ClaimID...)
		b = append(b, '"')
	}
	if c.CorrelationID != "" {
		b = append(b, `,"correlation_id":"`...)
		b = append(b, c.CorrelationID...)
		b = append(b, '"')
	}
	return append(b, '}'), true
}

// plainJSON reports whether s is printable ASCII that JSON writes as it
// is, without HTML escaping (Marshal's): no control byte, quote or
// backslash, nothing past '~'.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
