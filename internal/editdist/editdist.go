// Package editdist measures how far apart two names are, for the "did you
// mean" of a misspelt flag, variable or JSON member.
package editdist

// Distance is the Levenshtein distance of a and b, in bytes (insertions,
// deletions, substitutions), or limit+1 when it is more than limit. Names
// whose lengths differ by more than limit are not compared, so a long
// name (a hostile request's member) costs nothing. A negative limit is
// none.
func Distance(a, b string, limit int) int {
	if limit >= 0 && (len(a)-len(b) > limit || len(b)-len(a) > limit) {
		return limit + 1
	}
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	if limit >= 0 {
		return min(prev[len(b)], limit+1)
	}
	return prev[len(b)]
}
