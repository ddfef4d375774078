//! Command-line flags of `kmeta run` and `kmeta dev`, and their validation into a [`RunConfig`].
//!
//! Flag names and defaults are Metacontroller v4.17's (`pkg/cmd/metacontroller/main.go`), so an
//! existing Deployment's `args:` carry over unchanged. Parsing into the config is a pure function
//! ([`RunArgs::to_config`]) with unit tests; nothing here touches the network.
//!
//! Metacontroller flags that are accepted but have no effect in kmeta (a warning is logged at
//! start when they are set to a non-default value): `--pprof-address`,
//! `--zap-stacktrace-level`, `--zap-time-encoding`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

pub use kmeta::coord::shard::ShardKey;
use kmeta::reconcile::{ApplyStrategy, MAX_FIELD_MANAGER};

/// The longest `--apply-strategy-ssa-field-manager`: half of a field manager's 128 characters,
/// the rest being the controller name and the parent UID hash.
const MAX_FIELD_MANAGER_PREFIX: usize = MAX_FIELD_MANAGER / 2;

pub use kmeta::ops::logging::{LogConfig, LogFormat};

/// A refused `kmeta run` flag. The value variants (`Duration` … `LeasePrefix`) are what clap prints
/// after the flag and the value (`invalid value 'soon' for '--discovery-interval <DURATION>': not
/// a Go duration …`); `Invalid` names its flag itself; `Flags` is clap's own refusal.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Not a Go-style duration.
    #[error("not a Go duration (use Go syntax such as 30s, 5m, 1h30m, 500ms)")]
    Duration,
    /// Neither "0", ":PORT" nor "HOST:PORT".
    #[error("not a bind address (use :PORT, HOST:PORT, or 0 to disable)")]
    Address,
    /// Not an apply strategy.
    #[error("{message}")]
    ApplyStrategy {
        /// What is wrong.
        message: String,
    },
    /// Not a usable number of shard buckets.
    #[error("must be a power of two from 1 to 1024")]
    BucketCount,
    /// Not a usable shard Lease prefix.
    #[error("must be 1 to 40 lowercase letters, digits or '-', starting with a letter or digit")]
    LeasePrefix,
    /// A value that passed its flag's parser but not the checks across flags.
    #[error("--{flag}: {message}")]
    Invalid {
        /// Flag name.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Refused by clap (an unknown flag, a malformed value, a conflict between flags).
    #[error("{0}")]
    Flags(#[from] clap::Error),
}

/// Flags of `kmeta run` (the in-cluster controller).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Path to a kubeconfig. Default: in-cluster service account, else $KUBECONFIG / ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// How often discovery is refreshed, so CRDs created later are picked up.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = duration_value)]
    pub discovery_interval: Duration,
    /// How often every cached parent and target is resynced (Metacontroller's informer resync
    /// period; the watches stay open). "0" disables.
    #[arg(long, default_value = "30m", value_name = "DURATION", value_parser = duration_value)]
    pub cache_flush_interval: Duration,
    /// How a watch gets its initial state: `auto`, a watch-list (one watch with
    /// sendInitialEvents) where the API server offers it, else a list then a watch; `off`,
    /// always a list then a watch.
    #[arg(long, value_enum, default_value_t = WatchList::Auto, value_name = "MODE")]
    pub watch_list: WatchList,
    /// The shortest resync a hook's `resyncAfterSeconds` can ask for, so a tiny value cannot turn
    /// one parent into a hook-call loop (kmeta's, opt-in). "0", the default, sets none, as
    /// Metacontroller.
    #[arg(long, default_value = "0", value_name = "DURATION", value_parser = duration_value)]
    pub min_resync_after: Duration,
    /// Concurrent syncs per CompositeController or DecoratorController.
    #[arg(long, default_value_t = 5)]
    pub workers: usize,
    /// API requests per second (client-side token bucket on every request). 0 disables limiting.
    #[arg(long, default_value_t = 5.0)]
    pub client_go_qps: f64,
    /// API request burst above --client-go-qps.
    #[arg(long, default_value_t = 10)]
    pub client_go_burst: u32,
    /// Address of the Prometheus /metrics endpoint; "0" disables it.
    #[arg(long, default_value = ":9999", value_name = "ADDR", value_parser = bind_address_value)]
    pub metrics_address: BindAddress,
    /// Address of /healthz and /readyz; "0" disables them.
    #[arg(long, default_value = ":8081", value_name = "ADDR", value_parser = bind_address_value)]
    pub health_probe_bind_address: BindAddress,
    /// Run only while holding a coordination.k8s.io Lease, so replicas can stand by.
    #[arg(long)]
    pub leader_election: bool,
    /// Namespace of the Lease. Default: the pod's namespace (required out of cluster).
    #[arg(
        long,
        default_value = "",
        hide_default_value = true,
        value_name = "NAMESPACE"
    )]
    pub leader_election_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "metacontroller", value_name = "NAME")]
    pub leader_election_id: String,
    /// Lock type; only "leases" is supported (Metacontroller's default).
    #[arg(long, value_enum, default_value_t = ResourceLock::Leases, value_name = "LOCK")]
    pub leader_election_resource_lock: ResourceLock,
    /// How long the leader's Lease stays valid after its last renewal: a standby takes over
    /// this long after a leader died (the 15 s Metacontroller gets from controller-runtime).
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = duration_value)]
    pub leader_election_lease_duration: Duration,
    /// How long the leader keeps working without a successful renewal (controller-runtime's
    /// 10 s); less than the Lease duration.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration_value)]
    pub leader_election_renew_deadline: Duration,
    /// Interval of the leader's renewals and of a standby's attempts (controller-runtime's 2 s).
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = duration_value)]
    pub leader_election_retry_period: Duration,
    /// kmeta: serve kro's ResourceGraphDefinitions (kro.run/v1alpha1): install their CRD when
    /// missing, and run each RGD as its instance CRD and a CompositeController with a CEL hook
    /// (docs/design/cel-hooks.md). Under --leader-election only the leader serves them, under
    /// --sharding the replica holding the cluster bucket.
    #[arg(long)]
    pub serve_kro: bool,
    /// kmeta: kro's --allow-crd-deletion: deleting a ResourceGraphDefinition deletes its
    /// instance CRD, and so every instance and their children (off: they stay). Needs `delete`
    /// on customresourcedefinitions (kmeta rbac --kro-allow-crd-deletion).
    #[arg(long, requires = "serve_kro")]
    pub kro_allow_crd_deletion: bool,
    /// Split the parents between every replica running with this flag: each holds a share of
    /// the shard buckets (Leases in --leader-election-namespace); excludes --leader-election
    /// (every sharded replica works; each bucket has its own Lease).
    #[arg(long, help_heading = "Sharding", conflicts_with = "leader_election")]
    pub sharding: bool,
    /// Number of hash buckets of namespaces (a power of two, 1 to 1024); every replica of a set
    /// must agree. The cluster-scoped parents have one more bucket.
    #[arg(
        long,
        default_value_t = 32,
        value_name = "N",
        value_parser = bucket_count_value,
        help_heading = "Sharding"
    )]
    pub shard_buckets: u32,
    /// Prefix of the shard Leases' names and value of their `kmeta.dev/shard-set` label.
    #[arg(
        long,
        default_value = "kmeta-shard",
        value_name = "PREFIX",
        value_parser = lease_prefix_value,
        help_heading = "Sharding"
    )]
    pub shard_lease_prefix: String,
    /// How long a bucket Lease stays valid after its holder's last renewal.
    #[arg(
        long,
        default_value = "15s",
        value_name = "DURATION",
        value_parser = duration_value,
        help_heading = "Sharding"
    )]
    pub shard_lease_duration: Duration,
    /// How long a replica keeps writing for a bucket without a successful renewal.
    #[arg(
        long,
        default_value = "10s",
        value_name = "DURATION",
        value_parser = duration_value,
        help_heading = "Sharding"
    )]
    pub shard_renew_deadline: Duration,
    /// Interval of the bucket Lease loop (renewals, acquisitions, hand-overs).
    #[arg(
        long,
        default_value = "2s",
        value_name = "DURATION",
        value_parser = duration_value,
        help_heading = "Sharding"
    )]
    pub shard_retry_period: Duration,
    /// How long a bucket being handed over waits for its syncs in flight [default: the renew
    /// deadline].
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration_value,
        help_heading = "Sharding"
    )]
    pub shard_drain_timeout: Option<Duration>,
    /// Who filters a replica's watches to its buckets: `client` (every replica lists and
    /// watches everything and drops other buckets' parents) or `server` (the API server's
    /// KEP-5866 `shardSelector` sends each replica only its namespaces; buckets are then plain
    /// FNV-1a ranges, which spread namespaces named alike such as team-1…team-99 badly; a
    /// resource the server does not shard is watched whole). Every replica must agree.
    #[arg(
        long,
        value_enum,
        default_value_t = ShardWatch::Client,
        value_name = "MODE",
        requires_if("server", "sharding"),
        help_heading = "Sharding"
    )]
    pub shard_watch: ShardWatch,
    /// What places a parent in a bucket: `namespace` (a namespace's parents, children and
    /// orphans stay with one replica) or `uid` (the parent's uid: one huge namespace spreads over
    /// every replica; needs --shard-watch=client, and replicas may race for an orphan two
    /// parents select). Every replica must agree.
    #[arg(
        long,
        value_enum,
        default_value_t = ShardKey::Namespace,
        value_name = "KEY",
        requires_if("uid", "sharding"),
        help_heading = "Sharding"
    )]
    pub shard_key: ShardKey,
    /// Only run CompositeControllers and DecoratorControllers whose labels match this selector
    /// (e.g. "shard=a").
    #[arg(
        long,
        default_value = "",
        hide_default_value = true,
        value_name = "SELECTOR"
    )]
    pub target_label_selector: String,
    /// Events per second per object and reason after the burst [default: 1/300, one per 5
    /// minutes].
    #[arg(long, default_value_t = 1.0 / 300.0, hide_default_value = true, value_name = "QPS")]
    pub events_qps: f64,
    /// Events per object and reason allowed before --events-qps applies.
    #[arg(long, default_value_t = 25)]
    pub events_burst: u32,
    /// How children are updated: "dynamic-apply" (three-way merge, PUT) or "server-side-apply"
    /// (apply patches, one field manager per parent); a controller's `kmeta.dev/apply-strategy`
    /// annotation overrides it.
    #[arg(
        long,
        default_value = "dynamic-apply",
        value_name = "STRATEGY",
        value_parser = apply_strategy_value
    )]
    pub apply_strategy: ApplyStrategy,
    /// Prefix of the field managers of child writes: `<prefix>/<controller>/<parent uid hash>`.
    #[arg(long, default_value = "metacontroller", value_name = "NAME")]
    pub apply_strategy_ssa_field_manager: String,
    /// Make impersonation mandatory: every controller naming no `spec.serviceAccountName` has
    /// its child writes and related reads made as this ServiceAccount, in the parent's namespace
    /// (or the controller's `spec.serviceAccountNamespace`) [default: none, kmeta's own
    /// identity].
    #[arg(
        long,
        default_value = "",
        hide_default_value = true,
        value_name = "NAME"
    )]
    pub default_service_account: String,
    /// pprof address of Metacontroller (accepted for compatibility; kmeta serves no pprof).
    #[arg(long, default_value = "0", value_name = "ADDR")]
    pub pprof_address: String,
    /// How long in-flight syncs may run after SIGTERM/SIGINT before the process exits.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = duration_value)]
    pub shutdown_timeout: Duration,
    /// Logging flags.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Logging flags (shared by `run` and `dev`).
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter (error, warn, info, debug, trace, or a RUST_LOG directive such as
    /// "kmeta=debug"). Default: $RUST_LOG, else "info".
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Metacontroller's zap log level (accepted: 0-3 → info, 4-5 → debug, 6+ → trace, or a name).
    #[arg(
        long,
        value_name = "LEVEL",
        help_heading = "Metacontroller compatibility"
    )]
    pub zap_log_level: Option<String>,
    /// Metacontroller's zap encoder (json or console), mapped to --log-format.
    #[arg(
        long,
        value_name = "ENCODER",
        help_heading = "Metacontroller compatibility"
    )]
    pub zap_encoder: Option<String>,
    /// Metacontroller's zap development mode: text logs at debug level.
    #[arg(long, help_heading = "Metacontroller compatibility")]
    pub zap_devel: bool,
    /// Accepted for compatibility; ignored.
    #[arg(
        long,
        value_name = "LEVEL",
        help_heading = "Metacontroller compatibility"
    )]
    pub zap_stacktrace_level: Option<String>,
    /// Accepted for compatibility; ignored.
    #[arg(
        long,
        value_name = "ENCODING",
        help_heading = "Metacontroller compatibility"
    )]
    pub zap_time_encoding: Option<String>,
}

