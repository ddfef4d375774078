//! A static type checker for the CEL that kro's ResourceGraphDefinitions write: the type of an
//! expression from the types of its variables, which come from OpenAPI schemas ([`Schema`]),
//! so a field that does not exist or an operator applied to the wrong types is found before
//! the expression is evaluated. The `cel` crate has no checker (cel-go's is what kro uses);
//! this one covers the subset kro's examples use with cel-go's typing rules (so it refuses a
//! few expressions the evaluator would run, as `c ? 1 : 2.0`), and says `dyn` (anything)
//! wherever it is not sure:
//!
//! - field selection (`a.b`, `has(a.b)`) on typed objects: the field must be in the schema
//!   (`properties`, else `additionalProperties` or `x-kubernetes-preserve-unknown-fields`);
//! - `+ - * / %` on the same numeric type, `+` on strings, bytes and lists; comparisons of the
//!   same kind (numbers with numbers); `== !=` of compatible types; `&& || !` and the condition
//!   of `?:` on bools, its branches of compatible types; `[]` on lists, maps and objects; `in`;
//! - comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`, two-variable ones), their
//!   variables typed from the list or map they range over; `cel.bind`; list and map literals;
//! - `size`, the conversions (`string`, `int`, `uint`, `double`, `bool`, `bytes`, `dyn`) and
//!   the string functions (`contains`, `startsWith`, `endsWith`, `matches`, `lowerAscii`,
//!   `upperAscii`, `trim`, `split`, `join`, `indexOf`, ...) by their result type.
//!
//! Not checked: the signatures of other functions (their arguments are checked as
//! expressions, their result is `dyn`), map keys, the optional syntax, timestamps and durations
//! (`dyn`), OpenAPI `number` fields (`dyn`: a JSON number is an `int` or a `double` when
//! evaluated), `x-kubernetes-int-or-string` (`dyn`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_cel::cel::IdedExpr;
use kube_cel::cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, LiteralValue};
use serde_json::Value;

use crate::{Expression, Functions};

/// How many `$ref`/`allOf` hops a schema is followed through before it counts as `dyn`.
const MAX_HOPS: usize = 32;

/// An OpenAPI schema inside its document (so `$ref`s to `#/components/schemas/…` resolve).
#[derive(Debug, Clone)]
pub struct Schema {
    doc: Arc<Value>,
    pointer: String,
}

impl PartialEq for Schema {
    fn eq(&self, other: &Schema) -> bool {
        Arc::ptr_eq(&self.doc, &other.doc) && self.pointer == other.pointer
    }
}

/// `s` as one JSON-pointer token.
fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

impl Schema {
    /// A schema on its own (a CRD version's `openAPIV3Schema`).
    pub fn new(schema: Value) -> Schema {
        Schema {
            doc: Arc::new(schema),
            pointer: String::new(),
        }
    }

