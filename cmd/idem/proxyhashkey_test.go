package main

import (
	"crypto/hmac"
	"crypto/sha256"
	binenc "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With --hash-key-file the store holds HMACs: the principal of a caller's
// Basic-auth password and the request's fingerprint cannot be matched to
// guesses by whoever reads the store's logs, data or backups (a leak walk
// recovered "hunter2" from the plain SHA-256 principal in a node's log
// with a four-word list). Retries still replay, and a key file open to
// others is named.
func TestProxyHashKeyFileKeysPrincipalAndFingerprint(t *testing.T) {
	node := startStore(t)
	up := newUpstream(t)
	key := strings.Repeat("0123456789abcdef", 4)
	keyFile := filepath.Join(t.TempDir(), "hash.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("# the proxies' hash key\n"+key+"\n"), 0o644))
	// Chmod, not WriteFile's mode alone: an in-process serve earlier in
	// the package set the process's umask to 077 (restrictUmask).
	require.NoError(t, os.Chmod(keyFile, 0o644))
	px := startProxy(t, "--upstream", up.srv.URL, "--store", node.http, "--hash-key-file", keyFile)
	waitFor(t, 10*time.Second, "the warning about the open --hash-key-file", func() (bool, string) {
		return strings.Contains(px.logs.String(), "--hash-key-file"), px.logs.String()
	})

	const authz = "Basic dXNlcjpodW50ZXIy" // user:hunter2
	first := pxSend(t, "POST", px.url+"/pay", "order-1", `{"amount":1}`, "Authorization", authz)
	require.Equal(t, 201, first.status, first.body)
	again := pxSend(t, "POST", px.url+"/pay", "order-1", `{"amount":1}`, "Authorization", authz)
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	require.Equal(t, first.body, again.body)
	require.EqualValues(t, 1, up.runs.Load())

	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(authz))
	keyed := "authk:" + hex.EncodeToString(mac.Sum(nil)[:16])
	plain := sha256.Sum256([]byte(authz))
	record := func(principal string) (int, map[string]any) {
		q := url.Values{"principal": {principal}, "endpoint": {"POST /pay"}, "key": {"order-1"}}
		resp, err := http.Get("http://" + node.http + "/v1/records?" + q.Encode())
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc), "%s", b)
		return resp.StatusCode, doc
	}
	status, _ := record("authz:" + hex.EncodeToString(plain[:16]))
	require.Equal(t, 404, status, "the store holds the credential's plain hash")
	status, doc := record(keyed)
	require.Equal(t, 200, status, "%v", doc)

	var fields []byte
	for _, f := range []string{"POST", "/pay", "", "application/json", `{"amount":1}`} {
		fields = binenc.BigEndian.AppendUint64(fields, uint64(len(f)))
		fields = append(fields, f...)
	}
	fp := hmac.New(sha256.New, []byte(key))
	fp.Write(fields)
	rec, _ := doc["record"].(map[string]any)
	if rec == nil {
		rec = doc
	}
	require.Equal(t, hex.EncodeToString(fp.Sum(nil)), rec["fingerprint"], "%v", doc)
}