/// `--shard-watch`: who filters a sharded replica's watches to its buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ShardWatch {
    /// The replica: it watches everything (namespaces placed by a mixed hash).
    #[default]
    Client,
    /// The API server, by KEP-5866 `shardSelector` (namespaces placed by plain FNV-1a ranges).
    Server,
}

/// `--watch-list`: how a watch gets its initial state (docs/design/initial-list.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WatchList {
    /// A watch-list where the API server offers it, else a list then a watch.
    #[default]
    Auto,
    /// Always a list then a watch.
    Off,
}

impl From<WatchList> for kmeta::WatchListMode {
    fn from(w: WatchList) -> Self {
        match w {
            WatchList::Auto => kmeta::WatchListMode::Auto,
            WatchList::Off => kmeta::WatchListMode::Off,
        }
    }
}

/// `--leader-election-resource-lock`: only `leases`, coordination.k8s.io Leases (Metacontroller's
/// default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[allow(missing_docs)] // a doc comment would turn `--help`'s line into a list of values
pub enum ResourceLock {
    // coordination.k8s.io Leases
    #[default]
    Leases,
}

/// A bind address flag: an address, or `None` for "0" (disabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindAddress(pub Option<SocketAddr>);

/// Sharding settings from the flags (`--sharding`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardFlags {
    /// Lease namespace; empty: the pod's namespace, read at start.
    pub namespace: String,
    /// `--shard-buckets`.
    pub buckets: u32,
    /// `--shard-lease-prefix`.
    pub prefix: String,
    /// `--shard-lease-duration`.
    pub lease_duration: Duration,
    /// `--shard-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--shard-retry-period`.
    pub retry_period: Duration,
    /// `--shard-drain-timeout` (default: the renew deadline).
    pub drain_timeout: Duration,
    /// `--shard-watch`.
    pub watch: ShardWatch,
    /// `--shard-key`.
    pub key: ShardKey,
    /// `--leader-election-id`: the Lease a leader-mode kmeta or Metacontroller would hold; the
    /// sharded replicas work only while one of them holds it.
    pub leader_lease: String,
}