    /// The schema of `kind` of `api_version` in an API server's OpenAPI v3 document of that
    /// group-version, found by its `x-kubernetes-group-version-kind`; `None` when it has none.
    pub fn of_kind(doc: Arc<Value>, api_version: &str, kind: &str) -> Option<Schema> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let schemas = doc.pointer("/components/schemas")?.as_object()?;
        let name = schemas.iter().find_map(|(name, s)| {
            let gvks = s.get("x-kubernetes-group-version-kind")?.as_array()?;
            gvks.iter()
                .any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
                .then(|| name.clone())
        })?;
        let pointer = format!("/components/schemas/{}", escape(&name));
        Some(Schema { doc, pointer })
    }

    fn node(&self) -> &Value {
        self.doc.pointer(&self.pointer).unwrap_or(&Value::Null)
    }

    fn at(&self, tail: &str) -> Schema {
        Schema {
            doc: self.doc.clone(),
            pointer: format!("{}{tail}", self.pointer),
        }
    }

    /// The schema with its `$ref`s (and a lone `allOf`) followed.
    fn resolved(&self) -> Schema {
        let mut s = self.clone();
        for _ in 0..MAX_HOPS {
            let n = s.node();
            if let Some(r) = n.get("$ref").and_then(Value::as_str) {
                s.pointer = r.strip_prefix('#').unwrap_or(r).to_owned();
            } else if n.get("allOf").and_then(Value::as_array).map(Vec::len) == Some(1)
                && n.get("properties").is_none()
                && n.get("type").is_none()
            {
                s.pointer.push_str("/allOf/0");
            } else {
                return s;
            }
        }
        s
    }

    /// The CEL type of values of this schema.
    pub fn to_type(&self) -> Type {
        let s = self.resolved();
        let n = s.node();
        if n.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return Type::Dyn;
        }
        match n.get("type").and_then(Value::as_str) {
            Some("string") => Type::String,
            Some("integer") => Type::Int,
            Some("boolean") => Type::Bool,
            Some("array") if n.get("items").is_some() => {
                Type::List(Box::new(s.at("/items").to_type()))
            }
            Some("array") => Type::List(Box::new(Type::Dyn)),
            Some("object") | None => s.object_type(n),
            Some(_) => Type::Dyn,
        }
    }

    fn object_type(&self, n: &Value) -> Type {
        let has_props = n
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        match n.get("additionalProperties") {
            _ if has_props => Type::Object(self.clone()),
            Some(Value::Object(_)) => {
                Type::Map(Box::new(self.at("/additionalProperties").to_type()))
            }
            Some(Value::Bool(true)) => Type::Map(Box::new(Type::Dyn)),
            _ => Type::Dyn,
        }
    }

    /// The type of field `name`, or the fields there are.
    fn field(&self, name: &str) -> Result<Type, Vec<String>> {
        let s = self.resolved();
        let n = s.node();
        let props = n.get("properties").and_then(Value::as_object);
        if props.is_some_and(|p| p.contains_key(name)) {
            return Ok(s.at(&format!("/properties/{}", escape(name))).to_type());
        }
        if n.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return Ok(Type::Dyn);
        }
        match n.get("additionalProperties") {
            Some(Value::Object(_)) => Ok(s.at("/additionalProperties").to_type()),
            Some(Value::Bool(true)) => Ok(Type::Dyn),
            _ => {
                let mut known: Vec<String> = props
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.clone())
                    .collect();
                known.sort();
                Err(known)
            }
        }
    }
}

/// A CEL type as the checker knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    /// Anything: not known, or not checked.
    Dyn,
    /// `null`.
    Null,
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `uint`.
    Uint,
    /// `double`.
    Double,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// A list of the type.
    List(Box<Type>),
    /// A map from strings to the type.
    Map(Box<Type>),
    /// An object with the fields its schema declares.
    Object(Schema),
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Type::Dyn => f.write_str("dyn"),
            Type::Null => f.write_str("null"),
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::List(t) => write!(f, "list({t})"),
            Type::Map(t) => write!(f, "map(string, {t})"),
            Type::Object(_) => f.write_str("object"),
        }
    }
}

impl Type {
    /// Whether a value of type `got` may be placed where this type is wanted (a field of a
    /// template): `dyn` and `null` anywhere, objects and maps for each other, lists by their
    /// items, `int` and `uint` for each other; otherwise the same type.
    pub fn accepts(&self, got: &Type) -> bool {
        match (self, got) {
            (Type::Dyn, _) | (_, Type::Dyn) | (_, Type::Null) => true,
            (Type::List(a), Type::List(b)) => a.accepts(b),
            (Type::Map(_) | Type::Object(_), Type::Map(_) | Type::Object(_)) => true,
            (Type::Int | Type::Uint, Type::Int | Type::Uint) => true,
            (a, b) => a == b,
        }
    }

    /// The type of field `name` of this type (`dyn` when not known).
    pub fn field(&self, name: &str) -> Type {
        match self {
            Type::Object(s) => s.field(name).unwrap_or(Type::Dyn),
            Type::Map(v) => (**v).clone(),
            _ => Type::Dyn,
        }
    }

    /// The type of the items of this list type (`dyn` when not known).
    pub fn items(&self) -> Type {
        match self {
            Type::List(t) => (**t).clone(),
            _ => Type::Dyn,
        }
    }

