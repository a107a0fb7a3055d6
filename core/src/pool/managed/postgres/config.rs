//! [`Config`]: a PostgreSQL pool's settings as one plain value with deadpool-postgres's field
//! names, for services that read them from a file or the environment, and what turns it into a
//! pool: [`Config::create_pool`], [`Config::builder`].
//!
//! This file owns the settings types (the mirrors of tokio-postgres's enums among them, which
//! serde can read) and their checks; it connects nothing: the manager it builds connects on
//! the first `get`.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::Socket;

use super::{PgManager, Recycling};
use crate::pool::managed::{Pool, PoolBuilder, PoolConfig};

/// The recycling method by deadpool-postgres's name: the same type as [`Recycling`], so
/// `RecyclingMethod::Clean` and `Recycling::Clean` are one value.
pub type RecyclingMethod = Recycling;

/// A PostgreSQL pool's settings, with deadpool-postgres's field names and serde encoding.
/// Every field is optional; [`Config::get_pg_config`] turns the connection fields into a
/// [`tokio_postgres::Config`], [`Config::create_pool`] makes the pool.
///
/// ```
/// use slotpool::managed::postgres::{Config, ManagerConfig, RecyclingMethod};
/// use slotpool::managed::PoolConfig;
/// use tokio_postgres::NoTls;
///
/// let mut config = Config::new();
/// config.host = Some("127.0.0.1".into());
/// config.user = Some("app".into());
/// config.dbname = Some("app".into());
/// config.manager = Some(ManagerConfig { recycling_method: RecyclingMethod::Verified });
/// config.pool = Some(PoolConfig::new(16));
///
/// // No runtime needed, and nothing connects until the first `get`.
/// let pool = config.create_pool(NoTls)?;
/// assert_eq!(pool.status().max_size, 16);
/// # Ok::<(), slotpool::managed::postgres::CreatePoolError>(())
/// ```
///
/// # From deadpool-postgres
///
/// The fields, their serde encoding (feature `serde`) and the methods are deadpool-postgres
/// 0.14's, so a configuration file written for it loads unchanged and `cfg.create_pool(...)`
/// keeps its shape. The differences:
///
/// * [`Config::create_pool`] takes the TLS connector only: there is no runtime to name (the
///   pool needs none to be built, and uses the tokio runtime of its first `get`).
/// * `target_session_attrs`, `channel_binding` and `load_balance_hosts` are applied
///   (deadpool-postgres 0.14 reads them but does not pass them on), and
///   [`TargetSessionAttrs`] has tokio-postgres's `ReadOnly` too.
/// * Values that cannot work are refused by [`Config::get_pg_config`] with an error naming the
///   field (`Config.port`, `Config.hosts[1]`, ...), instead of failing every connect: an empty
///   host, port 0, a zero `connect_timeout` or `keepalives_idle`, more ports or addresses than
///   hosts.
/// * A host given only as `hostaddr` is connected to as given; deadpool-postgres adds its
///   default Unix sockets as hosts then, which tokio-postgres refuses.
/// * The defaults of an absent `pool` section are deadpool's (see [`PoolConfig`]), but a zero
///   deadline is refused: slotpool has [`Pool::try_get`] for a `get` that must not wait.
/// * [`RecyclingMethod::Clean`] sends a `ROLLBACK` first, so that a connection returned inside
///   a transaction is not handed out still in it (see [`Recycling`]).
#[derive(Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub struct Config {
    /// A connection string (`postgres://...` or `key=value ...`) read first; the fields below
    /// override what it sets, except `host`, `hosts`, `hostaddr`, `hostaddrs`, `port` and
    /// `ports`, which add to its lists.
    pub url: Option<String>,
    /// The role to log in as ([`tokio_postgres::Config::user`]). Empty is unset; unset (here
    /// and in `url`), the `USER` environment variable's value.
    pub user: Option<String>,
    /// The password ([`tokio_postgres::Config::password`]). `Debug` does not show it.
    pub password: Option<String>,
    /// The database ([`tokio_postgres::Config::dbname`]); required, here or in `url`.
    pub dbname: Option<String>,
    /// Command-line options for the server ([`tokio_postgres::Config::options`]).
    pub options: Option<String>,
    /// The session's `application_name` ([`tokio_postgres::Config::application_name`]).
    pub application_name: Option<String>,
    /// Whether to use TLS ([`tokio_postgres::Config::ssl_mode`]).
    pub ssl_mode: Option<SslMode>,
    /// One host: a name, an IP address, or (on Unix) a socket directory starting with `/`
    /// ([`tokio_postgres::Config::host`]). Added before `hosts`. With no host and no
    /// `hostaddr` anywhere, the usual Unix socket directories (`/run/postgresql`,
    /// `/var/run/postgresql`, `/tmp`), or `127.0.0.1` elsewhere.
    pub host: Option<String>,
    /// More hosts, tried in order (or shuffled: `load_balance_hosts`).
    pub hosts: Option<Vec<String>>,
    /// One host's IP address, to connect to without a name lookup
    /// ([`tokio_postgres::Config::hostaddr`]); one per host, or none.
    pub hostaddr: Option<IpAddr>,
    /// More hosts' IP addresses, after `hostaddr`.
    pub hostaddrs: Option<Vec<IpAddr>>,
    /// One port for every host ([`tokio_postgres::Config::port`]); 5432 if no port is given.
    pub port: Option<u16>,
    /// Ports, after `port`: one in all for every host, or one per host.
    pub ports: Option<Vec<u16>>,
    /// How long connecting to one host may take
    /// ([`tokio_postgres::Config::connect_timeout`]). Not zero.
    pub connect_timeout: Option<Duration>,
    /// Whether TCP keepalives are sent ([`tokio_postgres::Config::keepalives`]).
    pub keepalives: Option<bool>,
    /// Idle time before the first keepalive ([`tokio_postgres::Config::keepalives_idle`]).
    /// Not zero.
    pub keepalives_idle: Option<Duration>,
    /// What a session must allow ([`tokio_postgres::Config::target_session_attrs`]).
    pub target_session_attrs: Option<TargetSessionAttrs>,
    /// SCRAM channel binding ([`tokio_postgres::Config::channel_binding`]).
    pub channel_binding: Option<ChannelBinding>,
    /// The order hosts are tried in ([`tokio_postgres::Config::load_balance_hosts`]).
    pub load_balance_hosts: Option<LoadBalanceHosts>,
    /// How connections are recycled; absent, [`ManagerConfig::default`].
    pub manager: Option<ManagerConfig>,
    /// The pool's size, deadlines and queue order; absent, [`PoolConfig::default`]
    /// (deadpool's defaults).
    pub pool: Option<PoolConfig>,
}

