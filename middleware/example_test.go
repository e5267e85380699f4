package middleware_test

import (
	"database/sql"
	"encoding/json"
	"log"
	"net/http"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/middleware"
)

// Make POST and PATCH routes idempotent: one store client per process, one
// middleware, and each route wrapped so that its pattern is the endpoint.
func Example() {
	store, err := client.New("127.0.0.1:7070") // client.WithToken(...) with --auth-file
	if err != nil {
		log.Fatal(err)
	}
	idem, err := middleware.New(middleware.Options{
		Store: store,
		// The tenant comes from the application's own authentication,
		// never from what the caller typed.
		Principal: func(r *http.Request) (string, error) { return tenantOf(r) },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", idem(http.HandlerFunc(createPayment)))
	mux.Handle("POST /payments/{id}/refunds", idem(http.HandlerFunc(refund)))
	mux.HandleFunc("GET /payments/{id}", getPayment) // not wrapped: GET needs no key
	log.Fatal(http.ListenAndServe(":8080", mux))
}

// The dual-write problem: the claim lives in idem, the payment in the
// application's database. The handler writes its attempt number in the same
// transaction as the effect, guarded so that a stale attempt (one whose
// lease ran out while it was paused, and whose key another attempt took
// over) can never overwrite a newer one.
func Example_fencing() {
	var db *sql.DB // the application's database (SQLite, PostgreSQL, ...)
	pay := func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.FromContext(r.Context())
		tx, err := db.BeginTx(r.Context(), nil) // cancelled if the lease is lost
		if err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable) // 5xx: the claim is released
			return
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(r.Context(),
			`INSERT INTO payments (idem_key, attempt, amount) VALUES ($1, $2, $3)
			 ON CONFLICT (idem_key) DO UPDATE SET attempt = excluded.attempt, amount = excluded.amount
			 WHERE payments.attempt < excluded.attempt`,
			a.Principal+"/"+a.Key, a.Number, 100)
		if err != nil {
			http.Error(w, "not written", http.StatusServiceUnavailable)
			return
		}
		if n, _ := res.RowsAffected(); n == 0 {
			http.Error(w, "a newer attempt owns this payment", http.StatusConflict)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, "not committed", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	_ = pay
}

// A fingerprint that ignores the order of JSON members, so a client that
// re-encodes its body on retry still gets its replay.
func ExampleOptions_fingerprint() {
	store, _ := client.New("127.0.0.1:7070")
	_, _ = middleware.New(middleware.Options{
		Store: store,
		Fingerprint: func(r *http.Request, endpoint string, body []byte) (string, error) {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				return "", &middleware.CallerError{Detail: "the body is not JSON"} // answered 400, and said
			}
			canonical, _ := json.Marshal(v) // object members sorted
			return middleware.DefaultFingerprint(r, endpoint, canonical)
		},
	})
}

// Behind a gateway that authenticates callers and sets X-Tenant, wait for
// a concurrent duplicate instead of answering it 409, and re-check the
// caller's rights before showing a stored answer.
func ExampleHeaderPrincipal() {
	store, _ := client.New("https://idem.internal:7070", client.WithToken("app-token"))
	_, _ = middleware.New(middleware.Options{
		Store:          store,
		Principal:      middleware.HeaderPrincipal("X-Tenant"),
		WaitInProgress: 10 * time.Second,
		Reauthorize: func(r *http.Request, rec *client.Record) error {
			if r.Header.Get("X-Scopes") == "" {
				return &middleware.CallerError{Detail: "the caller may no longer read payments"}
			}
			return nil
		},
	})
}

func tenantOf(r *http.Request) (string, error)             { return "cus_42", nil }
func createPayment(w http.ResponseWriter, r *http.Request) {}
func refund(w http.ResponseWriter, r *http.Request)        {}
func getPayment(w http.ResponseWriter, r *http.Request)    {}
