//! The drain-before-delete hook server: `drain-before-delete-hook [ADDR]` (default
//! `127.0.0.1:8080`; also `HOOK_ADDR`), serving `POST /sync` and `POST /finalize`.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("HOOK_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    eprintln!("drain-before-delete hooks listening on http://{addr}/sync and /finalize");
    kmeta_example_drain_before_delete::hooks()
        .serve(&addr)
        .await
}
