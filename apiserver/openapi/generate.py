#!/usr/bin/env python3
"""Generates the OpenAPI v3 documents kmeta-apiserver serves for its built-in kinds.

Usage: python3 apiserver/openapi/generate.py [--check] [--source DIR]

The source is the Rust source of the `k8s-openapi` crate (crates.io) that the workspace depends
on, module `v1_37` (Kubernetes 1.37): by default found with `cargo metadata`, else given as
`--source <crate dir>/src/v1_37`. From each type's file the script reads

- the `JsonSchema` impl's `json_schema!({...})` literal: the schema (descriptions, types,
  formats, required), with `__gen.subschema_for::<crate::...::T>()` turned into a `$ref` to T's
  OpenAPI name (the impl's `schema_name()`), wrapped in `allOf` when the field adds a
  description, as kube-apiserver does;
- the `DeepMerge` impl: `merge_strategies::list::atomic|set|map` become
  `x-kubernetes-list-type` (and `x-kubernetes-list-map-keys`, the key fields' JSON names read
  from the item type's `Deserialize` impl), `merge_strategies::map::atomic` becomes
  `x-kubernetes-map-type: atomic` (a granular map is the default and is left unmarked);
- the `Resource` impl: `x-kubernetes-group-version-kind`.

The crate does not keep `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key`: where a list
has both list-map keys and a patch merge key it keeps only the patch merge key, and it does not
tell an unmarked list from an `atomic` one nor keep `default`s. `CORRECTIONS` below restores the
list-map keys and key defaults kube-apiserver 1.37 publishes for the lists that lose them, each
with its reason. See `apiserver/openapi/README.md`.

Writes `apiserver/openapi/v3/<group-version file>` (`api__v1_openapi.json`,
`apis__apps__v1_openapi.json`, ...), each holding the `components.schemas` the group-version's
served kinds reach, one schema a line. With `--check`, writes nothing and exits 1 when a
committed file differs from what it would write.
"""

import glob
import json
import os
import re
import subprocess
import sys

CRATE = "k8s-openapi"
CRATE_VERSION = "0.29.0"
MODULE = "v1_37"

# The built-in kinds of `builtin_resources` (apiserver/src/registry.rs) by group-version file;
# `apiserver/src/http/openapi.rs` checks every served built-in kind has its schema.
KINDS = {
    "api__v1_openapi.json": ("", "v1", [
        "Namespace", "ConfigMap", "Secret", "Service", "ServiceAccount", "Pod", "Event",
        "Endpoints", "PersistentVolumeClaim", "Node", "ResourceQuota",
    ]),
    "apis__apps__v1_openapi.json": ("apps", "v1", [
        "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ControllerRevision",
    ]),
    "apis__batch__v1_openapi.json": ("batch", "v1", ["Job", "CronJob"]),
    "apis__discovery.k8s.io__v1_openapi.json": ("discovery.k8s.io", "v1", ["EndpointSlice"]),
    "apis__events.k8s.io__v1_openapi.json": ("events.k8s.io", "v1", ["Event"]),
    "apis__coordination.k8s.io__v1_openapi.json": ("coordination.k8s.io", "v1", ["Lease"]),
    "apis__admissionregistration.k8s.io__v1_openapi.json": (
        "admissionregistration.k8s.io", "v1",
        ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
         "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]),
    "apis__policy__v1_openapi.json": ("policy", "v1", ["PodDisruptionBudget"]),
    "apis__networking.k8s.io__v1_openapi.json": ("networking.k8s.io", "v1", ["Ingress", "NetworkPolicy"]),
    "apis__rbac.authorization.k8s.io__v1_openapi.json": ("rbac.authorization.k8s.io", "v1", [
        "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
    ]),
}

# Where the crate's encoding loses what kube-apiserver 1.37 publishes:
# (schema, property) -> extensions to set on the property, and (schema, property) -> default.
# The crate keeps a list's patch merge key as its only map key; Kubernetes' Go types mark these
# lists `+listType=map` with the keys below (`+listMapKey`), and default the `protocol` key.
# StatefulSet's `volumeClaimTemplates` is `+listType=atomic` in Kubernetes; the crate merges it
# by `metadata.name`, which a list-map key cannot express (keys are top-level scalars).
CORRECTIONS = {
    ("io.k8s.api.core.v1.Container", "ports"): {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
    },
    ("io.k8s.api.core.v1.EphemeralContainer", "ports"): {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
    },
    ("io.k8s.api.core.v1.ServiceSpec", "ports"): {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["port", "protocol"],
    },
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints"): {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["topologyKey", "whenUnsatisfiable"],
    },
    ("io.k8s.api.apps.v1.StatefulSetSpec", "volumeClaimTemplates"): {
        "x-kubernetes-list-type": "atomic",
    },
}
DEFAULTS = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
}

HERE = os.path.dirname(os.path.abspath(__file__))


class SourceError(Exception):
    pass


