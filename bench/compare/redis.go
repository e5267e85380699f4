package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idem-store/idem/bench"
	"github.com/redis/go-redis/v9"
)

// redisDriver: claim = SET key value NX PX retention; complete = SET key
// value XX KEEPTTL; lookup = GET. As in the usual build, complete is not
// fenced by the token (that would need a Lua script).
type redisDriver struct {
	c           *redis.Client
	retentionMS int64
}

func newRedisClient(addr string, conns int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(conns, 1), MinIdleConns: max(conns, 1),
		DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		MaxRetries: -1, Protocol: 2, DisableIdentity: true})
}

func newRedisDriver(ctx context.Context, o driverOpts) (bench.Driver, error) {
	c := newRedisClient(o.target, o.conns)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	if cfg, err := c.ConfigGet(ctx, "append*").Result(); err == nil {
		fmt.Fprintf(os.Stderr, "redis %s: appendonly=%s appendfsync=%s\n", o.target, cfg["appendonly"], cfg["appendfsync"])
	}
	return &redisDriver{c: c, retentionMS: o.retention.Milliseconds()}, nil
}

func (d *redisDriver) Close() error { return d.c.Close() }

func (d *redisDriver) Claim(ctx context.Context, s bench.Scope, claimID string) (bench.ClaimResult, error) {
	var tok [8]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	val := "in_progress|" + token + "|" + claimID + "|9f86d081884c7d65"
	err := d.c.Do(ctx, "SET", scopeKey(s), val, "NX", "PX", d.retentionMS).Err()
	switch {
	case err == nil:
		return bench.ClaimResult{Outcome: bench.Won, Token: token}, nil
	case errors.Is(err, redis.Nil):
		return bench.ClaimResult{Outcome: bench.Lost}, nil
	}
	return bench.ClaimResult{}, redisErr(err)
}

func (d *redisDriver) Complete(ctx context.Context, s bench.Scope, token string, body []byte) error {
	val := "completed|" + token + "|201|" + string(body)
	err := d.c.Do(ctx, "SET", scopeKey(s), val, "XX", "KEEPTTL").Err()
	if errors.Is(err, redis.Nil) {
		return bench.Definitely("not_found", nil)
	}
	return redisErr(err)
}

func (d *redisDriver) Lookup(ctx context.Context, s bench.Scope) (bool, error) {
	err := d.c.Get(ctx, scopeKey(s)).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, redisErr(err)
}

func redisErr(err error) error {
	if err == nil {
		return nil
	}
	if e := netError(err); e != nil {
		return e
	}
	var re redis.Error
	if errors.As(err, &re) {
		code, _, _ := strings.Cut(re.Error(), " ")
		return bench.Definitely("redis_"+strings.ToLower(code), err)
	}
	return bench.Indeterminately("transport", err)
}

func pingRedis(ctx context.Context, target string) error {
	c := newRedisClient(target, 1)
	defer c.Close()
	return c.Ping(ctx).Err()
}
