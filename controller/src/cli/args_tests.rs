//! Unit tests of `args.rs`, `kmeta run`'s flags (a file of their own: `controller/tests/deploy.rs`
//! compiles `args.rs` and would run them again).

use std::time::Duration;

use kmeta::reconcile::ApplyStrategy;

use super::args::*;
use clap::error::ContextKind;

fn parse(args: &[&str]) -> Result<RunConfig, CliError> {
    parse_run_args(args)
}

/// The flag an error names: its own, or the one clap refused.
fn flag_of(args: &[&str]) -> String {
    match parse(args) {
        Err(CliError::Invalid { flag, .. }) => flag.to_owned(),
        Err(CliError::Flags(e)) => {
            let arg = e.get(ContextKind::InvalidArg).map(ToString::to_string);
            let arg = arg.unwrap_or_else(|| panic!("{args:?}: {e}"));
            let name = arg.split_whitespace().next().unwrap_or_default();
            name.trim_start_matches("--").to_owned()
        }
        other => panic!("{args:?}: {other:?}"),
    }
}

/// The error text of a refused command line, which must name the flag and the value.
fn refused(args: &[&str], flag: &str, value: &str) -> String {
    let e = parse(args).expect_err("refused").to_string();
    assert!(e.contains(&format!("'--{flag}")), "{args:?}: {e}");
    assert!(e.contains(&format!("'{value}'")), "{args:?}: {e}");
    e
}

#[test]
fn defaults_are_metacontrollers() {
    let c = parse(&[]).expect("defaults");
    assert_eq!(c.discovery_interval, Duration::from_secs(30));
    assert_eq!(c.cache_flush_interval, Some(Duration::from_secs(1800)));
    assert_eq!(c.workers, 5);
    assert_eq!((c.qps, c.burst), (5.0, 10));
    assert_eq!(
        c.metrics_address,
        Some("0.0.0.0:9999".parse().expect("addr"))
    );
    assert_eq!(
        c.health_address,
        Some("0.0.0.0:8081".parse().expect("addr"))
    );
    assert_eq!(c.leader, None);
    assert_eq!(c.target_label_selector, None);
    assert_eq!(
        c.default_service_account, None,
        "kmeta's own identity by default"
    );
    assert!((c.events_qps - 1.0 / 300.0).abs() < 1e-12);
    assert_eq!(c.events_burst, 25);
    assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(c.log.format, LogFormat::Text);
    assert!(c.ignored.is_empty());
}

#[test]
fn metacontroller_manifest_args_carry_over() {
    // The args of Metacontroller's own production manifest plus common overrides.
    let c = parse(&[
        "--zap-log-level=4",
        "--discovery-interval=20s",
        "--leader-election",
        "--leader-election-namespace=metacontroller",
        "--workers=50",
        "--client-go-qps=150",
        "--client-go-burst=300",
        "--metrics-address=0",
        "--target-label-selector=shard in (a,b)",
    ])
    .expect("valid");
    assert_eq!(c.discovery_interval, Duration::from_secs(20));
    assert_eq!(c.log.filter.as_deref(), Some("debug"));
    assert_eq!(
        c.leader,
        Some(LeaderFlags {
            namespace: "metacontroller".into(),
            name: "metacontroller".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        })
    );
    assert_eq!((c.workers, c.qps, c.burst), (50, 150.0, 300));
    assert_eq!(c.metrics_address, None);
    assert_eq!(c.target_label_selector.as_deref(), Some("shard in (a,b)"));
}