/// Leader election settings from the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderFlags {
    /// Lease namespace; empty: the pod's namespace, read at start.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// `--leader-election-lease-duration`.
    pub lease_duration: Duration,
    /// `--leader-election-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-election-retry-period`.
    pub retry_period: Duration,
}

/// Everything `kmeta run` needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Explicit kubeconfig path.
    pub kubeconfig: Option<PathBuf>,
    /// Discovery refresh period.
    pub discovery_interval: Duration,
    /// Resync period of every cached parent and target (None: never).
    pub cache_flush_interval: Option<Duration>,
    /// How a watch gets its initial state.
    pub watch_list: kmeta::WatchListMode,
    /// The shortest `resyncAfterSeconds` honoured (zero: no minimum).
    pub min_resync_after: Duration,
    /// Workers per CompositeController.
    pub workers: usize,
    /// API requests per second (0: unlimited).
    pub qps: f64,
    /// API request burst.
    pub burst: u32,
    /// Metrics endpoint (None: disabled).
    pub metrics_address: Option<SocketAddr>,
    /// Health endpoint (None: disabled).
    pub health_address: Option<SocketAddr>,
    /// Leader election (None: disabled).
    pub leader: Option<LeaderFlags>,
    /// Sharding (None: disabled).
    pub sharding: Option<ShardFlags>,
    /// Serve kro's ResourceGraphDefinitions (`--serve-kro`).
    pub serve_kro: bool,
    /// Delete an RGD's instance CRD with it (`--kro-allow-crd-deletion`).
    pub kro_allow_crd_deletion: bool,
    /// CompositeController label selector.
    pub target_label_selector: Option<String>,
    /// Event rate per object and reason.
    pub events_qps: f64,
    /// Event burst per object and reason.
    pub events_burst: u32,
    /// Bound on in-flight work after a termination signal.
    pub shutdown_timeout: Duration,
    /// Logging.
    pub log: LogConfig,
    /// Flags accepted for compatibility whose values have no effect (flag, value).
    pub ignored: Vec<(&'static str, String)>,
    /// `--apply-strategy`.
    pub apply_strategy: ApplyStrategy,
    /// `--apply-strategy-ssa-field-manager`: the field manager prefix.
    pub ssa_field_manager: String,
    /// `--default-service-account` (None: kmeta's own identity for controllers naming none).
    pub default_service_account: Option<String>,
}

