package wire

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
