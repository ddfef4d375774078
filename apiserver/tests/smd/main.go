// The reference side of kmeta-apiserver's differential test of server-side apply
// (apiserver/tests/ssa_differential.rs; docs/design/ssa-differential.md): structured-merge-diff
// (the library kube-apiserver's field manager is built on) runs sequences of applies and updates
// and prints each step's object, managed fields and conflicts.
//
// Protocol: one JSON object a line on stdin, one answer a line on stdout, until stdin closes.
//
//	in:  {"schema": <a CRD version's openAPIV3Schema>,
//	      "ops": [{"op": "apply"|"update", "manager": "a", "force": false, "object": {...}}]}
//	out: {"steps": [{"object": {...}, "managed": [{"manager", "operation", "fieldsV1"}],
//	                 "conflicts": [{"manager", "operation", "field"}], "error": "..."}]}
//
// The first operation creates the object (from an empty live object). A step with conflicts
// (or an error) leaves the object and its managers as they were. Around the library, this
// models what kube-apiserver's field manager adds for one API version: a manager is identified
// by its name and operation; an update is recorded under a temporary manager and then merged
// into the updater's entry (managedFieldsUpdater); the writer's set loses apiVersion, kind,
// metadata and metadata's server-set fields (stripMetaManager).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v2"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v4/merge"
	"sigs.k8s.io/structured-merge-diff/v4/typed"
)

type op struct {
	Op      string                 `json:"op"`
	Manager string                 `json:"manager"`
	Force   bool                   `json:"force"`
	Object  map[string]interface{} `json:"object"`
}

type request struct {
	Schema map[string]interface{} `json:"schema"`
	Ops    []op                   `json:"ops"`
}

type entry struct {
	Manager   string          `json:"manager"`
	Operation string          `json:"operation"`
	FieldsV1  json.RawMessage `json:"fieldsV1"`
}

type conflict struct {
	Manager   string `json:"manager"`
	Operation string `json:"operation"`
	Field     string `json:"field"`
}

type step struct {
	Object    interface{} `json:"object"`
	Managed   []entry     `json:"managed"`
	Conflicts []conflict  `json:"conflicts,omitempty"`
	Error     string      `json:"error,omitempty"`
}

type answer struct {
	Steps []step `json:"steps"`
	Error string `json:"error,omitempty"`
}

// sameVersion is the converter of a single-version resource.
type sameVersion struct{}

func (sameVersion) Convert(o *typed.TypedValue, _ fieldpath.APIVersion) (*typed.TypedValue, error) {
	return o, nil
}
func (sameVersion) IsMissingVersionError(error) bool { return false }

const version = fieldpath.APIVersion("v1")

// stripped: what kube-apiserver's stripMetaManager removes from the writer's set.
var stripped = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	parsers := map[string]*typed.ParseableType{}
	for in.Scan() {
		var req request
		var ans answer
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			ans.Error = "bad request: " + err.Error()
		} else {
			ans = run(req, parsers)
		}
		line, err := json.Marshal(ans)
		if err != nil {
			line = []byte(fmt.Sprintf(`{"error": %q}`, err.Error()))
		}
		out.Write(line)
		out.WriteByte('\n')
		out.Flush()
	}
}

func run(req request, parsers map[string]*typed.ParseableType) answer {
	key, _ := json.Marshal(req.Schema)
	pt, ok := parsers[string(key)]
	if !ok {
		p, err := parserFor(req.Schema)
		if err != nil {
			return answer{Error: "schema: " + err.Error()}
		}
		t := p.Type("root")
		pt = &t
		parsers[string(key)] = pt
	}
	updater := merge.Updater{Converter: sameVersion{}}
	live, err := pt.FromUnstructured(map[string]interface{}{})
	if err != nil {
		return answer{Error: "empty object: " + err.Error()}
	}
	managers := fieldpath.ManagedFields{}
	var ans answer
	for _, o := range req.Ops {
		next, nextManagers, s := apply(&updater, pt, live, managers.Copy(), o, req.Schema)
		if s.Error == "" && len(s.Conflicts) == 0 {
			// what a custom resource's storage keeps: no null where the schema has no
			// nullable (apiextensions' PruneNonNullableNullsWithoutDefaults)
			stored := next.AsValue().Unstructured()
			pruneNulls(stored, req.Schema)
			dropEmptyMeta(stored)
			if live, err = pt.FromUnstructured(stored); err != nil {
				s.Error = "stored object: " + err.Error()
			}
			managers = nextManagers
		}
		s.Object = live.AsValue().Unstructured()
		s.Managed = render(managers)
		ans.Steps = append(ans.Steps, s)
	}
	return ans
}