/// `--…-interval`, `--…-timeout` and the other durations, clap's value parser: a Go
/// `time.ParseDuration` string ("30s", "1h30m", "500ms", "0").
pub fn duration_value(value: &str) -> Result<Duration, CliError> {
    kmeta::duration::go_duration(value).ok_or(CliError::Duration)
}

/// `--metrics-address` and `--health-probe-bind-address`, clap's value parser: a Go-style bind
/// address, "0" disables, ":PORT" binds every interface, "HOST:PORT" binds HOST (an IP or
/// "localhost").
pub fn bind_address_value(value: &str) -> Result<BindAddress, CliError> {
    let s = value.trim();
    if s == "0" {
        return Ok(BindAddress(None));
    }
    let (host, port) = s.rsplit_once(':').ok_or(CliError::Address)?;
    let port: u16 = port.parse().map_err(|_| CliError::Address)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h.parse().map_err(|_| CliError::Address)?,
    };
    Ok(BindAddress(Some(SocketAddr::new(ip, port))))
}

/// `--apply-strategy`, clap's value parser.
fn apply_strategy_value(value: &str) -> Result<ApplyStrategy, CliError> {
    value
        .parse::<ApplyStrategy>()
        .map_err(|e| CliError::ApplyStrategy {
            message: e.to_string(),
        })
}

