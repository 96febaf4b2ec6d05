package metacontroller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// MaxRelativeObjects bounds the objects one body may carry under children (and, apart, under
// related). A pool has at most 1000 members (plus ones being replaced or deleted) and a Proxy a
// handful of children; a body of 100,000 tiny children once decoded to 464 MiB and answered
// 31.7 MB, so the count is checked while the map is read, before any object is decoded.
const MaxRelativeObjects = 4096

var typeOfObjects = reflect.TypeFor[map[string]json.RawMessage]()

// ErrTooManyObjects is returned for a children or related map longer than MaxRelativeObjects.
var ErrTooManyObjects = errors.New("too many objects")

// UnmarshalJSON reads the map of maps one object at a time, counting as it goes, so a body of
// too many objects is refused before they are held.
func (r *RelativeObjects) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*r = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	out := RelativeObjects{}
	n := 0
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		typ, err := stringToken(dec)
		if err != nil {
			return err
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok == nil { // "Kind.v1": null
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			return &json.UnmarshalTypeError{Value: fmt.Sprint(tok), Type: typeOfObjects, Field: typ}
		}
		objs := out[typ]
		if objs == nil {
			objs = map[string]json.RawMessage{}
			out[typ] = objs
		}
		for dec.More() {
			key, err := stringToken(dec)
			if err != nil {
				return err
			}
			if n++; n > MaxRelativeObjects {
				return fmt.Errorf("%w: more than %d objects", ErrTooManyObjects, MaxRelativeObjects)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return err
			}
			objs[key] = raw
		}
		if err := expectDelim(dec, '}'); err != nil {
			return err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	*r = out
	return nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return &json.UnmarshalTypeError{Value: fmt.Sprint(tok), Type: typeOfObjects}
	}
	return nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", &json.UnmarshalTypeError{Value: fmt.Sprint(tok), Type: typeOfObjects}
	}
	return s, nil
}
