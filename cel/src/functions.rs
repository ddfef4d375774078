//! The functions each [`crate::Scope`] declares, by name, for the type checker
//! ([`crate::types`]): a call to any other name is refused before the expression runs, as
//! cel-go's checker refuses an undeclared function (kro: `uses unknown functions`), instead of
//! failing only when it is evaluated. Also cel-go's `dyn` and `bool` conversions, which the
//! `cel` crate lacks, registered in every scope.
//!
//! The lists follow what the crates register (the `cel` crate 0.13's `Context::default()` with
//! `regex` and `chrono`, kube-cel 0.8's `register_all` with `full`, [`crate::kro`]'s
//! `register`); `tests::every_declared_function_is_registered` fails on a name a scope does not
//! register. A function a newer crate adds and these lists lack is refused by the checker (a
//! clear error, never a wait) until it is listed here.

use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value};

/// The `cel` crate's own functions (`Context::default()`, features `regex` and `chrono`).
const CEL: &[&str] = &[
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
    "value",
    "hasValue",
    "or",
    "orValue",
    "matches",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    // registered by this module
    "dyn",
    "bool",
];

/// The Kubernetes CEL libraries (kube-cel's `register_all`, feature `full`).
const KUBERNETES: &[&str] = &[
    "add",
    "asApproximateFloat",
    "asInteger",
    "base64.decode",
    "base64.encode",
    "charAt",
    "cidr",
    "compareTo",
    "containsCIDR",
    "containsIP",
    "distinct",
    "family",
    "find",
    "findAll",
    "first",
    "flatten",
    "format",
    "format.byte",
    "format.date",
    "format.datetime",
    "format.dns1035Label",
    "format.dns1035LabelPrefix",
    "format.dns1123Label",
    "format.dns1123LabelPrefix",
    "format.dns1123Subdomain",
    "format.dns1123SubdomainPrefix",
    "format.labelValue",
    "format.named",
    "format.qualifiedName",
    "format.uri",
    "format.uuid",
    "getEscapedPath",
    "getHost",
    "getHostname",
    "getPort",
    "getQuery",
    "getScheme",
    "indexOf",
    "ip",
    "ip.isCanonical",
    "isCIDR",
    "isCIDRv4",
    "isCIDRv6",
    "isGlobalUnicast",
    "isGreaterThan",
    "isIP",
    "isIPv4",
    "isIPv6",
    "isInteger",
    "isLessThan",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isLoopback",
    "isQuantity",
    "isSemver",
    "isSorted",
    "isURL",
    "isUnspecified",
    "join",
    "jsonpatch.escapeKey",
    "last",
    "lastIndexOf",
    "lists.range",
    "lowerAscii",
    "major",
    "masked",
    "math.abs",
    "math.bitAnd",
    "math.bitNot",
    "math.bitOr",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    "math.bitXor",
    "math.ceil",
    "math.floor",
    "math.greatest",
    "math.isFinite",
    "math.isInf",
    "math.isNaN",
    "math.least",
    "math.round",
    "math.sign",
    "math.sqrt",
    "math.trunc",
    "minor",
    "patch",
    "prefixLength",
    "quantity",
    "replace",
    "reverse",
    "semver",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "sign",
    "slice",
    "sort",
    "split",
    "strings.quote",
    "sub",
    "substring",
    "sum",
    "trim",
    "upperAscii",
    "url",
    "validate",
];

/// kro's own libraries and the cel-go extensions kro enables ([`crate::kro`]), in
/// [`crate::Scope::kro`] only.
const KRO: &[&str] = &[
    "hash.fnv64a",
    "hash.sha256",
    "hash.md5",
    "json.unmarshal",
    "json.marshal",
    "random.seededString",
    "random.seededInt",
    "lists.setAtIndex",
    "lists.insertAtIndex",
    "lists.removeAtIndex",
    "merge",
    "deepMerge",
    "omit",
    "cel.bind",
    "runtime.newCondition",
    "runtime.condition",
    "all",
    "exists",
    "existsOne",
    "transformList",
    "transformMap",
    "transformMapEntry",
];