func id(manager, operation string) string { return manager + "\x00" + operation }

func apply(u *merge.Updater, pt *typed.ParseableType, live *typed.TypedValue, managers fieldpath.ManagedFields, o op, schema map[string]interface{}) (*typed.TypedValue, fieldpath.ManagedFields, step) {
	if o.Op == "update" {
		// the body of a create or update is decoded through the custom resource's schema,
		// which drops the nulls it does not allow, before the field manager sees it
		pruneNulls(o.Object, schema)
		dropEmptyMeta(o.Object)
	}
	obj, err := pt.FromUnstructured(o.Object)
	if err != nil {
		return nil, nil, step{Error: "invalid object: " + err.Error()}
	}
	var who string
	var next *typed.TypedValue
	switch o.Op {
	case "apply":
		who = id(o.Manager, "Apply")
		before := managers.Copy()
		next, managers, err = u.Apply(live, obj, version, managers, who, o.Force)
		if next == nil && err == nil {
			next = live
		}
		if _, ok := err.(merge.Conflicts); ok {
			return nil, nil, step{Conflicts: conflictsOf(u, live, obj, before, who)}
		}
	case "update":
		// managedFieldsUpdater: the fields this update changed, under a temporary manager,
		// join the updater's entry
		who = id(o.Manager, "Update")
		const self = "current-operation"
		next, managers, err = u.Update(live, obj, version, managers, self)
		if err == nil {
			if vs, ok := managers[self]; ok {
				delete(managers, self)
				set := vs.Set()
				if prev, ok := managers[who]; ok {
					set = set.Union(prev.Set())
				}
				managers[who] = fieldpath.NewVersionedSet(set, version, false)
			}
		}
	default:
		return nil, nil, step{Error: "unknown op " + o.Op}
	}
	if err != nil {
		if cs, ok := err.(merge.Conflicts); ok {
			return nil, nil, step{Conflicts: conflicts(cs)}
		}
		return nil, nil, step{Error: err.Error()}
	}
	if vs, ok := managers[who]; ok {
		set := vs.Set().Difference(stripped)
		if set.Empty() {
			delete(managers, who)
		} else {
			managers[who] = fieldpath.NewVersionedSet(set, vs.APIVersion(), vs.Applied())
		}
	}
	return next, managers, step{}
}

// conflictsOf recomputes the conflicts of an apply as the library's Updater does (the other
// managers' fields that the forced result adds or changes): 4.1.2's ConflictsFromManagers
// reuses one path buffer for every conflict of a manager (fixed in 4.2 by copying the path), so
// its paths cannot be read.
func conflictsOf(u *merge.Updater, live, obj *typed.TypedValue, managers fieldpath.ManagedFields, who string) []conflict {
	forced, _, err := u.Apply(live, obj, version, managers.Copy(), who, true)
	if err != nil || forced == nil {
		return []conflict{{Field: fmt.Sprintf("recomputing conflicts: %v", err)}}
	}
	cmp, err := live.Compare(forced)
	if err != nil {
		return []conflict{{Field: "recomputing conflicts: " + err.Error()}}
	}
	changed := cmp.Modified.Union(cmp.Added)
	var cs merge.Conflicts
	for m, vs := range managers {
		if m == who {
			continue
		}
		vs.Set().Intersection(changed).Iterate(func(p fieldpath.Path) {
			cs = append(cs, merge.Conflict{Manager: m, Path: append(fieldpath.Path{}, p...)})
		})
	}
	return conflicts(cs)
}

