package api

import "net/http"

// FromPeer lets the external tests ask whether r is taken as forwarded by
// a node of the cluster.
func (s *Server) FromPeer(r *http.Request) bool { return s.fromPeer(r) }
