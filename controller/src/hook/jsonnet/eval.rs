//! Evaluating Jsonnet hook programs with `rsjsonnet-lang`, as Metacontroller's `jsonnetd` does:
//! the program's value, called with the request as its top-level argument `request` when it is
//! a function, manifested as multi-line JSON. Used by the worker process (`super::worker`) and,
//! for the syntax check only, by the controller when it builds a hook (`super::compile`).
//!
//! A program sees nothing of the machine: `import`, `importstr` and `importbin` resolve only the
//! other files of its [`Sources`] (the keys of its ConfigMap), there are no external variables,
//! and the only native functions are `jsonnetd`'s (`std.native('jsonUnmarshal')`,
//! `std.native('parseInt')`).

use std::collections::{BTreeMap, HashMap};

use rsjsonnet_lang::arena::Arena;
use rsjsonnet_lang::interner::InternedStr;
use rsjsonnet_lang::lexer::LexError;
use rsjsonnet_lang::parser::ParseError;
use rsjsonnet_lang::program::{
    AnalyzeError, Callbacks, EvalError, EvalErrorKind, EvalStackTraceItem, ImportError, LoadError,
    NativeError, Program, Thunk, Value,
};
use rsjsonnet_lang::span::{SpanContextId, SpanId};
use serde::{Deserialize, Serialize};

/// The C++ and Go implementations' default call depth limit.
pub const MAX_STACK: usize = 500;

/// A program: the name of its main file and every file it may import (the main file included).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sources {
    /// The main file's name (a ConfigMap key, or `source` for an inline program).
    pub main: String,
    /// File name to text.
    pub files: BTreeMap<String, String>,
}

impl Sources {
    /// An inline program: one file, importing nothing.
    pub fn inline(text: &str) -> Sources {
        let main = "source".to_owned();
        let files = BTreeMap::from([(main.clone(), text.to_owned())]);
        Sources { main, files }
    }

    /// A short content digest naming this version of the program (hex SHA-256).
    pub fn digest(&self) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(self.main.as_bytes());
        for (name, text) in &self.files {
            for part in [name.as_bytes(), text.as_bytes()] {
                ctx.update(&(part.len() as u64).to_be_bytes());
                ctx.update(part);
            }
        }
        ctx.finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn text(&self, name: &str) -> Option<&str> {
        let name = name.strip_prefix("./").unwrap_or(name);
        self.files.get(name).map(String::as_str)
    }
}

/// Why a program did not load or evaluate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalFailure {
    /// The main file is not among the sources.
    #[error("no file {0:?} in the program's sources")]
    NoMain(String),
    /// A syntax or static error, with its place (`file:line:column`).
    #[error("{0}")]
    Syntax(String),
    /// A runtime error, with its place.
    #[error("{0}")]
    Runtime(String),
    /// The request was not valid JSON for Jsonnet.
    #[error("the request is not valid JSON: {0}")]
    Request(String),
    /// The manifested output is larger than allowed.
    #[error("output of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The output's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// One loaded version of a program: its main value (a function, usually) and imports so far.
struct Loaded<'p> {
    sources: Sources,
    main: Thunk<'p>,
    imports: HashMap<String, Thunk<'p>>,
}

/// Where each loaded text came from, to turn spans into `file:line:column`.
#[derive(Default)]
struct Places {
    files: HashMap<SpanContextId, (String, String)>,
}