impl Config {
    /// Every field unset (the same as [`Config::default`]).
    ///
    /// ```
    /// let config = slotpool::managed::postgres::Config::new();
    /// assert_eq!(config.host, None);
    /// assert_eq!(config, Default::default());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The pool these settings describe: [`Config::builder`], built. Needs no tokio runtime
    /// and connects nothing: a pool made before the runtime (in a `static`, in `main` before
    /// `block_on`) connects on its first `get`, inside one.
    ///
    /// ```
    /// use slotpool::managed::postgres::{Config, CreatePoolError};
    /// use slotpool::managed::PoolConfig;
    /// use tokio_postgres::NoTls;
    ///
    /// let mut config = Config::new();
    /// config.dbname = Some("app".into());
    /// config.pool = Some(PoolConfig::new(0));
    /// let error = config.create_pool(NoTls).unwrap_err();
    /// assert!(matches!(error, CreatePoolError::Build(_)));
    /// assert_eq!(error.to_string(), "`Config.pool.max_size` must be at least 1");
    /// ```
    ///
    /// # Errors
    /// [`CreatePoolError::Config`] when [`Config::get_pg_config`] refuses a connection field;
    /// [`CreatePoolError::Build`] when the pool's `build` refuses a `pool` field, named as
    /// written (`Config.pool.max_size`, `Config.pool.timeouts.wait`, ...).
    pub fn create_pool<T>(&self, tls: T) -> Result<Pool<PgManager<T>>, CreatePoolError>
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        self.builder(tls)?
            .build()
            .map_err(|error| CreatePoolError::Build(named_in_pool(error)))
    }

    /// A [`PoolBuilder`] with these settings, for the pool settings a `Config` has no field
    /// for (`min_idle`, `max_lifetime`, hooks, ...). Its `build` names a bad `pool` field as
    /// [`PoolConfig`] does (`max_size`, `timeouts.wait`, ...).
    ///
    /// ```
    /// use std::time::Duration;
    /// use slotpool::managed::postgres::Config;
    /// use tokio_postgres::NoTls;
    ///
    /// let mut config = Config::new();
    /// config.url = Some("postgres://app@db.internal/app".into());
    /// let pool = config
    ///     .builder(NoTls)?
    ///     .max_lifetime(Some(Duration::from_secs(30 * 60)))
    ///     .build()?;
    /// # drop(pool);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// What [`Config::get_pg_config`] refuses.
    pub fn builder<T>(&self, tls: T) -> Result<PoolBuilder<PgManager<T>>, ConfigError>
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let manager = PgManager::with_tls(self.get_pg_config()?, tls)
            .recycling(self.get_manager_config().recycling_method);
        Ok(Pool::builder(manager).config(self.get_pool_config()))
    }

    /// The connection fields as a [`tokio_postgres::Config`] (`url` first, then each field
    /// set; see each field for its default).
    ///
    /// ```
    /// use slotpool::managed::postgres::{Config, ConfigError};
    ///
    /// let mut config = Config::new();
    /// config.url = Some("host=db.internal dbname=app".into());
    /// config.user = Some("app".into());
    /// config.port = Some(6432);
    /// let pg = config.get_pg_config()?;
    /// assert_eq!(pg.get_user(), Some("app"));
    /// assert_eq!(pg.get_ports(), [6432]);
    ///
    /// config.port = Some(0);
    /// let error = config.get_pg_config().unwrap_err();
    /// assert_eq!(error.setting(), "Config.port");
    /// assert_eq!(error.to_string(), "`Config.port` is 0, which is not a TCP port");
    /// # Ok::<(), ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] naming the field: `url` not a connection string, no database name
    /// or an empty one, an empty host, port 0, a zero `connect_timeout` or
    /// `keepalives_idle`, ports or addresses that do not pair with the hosts.
    pub fn get_pg_config(&self) -> Result<tokio_postgres::Config, ConfigError> {
        let mut pg = match &self.url {
            Some(url) => url.parse().map_err(ConfigError::InvalidUrl)?,
            None => tokio_postgres::Config::new(),
        };
        if let Some(user) = self.user.as_deref().filter(|user| !user.is_empty()) {
            pg.user(user);
        }
        if pg.get_user().is_none_or(str::is_empty) {
            if let Ok(user) = std::env::var("USER") {
                pg.user(user);
            }
        }
        if let Some(password) = &self.password {
            pg.password(password);
        }
        if let Some(dbname) = self.dbname.as_deref().filter(|name| !name.is_empty()) {
            pg.dbname(dbname);
        }
        match pg.get_dbname() {
            None if self.dbname.is_some() => return Err(ConfigError::DbnameEmpty),
            None => return Err(ConfigError::DbnameMissing),
            Some("") => return Err(ConfigError::DbnameEmpty),
            Some(_) => {}
        }
        if let Some(options) = &self.options {
            pg.options(options);
        }
        if let Some(name) = &self.application_name {
            pg.application_name(name);
        }
        if let Some(mode) = self.ssl_mode {
            pg.ssl_mode(mode.into());
        }
        self.add_hosts(&mut pg)?;
        self.add_ports(&mut pg)?;
        if let Some(timeout) = self.connect_timeout {
            not_zero(timeout, "Config.connect_timeout")?;
            pg.connect_timeout(timeout);
        }
        if let Some(keepalives) = self.keepalives {
            pg.keepalives(keepalives);
        }
        if let Some(idle) = self.keepalives_idle {
            not_zero(idle, "Config.keepalives_idle")?;
            pg.keepalives_idle(idle);
        }
        if let Some(attrs) = self.target_session_attrs {
            pg.target_session_attrs(attrs.into());
        }
        if let Some(binding) = self.channel_binding {
            pg.channel_binding(binding.into());
        }
        if let Some(order) = self.load_balance_hosts {
            pg.load_balance_hosts(order.into());
        }
        Ok(pg)
    }

    /// `manager`, or its default ([`RecyclingMethod::Fast`]).
    ///
    /// ```
    /// use slotpool::managed::postgres::{Config, RecyclingMethod};
    ///
    /// assert_eq!(Config::new().get_manager_config().recycling_method, RecyclingMethod::Fast);
    /// ```
    pub fn get_manager_config(&self) -> ManagerConfig {
        self.manager.clone().unwrap_or_default()
    }

    /// `pool`, or its default (deadpool's: see [`PoolConfig`]).
    ///
    /// ```
    /// use slotpool::managed::postgres::Config;
    /// use slotpool::managed::PoolConfig;
    ///
    /// assert_eq!(Config::new().get_pool_config(), PoolConfig::default());
    /// ```
    pub fn get_pool_config(&self) -> PoolConfig {
        self.pool.unwrap_or_default()
    }

    /// Adds `host`, `hosts`, `hostaddr` and `hostaddrs` to `pg` (after the url's), defaulting
    /// to the local sockets when none is given anywhere, and checks that hosts and addresses
    /// pair up.
    fn add_hosts(&self, pg: &mut tokio_postgres::Config) -> Result<(), ConfigError> {
        let named = self
            .host
            .iter()
            .map(|host| (host, "Config.host".to_owned()));
        let listed = self.hosts.iter().flatten().enumerate();
        let listed = listed.map(|(i, host)| (host, format!("Config.hosts[{i}]")));
        for (host, setting) in named.chain(listed) {
            if host.is_empty() {
                return Err(ConfigError::invalid(setting, "is empty"));
            }
            pg.host(host);
        }
        for addr in self.hostaddr.iter().chain(self.hostaddrs.iter().flatten()) {
            pg.hostaddr(*addr);
        }
        let (hosts, addrs) = (pg.get_hosts().len(), pg.get_hostaddrs().len());
        if hosts == 0 && addrs == 0 {
            #[cfg(unix)]
            for dir in ["/run/postgresql", "/var/run/postgresql", "/tmp"] {
                pg.host_path(dir);
            }
            #[cfg(not(unix))]
            pg.host("127.0.0.1");
        } else if hosts > 0 && addrs > 0 && hosts != addrs {
            let setting = if self.hostaddrs.is_some() {
                "Config.hostaddrs"
            } else if self.hostaddr.is_some() {
                "Config.hostaddr"
            } else {
                "Config.url"
            };
            return Err(ConfigError::invalid(
                setting,
                format!("gives {addrs} addresses for {hosts} hosts: give one per host, or none"),
            ));
        }
        Ok(())
    }

    /// Adds `port` and `ports` to `pg` (after the url's), and checks that there is one for
    /// all hosts or one per host.
    fn add_ports(&self, pg: &mut tokio_postgres::Config) -> Result<(), ConfigError> {
        let named = self
            .port
            .iter()
            .map(|port| (*port, "Config.port".to_owned()));
        let listed = self.ports.iter().flatten().enumerate();
        let listed = listed.map(|(i, port)| (*port, format!("Config.ports[{i}]")));
        for (port, setting) in named.chain(listed) {
            if port == 0 {
                return Err(ConfigError::invalid(
                    setting,
                    "is 0, which is not a TCP port",
                ));
            }
            pg.port(port);
        }
        let ports = pg.get_ports().len();
        let hosts = pg.get_hosts().len().max(pg.get_hostaddrs().len());
        if ports > 1 && ports != hosts {
            let setting = if self.ports.is_some() {
                "Config.ports"
            } else if self.port.is_some() {
                "Config.port"
            } else {
                "Config.url"
            };
            return Err(ConfigError::invalid(
                setting,
                format!("gives {ports} ports for {hosts} hosts: give one for all, or one per host"),
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field(
                "url",
                &self.url.as_ref().map(|_| "<hidden: may hold a password>"),
            )
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("dbname", &self.dbname)
            .field("options", &self.options)
            .field("application_name", &self.application_name)
            .field("ssl_mode", &self.ssl_mode)
            .field("host", &self.host)
            .field("hosts", &self.hosts)
            .field("hostaddr", &self.hostaddr)
            .field("hostaddrs", &self.hostaddrs)
            .field("port", &self.port)
            .field("ports", &self.ports)
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalives", &self.keepalives)
            .field("keepalives_idle", &self.keepalives_idle)
            .field("target_session_attrs", &self.target_session_attrs)
            .field("channel_binding", &self.channel_binding)
            .field("load_balance_hosts", &self.load_balance_hosts)
            .field("manager", &self.manager)
            .field("pool", &self.pool)
            .finish()
    }
}

/// `Err` naming `setting` when `value` is zero.
fn not_zero(value: Duration, setting: &'static str) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::invalid(setting, "is zero"));
    }
    Ok(())
}

/// The builder's error about a [`PoolConfig`] field, naming it as a [`Config`] user wrote it.
fn named_in_pool(error: crate::ConfigError) -> crate::ConfigError {
    fn name(field: &'static str) -> &'static str {
        match field {
            "max_size" => "Config.pool.max_size",
            "timeouts.wait" => "Config.pool.timeouts.wait",
            "timeouts.create" => "Config.pool.timeouts.create",
            "timeouts.recycle" => "Config.pool.timeouts.recycle",
            other => other,
        }
    }
    match error {
        crate::ConfigError::Zero(field) => crate::ConfigError::Zero(name(field)),
        crate::ConfigError::TooLarge {
            name: field,
            value,
            max,
        } => crate::ConfigError::TooLarge {
            name: name(field),
            value,
            max,
        },
        crate::ConfigError::Inverted {
            low,
            low_value,
            high,
            high_value,
        } => crate::ConfigError::Inverted {
            low: name(low),
            low_value,
            high: name(high),
            high_value,
        },
        crate::ConfigError::Missing(field) => crate::ConfigError::Missing(name(field)),
    }
}

/// deadpool-postgres's `ManagerConfig`: how the manager treats its connections.
///
/// ```
/// use slotpool::managed::postgres::{ManagerConfig, RecyclingMethod};
///
/// let config = ManagerConfig { recycling_method: RecyclingMethod::Clean };
/// assert_ne!(config, ManagerConfig::default());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct ManagerConfig {
    /// How an idle connection is checked before it goes out again (see [`Recycling`]).
    pub recycling_method: RecyclingMethod,
}

/// Why a [`Config`] cannot describe a connection. Each names the field the user wrote
/// ([`ConfigError::setting`]); nothing was connected. The first three are deadpool-postgres's
/// variants, so code that matches them ports as it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `Config.url` is not a connection string tokio-postgres accepts.
    #[error("`Config.url` is not a connection string: {0}")]
    InvalidUrl(#[source] tokio_postgres::Error),
    /// No database name: neither `Config.dbname` nor `Config.url` gives one.
    #[error("`Config.dbname` is not set, and `Config.url` names no database")]
    DbnameMissing,
    /// The database name is empty.
    #[error("`Config.dbname` is empty")]
    DbnameEmpty,
    /// A field has a value no connection can be made with.
    #[error("`{setting}` {problem}")]
    Invalid {
        /// The field as a user writes it: `Config.port`, `Config.hosts[1]`, ...
        setting: String,
        /// What is wrong with its value.
        problem: String,
    },
}

impl ConfigError {
    fn invalid(setting: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            setting: setting.into(),
            problem: problem.into(),
        }
    }

    /// The field at fault, as a user writes it (`Config.url`, `Config.dbname`,
    /// `Config.port`, `Config.hosts[1]`, ...).
    ///
    /// ```
    /// use slotpool::managed::postgres::Config;
    ///
    /// let config = Config { url: Some("port=nope".into()), ..Config::new() };
    /// assert_eq!(config.get_pg_config().unwrap_err().setting(), "Config.url");
    /// ```
    pub fn setting(&self) -> &str {
        match self {
            ConfigError::InvalidUrl(_) => "Config.url",
            ConfigError::DbnameMissing | ConfigError::DbnameEmpty => "Config.dbname",
            ConfigError::Invalid { setting, .. } => setting,
        }
    }
}