func conflicts(cs merge.Conflicts) []conflict {
	out := make([]conflict, 0, len(cs))
	for _, c := range cs {
		parts := strings.SplitN(c.Manager, "\x00", 2)
		parts = append(parts, "")
		out = append(out, conflict{Manager: parts[0], Operation: parts[1], Field: c.Path.String()})
	}
	return out
}

func render(managers fieldpath.ManagedFields) []entry {
	out := []entry{}
	for m, vs := range managers {
		js, err := vs.Set().ToJSON()
		if err != nil {
			js = []byte(fmt.Sprintf("%q", err.Error()))
		}
		parts := strings.SplitN(m, "\x00", 2)
		parts = append(parts, "")
		out = append(out, entry{Manager: parts[0], Operation: parts[1], FieldsV1: js})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Manager+out[i].Operation < out[j].Manager+out[j].Operation
	})
	return out
}

// parserFor turns an openAPIV3Schema into a structured-merge-diff schema whose type "root" is
// the object, as kube-openapi's schema conversion does for a CRD: properties are struct fields
// (atomic under x-kubernetes-map-type: atomic), additionalProperties a map's values, lists are
// atomic unless x-kubernetes-list-type says set or map (with x-kubernetes-list-map-keys), and
// x-kubernetes-preserve-unknown-fields (or no type) is the deduced untyped type. metadata is
// ObjectMeta's (the fields a test sets).
func parserFor(s map[string]interface{}) (*typed.Parser, error) {
	root := convert(s)
	rm, _ := root["map"].(map[string]interface{})
	if rm == nil {
		return nil, fmt.Errorf("the root schema is not an object")
	}
	fields, _ := rm["fields"].([]interface{})
	kept := []interface{}{}
	for _, f := range fields {
		switch f.(map[string]interface{})["name"] {
		case "apiVersion", "kind", "metadata":
		default:
			kept = append(kept, f)
		}
	}
	str := map[string]interface{}{"scalar": "string"}
	field := func(name string, t interface{}) map[string]interface{} {
		return map[string]interface{}{"name": name, "type": t}
	}
	strMap := map[string]interface{}{"map": map[string]interface{}{"elementType": str}}
	meta := map[string]interface{}{"map": map[string]interface{}{"fields": []interface{}{
		field("name", str), field("namespace", str), field("generateName", str),
		field("uid", str), field("resourceVersion", str), field("creationTimestamp", str),
		field("selfLink", str), field("generation", map[string]interface{}{"scalar": "numeric"}),
		field("labels", strMap), field("annotations", strMap),
		field("finalizers", map[string]interface{}{"list": map[string]interface{}{
			"elementType": str, "elementRelationship": "associative"}}),
		field("managedFields", map[string]interface{}{"namedType": "__untyped_atomic_"}),
	}}}
	rm["fields"] = append([]interface{}{field("apiVersion", str), field("kind", str), field("metadata", meta)}, kept...)
	untypedAtomic := map[string]interface{}{"namedType": "__untyped_atomic_"}
	types := []interface{}{
		map[string]interface{}{"name": "root", "map": rm},
		map[string]interface{}{
			"name":   "__untyped_atomic_",
			"scalar": "untyped",
			"list":   map[string]interface{}{"elementType": untypedAtomic, "elementRelationship": "atomic"},
			"map":    map[string]interface{}{"elementType": untypedAtomic, "elementRelationship": "atomic"},
		},
		map[string]interface{}{
			"name":   "__untyped_deduced_",
			"scalar": "untyped",
			"list":   map[string]interface{}{"elementType": untypedAtomic, "elementRelationship": "atomic"},
			"map":    map[string]interface{}{"elementType": map[string]interface{}{"namedType": "__untyped_deduced_"}, "elementRelationship": "separable"},
		},
	}
	y, err := yaml.Marshal(map[string]interface{}{"types": types})
	if err != nil {
		return nil, err
	}
	return typed.NewParser(typed.YAMLObject(y))
}