/// `--shard-buckets`, clap's value parser: a power of two from 1 to 1024.
fn bucket_count_value(value: &str) -> Result<u32, CliError> {
    let buckets: u32 = value.trim().parse().map_err(|_| CliError::BucketCount)?;
    kmeta::coord::shard::valid_bucket_count(buckets)
        .then_some(buckets)
        .ok_or(CliError::BucketCount)
}

/// A Lease's timings (`lease`, `renew` deadline, `retry` period) checked as client-go's leader
/// election checks them; an error names `flag`.
fn check_lease_timings(
    flag: &'static str,
    lease: Duration,
    renew: Duration,
    retry: Duration,
) -> Result<(), CliError> {
    let timings = kmeta::coord::leader::LeaderConfig {
        lease_duration: lease,
        renew_deadline: renew,
        retry_period: retry,
        ..kmeta::coord::leader::LeaderConfig::default()
    };
    timings.validate().map_err(|e| CliError::Invalid {
        flag,
        message: e.to_string(),
    })
}

/// `--shard-lease-prefix`, clap's value parser: 1 to 40 lowercase letters, digits or '-',
/// starting with a letter or digit (the Leases' names start with it).
fn lease_prefix_value(value: &str) -> Result<String, CliError> {
    let prefix = value.trim();
    let valid = !prefix.is_empty()
        && prefix.len() <= 40
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && prefix.starts_with(|c: char| c.is_ascii_alphanumeric());
    valid
        .then(|| prefix.to_owned())
        .ok_or(CliError::LeasePrefix)
}

