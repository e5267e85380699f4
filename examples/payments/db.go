package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // pure Go SQLite: the example builds without cgo
)

// payment is one row of the payments table.
type payment struct {
	ID        string `json:"id"`
	Customer  string `json:"customer"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
	Attempt   uint32 `json:"attempt"`
	CreatedAt string `json:"created_at"`
	principal string
	key       string
	token     string
}

// errStaleAttempt means a newer attempt of the same idempotency key has
// written this payment: the caller's attempt lost its lease to it and must
// not commit anything.
var errStaleAttempt = errors.New("payments: a newer attempt of this key owns the payment")

// store keeps payments in SQLite. Each row carries the idempotency scope it
// was made under and the attempt (and fencing token) that wrote it, so the
// database itself refuses an attempt that idem has already fenced out.
type store struct{ db *sql.DB }

func openStore(path string) (*store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("payments: open %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and a single connection
	// makes each transaction below run alone, so the read-then-write of
	// insertPayment cannot interleave with another attempt's.
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS payments (
		id         TEXT PRIMARY KEY,
		principal  TEXT NOT NULL,
		idem_key   TEXT NOT NULL,
		customer   TEXT NOT NULL,
		amount     INTEGER NOT NULL,
		currency   TEXT NOT NULL,
		status     TEXT NOT NULL,
		attempt    INTEGER NOT NULL,
		token      TEXT NOT NULL,
		created_at TEXT NOT NULL,
		UNIQUE (principal, idem_key)
	)`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("payments: create table: %w", err)
	}
	return &store{db: db}, nil
}

func (s *store) Close() error { return s.db.Close() }

// record writes p, made by attempt p.Attempt (token p.token) of the key
// (p.principal, p.key), in one transaction with its fence:
//
//   - no row for the key: insert it;
//   - a row written by an older attempt (which charged, then crashed before
//     idem stored its answer): return that payment, now owned by this attempt,
//     instead of charging twice;
//   - a row written by a newer attempt: errStaleAttempt, nothing written.
//
// created says whether p was inserted; otherwise the existing payment is
// returned.
func (s *store) record(ctx context.Context, p payment) (out payment, created bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return payment{}, false, fmt.Errorf("payments: begin: %w", err)
	}
	defer tx.Rollback()
	var cur payment
	err = tx.QueryRowContext(ctx, `SELECT id, customer, amount, currency, status, attempt, token, created_at
		FROM payments WHERE principal = ? AND idem_key = ?`, p.principal, p.key).
		Scan(&cur.ID, &cur.Customer, &cur.Amount, &cur.Currency, &cur.Status, &cur.Attempt, &cur.token, &cur.CreatedAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = tx.ExecContext(ctx, `INSERT INTO payments
			(id, principal, idem_key, customer, amount, currency, status, attempt, token, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.principal, p.key, p.Customer, p.Amount, p.Currency, p.Status, p.Attempt, p.token, p.CreatedAt)
		if err != nil {
			return payment{}, false, fmt.Errorf("payments: insert: %w", err)
		}
		out, created = p, true
	case err != nil:
		return payment{}, false, fmt.Errorf("payments: read: %w", err)
	case cur.Attempt > p.Attempt:
		return payment{}, false, errStaleAttempt
	default:
		// The guard is in the statement too: even a writer that skipped the
		// read above cannot move the row back to an older attempt.
		res, err := tx.ExecContext(ctx, `UPDATE payments SET attempt = ?, token = ?
			WHERE principal = ? AND idem_key = ? AND attempt <= ?`, p.Attempt, p.token, p.principal, p.key, p.Attempt)
		if err != nil {
			return payment{}, false, fmt.Errorf("payments: fence: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return payment{}, false, errStaleAttempt
		}
		cur.Attempt, cur.principal, cur.key = p.Attempt, p.principal, p.key
		out = cur
	}
	if err := tx.Commit(); err != nil {
		return payment{}, false, fmt.Errorf("payments: commit: %w", err)
	}
	return out, created, nil
}

// get returns the payment id of principal.
func (s *store) get(ctx context.Context, principal, id string) (payment, bool, error) {
	var p payment
	err := s.db.QueryRowContext(ctx, `SELECT id, customer, amount, currency, status, attempt, created_at
		FROM payments WHERE principal = ? AND id = ?`, principal, id).
		Scan(&p.ID, &p.Customer, &p.Amount, &p.Currency, &p.Status, &p.Attempt, &p.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return payment{}, false, nil
	}
	if err != nil {
		return payment{}, false, fmt.Errorf("payments: get: %w", err)
	}
	return p, true, nil
}

// count is how many payments principal has (the walk-through checks that a
// retry charged nothing).
func (s *store) count(ctx context.Context, principal string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM payments WHERE principal = ?`, principal).Scan(&n)
	return n, err
}

func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }
