package api

// BatchAnswerBytesInUse lets the external tests see the bytes of batch
// answers made or being written now.
func (s *Server) BatchAnswerBytesInUse() int64 { return s.answering.Load() }

// TokenBatchAnswerBytes is what the named app token's batches hold of them.
func (s *Server) TokenBatchAnswerBytes(name string) int64 {
	return s.tokenLoadOf(name).answers.n.Load()
}
