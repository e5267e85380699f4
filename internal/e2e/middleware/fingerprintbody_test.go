package e2emiddleware_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// A Fingerprint that reads r.Body (a canonical JSON form decoded from the
// request, as the Options doc suggests writing) drained the body the
// handler then read: the payment ran with an empty request, and its answer
// was stored for every retry. The handler gets the whole body whatever the
// Fingerprint did with r.Body.
func TestFingerprintThatReadsTheBodyLeavesItToTheHandler(t *testing.T) {
	var got string
	send := keyedServer(t, idemtest.Options{}, middleware.Options{
		Fingerprint: func(r *http.Request, endpoint string, _ []byte) (string, error) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return "", err
			}
			sum := sha256.Sum256(append([]byte(endpoint+"\n"), b...))
			return hex.EncodeToString(sum[:]), nil
		},
	}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(http.StatusCreated)
	})
	resp, b := send("fp-body-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	require.Equal(t, "{}", got, "the handler read a body the Fingerprint had drained")
}
