// Package middleware makes a net/http handler idempotent in the way of
// draft-ietf-httpapi-idempotency-key-header (Stripe's Idempotency-Key),
// with an idem cluster as the store. It is built on package client only, so
// an application that imports it never links Pebble or raft; `idem proxy` is
// this middleware in front of a reverse proxy.
//
//	store, _ := client.New("127.0.0.1:7070")
//	idem, _ := middleware.New(middleware.Options{Store: store, Principal: tenantOf})
//	mux.Handle("POST /payments", idem(http.HandlerFunc(pay)))
//
// # What a request goes through
//
// Requests whose method is not in Options.Methods (default POST and PATCH)
// pass through untouched; an Idempotency-Key on them is ignored. The others
// need exactly one Idempotency-Key header: a structured-field string
// ("abc"; parameters after it, "abc";p=1, are ignored), or a bare key (abc)
// for clients that do not quote, taken whole as Stripe takes raw keys
// (inv-7;part-1 is that key, not "inv-7" with a parameter). Missing:
// 400 idempotency_key_missing; empty, over 255 bytes, not printable ASCII or
// sent more than once: 400 idempotency_key_invalid. The handler does not run.
//
// The record's scope is (principal, endpoint, key):
//
//   - principal comes from Options.Principal, the application's own
//     authentication (never from what the end user typed). The default is
//     AuthorizationPrincipal: a hash of the Authorization header, refusing
//     (401) a keyed request without one (or with a scheme and no
//     credential, "Bearer " from an unset token, or one that reads as an
//     unset value, "Bearer undefined", "Bearer null", "Bearer None"), since callers with no
//     credential would share one tenant and each other's stored answers;
//     AnonymousPrincipal lets them share it on purpose (the text of an
//     unset value keeps there the principal earlier releases gave it, a
//     hash of the header shared by every caller that sends it, so that a
//     request stored before the upgrade still replays). The scheme's case
//     and spacing do not count, the credential does: a token refreshed
//     between a request and its retry is a new principal, and the retry
//     runs again; a credential signed for each request (AWS SigV4, OAuth
//     1.0a, Digest) makes every retry its client signs anew another
//     principal. Where tokens rotate (OAuth, JWT), set Principal to the
//     account the token stands for.
//   - endpoint is the method and the route pattern when the middleware wraps
//     a handler registered on a Go 1.22 ServeMux (r.Pattern), so
//     POST /payments/{id} is one endpoint; otherwise the method and path,
//     its percent-escapes normalized (/%70ay is /pay; /a%2Fb stays apart
//     from /a/b), as in the fingerprint.
//     Wrap each route (mux.Handle(pattern, idem(h))) to get patterns; wrapping
//     the whole mux keys by path only when that mux is the server's root
//     handler. A mux mounted under another (outer.Handle("/api/",
//     idem(inner))) runs the middleware with the outer route's pattern, so
//     every route of the inner mux is one endpoint ("POST /api/"): a key
//     sent to two of its routes collides (422). Wrap the routes, or set
//     Options.Endpoint. An endpoint over 255 bytes (a long path) keeps its
//     first bytes and ends in a hash of the whole, to fit the
//     store's default --max-scope-bytes. With the store's --scope principal,
//     the endpoint is stored but a key is unique per principal across
//     endpoints: a key sent to another endpoint than its record's is
//     answered 422 fingerprint_mismatch, whatever the fingerprint says (a
//     Fingerprint of the body alone would otherwise have a refund sent
//     with a payment's key and body replayed the payment's answer), also
//     when the record failed and the claim would take it over (the
//     middleware reads the record then, with a Store that has Get).
//
// The fingerprint binds a key to one request: by default SHA-256 of the
// method, path, query, Content-Type and body, and of the trailers a
// chunked body ends with when it has any (Options.Fingerprint replaces
// it, e.g. with a canonical JSON form that ignores key order). A multipart
// body (any multipart/ type, such as multipart/form-data: an upload, a
// form) counts as its parts'
// headers and contents, without the boundary, which every client picks at
// random for each request it makes: a form made anew for its retry is the
// same request, not a 422. A multipart request that an earlier release
// stored (its body whole, boundary and all) still replays to a resend of
// the same bytes: on a 422 the middleware asks once more by that
// fingerprint. A body of more than 1000 parts, or 10,000 part headers in
// all (Go's ParseMultipartForm's bounds), is fingerprinted whole, its
// boundary included. The body is taken as it is sent: a retry
// compressed again (Content-Encoding: gzip) by a client that stamps the
// time in its gzip header (Python's gzip.compress) is another request.
// No other header counts: where the application picks what a request acts
// on by a header (an account header) or by Host, wrap the fingerprint in
// HeaderFingerprint, or a key sent for one account and then for another is
// replayed the first one's answer.
//
// Then the key is claimed:
//
//   - claimed: the handler runs, its answer passes through to the client as
//     it is written and is recorded. Its trailers (declared in Trailer and
//     set after the body, or named with http.TrailerPrefix) reach the
//     client as trailers, as net/http sends them. A status below 500 is stored with a
//     complete whose context the client's disconnect cannot cancel (a lost
//     complete would run the payment again on retry), but for 408, 425 and
//     429, which say "not now", and 401 and 403, which refuse the caller's
//     credential or rights: the request did not run, and stored, an
//     expired token's 401 was replayed for the whole retention to the
//     retry with a fresh one (a Principal that names the account). Those,
//     a 5xx, a panic or an answer whose Content-Length is not the length
//     of what the handler wrote (its caller's transfer broke) release the
//     claim (then the panic goes on), so a retry runs again. A handler
//     must not answer 401 or 403 once it has done the work: its retry
//     would run it again.
//   - replay: Options.Reauthorize, when set, decides whether this caller may
//     still see the stored answer (403 reauthorization_failed otherwise);
//     then the stored status, headers (a header sent twice, two Set-Cookie,
//     comes back twice) and body are written with Idempotency-Replayed: true.
//     Not the trailers: they are not stored, and a replay has none, with
//     nothing to mark their absence (an answer whose trailers matter, a
//     checksum, a gRPC status, is not replayed faithfully). The store keeps
//     headers only, and a trailer stored as one would be replayed ahead of
//     the body it follows, which RFC 9110 (6.5.1) allows only for a field
//     defined as safe to move; make what a retry needs a header or part
//     of the body. Nor the
//     headers of the first caller's connection, which are neither stored
//     nor replayed: the hop-by-hop ones (RFC 9110 7.6.1: Connection and
//     every name it lists, Keep-Alive, Proxy-Connection, TE,
//     Transfer-Encoding, Upgrade, Trailer), Proxy-Authenticate,
//     Proxy-Authorization; Content-Length and Date are made anew. Nor the
//     headers an outer middleware set before this one ran and the handler
//     left as they were (a request id, CORS's Access-Control-Allow-Origin):
//     they are the request's, and a replay carries those set for it. A
//     handler that picks its Content-Encoding by the caller's
//     Accept-Encoding has its first caller's encoding replayed to every
//     retry.
//   - another attempt holds the key: 409 in_progress with Retry-After: 1, or
//     with Options.WaitInProgress the request waits up to that long for the
//     first attempt and replays its answer.
//   - the key was used with another request: 422 fingerprint_mismatch; the
//     first request's record is untouched.
//   - the principal's quota is full: 429 with Retry-After.
//   - the store is unreachable or answers 5xx: the claim is asked again
//     (with the same claim_id, which is always safe) until
//     Options.StoreTimeout, pausing 25 ms to 1 s between tries, each pause
//     drawn at random (callers refused together by a leader change do not
//     ask again together), then 503 unavailable with Retry-After, and the
//     handler does not run (fail closed). FailOpen runs the handler
//     unprotected instead: unsafe, a retry may run it twice. The claim may
//     have been applied all the same (a stalled store that resumes): it is
//     queued, asked again with its claim_id once the store answers (one
//     claim at a time while it does not), within the lease, and released,
//     so that the retry is not answered 409 for the whole lease.
//   - the store goes away after the claim: the handler's answer is sent
//     (an answer goes to the caller once its complete is stored, so that
//     a retry replays it, or after a second if the store has not answered
//     by then; a streamed or larger than MaxStoredBody one as it is
//     written), and its complete is asked again within StoreTimeout (at
//     most half the Lease: nothing extends the lease until then), then in the
//     background for ten minutes (or the lease, if longer), its lease
//     extended meanwhile (a store that answers but refuses the complete
//     for a while, 503, does not let a retry take the key over). In the
//     background the pauses between tries grow from about a second to
//     ten, each drawn at random, so that the answers an outage left
//     waiting (up to 10,000) do not ask a struggling store all at once,
//     nor together; a failed extend is asked again before the lease runs
//     out whatever the pause (within half the time left, and near the
//     end within a tenth of the lease, at most a second; within its last
//     tenth, which the store's clock may still run, within half of what
//     is left of it). The store
//     takes it until a retry takes the key over (which a retry can only
//     do once the lease has run out by the store's clock, which stands
//     still while the store is down), and the retry then replays. A store
//     away for longer, or a retry that took the key over first, runs the
//     handler again (logged at error). The one complete a store refuses
//     with 503 for good while it takes everything else is an answer with
//     a header sent more than once (two Set-Cookie, two Link): the store
//     keeps it as an array only once every member runs a version that
//     reads arrays, and a member of an older one (a rolling upgrade
//     stopped halfway, an old node added back) keeps it refused (its 503
//     names the member). Asked as it is, it would hold its key in
//     progress, 409 to every retry, for the ten minutes, and a retry
//     would then run the request again; after a minute of such refusals
//     it is stored with each such header folded into one value, its
//     values joined with ", " (RFC 9110 5.3: the same field), but for
//     Set-Cookie, which cannot be folded and is left out: a replay has
//     them on one line and lacks those cookies. A header that takes one
//     value, not a list (Location, ETag, Content-Disposition: RFC 9110
//     allows no second line of it), keeps its first value, as two
//     Content-Types do, not a joined one nobody sent. Joined, a header
//     counts ", " for each value after the first where its arrays counted
//     its name: should that take the answer past the bytes the store took
//     as arrays (its --max-response-header-bytes), the joined headers are
//     left out, the largest first, until it fits, and the log names them;
//     a member of smaller limits that refuses the folded answer 413 has it
//     folded again within the limit its answer names (its body dropped if
//     that is over; its status alone if no fold fits). That is logged at warning
//     (at most every 10s, with a count), not at each try. The store's
//     other 503s (no leader, a leader without the encryption key, a node
//     shedding load over its limits) never fold it, however long they
//     last: the arrays refusal is told apart by the store's detail, and
//     a store that sheds one try may take the next whole. At most 10,000 completes wait in
//     the background at once in a process, each holding its answer (up to
//     MaxStoredBody: 640 MiB at the default, the price of not running a
//     request twice); one more is dropped, logged at error. A server
//     stopping calls WaitCompletes after its http.Server's Shutdown, within
//     its grace: exiting with a complete on its way leaves the key claimed,
//     and the caller's retry runs the handler again after the lease.
//   - the store refuses the client's credentials (401 or 403: a wrong store
//     token, or an app token whose principal patterns miss this principal)
//     or the call (another 4xx): logged at error as a configuration
//     problem, 503 unavailable, and the handler does not run, with FailOpen
//     too. (A client.Batcher sends a batch the store refuses as too large
//     again in halves, so a MaxOps above --max-batch-ops only costs.) So
//     does an answer that is not a store's (client.ErrBadAnswer: a wrong
//     address that reaches another service, a proxy's error page, a record
//     of another principal or key than the request's, a won claim that is
//     not 201 with a token, a status past 599, which is no HTTP status), and a
//     redirect (3xx, never followed: no idem route redirects). An
//     Options.Lease outside the store's --min-lease/--max-lease is one
//     such refusal too (the store's 400, logged at error naming
//     Options.Lease and the store's bounds at most every 10s, with the
//     count of requests refused), not the caller's 400; New
//     says so once beforehand when it can read the store's bounds (a
//     *client.Client: GET /v1/config).
//
// An answer larger than Options.MaxStoredBody (or one the store refuses as
// too large, each logged as a warning: the store's --max-response-bytes is
// below MaxStoredBody) reaches the first caller untouched and is stored with its
// status and headers but an empty body; replays carry
// Idempotency-Body-Omitted: too-large. Its Content-Type is the one the
// first caller got: the handler's, or the one net/http sniffed from the
// start of the body (as for a stream below, from what was written before
// its first flush). An answer with more headers than the
// store keeps (its --max-response-headers, 32 values by default, two
// Set-Cookie counting two, or --max-response-header-bytes) is stored with
// its status and Content-Type alone, body and headers left out, with the
// same note (logged as a warning); the handler does not run again. An answer the handler flushed while
// writing (streaming) is stored the same way with
// Idempotency-Body-Omitted: streamed: it is never replayed as if complete.
// A hijacked connection (WebSocket) releases the claim; a keyed request
// that asks to upgrade its connection is refused (400) before it runs, but
// for an offer of h2c alone (curl --http2 on http://), which net/http
// ignores: it runs as the HTTP/1.1 request it is, the offer removed. A header the
// store would refuse (a name that is no HTTP token, a value with a control
// character other than tab or not in UTF-8) reaches the first caller and
// is left out of the stored copy, with a warning in the log: refused, the
// whole answer went unstored and the retry ran the handler again.
//
// The handler's context is not cancelled when the caller goes away: the
// handler runs to its end and its answer is stored for the caller's retry
// (a handler that stopped on the caller's disconnect had an empty 200
// stored). Only once the caller has been gone for Options.CallerGoneTimeout
// (10 minutes) is it cancelled, with ErrCallerGone, so that a handler that
// ends only on its context (a stream, a long poll) does not run and hold its
// key for ever; if it then returns without writing anything, its key is
// released. Wrap the handler in http.TimeoutHandler outside the middleware,
// never inside: inside, the timeout's 503 releases the key while the
// handler still runs, and a retry runs it a second time beside it.
// Outside, the timeout answers its caller 503 but does not stop the
// handler: its context, as on a disconnect, is cancelled only after
// CallerGoneTimeout, so it runs to its end, its answer is stored, and the
// caller's retry replays it.
//
// While the handler runs, the lease is extended in the background every
// third of Options.Lease. If the store says the lease is lost (another
// attempt took the key over after the lease ran out), the handler's context
// is cancelled with ErrLeaseLost: its effect must not commit. If no extend
// gets through before the lease runs out (this process cannot reach the
// store, or the store does not answer; a failed extend is asked again
// after a pause that grows, drawn at random, but within half the time
// left before the lease runs out, and near the end within a tenth of the
// lease, at most a second), it is cancelled with ErrLeaseExpired,
// which wraps ErrLeaseLost, a tenth of the lease before then: a retry
// reaching the store from elsewhere may take the key over from then on and
// run the handler beside this one. The extends go on meanwhile, and keep
// the key while no retry has taken it. A handler so stopped that returns
// without writing is released, and its caller gets 503 unavailable; one
// that answers all the same after another attempt took its key has its
// complete refused, and its caller gets 409 lease_lost rather than an
// answer no retry would see (when the store says so within a second and
// the answer was held: not a stream, not larger than MaxStoredBody). A
// retry in a record's last Lease of retention (the store cuts its lease at
// the record's expires_at, at a time the middleware cannot tell) is not
// run: released, 503 with Retry-After, and the key is new once the record
// expires. The handler
// runs until its answer is written, so give the http.Server a WriteTimeout
// (idem proxy's --write-timeout): a caller that never reads a large answer
// would otherwise keep the attempt, and its lease extensions, going for as
// long as its connection stays open. Give it a ReadTimeout too (idem
// proxy's --body-read-timeout): a keyed request's whole body, up to
// Options.MaxBodyBytes, is read before the key is claimed, and a caller
// that trickles it holds a connection and a goroutine until then.
//
// # Fencing the effect
//
// The claim lives in idem, the payment in the application's database. The
// handler reads its attempt with FromContext and writes Attempt.Number (and
// Token) in its own transaction, guarded so that an older attempt can never
// overwrite a newer one:
//
//	a, _ := middleware.FromContext(r.Context())
//	UPDATE payments SET ..., attempt = $n WHERE key = $k AND attempt <= $n
//
// # Problems
//
// Every answer the middleware makes itself is an RFC 9457 problem document
// (application/problem+json) with type, title, status, detail and code:
// idempotency_key_missing, idempotency_key_invalid (400), unauthorized
// (401, Options.Principal failed; with WWW-Authenticate naming
// Options.Challenge, by default Bearer), reauthorization_failed (403),
// request_too_large (413, over Options.MaxBodyBytes), in_progress (409),
// lease_lost (409, the attempt's lease ran out and another attempt holds
// the key: retry),
// fingerprint_mismatch (422), quota_exceeded or principal_limit (429),
// invalid_request (400, the store refused the scope), unavailable (503),
// stored_answer_not_final (500: the key's stored answer has a 1xx status,
// stored through the API by another writer of it; the middleware stores
// final answers only, and a 1xx written as one is no answer).
//
// The error of an Options.Principal, Fingerprint or Reauthorize reaches
// the caller's detail only as a CallerError, written for it; the text of
// any other (a database error naming an internal host) is logged at
// warning, and the caller reads only which step failed.
package middleware
