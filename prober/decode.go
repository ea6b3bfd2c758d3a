package prober

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrUnsupportedEncoding: the value is framed by a schema registry (Avro,
// Protobuf or JSON Schema through Confluent's or Apicurio's converters):
// the prober reads JSON and text only, so it is skipped with its own
// reason, never counted as garbage.
var ErrUnsupportedEncoding = errors.New("schema-registry framed value")

// maxUnwrap bounds how many wrappers DecodeMessage takes off. The deepest
// real form is three: Kafka Connect's schema envelope around the
// EventRouter's additional-fields envelope around a JSON string.
const maxUnwrap = 4

// DecodeMessage reads a canary from a message value in any form a relay
// writes it, and verifies its signature (Decode). Besides the bare payload
// JSON of the reference relay, that is every form Debezium's outbox
// EventRouter takes under Kafka Connect's common converter setups, as
// recorded from Debezium 3.6.1 on Kafka Connect 4.3.0
// (testdata/converters/):
//
//   - JsonConverter, schemas.enable=false: the payload column as a JSON
//     string ("{\"seq\": ...}"), or, with table.expand.json.payload=true,
//     as a JSON object;
//   - JsonConverter, schemas.enable=true (Kafka's default): either of those
//     inside Connect's envelope {"schema": ..., "payload": ...};
//   - StringConverter: the payload column's text as it is, or, with
//     table.expand.json.payload=true, Kafka Connect's Struct.toString()
//     (Struct{seq=...,sig=...});
//   - any of these inside the router's own envelope {"payload": ...,
//     "<alias>": ...} when table.fields.additional.placement puts a field
//     in the envelope.
//
// A value framed by a schema registry (magic byte 0 and a schema id) is
// ErrUnsupportedEncoding; anything else that is no canary is ErrNotCanary,
// with what was found; a canary whose signature does not verify is
// ErrBadSignature. The signature covers every field, so no unwrapping can
// turn a forged or altered value into an accepted canary.
func (s *Signer) DecodeMessage(value []byte) (Payload, error) {
	if p, ok := decodeFlat(bytes.TrimSpace(value)); ok {
		return s.verify(p)
	}
	inner, err := unwrapCanary(value)
	if err != nil {
		return Payload{}, err
	}
	return s.Decode(inner)
}

// Errors of screen, made once: a flood of foreign messages is skipped at
// the cost of a byte search, with no allocation per message. Each
// classifies a value exactly as DecodeMessage would (a JSON string holding
// a schema-registry frame aside); DecodeMessage says what the value is,
// for the log.
var (
	errEmptyValue    = fmt.Errorf("%w: empty value (a tombstone, or a row without payload)", ErrNotCanary)
	errShortFrame    = fmt.Errorf("%w: fewer than 5 bytes starting with 0x00", ErrNotCanary)
	errFramed        = fmt.Errorf("%w: magic byte 0x00 (Avro, Protobuf or JSON Schema through a schema registry converter)", ErrUnsupportedEncoding)
	errNoCanaryField = fmt.Errorf("%w: without %s in any form the prober reads", ErrNotCanary, fieldCanaryID)
)

// screen rejects, without decoding, a value that cannot hold a canary:
// every form DecodeMessage reads (JSON, JSON in a JSON string, Kafka
// Connect's Struct text) carries the field name outbox_canary_id
// verbatim, since no JSON encoder escapes letters or underscores. It
// returns nil for a value that may be a canary, which DecodeMessage then
// decodes and verifies; a value screened out is skipped for the same
// reason DecodeMessage would give, returned with the error (skipReason's
// errors.Is would take a third of a screened-out message's time).
func screen(value []byte) (reason string, err error) {
	value = bytes.TrimSpace(value)
	switch {
	case len(value) == 0:
		return ReasonMalformed, errEmptyValue
	case value[0] == 0 && len(value) < 5:
		return ReasonMalformed, errShortFrame
	case value[0] == 0:
		return ReasonUnsupportedEncoding, errFramed
	case !bytes.Contains(value, canaryField):
		return ReasonMalformed, errNoCanaryField
	}
	return "", nil
}

var canaryField = []byte(fieldCanaryID)

// unwrapCanary takes the converter's and the router's wrappers off a value
// and returns the payload JSON object inside.
func unwrapCanary(value []byte) ([]byte, error) {
	for range maxUnwrap + 1 {
		value = bytes.TrimSpace(value)
		switch {
		case len(value) == 0:
			return nil, fmt.Errorf("%w: empty value (a tombstone, or a row without payload)", ErrNotCanary)
		case value[0] == 0:
			return nil, schemaRegistryError(value)
		case value[0] == '"':
			var s string
			if err := json.Unmarshal(value, &s); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNotCanary, err)
			}
			value = []byte(s)
		case bytes.HasPrefix(value, []byte(structPrefix)):
			next, canary, err := fromStructText(string(value))
			if err != nil || canary {
				return next, err
			}
			value = next
		case value[0] == '{':
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(value, &obj); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNotCanary, err)
			}
			if _, ok := obj[fieldCanaryID]; ok {
				return value, nil
			}
			payload, ok := obj["payload"]
			if !ok {
				return nil, objectError(obj)
			}
			value = payload
		default:
			return nil, fmt.Errorf("%w: not JSON, not text of a JSON object (starts with %q)", ErrNotCanary, prefix(value, 8))
		}
	}
	return nil, fmt.Errorf("%w: more than %d nested wrappers", ErrNotCanary, maxUnwrap)
}

