package client

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A client given the server's CA speaks HTTPS to host:port; without it,
// or in plain HTTP, it does not get through; TLS settings with an
// http:// address are refused rather than silently ignored.
func TestTLSClientVerifiesAgainstCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	ctx := context.Background()

	cfg, err := LoadTLSConfig(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(hostPort, WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Addr(), "https://") {
		t.Fatalf("host:port with TLS must become https, got %s", c.Addr())
	}
	if _, err := c.Do(ctx, http.MethodGet, "/healthz", nil, nil); err != nil {
		t.Fatalf("with the CA: %v", err)
	}

	noCA, _ := New("https://" + hostPort)
	if _, err := noCA.Do(ctx, http.MethodGet, "/healthz", nil, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA the certificate must not verify, got %v", err)
	}
	plain, _ := New(hostPort)
	if _, err := plain.Do(ctx, http.MethodGet, "/healthz", nil, nil); !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), "speaks HTTPS") {
		t.Fatalf("plain HTTP to a TLS server must fail saying it speaks HTTPS, got %v", err)
	}
	if _, err := New("http://"+hostPort, WithTLS(cfg)); !errors.Is(err, ErrAddress) {
		t.Fatalf("TLS with an http:// address must be refused, got %v", err)
	}
	if _, err := LoadTLSConfig(caFile, "x.pem", ""); err == nil || !strings.Contains(err.Error(), "--key-file") {
		t.Fatalf("a certificate without its key must name --key-file, got %v", err)
	}
	if _, err := LoadTLSConfig(filepath.Join(t.TempDir(), "none.pem"), "", ""); err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Fatalf("a missing CA file must name --ca-file, got %v", err)
	}
}
