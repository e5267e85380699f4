package middleware

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// newTestServer serves h on the test's loopback address: IDEM_TEST_IP (a
// shared machine's own), else 127.0.0.1.
func newTestServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ip := os.Getenv("IDEM_TEST_IP")
	if ip == "" {
		ip = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	return srv
}
