package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxySaysTheUpstreamMayHaveDoneTheWork: two upstream failures after
// the request went out were worded as if nothing had run. An upstream
// that read the request and closed the connection without answering was
// told as "closed the connection before it answered", with nothing of the
// work it may have done before (a retry runs it again); one that sent its
// status and then did not finish its body within --upstream-timeout was
// told "did not answer within", though it had begun its answer. Both
// callers read now that it may have done the work, and the second that it
// began its answer.
func TestProxySaysTheUpstreamMayHaveDoneTheWork(t *testing.T) {
	upURL, _ := cutUpstream(t, map[string]string{
		"/gone":         "", // read, then closed without a byte
		"/answer-stall": "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"paid\":",
	})
	store := startStore(t)
	px := startProxy(t, "--upstream", upURL, "--store", store.http, "--upstream-timeout", "1s")
	send := func(path string) (int, string, string) {
		req, err := http.NewRequest(http.MethodPost, px.url+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k"+path)
		req.Header.Set("Authorization", "Bearer proxy-test")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var doc struct{ Code, Detail string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
		return resp.StatusCode, doc.Code, doc.Detail
	}
	status, code, detail := send("/gone")
	require.Equal(t, http.StatusBadGateway, status)
	require.Equal(t, "upstream_unavailable", code)
	require.Contains(t, detail, "closed the connection before it answered")
	require.Contains(t, detail, "may have done the work")

	status, code, detail = send("/answer-stall")
	require.Equal(t, http.StatusGatewayTimeout, status)
	require.Equal(t, "upstream_timeout", code)
	require.Contains(t, detail, "began its answer but did not finish it within 1s")
	require.Contains(t, detail, "may have done the work")
}
