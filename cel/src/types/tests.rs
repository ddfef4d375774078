use super::*;
use serde_json::json;

fn spec_schema() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "name": {"type": "string"},
            "replicas": {"type": "integer"},
            "ratio": {"type": "number"},
            "enabled": {"type": "boolean"},
            "names": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "port": {"x-kubernetes-int-or-string": true}}},
        "metadata": {"type": "object"}}})
}

/// An OpenAPI v3 document as kube-apiserver serves one, `$ref`s and `allOf` included.
fn apps_doc() -> Arc<Value> {
    Arc::new(json!({"components": {"schemas": {
        "io.k8s.api.apps.v1.Deployment": {
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
            "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
                "status": {"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentStatus"}}},
        "io.k8s.api.apps.v1.DeploymentStatus": {"type": "object", "properties": {
            "availableReplicas": {"type": "integer", "format": "int32"},
            "conditions": {"type": "array", "items": {"type": "object", "properties": {
                "type": {"type": "string"}, "status": {"type": "string"}}}}}},
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
            "name": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}}}},
    }}}))
}

fn env() -> TypeEnv {
    let deployment = Schema::of_kind(apps_doc(), "apps/v1", "Deployment").unwrap();
    TypeEnv::kro()
        .with("schema", Schema::new(spec_schema()).to_type())
        .with("deployment", deployment.to_type())
}

fn check(source: &str) -> Result<Type, TypeError> {
    Expression::compile(source).unwrap().check(&env())
}

fn text(source: &str) -> String {
    check(source).unwrap_err().to_string()
}

#[test]
fn fields_are_typed_from_the_schema_through_refs() {
    assert_eq!(check("schema.spec.replicas").unwrap(), Type::Int);
    assert_eq!(
        check("schema.spec.names").unwrap(),
        Type::List(Box::new(Type::String))
    );
    assert_eq!(check("schema.spec.labels.team").unwrap(), Type::String);
    assert_eq!(check("schema.spec.labels['a.b/c']").unwrap(), Type::String);
    assert_eq!(check("schema.spec.extra.x.y").unwrap(), Type::Dyn);
    assert_eq!(check("schema.metadata.name").unwrap(), Type::Dyn);
    assert_eq!(check("schema.spec.ratio").unwrap(), Type::Dyn);
    assert_eq!(
        check("deployment.status.availableReplicas").unwrap(),
        Type::Int
    );
    assert_eq!(
        check("deployment.metadata.labels").unwrap(),
        Type::Map(Box::new(Type::String))
    );
    assert_eq!(
        check("has(deployment.status.availableReplicas)").unwrap(),
        Type::Bool
    );
    assert_eq!(
        text("deployment.status.availableReplica"),
        "deployment.status has no field \"availableReplica\" (it has: availableReplicas, conditions)"
    );
    assert_eq!(
        text("has(schema.spec.nam)"),
        "schema.spec has no field \"nam\" (it has: enabled, extra, labels, name, names, port, ratio, replicas)"
    );
    assert_eq!(
        text("schema.spec.replicas.value"),
        "schema.spec.replicas is a int, it has no field \"value\""
    );
    assert!(Schema::of_kind(apps_doc(), "apps/v1", "StatefulSet").is_none());
}

#[test]
fn operators_need_operands_of_matching_types() {
    assert_eq!(check("schema.spec.replicas * 2 + 1").unwrap(), Type::Int);
    assert_eq!(check("schema.spec.name + '-svc'").unwrap(), Type::String);
    assert_eq!(
        text("schema.spec.replicas + \"x\""),
        "found no matching overload for \"_+_\" applied to (int, string)"
    );
    assert!(check("schema.spec.name > 3").is_err());
    assert!(check("schema.spec.replicas > 2.5").is_ok());
    assert!(check("schema.spec.replicas == 'a'").is_err());
    assert!(check("schema.spec.enabled && schema.spec.replicas").is_err());
    assert!(check("!schema.spec.name").is_err());
    assert_eq!(check("schema.spec.extra.n + 1").unwrap(), Type::Dyn);
    assert_eq!(
        text("schema.spec.enabled ? 1 : 'one'"),
        "found no matching overload for \"_?_:_\" applied to (bool, int, string)"
    );
    assert_eq!(check("schema.spec.enabled ? 1 : null").unwrap(), Type::Int);
    assert_eq!(check("schema.spec.names[0]").unwrap(), Type::String);
    assert!(check("schema.spec.name[0]").is_err());
    assert_eq!(check("'a' in schema.spec.names").unwrap(), Type::Bool);
    assert!(check("1 in schema.spec.names").is_err());
    assert!(
        check("undeclared.x")
            .unwrap_err()
            .to_string()
            .starts_with("undeclared reference to \"undeclared\" (declared: deployment, schema)")
    );
}