/// Why [`Config::create_pool`] made no pool (deadpool-postgres's `CreatePoolError`, with the
/// same two variants).
///
/// ```
/// use slotpool::managed::postgres::{Config, CreatePoolError};
/// use tokio_postgres::NoTls;
///
/// match Config::new().create_pool(NoTls) {
///     Err(CreatePoolError::Config(error)) => assert_eq!(error.setting(), "Config.dbname"),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreatePoolError {
    /// A connection field cannot work (see [`Config::get_pg_config`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A `pool` field cannot work; the error names it as written (`Config.pool.max_size`).
    #[error(transparent)]
    Build(crate::ConfigError),
}

/// Whether to use TLS: [`tokio_postgres::config::SslMode`] in a form serde reads (as
/// deadpool-postgres's).
///
/// ```
/// use slotpool::managed::postgres::SslMode;
///
/// let mode: tokio_postgres::config::SslMode = SslMode::Require.into();
/// assert_eq!(mode, tokio_postgres::config::SslMode::Require);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it.
    Prefer,
    /// TLS, or no connection.
    Require,
}

impl From<SslMode> for tokio_postgres::config::SslMode {
    fn from(mode: SslMode) -> Self {
        match mode {
            SslMode::Disable => Self::Disable,
            SslMode::Prefer => Self::Prefer,
            SslMode::Require => Self::Require,
        }
    }
}