impl Places {
    fn at(&self, program: &Program<'_>, span: SpanId) -> String {
        let (ctx, start, _) = program.span_manager().get_span(span);
        let Some((name, text)) = self.files.get(&ctx) else {
            return "<std>".to_owned();
        };
        let (line, column) = line_column(text, start);
        format!("{name}:{line}:{column}")
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// An evaluator holding loaded programs by digest. Not `Send`: it lives on one thread (the
/// worker's), as `rsjsonnet-lang`'s program state must.
pub struct Evaluator<'p> {
    program: Program<'p>,
    places: Places,
    loaded: HashMap<String, Loaded<'p>>,
}

impl<'p> Evaluator<'p> {
    /// An evaluator allocating in `arena`, with `jsonnetd`'s native functions.
    pub fn new(arena: &'p Arena) -> Evaluator<'p> {
        let mut program = Program::new(arena);
        program.set_max_stack(MAX_STACK);
        let json_str = program.intern_str("jsonStr");
        let json_unmarshal = program.intern_str("jsonUnmarshal");
        program.register_native_func(json_unmarshal, &[json_str]);
        let (int_str, base) = (program.intern_str("intStr"), program.intern_str("base"));
        let parse_int = program.intern_str("parseInt");
        program.register_native_func(parse_int, &[int_str, base]);
        Evaluator {
            program,
            places: Places::default(),
            loaded: HashMap::new(),
        }
    }

    /// Whether the version `digest` is loaded.
    pub fn has(&self, digest: &str) -> bool {
        self.loaded.contains_key(digest)
    }

    /// Loads (parses and analyses) `sources` as version `digest`: a syntax error is returned
    /// with its place; nothing is evaluated.
    pub fn load(&mut self, digest: &str, sources: Sources) -> Result<(), EvalFailure> {
        let text = sources
            .text(&sources.main)
            .ok_or_else(|| EvalFailure::NoMain(sources.main.clone()))?
            .to_owned();
        let main = self.load_text(&sources.main, &text, true)?;
        self.loaded.insert(
            digest.to_owned(),
            Loaded {
                sources,
                main,
                imports: HashMap::new(),
            },
        );
        Ok(())
    }

    fn load_text(&mut self, name: &str, text: &str, std: bool) -> Result<Thunk<'p>, EvalFailure> {
        let (ctx, _) = self
            .program
            .span_manager_mut()
            .insert_source_context(text.len());
        self.places
            .files
            .insert(ctx, (name.to_owned(), text.to_owned()));
        self.program
            .load_source(ctx, text.as_bytes(), std, name)
            .map_err(|e| EvalFailure::Syntax(self.load_error(&e)))
    }

    fn load_error(&self, e: &LoadError) -> String {
        let (span, what) = match e {
            LoadError::Lex(e) => lex_error(e),
            LoadError::Parse(ParseError::Expected {
                span,
                expected,
                instead,
            }) => (
                *span,
                format!(
                    "expected {}, found {}",
                    super::syntax::expected(expected),
                    super::syntax::found(instead)
                ),
            ),
            LoadError::Analyze(e) => analyze_error(e),
        };
        format!("{}: {what}", self.places.at(&self.program, span))
    }

    /// Evaluates version `digest` with `request` (JSON text) as its argument `request`, as
    /// `jsonnetd` does: a function is called with it, any other value is the answer. The
    /// answer is multi-line JSON with a final newline, at most `max_output` bytes.
    pub fn evaluate(
        &mut self,
        digest: &str,
        request: &str,
        max_output: usize,
    ) -> Result<String, EvalFailure> {
        let Some(loaded) = self.loaded.remove(digest) else {
            return Err(EvalFailure::NoMain(digest.to_owned()));
        };
        let mut cb = Imports {
            loaded,
            places: &mut self.places,
            failure: None,
        };
        let result = evaluate_in(&mut self.program, &mut cb, request, max_output);
        let failure = cb.failure.take();
        self.loaded.insert(digest.to_owned(), cb.loaded);
        self.program.maybe_gc();
        result.map_err(|e| match (e, failure) {
            (EvalFailure::Runtime(m), Some(why)) => EvalFailure::Runtime(format!("{m}: {why}")),
            (e, _) => e,
        })
    }
}

fn evaluate_in<'p>(
    program: &mut Program<'p>,
    cb: &mut Imports<'_, 'p>,
    request: &str,
    max_output: usize,
) -> Result<String, EvalFailure> {
    let main = cb.loaded.main.clone();
    let value = program
        .eval_value(&main, cb)
        .map_err(|e| EvalFailure::Runtime(eval_error(program, cb.places, &e)))?;
    let value = if value.is_function() {
        let (ctx, _) = program
            .span_manager_mut()
            .insert_source_context(request.len());
        let arg = program
            .load_source(ctx, request.as_bytes(), false, "request")
            .map_err(|e| EvalFailure::Request(load_error_words(&e)))?;
        let arg = program
            .eval_value(&arg, cb)
            .map_err(|e| EvalFailure::Request(eval_error(program, cb.places, &e)))?;
        let arg = program.value_to_thunk(&arg);
        let func = program.value_to_thunk(&value);
        let name = program.intern_str("request");
        program
            .eval_call(&func, &[], &[(name, arg)], cb)
            .map_err(|e| EvalFailure::Runtime(eval_error(program, cb.places, &e)))?
    } else {
        value
    };
    let manifested = program
        .manifest_json(&value, true)
        .map_err(|e| EvalFailure::Runtime(eval_error(program, cb.places, &e)))?;
    let mut out = reference_numbers(&manifested);
    out.push('\n');
    if out.len() > max_output {
        return Err(EvalFailure::TooLarge {
            size: out.len(),
            limit: max_output,
        });
    }
    Ok(out)
}