    fn is_number(&self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Double)
    }
}

/// The type both `a` and `b` are, when they can be one: `None` for two different scalar types.
fn join(a: &Type, b: &Type) -> Option<Type> {
    Some(match (a, b) {
        (Type::Dyn, _) | (_, Type::Dyn) => Type::Dyn,
        (Type::Null, x) | (x, Type::Null) => x.clone(),
        (x, y) if x == y => x.clone(),
        (Type::List(x), Type::List(y)) => Type::List(Box::new(join(x, y)?)),
        (Type::Map(x), Type::Map(y)) => Type::Map(Box::new(join(x, y)?)),
        (Type::Map(_) | Type::Object(_), Type::Map(_) | Type::Object(_)) => Type::Dyn,
        _ => return None,
    })
}

/// The more precise of two element types of lists concatenated (`[]` starts as `list(dyn)`).
fn concat(a: &Type, b: &Type) -> Option<Type> {
    match (a, b) {
        (Type::Dyn, x) | (x, Type::Dyn) => Some(x.clone()),
        _ => join(a, b),
    }
}

/// Why an expression does not type-check.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TypeError {
    /// A field the object's schema does not have.
    #[error("{path} has no field {field:?} (it has: {known})")]
    NoField {
        /// The object (`deployment.status`).
        path: String,
        /// The field.
        field: String,
        /// The fields it has, comma-separated.
        known: String,
    },
    /// A value that has no fields.
    #[error("{path} is a {ty}, it has no field {field:?}")]
    NotAnObject {
        /// The value.
        path: String,
        /// Its type.
        ty: String,
        /// The field.
        field: String,
    },
    /// A variable that is not declared.
    #[error("undeclared reference to {name:?} (declared: {declared})")]
    Undeclared {
        /// The name.
        name: String,
        /// The variables there are, comma-separated.
        declared: String,
    },
    /// A function no scope declares (misspelt, or from another environment).
    #[error("undeclared reference to function {name:?}")]
    UnknownFunction {
        /// The function, qualified as written (`random.seededString`).
        name: String,
    },
    /// A function of cel-go's environment that kmeta's evaluator does not have.
    #[error("function {name:?} is not supported by kmeta's CEL evaluator")]
    NotSupported {
        /// The function.
        name: String,
    },
    /// An operator or function applied to types it has no overload for.
    #[error("found no matching overload for {function:?} applied to ({args})")]
    NoOverload {
        /// The operator or function (`_+_`, `size`).
        function: String,
        /// The types of its operands, comma-separated.
        args: String,
    },
}

/// The types of the variables an expression reads, and the functions it may call.
#[derive(Debug, Clone, Default)]
pub struct TypeEnv {
    vars: BTreeMap<String, Type>,
    functions: Functions,
}

impl TypeEnv {
    /// The environment of kro's resource graphs ([`crate::Scope::kro`]'s functions), no
    /// variables yet.
    pub fn kro() -> TypeEnv {
        TypeEnv {
            vars: BTreeMap::new(),
            functions: Functions::Kro,
        }
    }

    /// Declares `name` of type `ty`.
    pub fn with(mut self, name: &str, ty: Type) -> TypeEnv {
        self.vars.insert(name.to_owned(), ty);
        self
    }

    /// Declares (or redeclares) `name` of type `ty`.
    pub fn set(&mut self, name: &str, ty: Type) {
        self.vars.insert(name.to_owned(), ty);
    }

    /// Whether variable `name` is declared.
    pub fn has(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }
}

impl Expression {
    /// The type of the expression's value when its variables have the types of `env`, or why
    /// it cannot be evaluated (module docs: what is and is not checked).
    pub fn check(&self, env: &TypeEnv) -> Result<Type, TypeError> {
        Checker {
            env,
            locals: Vec::new(),
        }
        .ty(&self.program)
    }
}

/// CEL's type names, values of type `type` (read as `dyn`).
const TYPE_NAMES: [&str; 11] = [
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

struct Checker<'e> {
    env: &'e TypeEnv,
    /// Comprehension variables, innermost last.
    locals: Vec<(String, Type)>,
}