#[test]
fn sharding_flags_are_checked() {
    let c = parse(&["--sharding", "--leader-election-namespace=kmeta"]).expect("valid");
    let s = c.sharding.expect("sharding on");
    assert_eq!((s.buckets, s.prefix.as_str()), (32, "kmeta-shard"));
    assert_eq!(s.namespace, "kmeta");
    assert_eq!(
        (
            s.lease_duration,
            s.renew_deadline,
            s.retry_period,
            s.drain_timeout
        ),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2),
            Duration::from_secs(10)
        )
    );
    assert_eq!(c.leader, None);
    assert_eq!(parse(&[]).expect("valid").sharding, None);
    assert_eq!(flag_of(&["--sharding", "--leader-election"]), "sharding");
    assert_eq!(s.key, ShardKey::Namespace);
    let by_uid = parse(&["--sharding", "--shard-key=uid"]).expect("valid");
    assert_eq!(by_uid.sharding.map(|s| s.key), Some(ShardKey::Uid));
    // clap names the flag --shard-key=uid requires, and shows the two in its usage line
    assert_eq!(flag_of(&["--shard-key=uid"]), "sharding");
    let e = parse(&["--shard-key=uid"]).expect_err("needs --sharding");
    assert!(
        e.to_string().contains("--sharding --shard-key <KEY>"),
        "{e}"
    );
    assert_eq!(flag_of(&["--shard-watch=server"]), "sharding");
    assert_eq!(
        flag_of(&["--sharding", "--shard-key=uid", "--shard-watch=server"]),
        "shard-key"
    );
    assert_eq!(
        flag_of(&["--sharding", "--shard-buckets=12"]),
        "shard-buckets"
    );
    assert_eq!(
        flag_of(&["--sharding", "--shard-lease-prefix=Bad_"]),
        "shard-lease-prefix"
    );
    assert_eq!(
        flag_of(&[
            "--sharding",
            "--shard-lease-duration=5s",
            "--shard-renew-deadline=6s"
        ]),
        "shard-lease-duration"
    );
    let short = parse(&[
        "--sharding",
        "--shard-buckets=8",
        "--shard-lease-duration=3s",
        "--shard-renew-deadline=2s",
        "--shard-retry-period=300ms",
        "--shard-drain-timeout=1s",
    ])
    .expect("valid")
    .sharding
    .expect("on");
    assert_eq!(
        (short.buckets, short.drain_timeout),
        (8, Duration::from_secs(1))
    );
}

