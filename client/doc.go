// Package client speaks idem's HTTP API, version 1 (docs/API.md), for Go
// programs, the idem CLI, the benchmark and the chaos harness. It depends on
// the standard library only.
//
// A Client is safe for concurrent use and keeps connections alive, so one
// Client per process (or per target node) is enough:
//
//	c, err := client.New("127.0.0.1:7070", client.WithToken(token))
//	res, err := c.Claim(ctx, client.ClaimRequest{
//		Principal: "cus_42", Endpoint: "POST /payments", Key: "retry-1",
//		Fingerprint: fp, ClaimID: attemptID,
//	})
//	var p *client.Problem
//	switch {
//	case errors.As(err, &p) && p.Code == client.CodeInProgress:
//		// another attempt holds the lease; wait p.RetryAfter
//	case err != nil:
//		// transport error or another problem
//	case res.Outcome == client.OutcomeReplay:
//		// send res.Record.Response again
//	default:
//		// run the handler, then Complete with res.Token
//	}
//
// Both a 201 claim and a 200 replay are successful answers. A status that
// is no final HTTP answer (past 599, which net/http reads all the same, or
// a 101) is ErrBadAnswer, as is a batch op's result outside 200-599. Every other status is
// returned as a *Problem (the server's RFC 9457 document, or one
// made from the status when the answer was not a problem document), so
// callers branch with errors.As or errors.Is against the Err sentinels.
//
// Given several nodes of one cluster, comma-separated (New("10.0.0.1:7070,
// 10.0.0.2:7070,10.0.0.3:7070")), a Client sends to the leader once an
// answer has named it (the Idem-Leader header), so writes skip a
// follower's forwarding. A request the client could not deliver goes to
// the next node; after a node dropped the connection, did not answer
// before the request's deadline (a stopped or wedged process, whose
// kernel still accepts connections), or answered 503 naming no leader,
// later requests start at the next node. A call its caller cancelled
// leaves them where they were.
//
// Over HTTP and HTTPS alike a Client writes each request and reads its
// answer on the calling goroutine, over kept-alive HTTP/1.1 connections
// (NewTransport; only requests through a proxy go through net/http): per
// claim that is a third less of the client's CPU than net/http's
// hand-offs to its connection goroutines. WithHTTPClient replaces it.
//
// The client never retries on its own: a claim answered 503 may or may not
// have been applied, and only the caller knows whether to repeat it with the
// same ClaimID (always safe) or to give up.
// The same holds for a call whose context ended (or whose connection
// broke) after its request was sent: it returns the context's (or the
// connection's) error, and the node may have decided it all the same. A
// claim repeated with its ClaimID then gets the claim back (the same
// token) while its lease holds, or the replay once it completed.
//
// A record an answer hands back (a claim's replay, a lookup) must be of the
// principal and key asked for: a node answers with no other, so one comes
// from something between (a cache, a proxy) that mixed answers up, and
// replaying it would send another key's, or tenant's, stored response.
// Claim and Get, of a Client and a Batcher alike, refuse it as ErrBadAnswer;
// in a batch answer one such record refuses the whole answer, every op's
// result included. The endpoint is not compared: under --scope principal a
// record shows the endpoint of its first claim. Each answer's outcome must
// be its route's too (a complete's "completed", with the record of its
// scope; "released", "extended", "deleted"): any other 2xx is ErrBadAnswer,
// not a success, and in a batch answer it refuses the whole answer.
//
// A string of a typed call (a principal, key, claim id, stored header...)
// that is not valid UTF-8 is refused before any request, by a Client and a
// Batcher alike: JSON would carry each invalid byte as U+FFFD, so two
// claim ids or two principals that differ only in such bytes would be one
// to the node.
//
// Every typed answer keeps the bytes the server sent in its Raw field, and Do
// returns the raw answer of any route, for callers that print the JSON.
package client