#[test]
fn functions_and_macros_are_typed() {
    assert_eq!(check("size(schema.spec.names)").unwrap(), Type::Int);
    assert_eq!(check("schema.spec.name.size()").unwrap(), Type::Int);
    assert!(check("size(schema.spec.replicas)").is_err());
    assert_eq!(
        check("string(schema.spec.replicas) + 'x'").unwrap(),
        Type::String
    );
    assert_eq!(
        check("schema.spec.name.startsWith('w')").unwrap(),
        Type::Bool
    );
    assert!(check("schema.spec.replicas.startsWith('w')").is_err());
    assert_eq!(
        check("schema.spec.name.split('-')").unwrap(),
        Type::List(Box::new(Type::String))
    );
    assert_eq!(
        check("schema.spec.names.map(n, n + '-x')").unwrap(),
        Type::List(Box::new(Type::String))
    );
    assert!(check("schema.spec.names.map(n, n + 1)").is_err());
    assert_eq!(
        check("schema.spec.names.filter(n, n.startsWith('a'))").unwrap(),
        Type::List(Box::new(Type::Dyn))
    );
    assert_eq!(
        check("schema.spec.names.all(n, size(n) > 1)").unwrap(),
        Type::Bool
    );
    assert_eq!(
        check(
            "deployment.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')"
        )
        .unwrap(),
        Type::Bool
    );
    assert!(check("deployment.status.conditions.exists(c, c.typ == 'A')").is_err());
    assert_eq!(
        check("schema.spec.labels.all(k, k != '')").unwrap(),
        Type::Bool
    );
    assert_eq!(
        check("random.seededString(10, schema.spec.name)").unwrap(),
        Type::Dyn
    );
    assert!(check("math.greatest(schema.spec.nam)").is_err());
    assert!(check("unknownFunction(schema.spec.nam)").is_err());
    assert_eq!(
        check("{'a': schema.spec.name}").unwrap(),
        Type::Map(Box::new(Type::String))
    );
    assert_eq!(check("dyn(schema.spec.name)").unwrap(), Type::Dyn);
}

#[test]
fn a_function_no_scope_declares_is_refused_by_name() {
    let cases = [
        (
            "unknownFunction(schema.spec.name)",
            "undeclared reference to function \"unknownFunction\"",
        ),
        (
            "schema.spec.name.lowerAsci()",
            "undeclared reference to function \"lowerAsci\"",
        ),
        (
            "random.seedString(10, schema.spec.name)",
            "undeclared reference to function \"random.seedString\"",
        ),
        (
            "deploymnt.size()",
            "undeclared reference to \"deploymnt\" (declared: deployment, schema)",
        ),
        (
            "type(schema.spec.name) == string",
            "function \"type\" is not supported by kmeta's CEL evaluator",
        ),
    ];
    for (source, want) in cases {
        assert_eq!(text(source), want, "{source}");
    }
    for ok in [
        "schema.spec.name.lowerAscii().startsWith('a')",
        "math.greatest([1, schema.spec.replicas])",
        "base64.encode(bytes(schema.spec.name))",
        "json.marshal(schema.spec.labels)",
        "schema.spec.names.join(',')",
        "hash.fnv64a(schema.spec.name)",
        "format.dns1123Label().validate(schema.spec.name).hasValue()",
    ] {
        assert!(check(ok).is_ok(), "{ok}: {:?}", check(ok));
    }
    // kro's functions are not in the Kubernetes environment
    let e = Expression::compile("json.marshal(x)").unwrap();
    let kube = TypeEnv::default().with("x", Type::Dyn);
    assert_eq!(
        e.check(&kube).unwrap_err().to_string(),
        "undeclared reference to function \"json.marshal\""
    );
}

#[test]
fn a_field_accepts_values_of_its_type() {
    assert!(Type::Int.accepts(&Type::Int));
    assert!(Type::Int.accepts(&Type::Dyn));
    assert!(Type::Int.accepts(&Type::Null));
    assert!(!Type::Int.accepts(&Type::String));
    assert!(!Type::String.accepts(&Type::Int));
    assert!(Type::List(Box::new(Type::String)).accepts(&Type::List(Box::new(Type::Dyn))));
    assert!(!Type::List(Box::new(Type::String)).accepts(&Type::List(Box::new(Type::Int))));
    let meta = env().vars["deployment"].field("metadata");
    assert!(meta.accepts(&Type::Map(Box::new(Type::String))));
    assert!(!meta.accepts(&Type::String));
    assert_eq!(meta.field("labels").field("x"), Type::String);
    assert_eq!(Type::List(Box::new(Type::Int)).items(), Type::Int);
}

#[test]
fn kros_extensions_are_typed_or_read_as_dyn() {
    assert_eq!(
        check("cel.bind(x, schema.spec.replicas, x + 1)").unwrap(),
        Type::Int
    );
    assert!(check("cel.bind(x, schema.spec.replicas, x + 'a')").is_err());
    assert_eq!(check("schema.spec.?name.orValue('a')").unwrap(), Type::Dyn);
    assert_eq!(
        check("schema.spec.labels.all(k, v, v != '')").unwrap(),
        Type::Bool
    );
    assert!(check("schema.spec.labels.all(k, v, v > 1)").is_err());
    assert_eq!(
        check("schema.spec.names.transformList(i, n, n + string(i))").unwrap(),
        Type::List(Box::new(Type::String))
    );
    assert_eq!(
        check("schema.spec.labels.transformMap(k, v, k != '', size(v))").unwrap(),
        Type::Map(Box::new(Type::Int))
    );
}
