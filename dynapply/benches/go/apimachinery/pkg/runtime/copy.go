// Package runtime: DeepCopyJSON as apimachinery defines it (a fresh copy of every map and
// slice; strings, numbers, booleans and nil shared).
package runtime

import (
	gojson "encoding/json"
	"fmt"
)

// DeepCopyJSON deep-copies a decoded JSON object.
func DeepCopyJSON(x map[string]interface{}) map[string]interface{} {
	return DeepCopyJSONValue(x).(map[string]interface{})
}

// DeepCopyJSONValue deep-copies a decoded JSON value; panics on a type JSON decoding never
// produces, as apimachinery's does.
func DeepCopyJSONValue(x interface{}) interface{} {
	switch x := x.(type) {
	case map[string]interface{}:
		if x == nil {
			return x
		}
		clone := make(map[string]interface{}, len(x))
		for k, v := range x {
			clone[k] = DeepCopyJSONValue(v)
		}
		return clone
	case []interface{}:
		if x == nil {
			return x
		}
		clone := make([]interface{}, len(x))
		for i, v := range x {
			clone[i] = DeepCopyJSONValue(v)
		}
		return clone
	case string, int64, bool, float64, nil, gojson.Number:
		return x
	default:
		panic(fmt.Errorf("cannot deep copy %T", x))
	}
}
