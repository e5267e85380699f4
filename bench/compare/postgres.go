package main

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/idem-store/idem/bench"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is the textbook PostgreSQL idempotency-key table: unique on the
// full scope, with its expiry index and the partial index of in-progress
// claims.
const schema = `
CREATE TABLE IF NOT EXISTS idempotency_keys (
  id              bigserial PRIMARY KEY,
  principal_id    uuid        NOT NULL,
  endpoint        text        NOT NULL,
  key             text        NOT NULL,
  fingerprint     bytea       NOT NULL,
  state           text        NOT NULL,
  response_status smallint,
  response_body   jsonb,
  correlation_id  text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  expires_at      timestamptz NOT NULL,
  CONSTRAINT idem_unique UNIQUE (principal_id, endpoint, key)
);
CREATE INDEX IF NOT EXISTS idem_expiry ON idempotency_keys (expires_at);
CREATE INDEX IF NOT EXISTS idem_stale ON idempotency_keys (created_at) WHERE state = 'in_progress';
`

const (
	claimSQL = `INSERT INTO idempotency_keys (principal_id, endpoint, key, fingerprint, state, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', now() + $5 * interval '1 second')
ON CONFLICT (principal_id, endpoint, key) DO NOTHING
RETURNING id`
	completeSQL = `UPDATE idempotency_keys SET state = 'completed', response_status = 201, response_body = $2::jsonb
WHERE id = $1 AND state = 'in_progress'`
	lookupSQL = `SELECT state FROM idempotency_keys
WHERE principal_id = $1 AND endpoint = $2 AND key = $3 AND expires_at > now()`
)

// postgresDriver claims with the textbook single INSERT ... ON CONFLICT DO
// NOTHING RETURNING id (the id is the token), completes with an UPDATE
// fenced by that id, looks up with a SELECT on the full scope.
type postgresDriver struct {
	pool        *pgxpool.Pool
	retentionS  float64
	fingerprint []byte
}

func newPostgresDriver(ctx context.Context, o driverOpts) (bench.Driver, error) {
	cfg, err := pgxpool.ParseConfig(o.target)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(max(o.conns, 1))
	cfg.MinConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating the table: %w", err)
	}
	var fsync, sync string
	if err := pool.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &sync); err == nil &&
		(fsync != "on" || sync != "on") {
		pool.Close()
		return nil, fmt.Errorf("the server runs with fsync=%s synchronous_commit=%s; the comparison needs both on", fsync, sync)
	}
	fp, _ := hex.DecodeString("9f86d081884c7d65")
	return &postgresDriver{pool: pool, retentionS: o.retention.Seconds(), fingerprint: fp}, nil
}

func (d *postgresDriver) Close() error { d.pool.Close(); return nil }

// principalUUID maps a principal name onto the uuid column.
func principalUUID(p string) string {
	h := md5.Sum([]byte(p))
	x := hex.EncodeToString(h[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

func (d *postgresDriver) Claim(ctx context.Context, s bench.Scope, _ string) (bench.ClaimResult, error) {
	var id int64
	err := d.pool.QueryRow(ctx, claimSQL, principalUUID(s.Principal), s.Endpoint, s.Key, d.fingerprint, d.retentionS).Scan(&id)
	switch {
	case err == nil:
		return bench.ClaimResult{Outcome: bench.Won, Token: strconv.FormatInt(id, 10)}, nil
	case errors.Is(err, pgx.ErrNoRows):
		return bench.ClaimResult{Outcome: bench.Lost}, nil // someone else holds the claim
	}
	return bench.ClaimResult{}, pgErr(err)
}

func (d *postgresDriver) Complete(ctx context.Context, s bench.Scope, token string, body []byte) error {
	id, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		return bench.Definitely("bad_token", err)
	}
	resp := `{"status":201,"content_type":"application/json","body":"` + base64.StdEncoding.EncodeToString(body) + `"}`
	tag, err := d.pool.Exec(ctx, completeSQL, id, resp)
	if err != nil {
		return pgErr(err)
	}
	if tag.RowsAffected() != 1 {
		return bench.Definitely("token_mismatch", nil)
	}
	return nil
}

func (d *postgresDriver) Lookup(ctx context.Context, s bench.Scope) (bool, error) {
	var state string
	err := d.pool.QueryRow(ctx, lookupSQL, principalUUID(s.Principal), s.Endpoint, s.Key).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, pgErr(err)
}

func pgErr(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return bench.Definitely("pg_"+pe.Code, err)
	}
	if e := netError(err); e != nil {
		return e
	}
	return bench.Indeterminately("transport", err)
}

func pingPostgres(ctx context.Context, dsn string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}
