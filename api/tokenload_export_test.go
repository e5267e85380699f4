package api

// BatchAnswerBytesInUse lets the external tests see the bytes of batch
// answers made or being written now.
func (s *Server) BatchAnswerBytesInUse() int64 { return s.answering.Load() }
