// Package jsonstrict finds what encoding/json takes silently in a file an
// operator writes by hand: a member given twice in one object. The decoder
// keeps the last one and matches names without regard to case, so
// {"role":"app", ..., "Role":"operator"} loads as an operator token while a
// reader of the file sees an app token.
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DuplicateMember returns an error naming the first member that appears
// twice in one object of b, names compared as encoding/json compares them
// (without regard to case), nil when there is none or b is not JSON (the
// decoder then says why).
func DuplicateMember(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return walk(dec, "")
}

func walk(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return nil
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]string{}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return nil
			}
			name, _ := t.(string)
			if was, ok := seen[fold(name)]; ok {
				if was == name {
					return fmt.Errorf("%q appears twice in one object%s: JSON readers disagree on which counts (encoding/json takes the last); keep one", name, at(path))
				}
				return fmt.Errorf("%q and %q are in one object%s: names match without regard to case, and JSON readers disagree on which counts (encoding/json takes the last); keep one", was, name, at(path))
			}
			seen[fold(name)] = name
			if err := walk(dec, path+"."+name); err != nil {
				return err
			}
		}
		dec.Token() // '}'
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walk(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dec.Token() // ']'
	}
	return nil
}

// fold is the name encoding/json matches a struct field by: ASCII upper
// case, and each other rune as unicode.ToUpper(unicode.ToLower(r)), so
// "tokenſ" (U+017F) and "\u212Aeys" (the Kelvin sign) are "tokens" and
// "keys" to the decoder. strings.ToLower kept them apart, and
// {"tokens":[…],"tokenſ":[…]} loaded the second list unflagged.
func fold(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			continue
		}
		b.WriteRune(unicode.ToUpper(unicode.ToLower(r)))
	}
	return b.String()
}

func at(path string) string {
	if path == "" {
		return ""
	}
	return " (at " + strings.TrimPrefix(path, ".") + ")"
}
