package chaos

import (
	"context"
	"sync"

	"github.com/idem-store/idem/client"
)

// caller is what the workload sends an operation through: a node's Client,
// or, with Config.Batch, that client's Batcher, which coalesces the
// concurrent clients' operations into POST /v1/batch requests. Both answer
// an operation with the same values, so the history and its checks are the
// same either way.
type caller interface {
	Claim(context.Context, client.ClaimRequest) (*client.ClaimResponse, error)
	Complete(context.Context, client.CompleteRequest) (*client.CompleteResponse, error)
	Release(context.Context, client.ReleaseRequest) (*client.ReleaseResponse, error)
	Extend(context.Context, client.ExtendRequest) (*client.ExtendResponse, error)
	Get(ctx context.Context, principal, endpoint, key, consistency string) (*client.Record, error)
}

// batchers are the Batchers of the nodes' clients, made on first use. They
// live as long as the process (a chaos run is one).
var batchers sync.Map // *client.Client -> *client.Batcher

// via is what op goes to node through.
func (w *Workload) via(node *Node) caller {
	if w.cfg.Batch <= 0 {
		return node.Client
	}
	if b, ok := batchers.Load(node.Client); ok {
		return b.(*client.Batcher)
	}
	mine := node.Client.NewBatcher(client.BatcherConfig{MaxOps: w.cfg.Batch})
	b, loaded := batchers.LoadOrStore(node.Client, mine)
	if loaded {
		mine.Close() // another workload client made one first
	}
	return b.(*client.Batcher)
}