#[test]
fn go_durations() {
    let d = |s| duration_value(s).ok();
    assert_eq!(d("0"), Some(Duration::ZERO));
    assert_eq!(d("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(d("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(d("1.5h"), Some(Duration::from_secs(5400)));
    assert_eq!(d("2m3s"), Some(Duration::from_secs(123)));
    for bad in ["", "30", "-5s", "abc", "PT5S", "5 s"] {
        assert!(d(bad).is_none(), "{bad:?} must be rejected");
    }
}

#[test]
fn bind_addresses() {
    let a = |s| bind_address_value(s).ok().map(|b| b.0);
    assert_eq!(a("0"), Some(None));
    assert_eq!(
        a(":9999"),
        Some(Some("0.0.0.0:9999".parse().expect("addr")))
    );
    assert_eq!(
        a("127.0.0.1:80"),
        Some(Some("127.0.0.1:80".parse().expect("addr")))
    );
    assert_eq!(
        a("localhost:8081"),
        Some(Some("127.0.0.1:8081".parse().expect("addr")))
    );
    assert_eq!(a("[::1]:81"), Some(Some("[::1]:81".parse().expect("addr"))));
    for bad in ["9999", ":http", "example.com:80", ":70000"] {
        assert!(a(bad).is_none(), "{bad:?} must be rejected");
    }
}

#[test]
fn bad_values_name_the_flag() {
    let c = parse(&[
        "--apply-strategy=server-side-apply",
        "--apply-strategy-ssa-field-manager=acme",
    ])
    .expect("ssa");
    assert_eq!(c.apply_strategy, ApplyStrategy::ServerSideApply);
    assert_eq!(c.ssa_field_manager, "acme");
    assert!(c.ignored.is_empty(), "{:?}", c.ignored);
    let e = parse(&["--apply-strategy-ssa-field-manager="]).expect_err("empty prefix");
    assert!(
        e.to_string()
            .starts_with("--apply-strategy-ssa-field-manager: "),
        "{e}"
    );
    let e = refused(&["--apply-strategy=merge"], "apply-strategy", "merge");
    assert!(e.contains("unknown apply strategy"), "{e}");
    let e = refused(&["--discovery-interval=30"], "discovery-interval", "30");
    assert!(e.contains("Go duration"), "{e}");
    let e = refused(&["--metrics-address=9999"], "metrics-address", "9999");
    assert!(e.contains("bind address"), "{e}");
    let e = parse(&["--target-label-selector=a in b"]).expect_err("bad selector");
    assert!(
        e.to_string().starts_with("--target-label-selector: "),
        "{e}"
    );
    assert_eq!(
        parse(&["--default-service-account=kmeta-writer"])
            .expect("sa")
            .default_service_account
            .as_deref(),
        Some("kmeta-writer")
    );
    let e = parse(&["--default-service-account=Writer"]).expect_err("bad sa");
    assert!(
        e.to_string().starts_with("--default-service-account: "),
        "{e}"
    );
    let e = refused(
        &["--leader-election-resource-lock=configmaps"],
        "leader-election-resource-lock",
        "configmaps",
    );
    assert!(e.contains("leases"), "{e}");
    assert!(parse(&["--workers=0"]).is_err());
    assert!(parse(&["--client-go-qps=-1"]).is_err());
    assert!(parse(&["--zap-log-level=verbose"]).is_err());
}

#[test]
fn zero_disables_limits_and_flushes() {
    let c = parse(&["--client-go-qps=0", "--cache-flush-interval=0"]).expect("valid");
    assert_eq!(c.qps, 0.0);
    assert_eq!(c.cache_flush_interval, None);
}

#[test]
fn logging_flags() {
    let c = parse(&["--zap-encoder=json"]).expect("valid");
    assert_eq!(c.log.format, LogFormat::Json);
    let c = parse(&["--zap-devel"]).expect("valid");
    assert_eq!(
        c.log,
        LogConfig {
            format: LogFormat::Text,
            filter: Some("debug".into())
        }
    );
    // --log-level wins over the zap level.
    let c = parse(&["--zap-log-level=6", "--log-level=kmeta=trace,info"]).expect("valid");
    assert_eq!(c.log.filter.as_deref(), Some("kmeta=trace,info"));
    let c = parse(&["--zap-log-level=6"]).expect("valid");
    assert_eq!(c.log.filter.as_deref(), Some("trace"));
}

#[test]
fn unused_compat_flags_are_reported() {
    let c = parse(&["--pprof-address=:6060", "--zap-time-encoding=iso8601"]).expect("valid");
    assert_eq!(
        c.ignored,
        vec![
            ("pprof-address", ":6060".to_owned()),
            ("zap-time-encoding", "iso8601".to_owned())
        ]
    );
}

#[test]
fn leader_election_timings_are_set_and_checked() {
    let c = parse(&[
        "--leader-election",
        "--leader-election-namespace=kmeta",
        "--leader-election-lease-duration=3s",
        "--leader-election-renew-deadline=2s",
        "--leader-election-retry-period=300ms",
    ])
    .expect("valid");
    let l = c.leader.expect("leader election on");
    assert_eq!(
        (l.lease_duration, l.renew_deadline, l.retry_period),
        (
            Duration::from_secs(3),
            Duration::from_secs(2),
            Duration::from_millis(300)
        )
    );
    // a renew deadline past the Lease would let two leaders work at once: refused, named
    let e = parse(&[
        "--leader-election",
        "--leader-election-namespace=kmeta",
        "--leader-election-lease-duration=5s",
        "--leader-election-renew-deadline=10s",
    ])
    .expect_err("renew deadline past the lease");
    let text = e.to_string();
    assert!(
        text.contains("leader-election-lease-duration") && text.contains("renew deadline"),
        "{text}"
    );
}

#[test]
fn watch_list_is_auto_unless_turned_off() {
    use kmeta::WatchListMode;
    assert_eq!(
        parse(&[]).expect("defaults").watch_list,
        WatchListMode::Auto
    );
    let off = parse(&["--watch-list=off"]).expect("off");
    assert_eq!(off.watch_list, WatchListMode::Off);
    let auto = parse(&["--watch-list", "auto"]).expect("auto");
    assert_eq!(auto.watch_list, WatchListMode::Auto);
    refused(&["--watch-list=on"], "watch-list", "on");
}