/// What a session must allow: [`tokio_postgres::config::TargetSessionAttrs`] in a form serde
/// reads (deadpool-postgres's, plus `ReadOnly`).
///
/// ```
/// use slotpool::managed::postgres::TargetSessionAttrs;
///
/// let attrs: tokio_postgres::config::TargetSessionAttrs = TargetSessionAttrs::ReadWrite.into();
/// assert_eq!(attrs, tokio_postgres::config::TargetSessionAttrs::ReadWrite);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[non_exhaustive]
pub enum TargetSessionAttrs {
    /// Any session.
    Any,
    /// A session that can write (a primary).
    ReadWrite,
    /// A read-only session (a standby).
    ReadOnly,
}

impl From<TargetSessionAttrs> for tokio_postgres::config::TargetSessionAttrs {
    fn from(attrs: TargetSessionAttrs) -> Self {
        match attrs {
            TargetSessionAttrs::Any => Self::Any,
            TargetSessionAttrs::ReadWrite => Self::ReadWrite,
            TargetSessionAttrs::ReadOnly => Self::ReadOnly,
        }
    }
}

/// SCRAM channel binding: [`tokio_postgres::config::ChannelBinding`] in a form serde reads (as
/// deadpool-postgres's).
///
/// ```
/// use slotpool::managed::postgres::ChannelBinding;
///
/// let binding: tokio_postgres::config::ChannelBinding = ChannelBinding::Prefer.into();
/// assert_eq!(binding, tokio_postgres::config::ChannelBinding::Prefer);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[non_exhaustive]
pub enum ChannelBinding {
    /// Never.
    Disable,
    /// When the server supports it.
    Prefer,
    /// Always, or no connection.
    Require,
}

impl From<ChannelBinding> for tokio_postgres::config::ChannelBinding {
    fn from(binding: ChannelBinding) -> Self {
        match binding {
            ChannelBinding::Disable => Self::Disable,
            ChannelBinding::Prefer => Self::Prefer,
            ChannelBinding::Require => Self::Require,
        }
    }
}

/// The order hosts are tried in: [`tokio_postgres::config::LoadBalanceHosts`] in a form serde
/// reads (as deadpool-postgres's).
///
/// ```
/// use slotpool::managed::postgres::LoadBalanceHosts;
///
/// let order: tokio_postgres::config::LoadBalanceHosts = LoadBalanceHosts::Random.into();
/// assert_eq!(order, tokio_postgres::config::LoadBalanceHosts::Random);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[non_exhaustive]
pub enum LoadBalanceHosts {
    /// As listed.
    Disable,
    /// Shuffled, for each connection.
    Random,
}

impl From<LoadBalanceHosts> for tokio_postgres::config::LoadBalanceHosts {
    fn from(order: LoadBalanceHosts) -> Self {
        match order {
            LoadBalanceHosts::Disable => Self::Disable,
            LoadBalanceHosts::Random => Self::Random,
        }
    }
}