/// `json` (a manifested value) with every number written as the reference implementations
/// (C++ and Go Jsonnet, so `jsonnetd`) write it: an integer in full (`%.0f`), any other number
/// with 17 significant digits (`%.17g`). `rsjsonnet-lang` writes the shortest digits that read
/// back as the same double; the value is the same, the bytes are not. Strings are copied as
/// they are.
pub fn reference_numbers(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(i) = rest.find(|c: char| c == '"' || c == '-' || c.is_ascii_digit()) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if rest.starts_with('"') {
            let end = string_end(rest);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
                .unwrap_or(rest.len());
            match rest[..end].parse::<f64>() {
                Ok(v) => out.push_str(&reference_number(v)),
                Err(_) => out.push_str(&rest[..end]),
            }
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

/// The length of the JSON string token `s` starts with, its quotes included.
fn string_end(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// A number as C's `%.0f` (integers) or `%.17g` (others) writes it.
pub fn reference_number(v: f64) -> String {
    if v == v.floor() {
        return format!("{v:.0}");
    }
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let decimals = usize::try_from(16 - exp).unwrap_or(0);
    trim_fraction(&format!("{v:.decimals$}")).to_owned()
}

/// `s` without trailing zeros of its fraction (and without the point when none remain).
fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Resolves imports from the program's own files and answers `jsonnetd`'s native functions.
struct Imports<'a, 'p> {
    loaded: Loaded<'p>,
    places: &'a mut Places,
    /// Why the last import failed (the crate's error carries nothing).
    failure: Option<String>,
}

impl<'p> Callbacks<'p> for Imports<'_, 'p> {
    fn import(
        &mut self,
        program: &mut Program<'p>,
        _from: SpanId,
        path: &str,
    ) -> Result<Thunk<'p>, ImportError> {
        if let Some(t) = self.loaded.imports.get(path) {
            return Ok(t.clone());
        }
        let Some(text) = self.loaded.sources.text(path).map(str::to_owned) else {
            self.failure = Some(format!("no file {path:?} among the program's sources"));
            return Err(ImportError);
        };
        let (ctx, _) = program.span_manager_mut().insert_source_context(text.len());
        self.places
            .files
            .insert(ctx, (path.to_owned(), text.clone()));
        match program.load_source(ctx, text.as_bytes(), true, path) {
            Ok(thunk) => {
                self.loaded.imports.insert(path.to_owned(), thunk.clone());
                Ok(thunk)
            }
            Err(e) => {
                let (span, what) = match &e {
                    LoadError::Lex(e) => lex_error(e),
                    LoadError::Parse(ParseError::Expected {
                        span,
                        expected,
                        instead,
                    }) => (
                        *span,
                        format!(
                            "expected {}, found {}",
                            super::syntax::expected(expected),
                            super::syntax::found(instead)
                        ),
                    ),
                    LoadError::Analyze(e) => analyze_error(e),
                };
                self.failure = Some(format!("{}: {what}", self.places.at(program, span)));
                Err(ImportError)
            }
        }
    }

    fn import_str(
        &mut self,
        _program: &mut Program<'p>,
        _from: SpanId,
        path: &str,
    ) -> Result<String, ImportError> {
        match self.loaded.sources.text(path) {
            Some(t) => Ok(t.to_owned()),
            None => {
                self.failure = Some(format!("no file {path:?} among the program's sources"));
                Err(ImportError)
            }
        }
    }

    fn import_bin(
        &mut self,
        program: &mut Program<'p>,
        from: SpanId,
        path: &str,
    ) -> Result<Vec<u8>, ImportError> {
        self.import_str(program, from, path).map(String::into_bytes)
    }

    fn trace(&mut self, _: &mut Program<'p>, _message: &str, _: &[EvalStackTraceItem]) {}

    fn native_call(
        &mut self,
        program: &mut Program<'p>,
        name: InternedStr<'p>,
        args: &[Value<'p>],
    ) -> Result<Value<'p>, NativeError> {
        let answer = match (name.value(), args) {
            ("jsonUnmarshal", [s]) => json_unmarshal(program, s),
            ("parseInt", [s, base]) => parse_int(s, base).map(Value::number),
            (other, _) => Err(NativeFailure::Unknown(other.to_owned())),
        };
        answer.map_err(|why| {
            self.failure = Some(format!("std.native({:?}): {why}", name.value()));
            NativeError
        })
    }
}

/// Why a `std.native` function failed.
#[derive(Debug, thiserror::Error)]
enum NativeFailure {
    /// No such native function.
    #[error("no native function {0:?}")]
    Unknown(String),
    /// An argument of the wrong type: which one, and what it must be.
    #[error("{0}")]
    Argument(&'static str),
    /// `jsonUnmarshal`'s text is not JSON.
    #[error("can't unmarshal JSON: {0}")]
    Json(serde_json::Error),
    /// `jsonUnmarshal`'s JSON is not an object.
    #[error("can't unmarshal JSON: not an object")]
    NotAnObject,
    /// `parseInt`'s text is not an integer in the base.
    #[error("can't parse 'intStr': {text:?} in base {base}")]
    Int {
        /// The text.
        text: String,
        /// The base.
        base: f64,
    },
}

/// `jsonnetd`'s `jsonUnmarshal(jsonStr)`: a JSON object text as a value (Go decodes into a map,
/// so any other JSON value is an error there too).
fn json_unmarshal<'p>(
    program: &mut Program<'p>,
    s: &Value<'p>,
) -> Result<Value<'p>, NativeFailure> {
    let text = s
        .to_string()
        .ok_or(NativeFailure::Argument("jsonStr is not a string"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(NativeFailure::Json)?;
    if !v.is_object() {
        return Err(NativeFailure::NotAnObject);
    }
    Ok(json_value(program, &v))
}

fn json_value<'p>(program: &mut Program<'p>, v: &serde_json::Value) -> Value<'p> {
    match v {
        serde_json::Value::Null => Value::null(),
        serde_json::Value::Bool(b) => Value::bool(*b),
        serde_json::Value::Number(n) => Value::number(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::string(s),
        serde_json::Value::Array(items) => {
            let items: Vec<Value<'p>> = items.iter().map(|i| json_value(program, i)).collect();
            program.make_array(&items)
        }
        serde_json::Value::Object(m) => {
            let fields: Vec<(InternedStr<'p>, Value<'p>)> = m
                .iter()
                .map(|(k, v)| (program.intern_str(k), json_value(program, v)))
                .collect();
            program.make_object(&fields)
        }
    }
}

/// `jsonnetd`'s `parseInt(intStr, base)`: Go's `strconv.ParseInt(intStr, base, 64)` as a number.
fn parse_int(s: &Value<'_>, base: &Value<'_>) -> Result<f64, NativeFailure> {
    let text = s
        .to_string()
        .ok_or(NativeFailure::Argument("intStr is not a string"))?;
    let base = base
        .as_number()
        .ok_or(NativeFailure::Argument("base is not a number"))?;
    match parse_go_int(&text, base as u32) {
        Some(i) => Ok(i as f64),
        None => Err(NativeFailure::Int { text, base }),
    }
}

/// Go's `strconv.ParseInt(s, base, 64)`: base 0 reads a `0x`, `0o`, `0b` or `0` prefix (and
/// allows `_` between digits); bases 2 to 36 read digits only.
pub fn parse_go_int(s: &str, base: u32) -> Option<i64> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (base, digits) = if base == 0 {
        let lower = digits.to_ascii_lowercase();
        let (b, rest) = if lower.starts_with("0x") {
            (16, &digits[2..])
        } else if lower.starts_with("0o") {
            (8, &digits[2..])
        } else if lower.starts_with("0b") {
            (2, &digits[2..])
        } else if digits.len() > 1 && digits.starts_with('0') {
            (8, &digits[1..])
        } else {
            (10, digits)
        };
        (b, rest.replace('_', ""))
    } else if (2..=36).contains(&base) {
        (base, digits.to_owned())
    } else {
        return None;
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = i128::from(u64::from_str_radix(&digits, base).ok()?);
    i64::try_from(if neg { -magnitude } else { magnitude }).ok()
}

/// A load error without its place (the request kmeta encodes itself: only a bug makes it fail).
fn load_error_words(e: &LoadError) -> String {
    match e {
        LoadError::Lex(e) => lex_error(e).1,
        LoadError::Parse(ParseError::Expected {
            expected, instead, ..
        }) => format!(
            "expected {}, found {}",
            super::syntax::expected(expected),
            super::syntax::found(instead)
        ),
        LoadError::Analyze(e) => analyze_error(e).1,
    }
}

fn lex_error(e: &LexError) -> (SpanId, String) {
    let span = match e {
        LexError::InvalidChar { span, .. }
        | LexError::InvalidUtf8 { span, .. }
        | LexError::UnfinishedMultilineComment { span }
        | LexError::LeadingZeroInNumber { span }
        | LexError::MissingFracDigits { span }
        | LexError::MissingExpDigits { span }
        | LexError::MissingDigitAfterUnderscore { span }
        | LexError::ExpOverflow { span }
        | LexError::InvalidEscapeInString { span, .. }
        | LexError::IncompleteUnicodeEscape { span }
        | LexError::InvalidUtf16EscapeSequence { span, .. }
        | LexError::UnfinishedString { span }
        | LexError::MissingLineBreakAfterTextBlockStart { span }
        | LexError::MissingWhitespaceTextBlockStart { span }
        | LexError::InvalidTextBlockTermination { span } => *span,
    };
    let what = super::syntax::kind_words(&format!("{e:?}"));
    (span, format!("syntax error: {what}"))
}

fn analyze_error(e: &AnalyzeError) -> (SpanId, String) {
    match e {
        AnalyzeError::UnknownVariable { span, name } => (*span, format!("unknown variable {name}")),
        AnalyzeError::SelfOutsideObject { self_span: s } => (*s, "self outside an object".into()),
        AnalyzeError::SuperOutsideObject { super_span: s } => {
            (*s, "super outside an object".into())
        }
        AnalyzeError::DollarOutsideObject { dollar_span: s } => (*s, "$ outside an object".into()),
        AnalyzeError::RepeatedLocalName {
            repeated_span,
            name,
            ..
        } => (*repeated_span, format!("local {name} defined twice")),
        AnalyzeError::RepeatedFieldName {
            repeated_span,
            name,
            ..
        } => (*repeated_span, format!("field {name} defined twice")),
        AnalyzeError::RepeatedParamName {
            repeated_span,
            name,
            ..
        } => (*repeated_span, format!("parameter {name} defined twice")),
        AnalyzeError::PositionalArgAfterNamed { arg_span } => {
            (*arg_span, "positional argument after a named one".into())
        }
        AnalyzeError::TextBlockAsImportPath { span } => {
            (*span, "a text block as an import path".into())
        }
        AnalyzeError::ComputedImportPath { span } => (*span, "a computed import path".into()),
    }
}

/// A runtime error as one line: what, and where (the innermost place of its stack trace).
fn eval_error(program: &Program<'_>, places: &Places, e: &EvalError) -> String {
    let what = match &e.kind {
        EvalErrorKind::StackOverflow => format!("stack overflow (max call depth {MAX_STACK})"),
        EvalErrorKind::InfiniteRecursion => "infinite recursion".to_owned(),
        EvalErrorKind::ExplicitError { message, .. } => format!("error: {message}"),
        EvalErrorKind::AssertFailed { message, .. } => match message {
            Some(m) => format!("assertion failed: {m}"),
            None => "assertion failed".to_owned(),
        },
        EvalErrorKind::UnknownObjectField { field_name, .. } => {
            format!("field does not exist: {field_name}")
        }
        EvalErrorKind::ImportFailed { path, .. } => format!("cannot import {path:?}"),
        EvalErrorKind::NativeCallFailed => "native function failed".to_owned(),
        EvalErrorKind::Other { message, .. } => message.clone(),
        other => super::syntax::kind_words(&format!("{other:?}")),
    };
    let place = kind_span(&e.kind).or_else(|| trace_span(&e.stack_trace));
    match place {
        Some(span) => format!("{}: {what}", places.at(program, span)),
        None => what,
    }
}

/// The place an error's kind names, if it names one.
fn kind_span(kind: &EvalErrorKind) -> Option<SpanId> {
    use EvalErrorKind as K;
    match kind {
        K::InvalidIndexedType { span, .. }
        | K::InvalidSlicedType { span, .. }
        | K::SliceIndexOrStepIsNotNumber { span, .. }
        | K::StringIndexIsNotNumber { span, .. }
        | K::ArrayIndexIsNotNumber { span, .. }
        | K::NumericIndexIsNotValid { span, .. }
        | K::NumericIndexOutOfRange { span, .. }
        | K::ObjectIndexIsNotString { span, .. }
        | K::RepeatedFieldName { span, .. }
        | K::FieldNameIsNotString { span, .. }
        | K::UnknownObjectField { span, .. }
        | K::FieldOfNonObject { span }
        | K::SuperWithoutSuperObject { span }
        | K::ForSpecValueIsNotArray { span, .. }
        | K::CondIsNotBool { span, .. }
        | K::InvalidUnaryOpType { span, .. }
        | K::AssertFailed { span, .. }
        | K::ExplicitError { span, .. }
        | K::ImportFailed { span, .. } => Some(*span),
        K::CalleeIsNotFunction { span, .. }
        | K::TooManyCallArgs { span, .. }
        | K::UnknownCallParam { span, .. }
        | K::RepeatedCallParam { span, .. }
        | K::CallParamNotBound { span, .. }
        | K::InvalidBinaryOpTypes { span, .. }
        | K::NumberNotBitwiseSafe { span }
        | K::NumberOverflow { span }
        | K::NumberNan { span }
        | K::DivByZero { span }
        | K::ShiftByNegative { span }
        | K::Other { span, .. } => *span,
        _ => None,
    }
}

/// The innermost place of a stack trace.
fn trace_span(trace: &[EvalStackTraceItem]) -> Option<SpanId> {
    trace.iter().find_map(|item| match item {
        EvalStackTraceItem::Expr { span }
        | EvalStackTraceItem::Variable { span, .. }
        | EvalStackTraceItem::Import { span } => Some(*span),
        EvalStackTraceItem::Call { span, .. }
        | EvalStackTraceItem::ArrayItem { span, .. }
        | EvalStackTraceItem::ObjectField { span, .. } => *span,
        _ => None,
    })
}

/// Loads `sources` and evaluates it once with `request` (what a worker does for one request,
/// in this thread): the answer, at most `max_output` bytes.
pub fn evaluate_once(
    sources: &Sources,
    request: &str,
    max_output: usize,
) -> Result<String, EvalFailure> {
    let arena = Arena::new();
    let mut ev = Evaluator::new(&arena);
    ev.load("once", sources.clone())?;
    ev.evaluate("once", request, max_output)
}

/// Parses `sources`' main file as the controller does when it builds a hook: its syntax error,
/// with its place, if any. Runs nothing.
pub fn check(sources: &Sources) -> Result<(), EvalFailure> {
    let arena = Arena::new();
    let mut ev = Evaluator::new(&arena);
    ev.load("check", sources.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(files: &[(&str, &str)], request: &str) -> Result<String, EvalFailure> {
        let sources = Sources {
            main: files[0].0.to_owned(),
            files: files
                .iter()
                .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                .collect(),
        };
        evaluate_once(&sources, request, 1 << 20)
    }

    #[test]
    fn a_function_is_called_with_the_request_and_its_value_manifested_as_jsonnetd_does() {
        let out = run(
            &[(
                "sync.jsonnet",
                "function(request) {b: request.a, a: [], c: {}}",
            )],
            r#"{"a": 1}"#,
        );
        assert_eq!(
            out,
            Ok("{\n   \"a\": [ ],\n   \"b\": 1,\n   \"c\": { }\n}\n".to_owned())
        );
        // a value that is not a function ignores the request
        assert_eq!(
            run(&[("x", "{a: 1}")], "{}"),
            Ok("{\n   \"a\": 1\n}\n".into())
        );
    }

    #[test]
    fn imports_resolve_only_the_programs_own_files() {
        let files = [
            (
                "main",
                "local l = import 'lib.libsonnet'; function(request) l.f(2)",
            ),
            ("lib.libsonnet", "{f(x): x * 3, s: importstr 'text'}"),
            ("text", "hello"),
        ];
        assert_eq!(run(&files, "{}"), Ok("6\n".into()));
        let missing = run(&[("main", "import '/etc/passwd'")], "{}").unwrap_err();
        assert!(
            missing.to_string().contains("no file \"/etc/passwd\""),
            "{missing}"
        );
    }

    #[test]
    fn errors_name_their_file_line_and_column() {
        let syntax = run(&[("hook.jsonnet", "{\n  a: 1,\n  b: ]\n}")], "{}").unwrap_err();
        assert!(
            matches!(&syntax, EvalFailure::Syntax(m) if m.starts_with("hook.jsonnet:3:")),
            "{syntax}"
        );
        let runtime = run(&[("h", "function(request)\n  error 'no'")], "{}").unwrap_err();
        assert_eq!(runtime, EvalFailure::Runtime("h:2:3: error: no".into()));
    }

    #[test]
    fn unbounded_recursion_stops_at_the_stack_limit() {
        let e = run(&[("h", "local f(x) = 1 + f(x + 1); f(0)")], "{}").unwrap_err();
        assert!(e.to_string().contains("stack overflow"), "{e}");
    }

    #[test]
    fn output_over_the_limit_is_refused() {
        let e = run(&[("h", "std.repeat('x', 2000000)")], "{}").unwrap_err();
        assert!(matches!(e, EvalFailure::TooLarge { .. }), "{e}");
    }

    #[test]
    fn jsonnetd_native_functions_answer_as_there() {
        let out = run(
            &[(
                "h",
                "[std.native('parseInt')('ff', 16), std.native('parseInt')('0x10', 0), \
                 std.native('jsonUnmarshal')('{\"a\": [1]}')]",
            )],
            "{}",
        );
        assert_eq!(
            out.map(|s| s.split_whitespace().collect::<String>()),
            Ok("[255,16,{\"a\":[1]}]".into())
        );
        assert_eq!(parse_go_int("-0b101", 0), Some(-5));
        assert_eq!(parse_go_int("08", 0), None);
        assert_eq!(parse_go_int("z", 36), Some(35));
    }

    #[test]
    fn numbers_are_written_as_the_reference_writes_them() {
        let cases = [
            (1.0 / 3.0, "0.33333333333333331"),
            (1e-7, "9.9999999999999995e-08"),
            (0.0025, "0.0025000000000000001"),
            (1.5, "1.5"),
            (
                1e300,
                "1000000000000000052504760255204420248704468581108159154915854115511802457988908195786371375080447864043704443832883878176942523235360430575644792184786706982848387200926575803737830233794788090059368953234970799945081119038967640880074652742780142494579258788820056842838115669472196386865459400540160",
            ),
            (-2.5e-300, "-2.5e-300"),
            (123456.789, "123456.789"),
            (1.5e17, "150000000000000000"),
            (1.25e16 + 0.5, "12500000000000000"),
        ];
        for (v, want) in cases {
            assert_eq!(reference_number(v), want, "{v}");
        }
        assert_eq!(
            reference_numbers("{\"a-1\": [0.1, -3, \"x\\\"0.5\"], \"b\": 1e-7}"),
            "{\"a-1\": [0.10000000000000001, -3, \"x\\\"0.5\"], \"b\": 9.9999999999999995e-08}"
        );
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_column("ab\ncé d", 7), (2, 4));
        assert_eq!(line_column("x", 0), (1, 1));
    }
}
