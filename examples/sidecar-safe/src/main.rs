//! The sidecar-safe hook server: `sidecar-safe-hook [ADDR]` (default `127.0.0.1:8080`; also
//! `HOOK_ADDR`), serving `POST /sync`.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("HOOK_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    eprintln!("sidecar-safe hook listening on http://{addr}/sync");
    kmeta_example_sidecar_safe::hooks().serve(&addr).await
}
