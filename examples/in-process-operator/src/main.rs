//! `in-process-operator`: runs the example against the cluster of the current kubeconfig until
//! Ctrl-C; `in-process-operator crd` prints the Frontend CRD (JSON, which `kubectl apply -f -`
//! reads).

use std::time::Duration;

use kmeta_example_in_process_operator::{Frontend, controller};
use kube::CustomResourceExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        println!("{}", serde_json::to_string_pretty(&Frontend::crd())?);
        return Ok(());
    }
    let client = kube::Client::try_default().await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    controller(client, Duration::from_secs(300))
        .run(stop)
        .await?;
    Ok(())
}