// fieldCanaryID is the JSON name of Payload.CanaryID, the field that marks
// an object as a canary rather than a wrapper.
const fieldCanaryID = "outbox_canary_id"

// schemaRegistryError describes a value that starts with the magic byte 0.
// Confluent's wire format follows it with a 4-byte big-endian schema id
// (Apicurio's default with an 8-byte one, whose first 4 bytes are then 0).
func schemaRegistryError(value []byte) error {
	if len(value) < 5 {
		return fmt.Errorf("%w: %d bytes starting with 0x00", ErrNotCanary, len(value))
	}
	return fmt.Errorf("%w: magic byte 0x00, schema id %d (Avro, Protobuf or JSON Schema through a schema registry converter)",
		ErrUnsupportedEncoding, binary.BigEndian.Uint32(value[1:5]))
}

// objectError says what a JSON object that is neither a canary nor a
// wrapper looks like, so the warning points at the cause.
func objectError(obj map[string]json.RawMessage) error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > 8 {
		keys = append(keys[:8], "...")
	}
	_, op := obj["op"]
	_, source := obj["source"]
	if op && source {
		return fmt.Errorf("%w: a Debezium change event (keys %s): the outbox EventRouter did not transform it (check transforms and its predicate)",
			ErrNotCanary, strings.Join(keys, ", "))
	}
	return fmt.Errorf("%w: a JSON object without %s or payload (keys %s)", ErrNotCanary, fieldCanaryID, strings.Join(keys, ", "))
}

// structPrefix starts Kafka Connect's Struct.toString(), which
// StringConverter writes for the struct that table.expand.json.payload
// makes of the payload.
const structPrefix = "Struct{"

// structFields are the payload's fields, which alone may start a new
// field in Struct text: values are written unquoted, so a comma followed
// by anything else belongs to the value before it.
var structFields = []string{fieldCanaryID, "instance", "pipeline", "seq", "sig"}

// structPayloadField is how the router's envelope (additional fields
// placed in the envelope) shows the payload in Struct text.
const structPayloadField = "payload="

