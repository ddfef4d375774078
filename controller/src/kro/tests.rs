//! kro's own examples (`examples/kubernetes/`) translated: the instance CRD and the
//! CompositeController kmeta makes of each.

use super::*;

fn plurals(_: &str, kind: &str) -> Option<String> {
    Some(plural(kind))
}

fn webapp() -> Value {
    json!({"apiVersion": API_VERSION, "kind": "ResourceGraphDefinition",
        "metadata": {"name": "webapp.kro.run", "uid": "r1", "labels": {"team": "a"}},
        "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "WebApp",
            "spec": {"name": "string", "replicas": "integer | default=1",
                     "service": {"enabled": "boolean | default=true"}},
            "status": {"availableReplicas": "${deployment.status.availableReplicas}"}},
          "resources": [
            {"id": "service", "includeWhen": ["${schema.spec.service.enabled}"],
             "template": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "${deployment.metadata.name}"}}},
            {"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "${schema.spec.name}"}}}]}})
}

#[test]
fn an_rgd_becomes_its_instance_crd_and_a_composite_controller() {
    let served = translate(&webapp(), &plurals).unwrap();
    assert_eq!(served.order, ["deployment", "service"]);
    let crd = &served.crd;
    assert_eq!(crd["metadata"]["name"], "webapps.kro.run");
    assert_eq!(crd["spec"]["names"]["kind"], "WebApp");
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(
        v["additionalPrinterColumns"][0]["jsonPath"],
        ".status.state"
    );
    let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["properties"]["replicas"],
        json!({"type": "integer", "default": 1})
    );
    assert_eq!(spec["properties"]["service"]["default"], json!({}));
    let cc = &served.controller;
    assert_eq!(cc["metadata"]["name"], "webapp.kro.run");
    assert_eq!(cc["metadata"]["labels"]["team"], "a");
    assert_eq!(cc["metadata"]["ownerReferences"][0]["uid"], "r1");
    assert_eq!(
        cc["spec"]["parentResource"],
        json!({"apiVersion": "kro.run/v1alpha1", "resource": "webapps"})
    );
    assert_eq!(cc["spec"]["childResources"][0]["resource"], "deployments");
    assert_eq!(
        cc["spec"]["hooks"]["sync"]["cel"]["resourceGraph"],
        webapp()["spec"]
    );
    let typed: crate::api::CompositeController = serde_json::from_value(cc.clone()).unwrap();
    assert!(typed.spec.hooks.unwrap().sync.unwrap().cel.is_some());
}

#[test]
fn printer_columns_group_and_scope_are_kept() {
    let mut rgd = webapp();
    rgd["spec"]["schema"]["group"] = json!("example.com");
    rgd["spec"]["schema"]["additionalPrinterColumns"] =
        json!([{"jsonPath": ".spec.image", "name": "Image", "type": "string"}]);
    let crd = instance_crd(&rgd).unwrap();
    assert_eq!(crd["metadata"]["name"], "webapps.example.com");
    assert_eq!(
        crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn short_names_and_categories_reach_the_instance_crd() {
    let mut rgd = webapp();
    assert!(
        instance_crd(&rgd).unwrap()["spec"]["names"]
            .get("shortNames")
            .is_none()
    );
    rgd["spec"]["schema"]["shortNames"] = json!(["wa"]);
    rgd["spec"]["schema"]["categories"] = json!(["all", "apps"]);
    let names = &instance_crd(&rgd).unwrap()["spec"]["names"];
    assert_eq!(names["shortNames"], json!(["wa"]));
    assert_eq!(names["categories"], json!(["all", "apps"]));
    let mut lower = webapp();
    lower["spec"]["schema"]["kind"] = json!("webApp");
    assert_eq!(
        instance_crd(&lower).unwrap_err().to_string(),
        "spec.schema.kind: \"webApp\" is not a valid kind (UpperCamelCase)"
    );
    rgd["spec"]["schema"]["shortNames"] = json!("wa");
    assert_eq!(
        instance_crd(&rgd).unwrap_err().to_string(),
        "spec.schema.shortNames: must be a list of strings, got \"wa\""
    );
}

#[test]
fn a_bad_rgd_is_named() {
    let mut rgd = webapp();
    rgd["spec"]["resources"][1]["template"]["metadata"]["name"] = json!("${schema.spec.}");
    let e = translate(&rgd, &plurals).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("resource \"deployment\": template.metadata.name: schema.spec.:"),
        "{e}"
    );
    let e = translate(&webapp(), &|_, _| None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "resource \"deployment\": apps/v1 Deployment is not served by the API server"
    );
}

#[test]
fn plurals_follow_english() {
    assert_eq!(plural("WebApp"), "webapps");
    assert_eq!(plural("Policy"), "policies");
    assert_eq!(plural("Gateway"), "gateways");
    assert_eq!(plural("Class"), "classes");
}

#[test]
fn a_spec_field_the_schema_lacks_is_refused_at_creation() {
    let mut rgd = webapp();
    rgd["spec"]["resources"][1]["template"]["spec"] = json!({"replicas": "${schema.spec.replica}"});
    let e = translate(&rgd, &plurals).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("resource \"deployment\": template.spec.replicas: schema.spec.replica: "),
        "{e}"
    );
}

