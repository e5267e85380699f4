package client

import (
	"fmt"
	"unicode/utf8"
)

// checkUTF8 refuses, before any request, a string that is not valid
// UTF-8; kv holds pairs of a field's name and its value. JSON carries
// only UTF-8: encoding/json sends each invalid byte as U+FFFD, so two
// values that differ only in such bytes would reach the node as one. Two
// attempts whose claim ids differed so both won the claim, with the same
// token; a principal so changed never matched the record the node
// answered with, and every replay of it was a malformed answer.
func checkUTF8(route string, kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if !utf8.ValidString(kv[i+1]) {
			return fmt.Errorf("client: %s: %s is not valid UTF-8 (JSON cannot carry it unchanged)", route, kv[i])
		}
	}
	return nil
}

func checkClaim(route string, r *ClaimRequest) error {
	return checkUTF8(route, "principal", r.Principal, "endpoint", r.Endpoint, "key", r.Key,
		"fingerprint", r.Fingerprint, "claim_id", r.ClaimID, "correlation_id", r.CorrelationID)
}

func checkComplete(route string, r *CompleteRequest) error {
	if err := checkUTF8(route, "principal", r.Principal, "endpoint", r.Endpoint, "key", r.Key,
		"token", r.Token, "response.content_type", r.Response.ContentType); err != nil {
		return err
	}
	for name, v := range r.Response.Headers {
		if err := checkUTF8(route, "a response.headers name", name, "response.headers value of "+fmt.Sprintf("%q", name), v); err != nil {
			return err
		}
	}
	for name, vs := range r.Response.HeaderLists {
		if err := checkUTF8(route, "a response.headers name", name); err != nil {
			return err
		}
		for _, v := range vs {
			if err := checkUTF8(route, "response.headers value of "+fmt.Sprintf("%q", name), v); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkRelease(route string, r *ReleaseRequest) error {
	return checkUTF8(route, "principal", r.Principal, "endpoint", r.Endpoint, "key", r.Key,
		"token", r.Token, "reason", r.Reason)
}

func checkExtend(route string, r *ExtendRequest) error {
	return checkUTF8(route, "principal", r.Principal, "endpoint", r.Endpoint, "key", r.Key, "token", r.Token)
}

func checkScope(route, principal, endpoint, key string) error {
	return checkUTF8(route, "principal", principal, "endpoint", endpoint, "key", key)
}
