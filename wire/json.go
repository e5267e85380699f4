package wire

import (
	"bytes"
	"encoding/json"
)

// Marshal is json.Marshal without HTML escaping: <, > and & go out as
// they are, so stored strings come back exactly as sent (docs/API.md).
// Every MarshalJSON of this package encodes with it, not only the encoder
// that writes an answer: encoding/json compacts what a MarshalJSON returns
// but keeps its escapes, so one json.Marshal inside escaped the whole
// record. It costs what json.Marshal does (one copy out of the encoder's
// pooled buffer). The server's answers and the Go client's requests use it.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil // Encode ends the value with a newline
}

// ValueEnd is the length of the JSON value b starts with, the white space
// after it included, in text already known to be valid JSON: the index of
// the ',', ']' or '}' that ends it at its own depth, or 0 if none does.
// Only strings and nesting need following. The server splits a batch's
// ops with it, the client a batch's results.
func ValueEnd(b []byte) int {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return 0
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing array or object
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return 0
}