def crate_source():
    """`<k8s-openapi dir>/src/v1_37`: from `cargo metadata` (offline first), else from cargo's
    registry cache (`$CARGO_HOME/registry/src/*/k8s-openapi-<version>`)."""
    errors = []
    for offline in (["--offline"], []):
        try:
            out = subprocess.run(
                ["cargo", "metadata", "--format-version", "1", *offline],
                cwd=HERE, capture_output=True, text=True, check=False)
        except OSError as e:
            errors.append(f"cargo: {e}")
            break
        if out.returncode != 0:
            errors.append(out.stderr.strip()[-300:])
            continue
        for package in json.loads(out.stdout)["packages"]:
            if package["name"] == CRATE:
                if package["version"] != CRATE_VERSION:
                    raise SourceError(
                        f"the workspace uses {CRATE} {package['version']}, this script reads "
                        f"{CRATE_VERSION}: update CRATE_VERSION and MODULE and regenerate")
                return os.path.join(os.path.dirname(package["manifest_path"]), "src", MODULE)
        raise SourceError(f"{CRATE} is not a dependency of the workspace")
    cargo_home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    found = sorted(glob.glob(os.path.join(
        cargo_home, "registry", "src", "*", f"{CRATE}-{CRATE_VERSION}", "src", MODULE)))
    if found:
        return found[0]
    raise SourceError("cargo metadata failed and no k8s-openapi source in cargo's registry: "
                      + " / ".join(errors))


def read_string(text, i):
    """The Rust string literal starting at text[i] (a quote): (its JSON text, index after)."""
    out = ['"']
    i += 1
    while True:
        c = text[i]
        if c == "\\":
            nxt = text[i + 1]
            if nxt == "u" and text[i + 2] == "{":
                end = text.index("}", i)
                out.append("\\u%04x" % int(text[i + 3:end], 16))
                i = end + 1
                continue
            if nxt == "'":
                out.append("'")
            elif nxt == "0":
                out.append("\\u0000")
            else:
                out.append(c + nxt)
            i += 2
            continue
        out.append(c)
        i += 1
        if c == '"':
            return "".join(out), i


