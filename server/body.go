package server

import (
	"bytes"
	"io"
	"net/http"
)

func readAll(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength < 1<<20 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := io.Copy(&buf, r.Body)
	return buf.Bytes(), err
}
