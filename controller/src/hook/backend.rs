//! One interface for every kind of hook back end, and the one place a hook spec's back end is
//! chosen.
//!
//! A back end turns one request body into the response body a webhook would send: a webhook
//! ([`super::webhook`]), a Rust function in this process ([`super::local`]), a Jsonnet program
//! ([`super::jsonnet`]). What every call needs — the request's trace context, the timeout, the
//! request metrics and the Jsonnet worker kills — is applied around the back end once, by
//! [`super::HookClient::call`]; the response is decoded there too.
//!
//! A new kind of hook is one module implementing [`HookBackend`] and one registration here: a
//! [`Declared`] variant for its field of [`Hook`], and its arm in [`for_hook`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::error::HookError;
use super::jsonnet;
use super::webhook::WebhookBackend;
use crate::api::{EndpointConfig, Hook, JsonnetHook, Webhook};
use crate::hook::HookOptions;

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
    /// As JSON text.
    Text(String),
    /// As a JSON value.
    Value(Value),
}

impl RequestBody {
    /// `body` encoded in `form`, straight from what the caller borrows.
    pub fn encode<B: Serialize + ?Sized>(body: &B, form: BodyForm) -> serde_json::Result<Self> {
        Ok(match form {
            BodyForm::Text => RequestBody::Text(serde_json::to_string(body)?),
            BodyForm::Value => RequestBody::Value(serde_json::to_value(body)?),
        })
    }

    /// The body as JSON text.
    pub fn into_text(self) -> serde_json::Result<String> {
        match self {
            RequestBody::Text(text) => Ok(text),
            RequestBody::Value(v) => serde_json::to_string(&v),
        }
    }

    /// The body as a JSON value.
    pub fn into_value(self) -> serde_json::Result<Value> {
        match self {
            RequestBody::Text(text) => serde_json::from_str(&text),
            RequestBody::Value(v) => Ok(v),
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

/// The back end a hook spec declares, one variant per field of [`Hook`].
enum Declared<'a> {
    /// `webhook`.
    Webhook(&'a Webhook),
    /// `jsonnet`.
    Jsonnet(&'a JsonnetHook),
}

/// Every field of [`Hook`] that declares a back end, in [`Declared`]'s order.
const FIELDS: [&str; 2] = ["webhook", "jsonnet"];

impl Declared<'_> {
    /// The field of [`Hook`] it comes from.
    fn field(&self) -> &'static str {
        match self {
            Declared::Webhook(_) => FIELDS[0],
            Declared::Jsonnet(_) => FIELDS[1],
        }
    }
}

/// The one back end `hook` declares (`which`: sync, finalize, customize): exactly one field.
fn declared<'a>(which: &'static str, hook: &'a Hook) -> Result<Declared<'a>, HookError> {
    let webhook = hook.webhook.as_ref().map(Declared::Webhook);
    let jsonnet = hook.jsonnet.as_ref().map(Declared::Jsonnet);
    let mut set: Vec<Declared<'a>> = [webhook, jsonnet].into_iter().flatten().collect();
    let wrong = match set.len() {
        1 => return Ok(set.remove(0)),
        0 => format!("neither {} is set", FIELDS.join(" nor ")),
        2 => format!("{} and {} are both set", set[0].field(), set[1].field()),
        _ => format!(
            "{} are all set",
            set.iter()
                .map(Declared::field)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(HookError::Config {
        hook: which,
        message: format!("hooks.{which}: {wrong}; set exactly one"),
    })
}

/// The back end of `hook` (the controller's `which` hook), ready to call: its credentials,
/// CA bundle or program read from the cluster through `client` once, now.
pub(crate) async fn for_hook(
    client: &kube::Client,
    which: &'static str,
    hook: &Hook,
    endpoint_configs: &[EndpointConfig],
    opts: &HookOptions,
) -> Result<Box<dyn HookBackend>, HookError> {
    Ok(match declared(which, hook)? {
        Declared::Webhook(w) => {
            let max = opts.max_response_bytes;
            Box::new(WebhookBackend::connect(client, which, w, endpoint_configs, max).await?)
        }
        Declared::Jsonnet(j) => Box::new(jsonnet::Runner::build(client, which, j, opts).await?),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn message(hook: &Hook) -> String {
        declared("sync", hook).err().unwrap().to_string()
    }

    #[test]
    fn a_hook_declares_exactly_one_back_end() {
        assert_eq!(
            message(&Hook::default()),
            "sync hook config: hooks.sync: neither webhook nor jsonnet is set; set exactly one"
        );
        let both = Hook {
            webhook: Some(Webhook::default()),
            jsonnet: Some(JsonnetHook::default()),
            ..Hook::default()
        };
        assert_eq!(
            message(&both),
            "sync hook config: hooks.sync: webhook and jsonnet are both set; set exactly one"
        );
        let one = Hook {
            jsonnet: Some(JsonnetHook::default()),
            ..Hook::default()
        };
        assert!(matches!(declared("sync", &one), Ok(Declared::Jsonnet(_))));
    }
}
