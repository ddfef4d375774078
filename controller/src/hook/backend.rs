//! One interface for every kind of hook back end.
//!
//! A back end turns one request body into the response body a webhook would send: a webhook
//! ([`super::webhook`]), a Rust function in this process ([`super::local`]), a Jsonnet program
//! ([`super::jsonnet`]). What every call needs — the request's trace context, the timeout, the
//! request metrics and the Jsonnet worker kills — is applied around the back end once, by
//! [`super::HookClient::call`]; the response is decoded there too.
//!
//! A new kind of hook is one module implementing [`HookBackend`] and one registration in
//! [`super::registry`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::error::HookError;

/// The form a back end takes request bodies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyForm {
    /// JSON text (a webhook's POST, a Jsonnet program's `request`).
    Text,
    /// A JSON value (a Rust function's argument).
    Value,
}

/// A request body, encoded once by the client in the form its back end takes.
#[derive(Debug)]
pub(crate) enum RequestBody {
    /// As JSON text (UTF-8, as serde_json writes it).
    Text(Vec<u8>),
    /// As a JSON value.
    Value(Value),
}

impl RequestBody {
    /// `body` encoded in `form`, straight from what the caller borrows; text is written into a
    /// buffer of `size_hint` bytes (grown if the body needs more).
    pub fn encode<B: Serialize + ?Sized>(
        body: &B,
        form: BodyForm,
        size_hint: usize,
    ) -> serde_json::Result<Self> {
        Ok(match form {
            BodyForm::Text => {
                let mut text = Vec::with_capacity(size_hint);
                serde_json::to_writer(&mut text, body)?;
                RequestBody::Text(text)
            }
            BodyForm::Value => RequestBody::Value(serde_json::to_value(body)?),
        })
    }

    /// The body as JSON text, in bytes (a webhook's POST body).
    pub fn into_bytes(self) -> serde_json::Result<Vec<u8>> {
        match self {
            RequestBody::Text(text) => Ok(text),
            RequestBody::Value(v) => serde_json::to_vec(&v),
        }
    }

    /// The body as JSON text.
    pub fn into_text(self) -> serde_json::Result<String> {
        String::from_utf8(self.into_bytes()?).map_err(serde::ser::Error::custom)
    }

    /// The body as a JSON value.
    pub fn into_value(self) -> serde_json::Result<Value> {
        match self {
            RequestBody::Text(text) => serde_json::from_slice(&text),
            RequestBody::Value(v) => Ok(v),
        }
    }

    /// The length of the body as text (0 for a value).
    pub fn text_len(&self) -> usize {
        match self {
            RequestBody::Text(text) => text.len(),
            RequestBody::Value(_) => 0,
        }
    }
}

/// One call of a hook, as the client hands it to its back end.
pub(crate) struct Call<'a> {
    /// The hook: `sync`, `finalize` or `customize` (named in errors and logs).
    pub hook: &'static str,
    /// The root object the request is about (the key of a webhook's ETag cache).
    pub cache_key: &'a str,
    /// The request body in the back end's [`HookBackend::body_form`], or why it did not encode
    /// (for the back end to report as its own error).
    pub body: serde_json::Result<RequestBody>,
    /// The W3C `traceparent` of this request ([`super::trace`]); `None` outside a sync. A back
    /// end that sends requests elsewhere passes it on.
    pub traceparent: Option<String>,
}

/// What a back end answers: the response body, as a webhook's 200 would carry it.
pub(crate) type Answer<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, HookError>> + Send + 'a>>;

/// A way of answering a hook's requests.
pub(crate) trait HookBackend: Send + Sync {
    /// How the back end is shown in errors, logs and the hook metrics' `url` label: a webhook's
    /// URL without userinfo, `in-process`, `jsonnet:inline`, ….
    fn shown(&self) -> &str;

    /// The bound the client puts around each call ([`HookBackend::timed_out`] once it passes);
    /// `None` when the back end bounds its own calls (a Jsonnet evaluation past its timeout
    /// kills its worker).
    fn timeout(&self) -> Option<Duration>;

    /// The error of a call the client ended after `after` (the [`HookBackend::timeout`]).
    fn timed_out(&self, hook: &'static str, after: Duration) -> HookError;

    /// The form the back end takes request bodies in.
    fn body_form(&self) -> BodyForm {
        BodyForm::Text
    }

    /// Credential values the back end sends, masked in any response text kmeta copies (a hook
    /// may echo its `Authorization` header).
    fn sent(&self) -> &[String] {
        &[]
    }

    /// Answers one call.
    fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a>;
}