impl LogArgs {
    /// Validates the logging flags, mapping Metacontroller's zap flags onto kmeta's.
    pub fn to_config(&self) -> Result<LogConfig, CliError> {
        let mut format = self.log_format;
        if let Some(enc) = &self.zap_encoder {
            format = match enc.as_str() {
                "json" => LogFormat::Json,
                "console" => LogFormat::Text,
                other => {
                    return Err(CliError::Invalid {
                        flag: "zap-encoder",
                        message: format!("unknown encoder {other:?} (json or console)"),
                    });
                }
            };
        }
        let mut filter = None;
        if self.zap_devel {
            format = LogFormat::Text;
            filter = Some("debug".to_owned());
        }
        if let Some(level) = &self.zap_log_level {
            filter = Some(zap_level(level)?.to_owned());
        }
        if let Some(level) = &self.log_level {
            let level = level.trim();
            if level.is_empty() {
                return Err(CliError::Invalid {
                    flag: "log-level",
                    message: "empty filter".into(),
                });
            }
            filter = Some(level.to_owned());
        }
        Ok(LogConfig { format, filter })
    }
}

/// Maps a zap level (a name, or controller-runtime's numeric verbosity) to a tracing level:
/// Metacontroller logs API actions at V(4), diffs at V(5) and hook bodies at V(6).
fn zap_level(level: &str) -> Result<&'static str, CliError> {
    let bad = || CliError::Invalid {
        flag: "zap-log-level",
        message: format!("unknown level {level:?} (debug, info, error, or a number)"),
    };
    match level {
        "debug" => Ok("debug"),
        "info" => Ok("info"),
        "warn" => Ok("warn"),
        "error" | "dpanic" | "panic" | "fatal" => Ok("error"),
        n => match n.parse::<i64>().map_err(|_| bad())? {
            ..=3 => Ok("info"),
            4..=5 => Ok("debug"),
            _ => Ok("trace"),
        },
    }
}

impl RunArgs {
    /// Validates the flags into a [`RunConfig`] (pure: no IO).
    ///
    /// The checks run in a fixed order, so the first invalid flag reported is always the same.
    pub fn to_config(&self) -> Result<RunConfig, CliError> {
        let ssa_field_manager = self.check_field_manager_prefix()?;
        self.check_workers_and_rates()?;
        self.check_target_label_selector()?;
        let default_service_account = self.check_default_service_account()?;
        let leader = self.leader_flags()?;
        let sharding = self.shard_flags()?;
        self.check_discovery_interval()?;
        Ok(RunConfig {
            kubeconfig: self.kubeconfig.clone(),
            discovery_interval: self.discovery_interval,
            cache_flush_interval: Some(self.cache_flush_interval).filter(|d| !d.is_zero()),
            watch_list: self.watch_list.into(),
            workers: self.workers,
            qps: self.client_go_qps,
            burst: self.client_go_burst,
            metrics_address: self.metrics_address.0,
            health_address: self.health_probe_bind_address.0,
            leader,
            sharding,
            serve_kro: self.serve_kro,
            kro_allow_crd_deletion: self.kro_allow_crd_deletion,
            target_label_selector: Some(self.target_label_selector.trim().to_owned())
                .filter(|s| !s.is_empty()),
            events_qps: self.events_qps,
            events_burst: self.events_burst,
            shutdown_timeout: self.shutdown_timeout,
            min_resync_after: self.min_resync_after,
            log: self.log.to_config()?,
            apply_strategy: self.apply_strategy,
            ssa_field_manager,
            default_service_account,
            ignored: self.ignored_flags(),
        })
    }

