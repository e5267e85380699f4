package wire

import (
	"encoding/json"
	"fmt"
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
