//! Jsonnet's syntax and evaluation errors in words: the tokens a parse error expected and met
//! (`expected ',' or '}', found identifier foo`), and the lexer's and evaluator's error kinds
//! (`unfinished string`), never their Rust debug form (`{Simple(Comma)}`, `Ident("foo")`).

use std::collections::BTreeSet;

use rsjsonnet_lang::parser::{ActualToken, ExpectedToken};
use rsjsonnet_lang::token::STokenKind;

/// The symbols by their token names; a token not here is a keyword, written in lower case.
const SYMBOLS: &[(&str, &str)] = &[
    ("Exclam", "!"),
    ("ExclamEq", "!="),
    ("Dollar", "$"),
    ("Percent", "%"),
    ("Amp", "&"),
    ("AmpAmp", "&&"),
    ("LeftParen", "("),
    ("RightParen", ")"),
    ("Asterisk", "*"),
    ("Plus", "+"),
    ("PlusColon", "+:"),
    ("PlusColonColon", "+::"),
    ("PlusColonColonColon", "+:::"),
    ("Comma", ","),
    ("Minus", "-"),
    ("Dot", "."),
    ("Slash", "/"),
    ("Colon", ":"),
    ("ColonColon", "::"),
    ("ColonColonColon", ":::"),
    ("Semicolon", ";"),
    ("Lt", "<"),
    ("LtLt", "<<"),
    ("LtEq", "<="),
    ("Eq", "="),
    ("EqEq", "=="),
    ("Gt", ">"),
    ("GtEq", ">="),
    ("GtGt", ">>"),
    ("LeftBracket", "["),
    ("RightBracket", "]"),
    ("Hat", "^"),
    ("LeftBrace", "{"),
    ("Pipe", "|"),
    ("PipePipe", "||"),
    ("RightBrace", "}"),
    ("Tilde", "~"),
];

/// A keyword or symbol as written in Jsonnet, quoted: `','`, `'local'`.
fn token(kind: STokenKind) -> String {
    let name = format!("{kind:?}");
    let text = SYMBOLS.iter().find(|(n, _)| *n == name).map_or_else(
        || name.trim_end_matches('_').to_lowercase(),
        |(_, t)| (*t).to_owned(),
    );
    format!("'{text}'")
}

/// What a parse error expected, in words, alternatives joined by `or`.
pub(super) fn expected(tokens: &BTreeSet<ExpectedToken>) -> String {
    let words: Vec<String> = tokens
        .iter()
        .map(|t| match t {
            ExpectedToken::EndOfFile => "the end of the file".to_owned(),
            ExpectedToken::Simple(k) => token(*k),
            ExpectedToken::Ident => "an identifier".to_owned(),
            ExpectedToken::Number => "a number".to_owned(),
            ExpectedToken::String => "a string".to_owned(),
            ExpectedToken::TextBlock => "a text block".to_owned(),
            ExpectedToken::Expr => "an expression".to_owned(),
            ExpectedToken::BinaryOp => "a binary operator".to_owned(),
        })
        .collect();
    words.join(" or ")
}

/// What a parse error met instead, in words.
pub(super) fn found(token_met: &ActualToken) -> String {
    match token_met {
        ActualToken::EndOfFile => "the end of the file".to_owned(),
        ActualToken::Simple(k) => token(*k),
        ActualToken::OtherOp(op) => format!("operator '{op}'"),
        ActualToken::Ident(name) => format!("identifier {name}"),
        ActualToken::Number => "a number".to_owned(),
        ActualToken::String => "a string".to_owned(),
        ActualToken::TextBlock => "a text block".to_owned(),
    }
}

/// The name of an error kind's variant (the first word of its debug form, `UnfinishedString {
/// span: .. }`) in lower-case words: `unfinished string`.
pub(super) fn kind_words(debug: &str) -> String {
    let name = debug
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .next()
        .unwrap_or(debug);
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out.replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_tokens_as_written() {
        let want = BTreeSet::from([
            ExpectedToken::Simple(STokenKind::Comma),
            ExpectedToken::Simple(STokenKind::RightBrace),
            ExpectedToken::Simple(STokenKind::Self_),
            ExpectedToken::Expr,
        ]);
        assert_eq!(expected(&want), "'self' or ',' or '}' or an expression");
        assert_eq!(found(&ActualToken::Ident("foo".into())), "identifier foo");
        assert_eq!(found(&ActualToken::Simple(STokenKind::Local)), "'local'");
        assert_eq!(found(&ActualToken::OtherOp("=>".into())), "operator '=>'");
    }

    #[test]
    fn error_kinds_read_as_words() {
        assert_eq!(
            kind_words("UnfinishedString { span: SpanId(3) }"),
            "unfinished string"
        );
        assert_eq!(kind_words("InvalidUtf8"), "invalid utf8");
        assert_eq!(
            kind_words("ArrayIndexOutOfRange(3)"),
            "array index out of range"
        );
    }
}
