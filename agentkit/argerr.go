package agentkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// sentMax bounds how much of the arguments a model sent is quoted back
// to it in an error.
const sentMax = 500

// argsError describes, for the model, why the arguments it sent (raw)
// did not decode: in JSON terms (what is not valid JSON, or which field
// must be which JSON type), never Go's, then what it sent.
func argsError(raw json.RawMessage, err error) string {
	var msg string
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case len(raw) > 0 && !json.Valid(raw):
		msg = "they are not valid JSON"
		if errors.As(err, &syn) {
			msg += fmt.Sprintf(" (%s, at byte %d)", strings.TrimPrefix(syn.Error(), "json: "), syn.Offset)
		}
	case errors.As(err, &typ):
		want := jsonType(typ.Type)
		if typ.Field == "" {
			msg = fmt.Sprintf("they must be %s, not %s", want, article(typ.Value))
		} else {
			msg = fmt.Sprintf("field %q must be %s, not %s", typ.Field, want, article(typ.Value))
		}
	default:
		msg = strings.TrimPrefix(err.Error(), "json: ")
	}
	return msg + ". You sent: " + quoteSent(raw)
}

// jsonType names the JSON type a Go type decodes from.
func jsonType(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return fmt.Sprintf("an array of %d", t.Len())
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

// article puts "a" or "an" before a JSON value kind as encoding/json
// names it ("number", "string", "object", "array", "bool", "number 1.5").
func article(v string) string {
	switch {
	case v == "":
		return "that"
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case strings.ContainsRune("aeiou", rune(v[0])):
		return "an " + v
	}
	return "a " + v
}

// quoteSent is raw for an error message: empty as such, long as its
// first sentMax bytes.
func quoteSent(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	s := string(raw)
	if len(s) <= sentMax {
		return s
	}
	cut := sentMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes in all)", len(s))
}
