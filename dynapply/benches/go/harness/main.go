// Times Metacontroller's child-update path on the workloads dynapply's `update_path` example
// writes, the way Metacontroller runs it for every observed child on every sync
// (pkg/controller/common/manage_children.go, ApplyUpdate then DeepEqual in DynamicApply.Apply):
// decode the last-applied annotation, drop the annotation from desired, Merge (which deep-copies
// observed), revert the system metadata fields and status, encode the new annotation, compare
// with observed. The package doing the work, metacontroller/pkg/dynamic/apply, is
// Metacontroller's own file, unmodified; this harness only sequences the calls.
//
// Usage: harness DIR ROUNDS MILLIS. Prints `go <size> <row> <ns per op>` per round and row, and
// writes DIR/<size>.go-merged.json (the object the full path produced) for a cross-check.
package main

import (
	gojson "encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sjson "k8s.io/apimachinery/pkg/util/json"
	"metacontroller/pkg/dynamic/apply"
)

var systemFields = []string{
	"selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
	"deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
}

func revertField(newObj, orig *unstructured.Unstructured, path ...string) error {
	field, found, err := unstructured.NestedFieldNoCopy(orig.UnstructuredContent(), path...)
	if err != nil {
		return err
	}
	if found {
		return unstructured.SetNestedField(newObj.UnstructuredContent(), field, path...)
	}
	unstructured.RemoveNestedField(newObj.UnstructuredContent(), path...)
	return nil
}

func nullifyLastApplied(obj *unstructured.Unstructured) {
	ann := obj.GetAnnotations()
	if ann == nil {
		return
	}
	if _, ok := ann[apply.LastAppliedAnnotation]; !ok {
		return
	}
	delete(ann, apply.LastAppliedAnnotation)
	obj.SetAnnotations(ann)
}

// update is ApplyUpdate followed by the DeepEqual that decides whether to write.
func update(orig, desired *unstructured.Unstructured) (*unstructured.Unstructured, bool, error) {
	last, err := apply.GetLastApplied(orig)
	if err != nil {
		return nil, false, err
	}
	nullifyLastApplied(desired)
	merged, err := apply.Merge(orig.UnstructuredContent(), last, desired.UnstructuredContent())
	if err != nil {
		return nil, false, err
	}
	newObj := &unstructured.Unstructured{Object: merged}
	for _, f := range systemFields {
		if err := revertField(newObj, orig, "metadata", f); err != nil {
			return nil, false, err
		}
	}
	if err := revertField(newObj, orig, "status"); err != nil {
		return nil, false, err
	}
	if err := apply.SetLastApplied(newObj, desired.UnstructuredContent()); err != nil {
		return nil, false, err
	}
	return newObj, !reflect.DeepEqual(newObj.UnstructuredContent(), orig.UnstructuredContent()), nil
}

func load(path string) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj := map[string]interface{}{}
	if err := k8sjson.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// timeIt runs f for about `budget`, returning nanoseconds per call.
func timeIt(budget time.Duration, f func()) float64 {
	n := 1
	for {
		start := time.Now()
		for i := 0; i < n; i++ {
			f()
		}
		took := time.Since(start)
		if took >= budget {
			return float64(took.Nanoseconds()) / float64(n)
		}
		if took < budget/100 {
			n *= 10
		} else {
			n = int(float64(n)*float64(budget)/float64(took)) + 1
		}
	}
}

func run(dir, size string, rounds int, budget time.Duration) error {
	orig, err := load(filepath.Join(dir, size+".observed.json"))
	if err != nil {
		return err
	}
	changed, err := load(filepath.Join(dir, size+".desired.json"))
	if err != nil {
		return err
	}
	same, err := load(filepath.Join(dir, size+".last.json"))
	if err != nil {
		return err
	}
	out, wrote, err := update(orig, changed)
	if err != nil || !wrote {
		return fmt.Errorf("%s: changed desired: write=%v err=%v", size, wrote, err)
	}
	if _, wrote, err = update(orig, same); err != nil || wrote {
		return fmt.Errorf("%s: unchanged desired: write=%v err=%v", size, wrote, err)
	}
	text, err := gojson.Marshal(out.Object)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, size+".go-merged.json"), text, 0o644); err != nil {
		return err
	}
	last, err := apply.GetLastApplied(orig)
	if err != nil {
		return err
	}
	for r := 0; r < rounds; r++ {
		for _, row := range []struct {
			name string
			f    func()
		}{
			{"update", func() { _, _, _ = update(orig, changed) }},
			{"update_noop", func() { _, _, _ = update(orig, same) }},
			{"merge", func() { _, _ = apply.Merge(orig.Object, last, changed.Object) }},
		} {
			fmt.Printf("go %s %s %.0f\n", size, row.name, timeIt(budget, row.f))
		}
	}
	return nil
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: harness DIR ROUNDS MILLIS")
		os.Exit(2)
	}
	rounds, err1 := strconv.Atoi(os.Args[2])
	millis, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "ROUNDS and MILLIS must be integers")
		os.Exit(2)
	}
	for _, size := range []string{"1x5", "5x20", "20x50"} {
		if err := run(os.Args[1], size, rounds, time.Duration(millis)*time.Millisecond); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