    /// `--apply-strategy-ssa-field-manager`: a non-empty prefix that leaves room in
    /// Kubernetes' 128 characters for the controller and parent parts.
    fn check_field_manager_prefix(&self) -> Result<String, CliError> {
        let prefix = self.apply_strategy_ssa_field_manager.trim();
        if prefix.is_empty() || prefix.len() > MAX_FIELD_MANAGER_PREFIX {
            return Err(CliError::Invalid {
                flag: "apply-strategy-ssa-field-manager",
                message: format!(
                    "must be 1 to {MAX_FIELD_MANAGER_PREFIX} characters, got {}",
                    prefix.len()
                ),
            });
        }
        Ok(prefix.to_owned())
    }

    /// `--default-service-account`: empty, or a ServiceAccount name (a DNS subdomain: lowercase
    /// letters, digits, `-` and `.`, at most 253 characters).
    fn check_default_service_account(&self) -> Result<Option<String>, CliError> {
        let name = self.default_service_account.trim();
        if name.is_empty() {
            return Ok(None);
        }
        let valid = name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid {
            return Err(CliError::Invalid {
                flag: "default-service-account",
                message: format!(
                    "{name:?} is not a ServiceAccount name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
                ),
            });
        }
        Ok(Some(name.to_owned()))
    }

    /// `--workers`, `--client-go-qps`, `--client-go-burst` and `--events-qps`.
    fn check_workers_and_rates(&self) -> Result<(), CliError> {
        if self.workers == 0 {
            return Err(CliError::Invalid {
                flag: "workers",
                message: "must be at least 1".into(),
            });
        }
        if !self.client_go_qps.is_finite() || self.client_go_qps < 0.0 {
            return Err(CliError::Invalid {
                flag: "client-go-qps",
                message: format!("must be a number >= 0, got {}", self.client_go_qps),
            });
        }
        if self.client_go_qps > 0.0 && self.client_go_burst == 0 {
            return Err(CliError::Invalid {
                flag: "client-go-burst",
                message: "must be at least 1 when --client-go-qps is positive".into(),
            });
        }
        if !self.events_qps.is_finite() || self.events_qps < 0.0 {
            return Err(CliError::Invalid {
                flag: "events-qps",
                message: format!("must be a number >= 0, got {}", self.events_qps),
            });
        }
        Ok(())
    }

    /// `--target-label-selector`, parsed when the embedded API server's parser is built in.
    fn check_target_label_selector(&self) -> Result<(), CliError> {
        // Without the embedded API server (and its selector parser) a bad selector is reported
        // by the API server when the CompositeController watch starts.
        #[cfg(feature = "embedded-apiserver")]
        {
            let selector = self.target_label_selector.trim();
            if !selector.is_empty() {
                kmeta_apiserver::selector::LabelSelector::parse(selector).map_err(|e| {
                    CliError::Invalid {
                        flag: "target-label-selector",
                        message: e.to_string(),
                    }
                })?;
            }
        }
        Ok(())
    }

