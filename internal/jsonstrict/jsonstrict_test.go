package jsonstrict

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDuplicateMember(t *testing.T) {
	for _, ok := range []string{
		`{"tokens":[{"name":"a","role":"app"},{"name":"b","role":"app"}]}`,
		`{"Name":"a"}`,
		`[1,{"a":{"a":1}},"x"]`,
		`not json`,
		``,
	} {
		require.NoError(t, DuplicateMember([]byte(ok)), ok)
	}
	for in, want := range map[string]string{
		`{"tokens":[{"name":"a","role":"app","principals":["a"],"Role":"operator","principals":null}]}`: `"role" and "Role" are in one object (at tokens[0])`,
		`{"keys":[{"id":"k1"}],"keys":[]}`: `"keys" appears twice in one object: `,
		`{"a":{"b":1,"b":2}}`:              `"b" appears twice in one object (at a)`,
		// encoding/json folds U+017F to s and the Kelvin sign to k: the
		// decoder keeps the second list of each, so they are duplicates
		`{"tokens":[{"name":"a"}],"tokenſ":[{"name":"b"}]}`:        `"tokens" and "tokenſ" are in one object`,
		`{"keys":[{"id":"k1","key":"x","\u212Aey":"y"}]}`:          `are in one object (at keys[0])`,
		`{"tokens":[{"principals":["a"],"principalſ":["b","c"]}]}`: `"principals" and "principalſ" are in one object (at tokens[0])`,
	} {
		err := DuplicateMember([]byte(in))
		require.Error(t, err, in)
		require.Contains(t, err.Error(), want, in)
	}
}