def balanced(text, i, open_c, close_c):
    """Index after the bracket closing the one at text[i], skipping string literals."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            _, i = read_string(text, i)
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise SourceError(f"unbalanced {open_c}")


SUBSCHEMA = re.compile(r"subschema_for::<([A-Za-z0-9_:]+)>\(\)")
INSERT = re.compile(r'insert\("([^"]+)"\.into\(\), ')


def expression(expr, names):
    """A `(__gen.subschema_for::<T>())` expression, with its inserted fields, as a schema."""
    m = SUBSCHEMA.search(expr)
    if not m:
        raise SourceError(f"an expression that is not a subschema: {expr[:80]}")
    if m.group(1) not in names:
        raise SourceError(f"no schema for {m.group(1)}")
    ref = {"$ref": "#/components/schemas/" + names[m.group(1)]}
    extra = {}
    for ins in INSERT.finditer(expr):
        value, _ = read_string(expr, ins.end())
        extra[ins.group(1)] = json.loads(value)
    if not extra:
        return ref
    return {"allOf": [ref], **extra}


def literal(text, names):
    """The `json_schema!({...})` literal starting at text[0] (`{`) as a Python value."""
    out = []
    i = 0
    end = balanced(text, 0, "{", "}")
    while i < end:
        c = text[i]
        if c == '"':
            s, i = read_string(text, i)
            out.append(s)
        elif c == "(":
            j = balanced(text, i, "(", ")")
            out.append(json.dumps(expression(text[i:j], names)))
            i = j
        elif c == ",":
            k = i + 1
            while text[k].isspace():
                k += 1
            if text[k] not in "}]":
                out.append(",")
            i += 1
        else:
            out.append(c)
            i += 1
    return json.loads("".join(out))


def module_path(source, path):
    rel = os.path.relpath(os.path.dirname(path), source)
    return "crate::" + rel.replace(os.sep, "::")


def index(source):
    """Every type with a schema: {rust path: file text} and {rust path: OpenAPI name}."""
    texts, names = {}, {}
    for root, _, files in os.walk(source):
        for f in sorted(files):
            if not f.endswith(".rs") or f == "mod.rs":
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            m = re.search(r"impl crate::schemars::JsonSchema for (\w+) \{\s*fn schema_name\(\)"
                          r"[^{]*\{\s*\"([^\"]+)\"", text)
            if not m:
                continue
            rust = module_path(source, path) + "::" + m.group(1)
            texts[rust] = text
            names[rust] = m.group(2)
    if not names:
        raise SourceError(f"no JsonSchema impls under {source}")
    return texts, names


def json_fields(text):
    """Rust field name -> JSON name, from the Deserialize impl."""
    return {rust: js for js, rust in re.findall(r'"([^"]+)" => Field::Key_(\w+),', text)}


def merge_markers(text, fields):
    """JSON field name -> the extensions its DeepMerge strategy stands for."""
    out = {}
    body = re.search(r"impl crate::DeepMerge for \w+ \{(.*?)\n\}\n", text, re.S)
    if not body:
        return out
    body = body.group(1)
    for kind, field in re.findall(
            r"merge_strategies::(list::atomic|list::set|map::atomic)\(&mut self\.(\w+),", body):
        out[fields[field]] = {
            "list::atomic": {"x-kubernetes-list-type": "atomic"},
            "list::set": {"x-kubernetes-list-type": "set"},
            "map::atomic": {"x-kubernetes-map-type": "atomic"},
        }[kind]
    for field, keys in re.findall(
            r"merge_strategies::list::map\(\s*&mut self\.(\w+),\s*other\.\w+,\s*&\[(.*?)\],",
            body, re.S):
        rust_keys = re.findall(r"lhs\.([\w.]+) == rhs\.", keys)
        out[fields[field]] = {"x-kubernetes-list-type": "map", "_keys": rust_keys}
    for field in re.findall(
            r"merge_strategies::map::granular\(&mut self\.(\w+), other\.\w+, \|current_item, "
            r"other_item\| \{\s*crate::merge_strategies::list::atomic\(current_item", body):
        out[fields[field]] = {"_values": {"x-kubernetes-list-type": "atomic"}}
    return out


def gvk(text):
    consts = dict(re.findall(r"const (GROUP|KIND|VERSION): &'static str = \"([^\"]*)\";", text))
    if "KIND" not in consts:
        return None
    return [{"group": consts["GROUP"], "kind": consts["KIND"], "version": consts["VERSION"]}]


def item_type_name(prop):
    items = prop.get("items", {})
    ref = items.get("$ref") or next(
        (s["$ref"] for s in items.get("allOf", []) if "$ref" in s), None)
    return ref.rsplit("/", 1)[-1] if ref else None


def schema_of(rust, texts, names, by_name):
    text = texts[rust]
    m = re.search(r"crate::schemars::json_schema!\(", text)
    if not m:
        raise SourceError(f"{rust}: no json_schema! literal")
    schema = literal(text[m.end():], names)
    name = names[rust]
    props = schema.get("properties", {})
    for field, markers in merge_markers(text, json_fields(text)).items():
        prop = props.get(field)
        if prop is None:
            raise SourceError(f"{name}: DeepMerge names {field}, which the schema lacks")
        keys = markers.pop("_keys", None)
        values = markers.pop("_values", None)
        if values and isinstance(prop.get("additionalProperties"), dict):
            prop["additionalProperties"].update(values)
        if keys is not None:
            item = item_type_name(prop)
            if item is None:
                raise SourceError(f"{name}.{field}: a list map without an item type")
            item_fields = json_fields(texts[by_name[item]])
            if any("." in k for k in keys):
                markers = {}  # not a list-map key; see CORRECTIONS
            else:
                markers["x-kubernetes-list-map-keys"] = [item_fields[k] for k in keys]
        prop.update(markers)
    for (schema_name, field), ext in CORRECTIONS.items():
        if schema_name == name:
            props[field].pop("x-kubernetes-list-map-keys", None)
            props[field].update(ext)
    for (schema_name, field), default in DEFAULTS.items():
        if schema_name == name:
            props[field]["default"] = default
    kinds = gvk(text)
    if kinds:
        schema["x-kubernetes-group-version-kind"] = kinds
    return schema


REF = re.compile(r'"#/components/schemas/([^"]+)"')


def documents(source):
    texts, names = index(source)
    by_name = {n: r for r, n in names.items()}
    cache = {}

    def schema(name):
        if name not in cache:
            cache[name] = schema_of(by_name[name], texts, names, by_name)
        return cache[name]

    out = {}
    for file, (group, version, kinds) in KINDS.items():
        roots = []
        for kind in kinds:
            found = [n for r, n in names.items()
                     if gvk(texts[r]) == [{"group": group, "kind": kind, "version": version}]]
            if len(found) != 1:
                raise SourceError(f"{file}: {len(found)} schemas for {kind}")
            roots.extend(found)
        seen, todo = set(), list(roots)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo.extend(REF.findall(json.dumps(schema(name))))
        lines = [json.dumps(n) + ":" + json.dumps(schema(n), sort_keys=True,
                                                   separators=(",", ":"))
                 for n in sorted(seen)]
        out[file] = '{"components":{"schemas":{\n' + ",\n".join(lines) + "\n}}}\n"
    return out


def main(argv):
    check = "--check" in argv
    source = None
    if "--source" in argv:
        source = argv[argv.index("--source") + 1]
    try:
        source = source or crate_source()
        if not os.path.isdir(source):
            raise SourceError(f"{source} is not a directory")
        docs = documents(source)
    except SourceError as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    out_dir = os.path.join(HERE, "v3")
    stale = []
    for file, text in docs.items():
        path = os.path.join(out_dir, file)
        if check:
            try:
                with open(path, encoding="utf-8") as fh:
                    if fh.read() != text:
                        stale.append(file)
            except FileNotFoundError:
                stale.append(file)
            continue
        os.makedirs(out_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"{file}: {text.count(chr(10)) - 2} schemas")
    if check:
        extra = sorted(set(os.listdir(out_dir)) - set(docs)) if os.path.isdir(out_dir) else []
        if stale or extra:
            print("out of date (run python3 apiserver/openapi/generate.py): "
                  + ", ".join(stale + extra), file=sys.stderr)
            return 1
        print(f"{len(docs)} documents up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
