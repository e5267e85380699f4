// Command payments is a small payments service made idempotent with idem's
// net/http middleware: POST /payments takes an Idempotency-Key, and a retry
// gets the first answer back instead of charging twice. Payments live in
// SQLite; each row records the idem attempt that wrote it, so a stale
// attempt (one whose lease ran out and was taken over) is refused by the
// database too. README.md walks through it with curl.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/middleware"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "`address` to serve the payments API on")
	storeAddr := flag.String("store", "127.0.0.1:7070", "`address` of an idem node")
	storeToken := flag.String("store-token", os.Getenv("IDEM_AUTH_TOKEN"), "bearer `token` for an idem started with --auth-file (env IDEM_AUTH_TOKEN)")
	dbPath := flag.String("db", "payments.db", "SQLite database `file`")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, *storeAddr, *storeToken, *dbPath, log); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func run(listen, storeAddr, storeToken, dbPath string, log *slog.Logger) error {
	db, err := openStore(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	h, err := newService(db, storeAddr, storeToken)
	if err != nil {
		return err
	}
	// WriteTimeout, as the middleware asks: a caller that never reads its
	// answer would otherwise keep the attempt, and its lease extensions,
	// going for as long as its connection stays open. A payment's answer
	// is stored before it is written: the retry of a caller cut off
	// replays it. ReadTimeout: the middleware reads a keyed request's
	// whole body (up to 1 MiB) before it claims the key, and a caller
	// that trickles it would otherwise hold its connection and goroutine
	// for as long as it likes.
	srv := &http.Server{Addr: listen, Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		// Let attempts in flight finish and store their answers, then
		// wait for the answers sent whose store the idem store had not
		// yet taken (it was away): exiting with one on its way would let
		// its retry run the payment again after the lease.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		stopped <- errors.Join(err, middleware.WaitCompletes(sctx))
	}()
	log.Info("payments listening", "addr", listen, "store", storeAddr, "db", dbPath)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// ListenAndServe returns as soon as Shutdown begins; the attempts in
	// flight end only when it returns.
	return <-stopped
}

// apiKeys are the service's own credentials: each API key is one merchant
// account. The account is the idempotency principal, so two merchants who
// both send Idempotency-Key: order-1 never see each other's payment.
var apiKeys = map[string]string{
	"sk_test_acme":   "acme",
	"sk_test_globex": "globex",
}

// account authenticates r: the merchant of its bearer API key.
func account(r *http.Request) (string, error) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if acct, known := apiKeys[key]; ok && known {
		return acct, nil
	}
	// A CallerError: its text is the 401's detail (another error's is
	// logged, and the caller is told only that it failed).
	return "", &middleware.CallerError{Detail: "a valid Authorization: Bearer API key is required"}
}

// newService is the payments API: POST /payments behind the idempotency
// middleware, GET /payments/{id} without it (reads need no key).
func newService(db *store, storeAddr, storeToken string) (http.Handler, error) {
	var opts []client.Option
	if storeToken != "" {
		opts = append(opts, client.WithToken(storeToken))
	}
	idemStore, err := client.New(storeAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("payments: --store: %w", err)
	}
	idem, err := middleware.New(middleware.Options{
		Store:     idemStore,
		Principal: account, // the merchant, from the service's own authentication
	})
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	s := &service{db: db}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", idem(http.HandlerFunc(s.pay)))
	mux.HandleFunc("GET /payments/{id}", s.show)
	return mux, nil
}

type service struct{ db *store }

type payRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// pay charges once per Idempotency-Key. It runs only for a claimed attempt:
// the middleware answers retries (replay, 409, 422) without calling it.
func (s *service) pay(w http.ResponseWriter, r *http.Request) {
	acct, err := account(r)
	if err != nil {
		problem(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	var req payRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, "invalid_request", "the body must be JSON {customer, amount, currency}: "+err.Error())
		return
	}
	if req.Customer == "" || req.Amount <= 0 || len(req.Currency) != 3 {
		problem(w, http.StatusBadRequest, "invalid_request", "customer, a positive amount (in cents) and a 3-letter currency are required")
		return
	}
	attempt, ok := middleware.FromContext(r.Context())
	if !ok {
		problem(w, http.StatusInternalServerError, "internal", "no idempotency attempt: POST /payments must be behind the middleware")
		return
	}

	// The card network call. X-Simulate-Delay makes it slow, so that a
	// concurrent retry can be seen getting 409 (headers other than
	// Content-Type are not part of the request's fingerprint).
	if d, err := time.ParseDuration(r.Header.Get("X-Simulate-Delay")); err == nil && d > 0 {
		select {
		case <-time.After(min(d, 30*time.Second)):
		case <-r.Context().Done(): // the lease was lost, or the caller left: charge nothing
			problem(w, http.StatusServiceUnavailable, "unavailable", "the attempt was cancelled before charging")
			return
		}
	}

	p := payment{
		ID: "py_" + randomID(), Customer: req.Customer, Amount: req.Amount,
		Currency: strings.ToLower(req.Currency), Status: "succeeded", CreatedAt: now(),
		Attempt: uint32(attempt.Number), principal: acct, key: attempt.Key, token: attempt.Token,
	}
	// The fence: the row records this attempt, in the same transaction as
	// the payment, and an older attempt can never overwrite a newer one.
	p, created, err := s.db.record(r.Context(), p)
	switch {
	case errors.Is(err, errStaleAttempt):
		problem(w, http.StatusConflict, "stale_attempt", "a newer attempt of this Idempotency-Key owns the payment; this one was fenced out")
		return
	case err != nil:
		problem(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Location", "/payments/"+p.ID)
	w.Header().Set("Content-Type", "application/json")
	if created {
		w.WriteHeader(http.StatusCreated)
	} else {
		w.WriteHeader(http.StatusOK) // an earlier attempt had charged: its payment, not a second charge
	}
	json.NewEncoder(w).Encode(p)
}

func (s *service) show(w http.ResponseWriter, r *http.Request) {
	acct, err := account(r)
	if err != nil {
		problem(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	p, ok, err := s.db.get(r.Context(), acct, r.PathValue("id"))
	switch {
	case err != nil:
		problem(w, http.StatusInternalServerError, "internal", err.Error())
	case !ok:
		problem(w, http.StatusNotFound, "not_found", "no such payment")
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(p)
	}
}

func problem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type": "https://example.com/problems/" + code, "title": http.StatusText(status),
		"status": status, "detail": detail, "code": code,
	})
}

func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
