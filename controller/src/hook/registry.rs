//! The one place a hook spec's back end is chosen: each field of [`Hook`] that declares a back
//! end, and how that back end is built. A new kind of hook registers here: a [`Declared`]
//! variant for its field (named in [`FIELDS`]), and its arm in [`for_hook`].

use super::backend::HookBackend;
use super::cel::CelRunner;
use super::error::HookError;
use super::jsonnet;
use super::webhook::WebhookBackend;
use crate::api::{CelHook, EndpointConfig, Hook, JsonnetHook, Webhook};
use crate::hook::HookOptions;

/// The back end a hook spec declares, one variant per field of [`Hook`].
enum Declared<'a> {
    /// `webhook`.
    Webhook(&'a Webhook),
    /// `jsonnet`.
    Jsonnet(&'a JsonnetHook),
    /// `cel`.
    Cel(&'a CelHook),
}

/// Every field of [`Hook`] that declares a back end, in [`Declared`]'s order.
const FIELDS: [&str; 3] = ["webhook", "jsonnet", "cel"];

impl Declared<'_> {
    /// The field of [`Hook`] it comes from.
    fn field(&self) -> &'static str {
        match self {
            Declared::Webhook(_) => FIELDS[0],
            Declared::Jsonnet(_) => FIELDS[1],
            Declared::Cel(_) => FIELDS[2],
        }
    }
}

/// The one back end `hook` declares (`which`: sync, finalize, customize): exactly one field.
fn declared<'a>(which: &'static str, hook: &'a Hook) -> Result<Declared<'a>, HookError> {
    let webhook = hook.webhook.as_ref().map(Declared::Webhook);
    let jsonnet = hook.jsonnet.as_ref().map(Declared::Jsonnet);
    let cel = hook.cel.as_ref().map(Declared::Cel);
    let mut set: Vec<Declared<'a>> = [webhook, jsonnet, cel].into_iter().flatten().collect();
    let wrong = match set.len() {
        1 => return Ok(set.remove(0)),
        0 => format!("none of {} is set", FIELDS.join(", ")),
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
        Declared::Jsonnet(j) => {
            let max = opts.max_response_bytes;
            Box::new(jsonnet::Runner::build(client, which, j, &opts.jsonnet, max).await?)
        }
        Declared::Cel(c) => Box::new(CelRunner::build(which, c, opts.max_response_bytes)?),
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
            "sync hook config: hooks.sync: none of webhook, jsonnet, cel is set; set exactly one"
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
