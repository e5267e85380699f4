package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The leader proposes batch entries only to members whose /healthz lists
// them: a member of an older version (it lists the secret only) would skip
// the entry and fall out of step.
func TestBatchFeatureIsAdvertisedAndRequired(t *testing.T) {
	s := &Server{cfg: Config{}}
	s.fwd = newForwarder(s)
	current := httptest.NewServer(withFeatures(withBatchFeature(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })))
	defer current.Close()
	older := httptest.NewServer(withFeatures(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer older.Close()
	addr := func(u string) string { return strings.TrimPrefix(u, "http://") }
	ctx := context.Background()
	if !s.hasFeature(ctx, addr(current.URL), featureBatch) || !s.hasFeature(ctx, addr(current.URL), featureSecret) {
		t.Fatal("this version's /healthz must list both batch entries and the secret")
	}
	if s.hasFeature(ctx, addr(older.URL), featureBatch) {
		t.Fatal("an older member must not count as knowing batch entries")
	}
	if s.hasFeature(ctx, "127.0.0.1:1", featureBatch) {
		t.Fatal("a member that does not answer must not count as knowing batch entries")
	}
}
