//! `kube-rs-operator`: runs the example operator against the cluster of the current kubeconfig;
//! `kube-rs-operator crd` prints the Frontend CRD (JSON, which `kubectl apply -f -` reads).

use std::sync::Arc;
use std::time::Duration;

use kmeta_example_kube_rs_operator::{Context, Frontend, run};
use kube::CustomResourceExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        println!("{}", serde_json::to_string_pretty(&Frontend::crd())?);
        return Ok(());
    }
    let client = kube::Client::try_default().await?;
    let ctx = Context {
        client,
        resync: Duration::from_secs(300),
        reconciles: Default::default(),
    };
    run(Arc::new(ctx)).await;
    Ok(())
}
