package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/bench"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdDriver claims with a transaction If(CreateRevision(key) == 0)
// Then(Put(key, in_progress, lease)); the token is the revision of that
// put. Complete is If(ModRevision(key) == token) Then(Put, keeping the
// lease); lookup is a (linearizable) Get. Claims share one lease per
// minute of creation, with TTL retention + 1 min: granting a lease per
// claim would double the raft round trips, and nobody would build it so.
type etcdDriver struct {
	clients []*clientv3.Client
	next    atomic.Uint64
	ttl     int64

	mu       sync.Mutex
	leases   map[int64]clientv3.LeaseID // minute -> lease
	inflight map[int64]chan struct{}
}

const leaseBucket = time.Minute

func newEtcdClient(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Context: ctx,
		DialKeepAliveTime: 30 * time.Second, MaxCallSendMsgSize: 4 << 20, Logger: zap.NewNop()})
}

func newEtcdDriver(ctx context.Context, o driverOpts) (bench.Driver, error) {
	eps := splitList(o.target)
	if len(eps) == 0 {
		return nil, errors.New("--target names no node")
	}
	// Several gRPC connections, as etcd's own benchmark tool uses: one
	// HTTP/2 connection for every client would be the bottleneck.
	n := max(1, min(8, o.conns/8))
	d := &etcdDriver{ttl: int64((o.retention + leaseBucket).Seconds()), leases: map[int64]clientv3.LeaseID{}, inflight: map[int64]chan struct{}{}}
	for range n {
		c, err := newEtcdClient(context.Background(), eps)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.clients = append(d.clients, c)
	}
	if _, err := d.clients[0].Get(ctx, "idem/ping"); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *etcdDriver) Close() error {
	for _, c := range d.clients {
		c.Close()
	}
	return nil
}

func (d *etcdDriver) client() *clientv3.Client {
	return d.clients[d.next.Add(1)%uint64(len(d.clients))]
}

// lease returns the lease of the current minute, granting it once.
func (d *etcdDriver) lease(ctx context.Context) (clientv3.LeaseID, error) {
	b := time.Now().UnixNano() / int64(leaseBucket)
	for {
		d.mu.Lock()
		if id, ok := d.leases[b]; ok {
			d.mu.Unlock()
			return id, nil
		}
		if ch, ok := d.inflight[b]; ok {
			d.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		ch := make(chan struct{})
		d.inflight[b] = ch
		d.mu.Unlock()
		resp, err := d.client().Grant(ctx, d.ttl)
		d.mu.Lock()
		delete(d.inflight, b)
		if err == nil {
			d.leases[b] = resp.ID
		}
		d.mu.Unlock()
		close(ch)
		if err != nil {
			return 0, err
		}
		return resp.ID, nil
	}
}

func (d *etcdDriver) Claim(ctx context.Context, s bench.Scope, claimID string) (bench.ClaimResult, error) {
	lease, err := d.lease(ctx)
	if err != nil {
		return bench.ClaimResult{}, etcdErr(err)
	}
	key := scopeKey(s)
	resp, err := d.client().Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "in_progress|"+claimID+"|9f86d081884c7d65", clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return bench.ClaimResult{}, etcdErr(err)
	}
	if !resp.Succeeded {
		return bench.ClaimResult{Outcome: bench.Lost}, nil
	}
	return bench.ClaimResult{Outcome: bench.Won, Token: strconv.FormatInt(resp.Header.Revision, 10)}, nil
}

func (d *etcdDriver) Complete(ctx context.Context, s bench.Scope, token string, body []byte) error {
	rev, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		return bench.Definitely("bad_token", err)
	}
	key := scopeKey(s)
	resp, err := d.client().Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, "completed|201|"+string(body), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return etcdErr(err)
	}
	if !resp.Succeeded {
		return bench.Definitely("token_mismatch", nil)
	}
	return nil
}

func (d *etcdDriver) Lookup(ctx context.Context, s bench.Scope) (bool, error) {
	resp, err := d.client().Get(ctx, scopeKey(s), clientv3.WithCountOnly())
	if err != nil {
		return false, etcdErr(err)
	}
	return resp.Count > 0, nil
}

func etcdErr(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Aborted:
			return bench.Indeterminately("etcd_"+st.Code().String(), err)
		default:
			return bench.Definitely("etcd_"+st.Code().String(), err)
		}
	}
	if e := netError(err); e != nil {
		return e
	}
	return bench.Indeterminately("etcd_error", err)
}

func pingEtcd(ctx context.Context, target string) error {
	eps := splitList(target)
	c, err := newEtcdClient(ctx, eps)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, ep := range eps {
		if _, err := c.Status(ctx, ep); err != nil {
			return err
		}
	}
	_, err = c.Get(ctx, "idem/ping") // a quorum read: the cluster has a leader
	return err
}