// fromStructText reads Kafka Connect's Struct.toString() text. With the
// router's envelope it is Struct{payload=<the payload>,<alias>=...}: a
// payload that stayed text is JSON, returned for unwrapping (canary
// false); an expanded one is a nested Struct. The innermost Struct is the
// payload's, read back into the payload JSON (canary true). A value that
// itself contains ",seq=" (say) is split wrongly; the signature then fails,
// so the worst outcome is a bad_signature skip.
func fromStructText(text string) (next []byte, canary bool, err error) {
	if i := strings.Index(text, structPayloadField+"{"); i >= 0 {
		if prev := text[:i]; strings.HasSuffix(prev, "{") || strings.HasSuffix(prev, ",") {
			var raw json.RawMessage
			if json.NewDecoder(strings.NewReader(text[i+len(structPayloadField):])).Decode(&raw) == nil {
				return raw, false, nil
			}
		}
	}
	start := strings.LastIndex(text, structPrefix)
	end := strings.Index(text[start:], "}")
	if end < 0 {
		return nil, false, fmt.Errorf("%w: Struct text without its closing brace", ErrNotCanary)
	}
	fields := map[string]string{}
	current := ""
	for _, part := range strings.Split(text[start+len(structPrefix):start+end], ",") {
		name, v, ok := strings.Cut(part, "=")
		if ok && slices.Contains(structFields, name) {
			if _, dup := fields[name]; dup {
				return nil, false, fmt.Errorf("%w: Struct text names %s twice", ErrNotCanary, name)
			}
			fields[name], current = v, name
			continue
		}
		if current == "" {
			continue // a field of no interest before the first known one
		}
		fields[current] += "," + part
	}
	if _, ok := fields[fieldCanaryID]; !ok {
		return nil, false, fmt.Errorf("%w: Struct text without %s", ErrNotCanary, fieldCanaryID)
	}
	obj := map[string]any{}
	for name, v := range fields {
		if name == "seq" {
			if v == "" {
				return nil, false, fmt.Errorf("%w: Struct text with an empty seq", ErrNotCanary)
			}
			obj[name] = json.Number(v)
			continue
		}
		obj[name] = v
	}
	out, err := json.Marshal(obj)
	if err != nil {
		// json.Number refuses a seq that is not a number.
		return nil, false, fmt.Errorf("%w: Struct text: %v", ErrNotCanary, err)
	}
	return out, true, nil
}

// prefix is at most n bytes of b, for error messages.
func prefix(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// decodeFlat reads the form nearly every canary arrives in, a bare payload
// object (the prober's own JSON, or PostgreSQL's jsonb text of it), without
// encoding/json, which decoded every canary twice (for its wrappers, then
// for its fields) and was most of its consumption's CPU. It accepts only
// what it reads exactly as unwrapCanary and Decode would: an object of the
// payload's fields, each at most once, under their exact names, strings of
// printable ASCII without escapes, seq a plain unsigned integer, and
// outbox_canary_id among them. Anything else is not ok and takes the
// general path.
func decodeFlat(v []byte) (p Payload, ok bool) {
	if len(v) < 2 || v[0] != '{' {
		return Payload{}, false
	}
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == '}' {
		return Payload{}, false
	}
	var seen [5]bool
	for {
		key, next, ok := flatString(v, i)
		if !ok {
			return Payload{}, false
		}
		i = skipSpace(v, next)
		if i >= len(v) || v[i] != ':' {
			return Payload{}, false
		}
		i = skipSpace(v, i+1)
		field := slices.Index(flatFields[:], key)
		if field < 0 || seen[field] {
			return Payload{}, false
		}
		seen[field] = true
		if key == "seq" {
			j := i
			for j < len(v) && v[j] >= '0' && v[j] <= '9' {
				j++
			}
			if j == i || (v[i] == '0' && j > i+1) {
				return Payload{}, false
			}
			n, err := strconv.ParseUint(string(v[i:j]), 10, 64)
			if err != nil {
				return Payload{}, false
			}
			p.Seq, i = n, j
		} else {
			val, next, ok := flatString(v, i)
			if !ok {
				return Payload{}, false
			}
			switch key {
			case fieldCanaryID:
				p.CanaryID = val
			case "instance":
				p.Instance = val
			case "pipeline":
				p.Pipeline = val
			case "sig":
				p.Sig = val
			}
			i = next
		}
		i = skipSpace(v, i)
		if i >= len(v) {
			return Payload{}, false
		}
		switch v[i] {
		case ',':
			i = skipSpace(v, i+1)
			continue
		case '}':
			return p, seen[0] && i == len(v)-1
		}
		return Payload{}, false
	}
}

// flatFields are the payload's JSON names, outbox_canary_id first.
var flatFields = [5]string{fieldCanaryID, "instance", "pipeline", "seq", "sig"}

// flatString reads a JSON string at v[i] that needs no decoding (printable
// ASCII, no escape) and returns it and the index after its closing quote.
func flatString(v []byte, i int) (string, int, bool) {
	if i >= len(v) || v[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '"':
			return string(v[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipSpace skips JSON's whitespace from v[i].
func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}