fn no_overload(function: &str, args: &[&Type]) -> TypeError {
    let args: Vec<String> = args.iter().map(|t| t.to_string()).collect();
    TypeError::NoOverload {
        function: function.to_owned(),
        args: args.join(", "),
    }
}

fn literal(l: &LiteralValue) -> Type {
    match l {
        LiteralValue::Boolean(_) => Type::Bool,
        LiteralValue::Bytes(_) => Type::Bytes,
        LiteralValue::Double(_) => Type::Double,
        LiteralValue::Int(_) => Type::Int,
        LiteralValue::Null => Type::Null,
        LiteralValue::String(_) => Type::String,
        LiteralValue::UInt(_) => Type::Uint,
    }
}

/// `e` as written when it is a chain of field selections, else `the value`.
fn shown(e: &IdedExpr) -> String {
    crate::chain(e).map_or_else(|| "the value".to_owned(), |c| c.join("."))
}

impl Checker<'_> {
    fn ty(&mut self, e: &IdedExpr) -> Result<Type, TypeError> {
        match &e.expr {
            Expr::Literal(l) => Ok(literal(l)),
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => {
                let operand = self.ty(&s.operand)?;
                let field = select(&s.operand, &operand, &s.field)?;
                Ok(if s.test { Type::Bool } else { field })
            }
            Expr::Call(c) => self.call(c),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::List(l) => {
                let mut item: Option<Type> = None;
                for x in &l.elements {
                    let t = self.ty(x)?;
                    item = Some(match item {
                        None => t,
                        Some(p) => join(&p, &t).unwrap_or(Type::Dyn),
                    });
                }
                Ok(Type::List(Box::new(item.unwrap_or(Type::Dyn))))
            }
            Expr::Map(m) => {
                let mut value: Option<Type> = None;
                for entry in &m.entries {
                    let t = self.entry(&entry.expr)?;
                    value = Some(match value {
                        None => t,
                        Some(p) => join(&p, &t).unwrap_or(Type::Dyn),
                    });
                }
                Ok(Type::Map(Box::new(value.unwrap_or(Type::Dyn))))
            }
            Expr::Struct(st) => {
                for entry in &st.entries {
                    self.entry(&entry.expr)?;
                }
                Ok(Type::Dyn)
            }
            Expr::Unspecified => Ok(Type::Dyn),
        }
    }

    /// The value type of a map or struct entry, its key checked.
    fn entry(&mut self, e: &EntryExpr) -> Result<Type, TypeError> {
        match e {
            EntryExpr::StructField(f) => self.ty(&f.value),
            EntryExpr::MapEntry(m) => {
                self.ty(&m.key)?;
                self.ty(&m.value)
            }
        }
    }

    fn ident(&self, name: &str) -> Result<Type, TypeError> {
        if let Some((_, t)) = self.locals.iter().rev().find(|(n, _)| n == name) {
            return Ok(t.clone());
        }
        if let Some(t) = self.env.vars.get(name) {
            return Ok(t.clone());
        }
        if TYPE_NAMES.contains(&name) {
            return Ok(Type::Dyn);
        }
        let declared: Vec<&str> = self.env.vars.keys().map(String::as_str).collect();
        Err(TypeError::Undeclared {
            name: name.to_owned(),
            declared: declared.join(", "),
        })
    }

    /// Whether `e` is the namespace of a function (`math` of `math.greatest(...)`): a name
    /// that is no variable.
    fn is_namespace(&self, e: &IdedExpr) -> bool {
        match &e.expr {
            Expr::Ident(name) => {
                !self.locals.iter().any(|(n, _)| n == name)
                    && !self.env.vars.contains_key(name)
                    && !TYPE_NAMES.contains(&name.as_str())
            }
            _ => false,
        }
    }

    /// Whether `target.f` is the name of a declared function (`runtime.condition`).
    fn names_function(&self, target: &IdedExpr, f: &str) -> bool {
        matches!(&target.expr, Expr::Ident(ns) if self.env.functions.declares(&format!("{ns}.{f}")))
    }

    /// `cel.bind(name, init, body)`: `body` with `name` of `init`'s type.
    fn bind(&mut self, c: &CallExpr) -> Option<Result<Type, TypeError>> {
        let cel =
            matches!(c.target.as_deref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel");
        let [name, init, body] = c.args.as_slice() else {
            return None;
        };
        let Expr::Ident(name) = &name.expr else {
            return None;
        };
        if !(cel && c.func_name == "bind" && self.is_namespace(c.target.as_deref()?)) {
            return None;
        }
        Some(self.ty(init).and_then(|t| {
            self.locals.push((name.clone(), t));
            let out = self.ty(body);
            self.locals.pop();
            out
        }))
    }

    /// kro's two-variable comprehensions (`all`/`exists`/`existsOne` with three arguments,
    /// `transformList`, `transformMap`, `transformMapEntry`): the two names typed from the
    /// list (index, item) or map (key, value) they range over.
    fn two_variables(&mut self, c: &CallExpr) -> Option<Result<Type, TypeError>> {
        let f = c.func_name.as_str();
        let quantifier = matches!(f, "all" | "exists" | "existsOne" | "exists_one");
        let transform = matches!(f, "transformList" | "transformMap" | "transformMapEntry");
        let n = c.args.len();
        if !((quantifier && n == 3) || (transform && (n == 3 || n == 4))) {
            return None;
        }
        let (Expr::Ident(first), Expr::Ident(second)) = (&c.args[0].expr, &c.args[1].expr) else {
            return None;
        };
        let target = c.target.as_deref()?;
        Some(self.ty(target).and_then(|range| {
            let (a, b) = match range {
                Type::List(t) => (Type::Int, *t),
                Type::Map(t) => (Type::String, *t),
                Type::Object(_) => (Type::String, Type::Dyn),
                Type::Dyn => (Type::Dyn, Type::Dyn),
                other => return Err(no_overload(f, &[&other])),
            };
            let depth = self.locals.len();
            self.locals.push((first.clone(), a));
            self.locals.push((second.clone(), b));
            let rest: Result<Vec<Type>, TypeError> =
                c.args[2..].iter().map(|e| self.ty(e)).collect();
            self.locals.truncate(depth);
            let last = rest?.pop().unwrap_or(Type::Dyn);
            Ok(match f {
                "transformList" => Type::List(Box::new(last)),
                "transformMap" => Type::Map(Box::new(last)),
                "transformMapEntry" => Type::Map(Box::new(Type::Dyn)),
                _ => Type::Bool,
            })
        }))
    }

    /// `Ok` when the scope declares function `name`, else why not.
    fn declared(&self, name: &str) -> Result<(), TypeError> {
        if self.env.functions.declares(name) {
            return Ok(());
        }
        let name = name.to_owned();
        Err(match Functions::lacks(&name) {
            true => TypeError::NotSupported { name },
            false => TypeError::UnknownFunction { name },
        })
    }

    /// `Ok` when `ns.f(...)` (`ns` no variable) calls a declared function: `ns.f` itself; else
    /// the evaluator would read `ns` as a variable for a function `f`, so an undeclared `ns`
    /// when `f` exists, an unknown `ns.f` when it does not.
    fn qualified(&self, ns: &IdedExpr, f: &str) -> Result<(), TypeError> {
        let Expr::Ident(name) = &ns.expr else {
            return Ok(());
        };
        let full = format!("{name}.{f}");
        if self.env.functions.declares(&full) {
            return Ok(());
        }
        match self.env.functions.declares(f) {
            true => self.ident(name).map(|_| ()),
            false => self.declared(&full),
        }
    }

    fn call(&mut self, c: &CallExpr) -> Result<Type, TypeError> {
        if let Some(bound) = self.bind(c).or_else(|| self.two_variables(c)) {
            return bound;
        }
        let operator = c.func_name.starts_with(['_', '@']) || ["!_", "-_"].contains(&&*c.func_name);
        // the evaluator calls `ns.f` when a function has that name, a variable `ns` or not
        let target = match &c.target {
            Some(t) if self.is_namespace(t) || self.names_function(t, &c.func_name) => {
                self.qualified(t, &c.func_name)?;
                None
            }
            Some(t) => {
                let ty = self.ty(t)?;
                self.declared(&c.func_name)?;
                Some(ty)
            }
            None if operator => None,
            None => {
                self.declared(&c.func_name)?;
                None
            }
        };
        let args = c
            .args
            .iter()
            .map(|a| self.ty(a))
            .collect::<Result<Vec<_>, _>>()?;
        let f = c.func_name.as_str();
        match (target, args.as_slice()) {
            (None, [a]) if f.starts_with('!') || f.starts_with('-') || f.starts_with('@') => {
                unary(f, a)
            }
            (None, [a, b]) if f == "_[_]" => index(&c.args[0], a, &c.args[1], b),
            (None, [a, b]) if f.starts_with('_') || f == "@in" => binary(f, a, b),
            (None, [cond, a, b]) if f == "_?_:_" => {
                let fine = matches!(cond, Type::Bool | Type::Dyn);
                match join(a, b) {
                    Some(t) if fine => Ok(t),
                    _ => Err(no_overload(f, &[cond, a, b])),
                }
            }
            (target, args) => function(f, target.as_ref(), args),
        }
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Type, TypeError> {
        let range = self.ty(&c.iter_range)?;
        let (first, second) = match &range {
            Type::List(t) => (Type::Int, (**t).clone()),
            Type::Map(t) => (Type::String, (**t).clone()),
            Type::Object(_) => (Type::String, Type::Dyn),
            Type::Dyn => (Type::Dyn, Type::Dyn),
            other => return Err(no_overload("iterate", &[other])),
        };
        let depth = self.locals.len();
        match &c.iter_var2 {
            Some(v2) => {
                self.locals.push((c.iter_var.clone(), first));
                self.locals.push((v2.clone(), second));
            }
            None if matches!(range, Type::List(_)) => {
                self.locals.push((c.iter_var.clone(), second));
            }
            None => self.locals.push((c.iter_var.clone(), first)),
        }
        let out = self.accumulate(c);
        self.locals.truncate(depth);
        out
    }

    /// The accumulator of a comprehension typed from its start and its step; its result.
    fn accumulate(&mut self, c: &ComprehensionExpr) -> Result<Type, TypeError> {
        let init = self.ty(&c.accu_init)?;
        self.locals.push((c.accu_var.clone(), init.clone()));
        self.ty(&c.loop_cond)?;
        let step = self.ty(&c.loop_step)?;
        let accu = match (&init, &step) {
            (Type::List(a), Type::List(_)) if **a == Type::Dyn => step,
            (Type::Map(a), Type::Map(_)) if **a == Type::Dyn => step,
            _ => join(&init, &step).unwrap_or(Type::Dyn),
        };
        if let Some(last) = self.locals.last_mut() {
            last.1 = accu;
        }
        self.ty(&c.result)
    }
}

fn select(operand: &IdedExpr, ty: &Type, field: &str) -> Result<Type, TypeError> {
    match ty {
        Type::Object(s) => s.field(field).map_err(|known| TypeError::NoField {
            path: shown(operand),
            field: field.to_owned(),
            known: known.join(", "),
        }),
        Type::Map(v) => Ok((**v).clone()),
        Type::Dyn | Type::Null => Ok(Type::Dyn),
        other => Err(TypeError::NotAnObject {
            path: shown(operand),
            ty: other.to_string(),
            field: field.to_owned(),
        }),
    }
}

fn unary(f: &str, a: &Type) -> Result<Type, TypeError> {
    match (f, a) {
        ("!_", Type::Bool | Type::Dyn) => Ok(Type::Bool),
        ("-_", t) if t.is_number() || *t == Type::Dyn => Ok(t.clone()),
        ("@not_strictly_false", _) => Ok(Type::Bool),
        _ if f.starts_with('@') => Ok(Type::Dyn),
        _ => Err(no_overload(f, &[a])),
    }
}

fn binary(f: &str, a: &Type, b: &Type) -> Result<Type, TypeError> {
    let dyn_ = *a == Type::Dyn || *b == Type::Dyn;
    let fine = match f {
        "_&&_" | "_||_" => {
            let ok = |t: &Type| matches!(t, Type::Bool | Type::Dyn);
            return if ok(a) && ok(b) {
                Ok(Type::Bool)
            } else {
                Err(no_overload(f, &[a, b]))
            };
        }
        "_==_" | "_!=_" => dyn_ || join(a, b).is_some() || (a.is_number() && b.is_number()),
        "_<_" | "_<=_" | "_>_" | "_>=_" => {
            dyn_ || (a.is_number() && b.is_number())
                || (a == b && matches!(a, Type::String | Type::Bytes | Type::Bool))
        }
        "@in" => match b {
            Type::List(t) => join(a, t).is_some() || (a.is_number() && t.is_number()),
            Type::Map(_) | Type::Object(_) => matches!(a, Type::String | Type::Dyn),
            t => *t == Type::Dyn,
        },
        _ => return arithmetic(f, a, b),
    };
    if fine {
        Ok(Type::Bool)
    } else {
        Err(no_overload(f, &[a, b]))
    }
}

fn arithmetic(f: &str, a: &Type, b: &Type) -> Result<Type, TypeError> {
    let plus = f == "_+_";
    match (a, b) {
        (Type::Dyn, _) | (_, Type::Dyn) => Ok(Type::Dyn),
        (x, y) if x == y && x.is_number() => Ok(x.clone()),
        (x, y) if x == y && plus && matches!(x, Type::String | Type::Bytes) => Ok(x.clone()),
        (Type::List(x), Type::List(y)) if plus => match concat(x, y) {
            Some(t) => Ok(Type::List(Box::new(t))),
            None => Err(no_overload(f, &[a, b])),
        },
        _ if !["_+_", "_-_", "_*_", "_/_", "_%_"].contains(&f) => Ok(Type::Dyn),
        _ => Err(no_overload(f, &[a, b])),
    }
}

fn index(
    container: &IdedExpr,
    c: &Type,
    key_expr: &IdedExpr,
    key: &Type,
) -> Result<Type, TypeError> {
    match (c, key) {
        (Type::Dyn, _) => Ok(Type::Dyn),
        (Type::List(t), Type::Int | Type::Uint | Type::Dyn) => Ok((**t).clone()),
        (Type::Map(t), _) => Ok((**t).clone()),
        (Type::Object(_), Type::String) => match &key_expr.expr {
            Expr::Literal(LiteralValue::String(s)) => select(container, c, s.as_ref()),
            _ => Ok(Type::Dyn),
        },
        (Type::Object(_), Type::Dyn) => Ok(Type::Dyn),
        _ => Err(no_overload("_[_]", &[c, key])),
    }
}

/// The string functions that need a string target.
const ON_STRINGS: [&str; 9] = [
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "lowerAscii",
    "upperAscii",
    "trim",
    "split",
    "substring",
];

fn function(f: &str, target: Option<&Type>, args: &[Type]) -> Result<Type, TypeError> {
    let operand = target.or(args.first());
    let scalar = |t: &Type| {
        matches!(
            t,
            Type::Bool | Type::Int | Type::Uint | Type::Double | Type::Null
        )
    };
    if ON_STRINGS.contains(&f) && target.is_some_and(scalar) {
        let mut all: Vec<&Type> = target.into_iter().collect();
        all.extend(args);
        return Err(no_overload(f, &all));
    }
    Ok(match f {
        "size" => match operand {
            Some(t) if scalar(t) => return Err(no_overload(f, &[t])),
            _ => Type::Int,
        },
        "string" => Type::String,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "bool" => Type::Bool,
        "bytes" => Type::Bytes,
        "contains" | "startsWith" | "endsWith" | "matches" => Type::Bool,
        "lowerAscii" | "upperAscii" | "trim" | "substring" | "replace" | "charAt" | "format"
            if target == Some(&Type::String) =>
        {
            Type::String
        }
        "split" if target == Some(&Type::String) => Type::List(Box::new(Type::String)),
        "join" if matches!(target, Some(Type::List(_))) => Type::String,
        "indexOf" | "lastIndexOf" if target.is_some() => Type::Int,
        _ => Type::Dyn,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
