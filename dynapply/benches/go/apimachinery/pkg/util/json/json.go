// Package json: apimachinery's Marshal (encoding/json) and Unmarshal (sigs.k8s.io/json,
// case-sensitive, integers kept as int64).
package json

import (
	gojson "encoding/json"

	kjson "sigs.k8s.io/json"
)

// Marshal is encoding/json's Marshal, as in apimachinery.
func Marshal(v interface{}) ([]byte, error) {
	return gojson.Marshal(v)
}

// Unmarshal decodes like apimachinery: case-sensitive, integers as int64.
func Unmarshal(data []byte, v interface{}) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(data, v)
}