#[test]
fn an_external_reference_is_read_through_the_customize_hook() {
    let mut rgd = webapp();
    let external = json!({"id": "shared", "externalRef": {"apiVersion": "v1",
        "kind": "ConfigMap", "metadata": {"name": "shared"}}});
    rgd["spec"]["resources"]
        .as_array_mut()
        .unwrap()
        .push(external);
    let cc = translate(&rgd, &plurals).unwrap().controller;
    let hooks = &cc["spec"]["hooks"];
    assert_eq!(hooks["sync"], hooks["customize"]);
    assert_eq!(hooks["sync"]["version"], "v2");
    let refs = hooks["sync"]["cel"]["resourceGraph"]["resources"]
        .as_array()
        .unwrap();
    let shared = refs.iter().find(|r| r["id"] == "shared").unwrap();
    assert_eq!(shared["externalRef"]["resource"], "configmaps");
    let children = cc["spec"]["childResources"].as_array().unwrap();
    assert!(
        children.iter().all(|c| c["resource"] != "configmaps"),
        "an external reference is never a child: {children:?}"
    );
    // without external references nothing changes: one sync hook, no version
    let plain = translate(&webapp(), &plurals).unwrap().controller;
    assert_eq!(
        plain["spec"]["hooks"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["sync"]
    );
    assert!(plain["spec"]["hooks"]["sync"].get("version").is_none());
}

#[test]
fn translate_checked_reads_the_childrens_fields_from_their_schemas() {
    let deployment = Schema::new(json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
        "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
        "status": {"type": "object", "properties": {"availableReplicas": {"type": "integer"}}}}}));
    let schema_of = |_: &str, kind: &str| (kind == "Deployment").then(|| deployment.clone());
    translate_checked(&webapp(), &plurals, &schema_of).unwrap();
    let mut rgd = webapp();
    rgd["spec"]["schema"]["status"]["availableReplicas"] =
        json!("${deployment.status.availableReplica}");
    // without the children's schemas the typo passes (read as dyn) until an instance syncs
    translate(&rgd, &plurals).unwrap();
    let e = translate_checked(&rgd, &plurals, &schema_of).unwrap_err();
    assert_eq!(
        e.to_string(),
        "status.availableReplicas: deployment.status.availableReplica: deployment.status has no \
         field \"availableReplica\" (it has: availableReplicas)"
    );
    let mut rgd = webapp();
    rgd["spec"]["resources"][1]["template"]["spec"] = json!({"replicas": "${schema.spec.name}"});
    let e = translate_checked(&rgd, &plurals, &schema_of).unwrap_err();
    assert_eq!(
        e.to_string(),
        "resource \"deployment\": template.spec.replicas: schema.spec.name: returns string, but \
         the field must be int"
    );
}
