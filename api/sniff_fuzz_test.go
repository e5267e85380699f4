package api

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"testing"
)

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// goCLTE reads stream as net/http's server reads a connection's requests
// and reports, for the first request it takes as having a
// Transfer-Encoding, whether that request's header block also held
// Content-Length; found is false when no request before an error has one.
func goCLTE(stream []byte) (clte, found bool) {
	cr := &countingReader{r: bytes.NewReader(stream)}
	br := bufio.NewReader(cr)
	lastMethod := ""
	for {
		if lastMethod == "POST" {
			// The server skips up to four CR or LF bytes after a POST.
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		start := cr.n - br.Buffered()
		req, err := http.ReadRequest(br)
		if err != nil {
			return false, false
		}
		if len(req.TransferEncoding) > 0 {
			block := stream[start : cr.n-br.Buffered()]
			tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block)))
			if _, err := tp.ReadLine(); err != nil {
				return false, false
			}
			h, err := tp.ReadMIMEHeader()
			if err != nil {
				return false, false
			}
			_, cl := h["Content-Length"]
			return cl, true
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return false, false
		}
		lastMethod = req.Method
		if req.Close {
			return false, false // the server ends the connection here
		}
	}
}

// The sniffer follows a connection's requests as net/http reads them: for
// the first request net/http takes as chunked, it knows whether
// Content-Length came with it, however the bytes are split.
func FuzzSniffer(f *testing.F) {
	for _, s := range []string{
		"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 00000000000000000000005\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length:                                                              5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\nPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n 5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n                                                                          5\r\n\t\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\r\r\nPOST /b HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\nPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"post /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n0\r\n\r\n",
		"GET /b HTTP/1.1\nHost: x\nX-Long: zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n\nPOST /c HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n\n0\n\n",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		want, found := goCLTE(stream)
		if !found || len(stream) == 0 {
			return
		}
		var s sniffer
		for i, n := 0, max(int(step), 1); i < len(stream); i += n {
			s.feed(stream[i:min(i+n, len(stream))])
		}
		if !s.known || s.clte != want {
			t.Fatalf("%q (step %d): sniffer knows %v, Content-Length too %v; net/http: Content-Length too %v", stream, step, s.known, s.clte, want)
		}
	})
}