/// Functions of cel-go's environment (kro's, Kubernetes') that kmeta's evaluator does not
/// have: refused with a message of their own, not as misspelt.
const NOT_IN_KMETA: &[&str] = &["type", "sortBy", "optMap", "optFlatMap"];

/// Which functions an expression may call: those of a [`crate::Scope::new`] (the Kubernetes
/// environment) or of a [`crate::Scope::kro`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Functions {
    /// The Kubernetes environment: the `cel` crate's and the Kubernetes libraries.
    #[default]
    Kubernetes,
    /// kro's: the Kubernetes environment and kro's libraries.
    Kro,
}

impl Functions {
    /// Whether a call to `name` (qualified, `math.greatest`) finds a function.
    pub fn declares(self, name: &str) -> bool {
        CEL.contains(&name)
            || KUBERNETES.contains(&name)
            || (self == Functions::Kro && KRO.contains(&name))
    }

    /// Whether `name` is a function cel-go has that kmeta's evaluator lacks.
    pub fn lacks(name: &str) -> bool {
        NOT_IN_KMETA.contains(&name)
    }
}

/// Registers the cel-go standard functions the `cel` crate lacks: `dyn` (the value as it is)
/// and `bool` (of a bool, or of a string as Go's `strconv.ParseBool` reads it).
pub(crate) fn register(ctx: &mut Context<'_>) {
    ctx.add_function("dyn", |v: Value| -> ResolveResult { Ok(v) });
    ctx.add_function("bool", to_bool);
}

fn to_bool(v: Value) -> ResolveResult {
    match &v {
        Value::Bool(b) => Ok(Value::Bool(*b)),
        Value::String(s) => match s.as_str() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(Value::Bool(false)),
            other => Err(ExecutionError::function_error(
                "bool",
                format!("type conversion error from 'string' to 'bool': {other:?}"),
            )),
        },
        other => Err(ExecutionError::function_error(
            "bool",
            format!("no such overload: bool({:?})", other.type_of()),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{Bindings, CelError, Expression, Scope};
    use serde_json::json;

    /// Whether evaluating a call of `name` in `scope` finds the function (whatever the call
    /// then does with no arguments, a panic included).
    fn registered(scope: &Scope, name: &str) -> bool {
        let source = format!("{name}()");
        let e = Expression::compile(&source).unwrap();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.evaluate_in(scope)));
        let undeclared = |reason: &str| {
            let last = name.rsplit('.').next().unwrap_or(name);
            let first = name.split('.').next().unwrap_or(name);
            reason == format!("Undeclared reference to '{name}'")
                || reason == format!("Undeclared reference to '{last}'")
                || reason == format!("Undeclared reference to '{first}'")
        };
        !matches!(out, Ok(Err(CelError::Evaluate { ref reason, .. })) if undeclared(reason))
    }

    #[test]
    fn every_declared_function_is_registered() {
        let kube = Scope::new(&Bindings::default());
        let kro = Scope::kro(&Bindings::default());
        for name in CEL.iter().chain(KUBERNETES) {
            assert!(registered(&kube, name), "{name} in Scope::new");
            assert!(registered(&kro, name), "{name} in Scope::kro");
        }
        for name in KRO {
            assert!(registered(&kro, name), "{name} in Scope::kro");
            assert!(!Functions::Kubernetes.declares(name), "{name}");
        }
        for name in ["lowerAsci", "random.seedString", "nope"]
            .iter()
            .chain(NOT_IN_KMETA)
        {
            assert!(!registered(&kro, name), "{name} is registered: list it");
            assert!(!Functions::Kro.declares(name), "{name}");
        }
    }

    #[test]
    fn dyn_and_bool_convert_as_cel_go() {
        let scope = Scope::new(&Bindings::default().with("s", json!("True")));
        let eval = |src: &str| Expression::compile(src).unwrap().evaluate_in(&scope);
        assert_eq!(eval("dyn(1) + 1").unwrap(), json!(2));
        assert_eq!(eval("bool(s) && bool('0') == false").unwrap(), json!(true));
        assert_eq!(eval("bool(true)").unwrap(), json!(true));
        assert!(
            eval("bool('yes')")
                .unwrap_err()
                .to_string()
                .contains("\"yes\"")
        );
    }
}
