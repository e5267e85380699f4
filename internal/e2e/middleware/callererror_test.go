package e2emiddleware_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/middleware"
)

// The error an application's Principal, Fingerprint or Reauthorize
// returns is its own, and may name what no caller should read: a database
// error's internal address. Bug: its text was the problem's detail (401,
// 400, 403), told to any caller. It is logged now, and the caller reads
// only which step failed; a middleware.CallerError, returned or wrapped,
// is written for the caller and is its detail.
func TestOptionErrorsReachTheCallerOnlyAsCallerErrors(t *testing.T) {
	const secret = "dial tcp 10.0.0.5:5432: connection refused"
	var logs syncLog
	failWith := func(r *http.Request, step string) error {
		switch r.Header.Get("X-Fail") {
		case step:
			return errors.New(secret)
		case step + "-said":
			return fmt.Errorf("lookup at %s: %w", secret, &middleware.CallerError{Detail: "your account is suspended"})
		}
		return nil
	}
	e := newEnv(t, middleware.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Principal: func(r *http.Request) (string, error) {
			if err := failWith(r, "principal"); err != nil {
				return "", err
			}
			return "t1", nil
		},
		Fingerprint: func(r *http.Request, endpoint string, body []byte) (string, error) {
			if err := failWith(r, "fingerprint"); err != nil {
				return "", err
			}
			return middleware.DefaultFingerprint(r, endpoint, body)
		},
		Reauthorize: func(r *http.Request, rec *client.Record) error { return failWith(r, "reauthorize") },
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	do := func(fail string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("X-Fail", fail)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var p struct{ Detail string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		return resp.StatusCode, p.Detail
	}
	require.Equal(t, http.StatusOK, func() int {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}(), "the first request, stored for the replays below")
	for _, c := range []struct {
		step   string
		status int
	}{{"principal", 401}, {"fingerprint", 400}, {"reauthorize", 403}} {
		status, detail := do(c.step)
		require.Equal(t, c.status, status, c.step)
		require.NotContains(t, detail, "10.0.0.5", "%s: the application's error reached the caller", c.step)
		require.NotEmpty(t, detail, c.step)

		status, detail = do(c.step + "-said")
		require.Equal(t, c.status, status, c.step)
		require.Contains(t, detail, "your account is suspended", c.step)
		require.NotContains(t, detail, "10.0.0.5", c.step)
	}
	require.Equal(t, 3, strings.Count(logs.String(), "10.0.0.5"), "each plain error is logged once, a CallerError not at all:\n%s", logs.String())
}

// A plain error an option returns for every request (a Principal that
// fails each caller without a credential: an attacker's flood, a gateway
// misconfigured) is logged at most once every 10 s, with a count: a line
// each filled the log.
func TestOptionErrorLinesAreSpaced(t *testing.T) {
	var logs syncLog
	e := newEnv(t, middleware.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Principal: func(r *http.Request) (string, error) {
			return "", errors.New("dial tcp 10.0.0.5:5432: connection refused")
		},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	for i := range 30 {
		req, err := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k%d", i))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "Options.Principal failed"), "one line for 30 failures:\n%s", logs.String())
	require.Contains(t, logs.String(), "failed-total=1")
}
