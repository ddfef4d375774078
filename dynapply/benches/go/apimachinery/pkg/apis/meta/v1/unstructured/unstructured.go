// Package unstructured: the parts of apimachinery's Unstructured that Metacontroller's
// ApplyUpdate path uses, with the same copying behaviour (annotations are converted to a
// map[string]string on read and back to a fresh map on write).
package unstructured

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// Unstructured holds a decoded JSON object.
type Unstructured struct {
	Object map[string]interface{}
}

// UnstructuredContent returns the decoded object itself (no copy).
func (u *Unstructured) UnstructuredContent() map[string]interface{} {
	if u.Object == nil {
		return make(map[string]interface{})
	}
	return u.Object
}

// GetAnnotations returns a copy of metadata.annotations as a string map.
func (u *Unstructured) GetAnnotations() map[string]string {
	m, _, _ := NestedStringMap(u.Object, "metadata", "annotations")
	return m
}

// SetAnnotations replaces metadata.annotations (removes it when nil).
func (u *Unstructured) SetAnnotations(annotations map[string]string) {
	if annotations == nil {
		RemoveNestedField(u.Object, "metadata", "annotations")
		return
	}
	if u.Object == nil {
		u.Object = make(map[string]interface{})
	}
	_ = SetNestedStringMap(u.Object, annotations, "metadata", "annotations")
}

// NestedFieldNoCopy returns the value at the path, without copying it.
func NestedFieldNoCopy(obj map[string]interface{}, fields ...string) (interface{}, bool, error) {
	var val interface{} = obj
	for i, field := range fields {
		if val == nil {
			return nil, false, nil
		}
		m, ok := val.(map[string]interface{})
		if !ok {
			return nil, false, fmt.Errorf("%v accessor error: %v is of the type %T, expected map[string]interface{}", fields[:i+1], val, val)
		}
		val, ok = m[field]
		if !ok {
			return nil, false, nil
		}
	}
	return val, true, nil
}

// NestedStringMap returns a copy of the string map at the path.
func NestedStringMap(obj map[string]interface{}, fields ...string) (map[string]string, bool, error) {
	val, found, err := NestedFieldNoCopy(obj, fields...)
	if !found || err != nil {
		return nil, found, err
	}
	m, ok := val.(map[string]interface{})
	if !ok {
		return nil, false, fmt.Errorf("%v accessor error: %v is of the type %T, expected map[string]interface{}", fields, val, val)
	}
	strMap := make(map[string]string, len(m))
	for k, v := range m {
		str, ok := v.(string)
		if !ok {
			return nil, false, fmt.Errorf("%v accessor error: contains non-string value in the map under key %q: %v is of the type %T, expected string", fields, k, v, v)
		}
		strMap[k] = str
	}
	return strMap, true, nil
}

// SetNestedField sets a deep copy of value at the path, creating parent maps.
func SetNestedField(obj map[string]interface{}, value interface{}, fields ...string) error {
	return setNestedFieldNoCopy(obj, runtime.DeepCopyJSONValue(value), fields...)
}

// SetNestedStringMap sets a fresh map holding value's entries at the path.
func SetNestedStringMap(obj map[string]interface{}, value map[string]string, fields ...string) error {
	m := make(map[string]interface{}, len(value))
	for k, v := range value {
		m[k] = v
	}
	return setNestedFieldNoCopy(obj, m, fields...)
}

func setNestedFieldNoCopy(obj map[string]interface{}, value interface{}, fields ...string) error {
	m := obj
	for i, field := range fields[:len(fields)-1] {
		if val, ok := m[field]; ok {
			valMap, ok := val.(map[string]interface{})
			if !ok {
				return fmt.Errorf("value cannot be set because %v is not a map[string]interface{}", fields[:i+1])
			}
			m = valMap
		} else {
			newVal := make(map[string]interface{})
			m[field] = newVal
			m = newVal
		}
	}
	m[fields[len(fields)-1]] = value
	return nil
}

// RemoveNestedField removes the field at the path; a no-op when a parent is missing.
func RemoveNestedField(obj map[string]interface{}, fields ...string) {
	m := obj
	for _, field := range fields[:len(fields)-1] {
		x, ok := m[field].(map[string]interface{})
		if !ok {
			return
		}
		m = x
	}
	delete(m, fields[len(fields)-1])
}
