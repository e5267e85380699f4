package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A node whose --auth-file differs from the others' said nothing: a token
// its file gave other principals read their records there with
// consistency=stale (a follower decides that lookup alone), and idem
// cluster status compared every limit but not the tokens. The digest
// nodes publish follows what the file grants, not how it is written.
func TestAuthDigestFollowsWhatTheFileGrants(t *testing.T) {
	const node = `{"name":"node","sha256":"c657813fb6b2cfcac2feb3179e581e77ed2ff8ac0c0b9241a3d8a1c4a14e335b","role":"admin"}`
	app := func(name, principals string) string {
		return `{"name":"` + name + `","sha256":"c6297fe037e231bc93e378289a561633762977a43e546edf791ecfdde1aeae7f","role":"app","principals":[` + principals + `]}`
	}
	digest := func(entries ...string) string {
		t.Helper()
		b := `{"tokens":[`
		for i, e := range entries {
			if i > 0 {
				b += ","
			}
			b += e
		}
		c, err := ParseAuthFile([]byte(b + `]}`))
		require.NoError(t, err)
		return c.Digest()
	}
	same := digest(node, app("app", `"alice","cus_*"`))
	require.Len(t, same, 16)
	require.Equal(t, same, digest(app("payments", `"cus_*","alice"`), node), "order and names grant nothing")
	require.NotEqual(t, same, digest(node, app("app", `"bob","cus_*"`)), "another tenant for the same token")
	require.NotEqual(t, same, digest(node), "a token only one file lists")
}
