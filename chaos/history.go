package chaos

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"
)

// Operation kinds.
const (
	KindClaim    = "claim"
	KindComplete = "complete"
	KindRelease  = "release"
	KindExtend   = "extend"
	KindLookup   = "lookup"
)

// Outcome classes of an operation.
const (
	// OK: the server answered with a status the API defines for the route;
	// the answer is definite, success or refusal.
	OK = "ok"
	// Fail: the request certainly did not reach a server (connection
	// refused): it cannot have been applied.
	Fail = "fail"
	// Info: timeout, transport error, 503 or 5xx: the operation may or may
	// not have been applied.
	Info = "info"
)

// Response is the stored HTTP response of a completed attempt, as the
// workload sends it and the server replays it.
type Response struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"` // base64 in JSON
}

// Op is one operation of the history: what a client asked, of which node,
// when, and what it got.
type Op struct {
	ID      int    `json:"id"`
	Process int    `json:"process"` // a client gets a new process after an Info operation (its last one stays open)
	Client  int    `json:"client"`
	Node    string `json:"node"`
	Kind    string `json:"kind"`
	Final   bool   `json:"final,omitempty"` // issued by the final check after healing

	Principal   string    `json:"principal"`
	Endpoint    string    `json:"endpoint"`
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	ClaimID     string    `json:"claim_id,omitempty"`
	Token       string    `json:"token,omitempty"` // complete, release, extend: the token sent
	Response    *Response `json:"response,omitempty"`

	Call   int64 `json:"call_ns"`   // since the start of the run
	Return int64 `json:"return_ns"` // since the start of the run

	Outcome string `json:"outcome"` // OK, Fail or Info
	Status  int    `json:"status,omitempty"`
	Code    string `json:"code,omitempty"`
	Error   string `json:"error,omitempty"`

	// What a successful answer carried.
	ResToken   string    `json:"res_token,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	State      string    `json:"state,omitempty"`
	RecFP      string    `json:"rec_fingerprint,omitempty"`
	RecScope   string    `json:"rec_scope,omitempty"` // principal|endpoint|key of a returned record
	RecResp    *Response `json:"rec_response,omitempty"`
	LeaseUntil string    `json:"lease_expires_at,omitempty"`
	// RetentionMs is a 201 claim's expires_at - created_at.
	RetentionMs int64 `json:"retention_ms,omitempty"`
	// ClusterMs is the cluster time a 201 claim was decided at, as its
	// answer shows it (lease_expires_at less the lease asked for; 0 when
	// the lease was cut at expires_at, or the times were not in the
	// answer). ClockChecks compares it with the harness's clock.
	ClusterMs int64 `json:"cluster_ms,omitempty"`
}

// Scope is the op's scope as one string.
func (o *Op) Scope() string { return scopeString(o.Principal, o.Endpoint, o.Key) }

func scopeString(p, e, k string) string { return p + "|" + e + "|" + k }

// Event is one nemesis action with its window. Healed is when the fault
// was undone (processes restarted, links restored); a nemesis may go on
// observing after it, until End. Liveness is measured from Healed.
type Event struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	Start  int64  `json:"start_ns"`
	Healed int64  `json:"healed_ns"`
	End    int64  `json:"end_ns"`
	Error  string `json:"error,omitempty"`
}

// History is the record of a run: every operation and nemesis event.
type History struct {
	mu     sync.Mutex
	start  time.Time
	ops    []*Op
	events []Event
	procs  int
}

// NewHistory starts the clock of a history.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the start of the history, in nanoseconds.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records a completed operation and gives it its id.
func (h *History) Add(o *Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.ID = len(h.ops)
	h.ops = append(h.ops, o)
}

// NewProcess returns a fresh process number.
func (h *History) NewProcess() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.procs++
	return h.procs - 1
}

// AddEvent records a nemesis event.
func (h *History) AddEvent(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Ops returns the operations sorted by invocation time.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]*Op(nil), h.ops...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// Events returns the nemesis events in order.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// historyFile is the JSON form of a history.
type historyFile struct {
	Start      time.Time     `json:"start"`
	Config     any           `json:"config"`
	Ops        []*Op         `json:"ops"`
	Events     []Event       `json:"nemesis"`
	Readiness  []ReadySample `json:"readiness,omitempty"`
	Violations []Violation   `json:"violations"`
}

// WriteJSON writes the history, the run's config and the violations found.
func (h *History) WriteJSON(path string, cfg any, ready []ReadySample, v []Violation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", " ")
	if err := enc.Encode(historyFile{Start: h.start, Config: cfg, Ops: h.Ops(), Events: h.Events(), Readiness: ready, Violations: v}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
