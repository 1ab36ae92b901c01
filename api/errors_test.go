package api

import (
	"net/http"
	"testing"
)

// TestOneCodeForMalformedRequests: a malformed request has one code,
// invalid_request (shared/spec/interface.md), on every route. The only
// other 400 is prompt_too_long, a well-formed request whose texts do not
// fit the model (retrying it unchanged fails again). A second code for
// malformed requests (there was invalid_payload for steer) fails here.
func TestOneCodeForMalformedRequests(t *testing.T) {
	for code, status := range codeStatus {
		if status == http.StatusBadRequest && code != CodeInvalidRequest && code != CodePromptTooLong {
			t.Errorf("code %q also answers 400: a malformed request is invalid_request", code)
		}
	}
}
