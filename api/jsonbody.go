package api

import (
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/labstack/echo/v4"
)

// readJSON decodes the request's JSON body into dst. An empty body leaves
// dst unchanged when allowEmpty. Unknown fields are ignored. The body is
// bounded by MaxJSONBodyBytes.
func (s *Server) readJSON(c echo.Context, dst any, allowEmpty bool) error {
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, s.limits.MaxJSONBodyBytes+1))
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return ae // cut for arriving too slowly
		}
		return &Error{Code: CodeInvalidRequest, Message: "the request body could not be read", Err: err}
	}
	if int64(len(data)) > s.limits.MaxJSONBodyBytes {
		return errorf(CodePayloadTooLarge, "the request body exceeds the limit of %s", formatBytes(s.limits.MaxJSONBodyBytes))
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("a JSON request body is required")
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return jsonError("the request body", err)
	}
	return nil
}
