// Package wire owns the JSON request and response bodies of idem's HTTP API,
// version 1 (docs/API.md): the one definition that the server (api), the Go
// client (client) and the middleware (middleware) share, so the two sides
// cannot drift apart. It holds types and their JSON encoding only, and
// imports nothing but the standard library, so an application that links the
// client never links the server.
//
// Times are RFC 3339 UTC with exactly three fractional digits on the wire
// (TimeLayout); a response's headers are a string each, or an array of
// strings for a header sent more than once (Response).
package wire
