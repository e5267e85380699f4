package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-store/idem/client"
)

// A header sent more than once travels as an array, a single one as a
// string, and a replay gives both back in their form.
func TestHeadersSentMoreThanOnce(t *testing.T) {
	var sent map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body struct {
			Response map[string]any `json:"response"`
		}
		_ = json.Unmarshal(b, &body)
		sent, _ = body.Response["headers"].(map[string]any)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"outcome":"completed","record":{"principal":"p","endpoint":"e","key":"k","state":"completed",
			"fingerprint":"aa","attempt":1,"created_at":"2026-12-01T00:00:00.000Z","expires_at":"2026-12-02T00:00:00.000Z",
			"completed_at":"2026-12-01T00:00:01.000Z","response":{"status":200,"content_type":"","headers":`+string(mustMarshal(t, sent))+`,"body":""}}}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp := client.Response{Status: 200}
	resp.SetHeader("Set-Cookie", "a=1", "b=2")
	resp.SetHeader("Location", "/x")
	res, err := c.Complete(context.Background(), client.CompleteRequest{Principal: "p", Endpoint: "e", Key: "k", Token: "1", Response: resp})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(mustMarshal(t, sent)); got != `{"Location":"/x","Set-Cookie":["a=1","b=2"]}` {
		t.Fatalf("sent headers %s", got)
	}
	back := res.Record.Response
	if v := back.Values("Set-Cookie"); len(v) != 2 || v[1] != "b=2" || back.Headers["Location"] != "/x" {
		t.Fatalf("stored response read back as %+v", back)
	}
	if h := back.HTTPHeader(); len(h.Values("Set-Cookie")) != 2 {
		t.Fatalf("HTTPHeader %v", h)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