// convert returns the structured-merge-diff type (a TypeRef, inlined) of an OpenAPI schema node.
func convert(s map[string]interface{}) map[string]interface{} {
	if s["x-kubernetes-preserve-unknown-fields"] == true || s["type"] == nil {
		if s["type"] != "object" || s["properties"] == nil {
			return map[string]interface{}{"namedType": "__untyped_deduced_"}
		}
	}
	switch s["type"] {
	case "string":
		return map[string]interface{}{"scalar": "string"}
	case "integer", "number":
		return map[string]interface{}{"scalar": "numeric"}
	case "boolean":
		return map[string]interface{}{"scalar": "boolean"}
	case "array":
		items, _ := s["items"].(map[string]interface{})
		l := map[string]interface{}{"elementType": convert(items), "elementRelationship": "atomic"}
		switch s["x-kubernetes-list-type"] {
		case "set":
			l["elementRelationship"] = "associative"
		case "map":
			l["elementRelationship"] = "associative"
			l["keys"] = s["x-kubernetes-list-map-keys"]
		}
		return map[string]interface{}{"list": l}
	}
	m := map[string]interface{}{}
	if s["x-kubernetes-map-type"] == "atomic" {
		m["elementRelationship"] = "atomic"
	}
	if props, ok := s["properties"].(map[string]interface{}); ok {
		names := make([]string, 0, len(props))
		for n := range props {
			names = append(names, n)
		}
		sort.Strings(names)
		fields := []interface{}{}
		for _, n := range names {
			sub, _ := props[n].(map[string]interface{})
			fields = append(fields, map[string]interface{}{"name": n, "type": convert(sub)})
		}
		m["fields"] = fields
	}
	if ap, ok := s["additionalProperties"].(map[string]interface{}); ok {
		m["elementType"] = convert(ap)
	}
	if s["x-kubernetes-preserve-unknown-fields"] == true {
		m["elementType"] = map[string]interface{}{"namedType": "__untyped_deduced_"}
	}
	return map[string]interface{}{"map": m}
}

// pruneNulls drops the null values of x that its OpenAPI schema s does not declare nullable
// (none has a default here).
func pruneNulls(x interface{}, s map[string]interface{}) {
	sub := func(s map[string]interface{}, k string) map[string]interface{} {
		if props, ok := s["properties"].(map[string]interface{}); ok {
			if p, ok := props[k].(map[string]interface{}); ok {
				return p
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]interface{}); ok {
			return ap
		}
		return nil
	}
	switch x := x.(type) {
	case map[string]interface{}:
		for k, v := range x {
			ks := sub(s, k)
			if v == nil && ks != nil && ks["nullable"] != true {
				delete(x, k)
				continue
			}
			pruneNulls(v, ks)
		}
	case []interface{}:
		items, _ := s["items"].(map[string]interface{})
		for _, v := range x {
			pruneNulls(v, items)
		}
	}
}

// dropEmptyMeta does what ObjectMeta's round trip through its Go type does: a null or empty
// labels, annotations, finalizers or ownerReferences is no field (omitempty).
func dropEmptyMeta(obj interface{}) {
	o, _ := obj.(map[string]interface{})
	md, ok := o["metadata"].(map[string]interface{})
	if !ok {
		return
	}
	for _, k := range []string{"labels", "annotations", "finalizers", "ownerReferences"} {
		v, present := md[k]
		if !present {
			continue
		}
		switch v := v.(type) {
		case nil:
			delete(md, k)
		case map[string]interface{}:
			if len(v) == 0 {
				delete(md, k)
			}
		case []interface{}:
			if len(v) == 0 {
				delete(md, k)
			}
		}
	}
}