    /// `--sharding` and its settings (None: disabled). Clap has checked each value, that
    /// `--sharding` comes without `--leader-election`, and that `--shard-watch=server` and
    /// `--shard-key=uid` come with it; left are the rules across values: `uid` needs the
    /// client's watch, and the Lease timings as leader election checks them.
    fn shard_flags(&self) -> Result<Option<ShardFlags>, CliError> {
        if !self.sharding {
            return Ok(None);
        }
        if self.shard_key == ShardKey::Uid && self.shard_watch == ShardWatch::Server {
            return Err(CliError::Invalid {
                flag: "shard-key",
                message: "uid needs --shard-watch=client: children carry their own uid, so the API server cannot split their watches by their parent's".into(),
            });
        }
        check_lease_timings(
            "shard-lease-duration",
            self.shard_lease_duration,
            self.shard_renew_deadline,
            self.shard_retry_period,
        )?;
        Ok(Some(ShardFlags {
            namespace: self.leader_election_namespace.trim().to_owned(),
            buckets: self.shard_buckets,
            prefix: self.shard_lease_prefix.clone(),
            lease_duration: self.shard_lease_duration,
            renew_deadline: self.shard_renew_deadline,
            retry_period: self.shard_retry_period,
            drain_timeout: self
                .shard_drain_timeout
                .unwrap_or(self.shard_renew_deadline),
            watch: self.shard_watch,
            key: self.shard_key,
            leader_lease: self.leader_election_id.trim().to_owned(),
        }))
    }

    /// `--leader-election` with its Lease's namespace, name and timings (None: disabled); the
    /// timings checked as client-go checks them.
    fn leader_flags(&self) -> Result<Option<LeaderFlags>, CliError> {
        if !self.leader_election {
            return Ok(None);
        }
        if self.leader_election_id.trim().is_empty() {
            return Err(CliError::Invalid {
                flag: "leader-election-id",
                message: "must not be empty".into(),
            });
        }
        check_lease_timings(
            "leader-election-lease-duration",
            self.leader_election_lease_duration,
            self.leader_election_renew_deadline,
            self.leader_election_retry_period,
        )?;
        Ok(Some(LeaderFlags {
            namespace: self.leader_election_namespace.trim().to_owned(),
            name: self.leader_election_id.trim().to_owned(),
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
        }))
    }

    /// `--discovery-interval`: positive (`--cache-flush-interval` may be zero: never).
    fn check_discovery_interval(&self) -> Result<(), CliError> {
        if self.discovery_interval.is_zero() {
            return Err(CliError::Invalid {
                flag: "discovery-interval",
                message: "must be positive".into(),
            });
        }
        Ok(())
    }

    /// Compatibility flags set to a value that kmeta ignores (flag, value).
    fn ignored_flags(&self) -> Vec<(&'static str, String)> {
        let mut ignored = Vec::new();
        if self.pprof_address != "0" {
            ignored.push(("pprof-address", self.pprof_address.clone()));
        }
        if let Some(v) = &self.log.zap_stacktrace_level {
            ignored.push(("zap-stacktrace-level", v.clone()));
        }
        if let Some(v) = &self.log.zap_time_encoding {
            ignored.push(("zap-time-encoding", v.clone()));
        }
        ignored
    }
}

/// `kmeta run`'s flags as a command of their own (for [`parse_run_args`] and the unit tests).
#[derive(clap::Parser)]
#[command(name = "kmeta run")]
struct RunCommand {
    #[command(flatten)]
    run: RunArgs,
}

/// Parses the arguments that follow `kmeta run` (for example a Deployment's `args:` without the
/// leading `run`) and validates them, as the binary does at start (for the unit tests, and for
/// `controller/tests/deploy.rs`, which compiles this file).
#[cfg_attr(not(test), allow(dead_code))]
pub fn parse_run_args<S: AsRef<str>>(args: &[S]) -> Result<RunConfig, CliError> {
    let argv = std::iter::once("kmeta run").chain(args.iter().map(AsRef::as_ref));
    let parsed = <RunCommand as clap::Parser>::try_parse_from(argv)?;
    parsed.run.to_config()
}
