package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// schema is the part of a JSON schema the arguments are checked against:
// an object's required properties, each property's type (string, integer,
// number, boolean, object, array, null, or a list of them) and enum, and
// additionalProperties: false. The model reads the whole schema; a call
// that breaks these rules gets an error instead of running.
type schema struct {
	props      map[string]propRule
	required   []string
	additional bool
}

type propRule struct {
	types []string
	enum  []json.RawMessage
}

func parseSchema(js []byte) (*schema, error) {
	var raw struct {
		Type                 string                     `json:"type"`
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON schema object: %v", err)
	}
	if raw.Type != "object" {
		return nil, fmt.Errorf("type %q: the arguments' schema must be of type object", raw.Type)
	}
	s := &schema{props: map[string]propRule{}, required: raw.Required, additional: raw.AdditionalProperties == nil || *raw.AdditionalProperties}
	for name, p := range raw.Properties {
		var pr struct {
			Type json.RawMessage   `json:"type"`
			Enum []json.RawMessage `json:"enum"`
		}
		if err := json.Unmarshal(p, &pr); err != nil {
			return nil, fmt.Errorf("properties.%s: %v", name, err)
		}
		var r propRule
		switch t := bytes.TrimSpace(pr.Type); {
		case len(t) == 0:
		case t[0] == '[':
			if err := json.Unmarshal(t, &r.types); err != nil {
				return nil, fmt.Errorf("properties.%s.type: %v", name, err)
			}
		default:
			var one string
			if err := json.Unmarshal(t, &one); err != nil {
				return nil, fmt.Errorf("properties.%s.type: %v", name, err)
			}
			r.types = []string{one}
		}
		for _, ty := range r.types {
			if !slices.Contains([]string{"string", "integer", "number", "boolean", "object", "array", "null"}, ty) {
				return nil, fmt.Errorf("properties.%s.type: %q is not a JSON schema type", name, ty)
			}
		}
		r.enum = pr.Enum
		s.props[name] = r
	}
	for _, k := range s.required {
		if _, ok := s.props[k]; !ok && !s.additional {
			return nil, fmt.Errorf("required %q is not among the properties", k)
		}
	}
	return s, nil
}

// check names the first rule args breaks.
func (s *schema) check(args []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return fmt.Errorf("want a JSON object, got %s", clip(string(args), 80))
	}
	for _, k := range s.required {
		if _, ok := obj[k]; !ok {
			return fmt.Errorf("missing required %q", k)
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r, ok := s.props[k]
		if !ok {
			if !s.additional {
				return fmt.Errorf("unknown argument %q", k)
			}
			continue
		}
		if len(r.types) > 0 && !slices.Contains(r.types, jsonType(obj[k])) && !(jsonType(obj[k]) == "integer" && slices.Contains(r.types, "number")) {
			return fmt.Errorf("%q is %s, want %s", k, jsonType(obj[k]), strings.Join(r.types, " or "))
		}
		if len(r.enum) > 0 && !slices.ContainsFunc(r.enum, func(e json.RawMessage) bool { return jsonEqual(e, obj[k]) }) {
			return fmt.Errorf("%q is not one of its allowed values", k)
		}
	}
	return nil
}

func jsonType(v json.RawMessage) string {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return "null"
	}
	switch t[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(t, ".eE") {
		var f float64
		if json.Unmarshal(t, &f) == nil && f == float64(int64(f)) {
			return "integer"
		}
		return "number"
	}
	return "integer"
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// nodeJSON writes a YAML node as JSON, mappings in their own key order
// (the prompt shows the schema as the user wrote it). Empty: no node.
func nodeJSON(n *yaml.Node) ([]byte, error) {
	if n.Kind == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	if err := writeNode(&b, n); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeNode(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("line %d: one value expected", n.Line)
		}
		return writeNode(b, n.Content[0])
	case yaml.AliasNode:
		return writeNode(b, n.Alias)
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteString(", ")
			}
			k, _ := json.Marshal(n.Content[i].Value)
			b.Write(k)
			b.WriteString(": ")
			if err := writeNode(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writeNode(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %v", n.Line, err)
		}
		js, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %v", n.Line, err)
		}
		b.Write(js)
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}
