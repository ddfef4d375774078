//! kro's CEL libraries: the cases of kro's `pkg/cel/library/*_test.go`, with the values those
//! tests compute spelled out (SHA-256, MD5 and FNV-1a of `hello world` as `sha256sum`, `md5sum`
//! and the FNV reference give them; `random.*` from an independent transcription of kro's Go).

use crate::{Bindings, CelError, Expression, Scope, strip_omitted};
use serde_json::{Value, json};

fn eval(src: &str) -> Result<Value, CelError> {
    let b = Bindings::default().with(
        "schema",
        json!({"metadata": {"uid": "u-1"}, "spec": {"name": "app"}}),
    );
    Expression::compile(src)?.evaluate_in(&Scope::kro(&b))
}

fn ok(src: &str) -> Value {
    eval(src).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn err(src: &str) -> String {
    match eval(src) {
        Ok(v) => panic!("{src}: expected an error, got {v}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hashes_are_bytes_as_go_computes_them() {
    let hex = |src: &str| ok(&format!("'%x'.format([{src}])"));
    assert_eq!(
        hex("hash.sha256('hello world')"),
        "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
    );
    assert_eq!(
        hex("hash.md5('hello world')"),
        "5eb63bbbe01eeed093cb22bb8f5acdc3"
    );
    assert_eq!(hex("hash.fnv64a('hello world')"), "779a65e7023cd2e7");
    assert_eq!(hex("hash.fnv64a('')"), "cbf29ce484222325");
    // kro's cel-functions example: base64 of the hashes of "app"
    assert_eq!(
        ok("base64.encode(hash.fnv64a(schema.spec.name))"),
        "50+nGQVqg4w="
    );
    assert_eq!(
        ok("base64.encode(hash.sha256(schema.spec.name))"),
        "oXLO3K5HR0thXFTVEKXYSo3qMDLpWFh0MLQTU4vj8zM="
    );
    assert!(
        !err("hash.sha256(123)").is_empty(),
        "a hash of a non-string fails"
    );
}

#[test]
fn json_unmarshal_reads_numbers_as_doubles_and_marshal_writes_as_go() {
    assert_eq!(
        ok(r#"json.unmarshal('{"name": "test", "count": 42}')"#),
        json!({"name": "test", "count": 42}),
        "a whole double is written as Go writes it, without a fraction"
    );
    assert_eq!(ok("json.unmarshal('1.5')"), json!(1.5));
    assert_eq!(ok("json.unmarshal('[1, 2, 3]')[1] == 2.0"), true);
    assert_eq!(ok("json.unmarshal('null') == null"), true);
    assert_eq!(
        ok(r#"json.unmarshal('{"nested": {"value": "deep"}}').nested.value"#),
        "deep"
    );
    assert!(err(r#"json.unmarshal('{"invalid"}')"#).contains("failed to parse JSON"));
    assert!(err("json.unmarshal('')").contains("failed to parse JSON"));
    for (src, want) in [
        (
            r#"json.marshal({"name": "test", "count": 42})"#,
            r#"{"count":42,"name":"test"}"#,
        ),
        ("json.marshal([1, 2, 3])", "[1,2,3]"),
        (r#"json.marshal("hello")"#, r#""hello""#),
        ("json.marshal(42)", "42"),
        ("json.marshal(true)", "true"),
        ("json.marshal(null)", "null"),
        (
            r#"json.marshal({"outer": {"inner": "value"}})"#,
            r#"{"outer":{"inner":"value"}}"#,
        ),
        (
            r#"json.marshal(json.unmarshal('{"name":"test","count":42}'))"#,
            r#"{"count":42,"name":"test"}"#,
        ),
        (r#"json.marshal(b"hello")"#, r#""aGVsbG8=""#),
        (
            "json.marshal(18446744073709551615u)",
            "18446744073709551615",
        ),
        ("json.marshal(1.5)", "1.5"),
        ("json.marshal(1e21)", "1e+21"),
        ("json.marshal(0.0000001)", "1e-7"),
        (r#"json.marshal("<a&b>")"#, r#""\u003ca\u0026b\u003e""#),
    ] {
        assert_eq!(ok(src), want, "{src}");
    }
}

#[test]
fn random_is_seeded_as_kro_seeds_it() {
    assert_eq!(ok("random.seededString(10, 'test-seed')"), "5czheg3o5c");
    // kro's four bytes per character wrap around a 32-byte hash: eight characters repeat
    assert_eq!(
        ok("random.seededString(20, 'test-seed')"),
        "5czheg3o5czheg3o5czh"
    );
    assert_eq!(ok("random.seededInt(0, 100, 'test-seed')"), 56);
    assert_eq!(ok("random.seededInt(30000, 32768, 'my-service')"), 31247);
    assert_eq!(ok("random.seededInt(-100, -50, 'seed')"), -58);
    assert_eq!(ok("random.seededInt(5, 6, 'seed')"), 5);
    for n in ["-1", "0"] {
        let e = err(&format!("random.seededString({n}, 'test-seed')"));
        assert!(
            e.contains("random.seededString length must be positive"),
            "{e}"
        );
    }
    for (lo, hi) in [(5, 5), (10, 5)] {
        let e = err(&format!("random.seededInt({lo}, {hi}, 'seed')"));
        assert!(
            e.contains("random.seededInt min must be less than max"),
            "{e}"
        );
    }
    assert!(!err("random.seededString('10', 'test-seed')").is_empty());
}

#[test]
fn lists_index_mutation_and_map_merges() {
    assert_eq!(ok("lists.setAtIndex([1, 2, 3], 1, 9)"), json!([1, 9, 3]));
    assert_eq!(ok("lists.insertAtIndex([1, 2], 2, 3)"), json!([1, 2, 3]));
    assert_eq!(ok("lists.insertAtIndex([1, 2], 0, 0)"), json!([0, 1, 2]));
    assert_eq!(ok("lists.removeAtIndex([1, 2, 3], 0)"), json!([2, 3]));
    let e = err("lists.setAtIndex([1], 1, 0)");
    assert!(
        e.contains("lists.setAtIndex: index 1 out of bounds [0, 1)"),
        "{e}"
    );
    let e = err("lists.insertAtIndex([1], 3, 0)");
    assert!(e.contains("index 3 out of bounds [0, 1]"), "{e}");
    assert!(err("lists.removeAtIndex([], 0)").contains("out of bounds [0, 0)"));
    assert_eq!(
        ok("{'a': 1, 'b': 2}.merge({'b': 3, 'c': 4})"),
        json!({"a": 1, "b": 3, "c": 4})
    );
    assert_eq!(
        ok(
            "{'s': {'runAsNonRoot': true, 'x': 1}, 'k': [1]}.deepMerge({'s': {'fsGroup': 2, 'x': 5}, 'k': [2]})"
        ),
        json!({"s": {"runAsNonRoot": true, "fsGroup": 2, "x": 5}, "k": [2]})
    );
    assert_eq!(ok("{'a': 1}.deepMerge({})"), json!({"a": 1}));
}

#[test]
fn omit_leaves_the_field_out() {
    let mut v = ok("{'keep': 1, 'drop': omit(), 'list': [1, omit(), 2]}");
    strip_omitted(&mut v);
    assert_eq!(v, json!({"keep": 1, "list": [1, 2]}));
    assert!(crate::is_omitted(&ok("false ? 1 : omit()")));
}

#[test]
fn bindings_two_variable_comprehensions_and_optionals() {
    assert_eq!(
        ok("cel.bind(x, schema.spec.name + '-x', x + x)"),
        "app-xapp-x"
    );
    assert_eq!(
        ok("{'app': 'nginx', 'version': '1.19'}.transformList(k, v, k).sort()"),
        json!(["app", "version"])
    );
    assert_eq!(
        ok("{'cpu': 2, 'memory': 4}.transformMap(k, v, v * 2)"),
        json!({"cpu": 4, "memory": 8})
    );
    assert_eq!(
        ok("{'a': 1, 'b': 5, 'c': 3}.transformMap(k, v, v > 1, v * 10)"),
        json!({"b": 50, "c": 30})
    );
    assert_eq!(
        ok("{'us-east-1': 'primary', 'eu-west-1': 'secondary'}.transformMapEntry(k, v, {v: k})"),
        json!({"primary": "us-east-1", "secondary": "eu-west-1"})
    );
    assert_eq!(
        ok("['a', 'b'].transformList(i, v, v + string(i))"),
        json!(["a0", "b1"])
    );
    assert_eq!(
        ok("{'hello': 'world', 'taco': 'bell'}.all(k, v, k != v)"),
        true
    );
    assert_eq!(ok("[1, 2, 3].exists(i, v, i == 1 && v == 2)"), true);
    assert_eq!(ok("[1, 2, 3].existsOne(i, v, v > 1)"), false);
    assert_eq!(
        ok("[1, 2, 3].all(x, x > 0)"),
        true,
        "the one-variable macro stays"
    );
    assert_eq!(ok("schema.?spec.?nope.orValue('dflt')"), "dflt");
    assert_eq!(ok("schema.?spec.name.orValue('dflt')"), "app");
}

#[test]
fn the_kubernetes_scope_has_none_of_kros_functions() {
    let e = Expression::compile("hash.sha256('x')").unwrap();
    assert!(e.evaluate(&Bindings::default()).is_err());
}

#[test]
fn optional_selection_is_viral_as_in_cel_go() {
    let b = Bindings::default().with("input", json!({"data": {"ECHO_VALUE": "hi"}}));
    let s = Scope::new(&b);
    let e = |src: &str| Expression::compile(src).unwrap().evaluate_in(&s);
    // kro's e2e test check-external-references
    assert_eq!(
        e("input.?data.ECHO_VALUE.orValue('not found')").unwrap(),
        "hi"
    );
    assert_eq!(
        e("input.?data.NOPE.orValue('not found')").unwrap(),
        "not found"
    );
    assert_eq!(
        e("input.?nope.ECHO_VALUE.orValue('not found')").unwrap(),
        "not found"
    );
    assert_eq!(e("input.?data.?ECHO_VALUE.orValue('x')").unwrap(), "hi");
    assert_eq!(e("input.data.?NOPE.hasValue()").unwrap(), false);
    assert_eq!(e("input.data.ECHO_VALUE").unwrap(), "hi");
    assert!(matches!(
        e("input.data.NOPE"),
        Err(CelError::Evaluate { missing: true, .. })
    ));
}

#[test]
fn runtime_conditions_are_built_and_read_as_kro_does() {
    assert_eq!(
        ok(
            "runtime.newCondition({type: 'AppReady', status: 1 > 0 ? 'True' : 'False', reason: 'R', message: ''})"
        ),
        json!({"type": "AppReady", "status": "True", "reason": "R", "message": ""})
    );
    assert_eq!(
        ok("runtime.newCondition({type: 'A', status: 'Unknown'}).reason"),
        ""
    );
    let e = err("runtime.newCondition({type: 'A', status: 'Yes'})");
    assert!(
        e.contains("status must be one of True, False, Unknown (got \"Yes\")"),
        "{e}"
    );
    assert!(err("runtime.newCondition({status: 'True'})").contains("'type' is required"));
    assert!(
        err("runtime.newCondition({type: 'A', status: 'True', colour: 'x'})")
            .contains("unknown key")
    );
    let b = Bindings::default().with(
        "d",
        json!({"status": {"conditions": [
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}}),
    );
    let s = Scope::kro(&b);
    let e = |src: &str| Expression::compile(src).unwrap().evaluate_in(&s).unwrap();
    assert_eq!(e("runtime.condition(d, 'Available').status"), "True");
    assert_eq!(
        e("runtime.condition(d, 'Progressing')"),
        json!({"type": "", "status": "", "reason": "", "message": ""})
    );
}
