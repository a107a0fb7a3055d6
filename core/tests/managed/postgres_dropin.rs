//! deadpool-postgres's names in `slotpool::managed::postgres`: `Config` (its fields, its serde
//! encoding, the checks that name a field), `create_pool`, `Client`, `GenericClient`,
//! `build_transaction`.
//!
//! Without a server: a deadpool-shaped JSON configuration loads field for field, every
//! settings type survives a serde round trip (feature `serde`), `get_pg_config` applies each
//! field and refuses bad ones naming them, `create_pool` names a bad `pool` field as written.
//!
//! Against a server (`SLOTPOOL_PG`, as in `managed_postgres.rs`; skipped with a printed line
//! when unset, unless `SLOTPOOL_PG_REQUIRED=1`): generic code over `GenericClient` runs on a
//! pooled client, a transaction and in a spawned task; `build_transaction`'s settings are the
//! server's; a connection and its transactions share cached statements; a pool made by
//! `create_pool` outside any runtime is used inside one; a JSON configuration's manager and
//! pool sections take effect.
#![cfg(feature = "postgres")]

use std::net::{IpAddr, Ipv4Addr};
use std::pin::pin;
use std::time::Duration;

use slotpool::managed::postgres::{
    ChannelBinding, Client, Config, ConfigError, CreatePoolError, GenericClient, LoadBalanceHosts,
    ManagerConfig, PgTransaction, Recycling, RecyclingMethod, SslMode, TargetSessionAttrs,
    Transaction,
};
use slotpool::managed::{PoolConfig, QueueMode, Timeouts};
use tokio_postgres::config::Host;
use tokio_postgres::{IsolationLevel, NoTls};

// --- Without a server --------------------------------------------------------------------

/// The connection fields of a `Config` with every one of them set.
fn full_config() -> Config {
    Config {
        url: Some("postgres://url-user@url-host:6000/url-db".into()),
        user: Some("app".into()),
        password: Some("secret".into()),
        dbname: Some("appdb".into()),
        options: Some("-c statement_timeout=5000".into()),
        application_name: Some("dropin".into()),
        ssl_mode: Some(SslMode::Prefer),
        host: Some("db1.internal".into()),
        hosts: Some(vec!["db2.internal".into()]),
        hostaddr: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
        hostaddrs: Some(vec![
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
        ]),
        port: None,
        ports: Some(vec![6001, 6002]),
        connect_timeout: Some(Duration::from_secs(3)),
        keepalives: Some(true),
        keepalives_idle: Some(Duration::from_secs(60)),
        target_session_attrs: Some(TargetSessionAttrs::ReadWrite),
        channel_binding: Some(ChannelBinding::Disable),
        load_balance_hosts: Some(LoadBalanceHosts::Random),
        manager: Some(ManagerConfig {
            recycling_method: RecyclingMethod::Custom("SELECT 1".into()),
        }),
        pool: Some(PoolConfig {
            max_size: 7,
            timeouts: Timeouts {
                wait: Some(Duration::from_millis(1500)),
                create: Some(Duration::from_secs(2)),
                recycle: None,
            },
            queue_mode: QueueMode::Lowest,
        }),
    }
}

#[test]
fn get_pg_config_applies_every_field_after_the_url() {
    let pg = full_config().get_pg_config().expect("a valid config");
    assert_eq!(pg.get_user(), Some("app"), "the field overrides the url");
    assert_eq!(pg.get_password(), Some(&b"secret"[..]));
    assert_eq!(pg.get_dbname(), Some("appdb"));
    assert_eq!(pg.get_options(), Some("-c statement_timeout=5000"));
    assert_eq!(pg.get_application_name(), Some("dropin"));
    assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Prefer);
    let hosts: Vec<_> = ["url-host", "db1.internal", "db2.internal"]
        .map(|host| Host::Tcp(host.into()))
        .into();
    assert_eq!(pg.get_hosts(), hosts, "hosts add to the url's");
    assert_eq!(pg.get_hostaddrs().len(), 3);
    assert_eq!(pg.get_ports(), [6000, 6001, 6002], "ports add to the url's");
    assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(3)));
    assert!(pg.get_keepalives());
    assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(60));
    assert_eq!(
        pg.get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
    assert_eq!(
        pg.get_channel_binding(),
        tokio_postgres::config::ChannelBinding::Disable
    );
    assert_eq!(
        pg.get_load_balance_hosts(),
        tokio_postgres::config::LoadBalanceHosts::Random
    );
}

#[test]
fn without_a_host_the_local_sockets_are_tried_and_a_hostaddr_alone_is_kept() {
    let config = Config {
        dbname: Some("app".into()),
        ..Config::new()
    };
    let pg = config.get_pg_config().unwrap();
    #[cfg(unix)]
    assert_eq!(
        pg.get_hosts(),
        ["/run/postgresql", "/var/run/postgresql", "/tmp"].map(|dir| Host::Unix(dir.into()))
    );
    assert!(pg.get_hostaddrs().is_empty());

    let config = Config {
        dbname: Some("app".into()),
        hostaddr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ..Config::new()
    };
    let pg = config.get_pg_config().unwrap();
    assert!(
        pg.get_hosts().is_empty(),
        "no socket added beside the address"
    );
    assert_eq!(pg.get_hostaddrs(), [IpAddr::V4(Ipv4Addr::LOCALHOST)]);
}

/// The setting a refused `Config` names, and its message.
fn refused(config: Config) -> (String, String) {
    let error = config.get_pg_config().expect_err("refused");
    (error.setting().to_owned(), error.to_string())
}

#[test]
fn bad_connection_fields_are_refused_naming_the_field() {
    let base = || Config {
        dbname: Some("app".into()),
        host: Some("db".into()),
        ..Config::new()
    };
    let cases: Vec<(Config, &str)> = vec![
        (
            Config {
                port: Some(0),
                ..base()
            },
            "Config.port",
        ),
        (
            Config {
                ports: Some(vec![5432, 0]),
                ..base()
            },
            "Config.ports[1]",
        ),
        (
            Config {
                host: Some(String::new()),
                ..base()
            },
            "Config.host",
        ),
        (
            Config {
                hosts: Some(vec!["db2".into(), String::new()]),
                ..base()
            },
            "Config.hosts[1]",
        ),
        (
            Config {
                connect_timeout: Some(Duration::ZERO),
                ..base()
            },
            "Config.connect_timeout",
        ),
        (
            Config {
                keepalives_idle: Some(Duration::ZERO),
                ..base()
            },
            "Config.keepalives_idle",
        ),
        (
            Config {
                ports: Some(vec![1, 2, 3]),
                hosts: Some(vec!["db2".into()]),
                ..base()
            },
            "Config.ports",
        ),
        (
            Config {
                hostaddrs: Some(vec![IpAddr::V4(Ipv4Addr::LOCALHOST); 2]),
                ..base()
            },
            "Config.hostaddrs",
        ),
        (
            Config {
                url: Some("port=not-a-number".into()),
                ..base()
            },
            "Config.url",
        ),
        (
            Config {
                dbname: None,
                ..base()
            },
            "Config.dbname",
        ),
        (
            Config {
                dbname: Some(String::new()),
                ..base()
            },
            "Config.dbname",
        ),
    ];
    for (config, setting) in cases {
        let (named, message) = refused(config);
        assert_eq!(named, setting, "{message}");
        assert!(
            message.contains(&format!("`{setting}`")),
            "the message names the field: {message}"
        );
    }
}

#[test]
fn deadpools_error_variants_are_there_to_match() {
    let missing = Config::new().get_pg_config().unwrap_err();
    assert!(matches!(missing, ConfigError::DbnameMissing), "{missing:?}");
    let empty = Config {
        dbname: Some(String::new()),
        ..Config::new()
    }
    .get_pg_config()
    .unwrap_err();
    assert!(matches!(empty, ConfigError::DbnameEmpty), "{empty:?}");
    let url = Config {
        url: Some("sslmode=sometimes".into()),
        ..Config::new()
    }
    .get_pg_config()
    .unwrap_err();
    assert!(matches!(url, ConfigError::InvalidUrl(_)), "{url:?}");
}

#[test]
fn create_pool_names_a_bad_pool_field_as_written() {
    let with_pool = |pool: PoolConfig| Config {
        dbname: Some("app".into()),
        pool: Some(pool),
        ..Config::new()
    };
    let cases = [
        (
            PoolConfig::new(0),
            "`Config.pool.max_size` must be at least 1",
        ),
        (
            PoolConfig {
                timeouts: Timeouts::wait_millis(0),
                ..PoolConfig::new(4)
            },
            "`Config.pool.timeouts.wait` must be at least 1",
        ),
        (
            PoolConfig {
                timeouts: Timeouts {
                    recycle: Some(Duration::ZERO),
                    ..Timeouts::new()
                },
                ..PoolConfig::new(4)
            },
            "`Config.pool.timeouts.recycle` must be at least 1",
        ),
    ];
    for (pool, message) in cases {
        match with_pool(pool).create_pool(NoTls) {
            Err(error @ CreatePoolError::Build(_)) => assert_eq!(error.to_string(), message),
            other => panic!("expected a build error, got {other:?}"),
        }
    }
    match Config::new().create_pool(NoTls) {
        Err(CreatePoolError::Config(ConfigError::DbnameMissing)) => {}
        other => panic!("expected DbnameMissing, got {other:?}"),
    }
}

#[test]
fn create_pool_takes_the_pool_and_manager_sections() {
    // No runtime here: building needs none.
    let config = full_config();
    let pool = config.create_pool(NoTls).expect("built outside a runtime");
    assert_eq!(pool.status().max_size, 7);
    assert_eq!(
        pool.timeouts(),
        Timeouts {
            wait: Some(Duration::from_millis(1500)),
            create: Some(Duration::from_secs(2)),
            recycle: None,
        }
    );
    assert_eq!(
        pool.manager().recycling_method(),
        &Recycling::Custom("SELECT 1".into())
    );
    // Without sections: deadpool's defaults (no deadlines), `Fast`.
    let pool = Config {
        dbname: Some("app".into()),
        ..Config::new()
    }
    .create_pool(NoTls)
    .unwrap();
    assert_eq!(pool.timeouts(), Timeouts::new());
    assert_eq!(pool.manager().recycling_method(), &Recycling::Fast);
    assert_eq!(pool.status().max_size, PoolConfig::default().max_size);
}

#[test]
fn debug_hides_the_password_and_the_url() {
    let shown = format!("{:?}", full_config());
    assert!(!shown.contains("secret"), "{shown}");
    assert!(!shown.contains("url-user"), "{shown}");
    assert!(shown.contains("appdb"), "{shown}");
}

#[test]
fn recycling_method_is_recycling() {
    let method: RecyclingMethod = Recycling::Clean;
    assert_eq!(method, RecyclingMethod::Clean);
    assert_eq!(
        ManagerConfig::default().recycling_method,
        RecyclingMethod::Fast
    );
}

#[cfg(feature = "serde")]
mod serde_encoding {
    use super::*;

    /// A configuration as a deadpool-postgres 0.14 user writes it (every field, deadpool's
    /// encoding: `Duration` as `{secs, nanos}`, enums by variant name).
    const DEADPOOL_JSON: &str = r#"{
        "url": "postgres://url-user@url-host:6000/url-db",
        "user": "app",
        "password": "secret",
        "dbname": "appdb",
        "options": "-c statement_timeout=5000",
        "application_name": "dropin",
        "ssl_mode": "Prefer",
        "host": "db1.internal",
        "hosts": ["db2.internal"],
        "hostaddr": "10.0.0.1",
        "hostaddrs": ["10.0.0.2", "10.0.0.3"],
        "port": null,
        "ports": [6001, 6002],
        "connect_timeout": { "secs": 3, "nanos": 0 },
        "keepalives": true,
        "keepalives_idle": { "secs": 60, "nanos": 0 },
        "target_session_attrs": "ReadWrite",
        "channel_binding": "Disable",
        "load_balance_hosts": "Random",
        "manager": { "recycling_method": { "Custom": "SELECT 1" } },
        "pool": {
            "max_size": 7,
            "timeouts": {
                "wait": { "secs": 1, "nanos": 500000000 },
                "create": { "secs": 2, "nanos": 0 },
                "recycle": null
            },
            "queue_mode": "Lifo"
        }
    }"#;

    #[test]
    fn a_deadpool_json_config_loads_field_for_field() {
        let config: Config = serde_json::from_str(DEADPOOL_JSON).expect("deadpool's shape");
        assert_eq!(config, full_config());
    }

    #[test]
    fn every_settings_type_round_trips() {
        let config = full_config();
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config);
        assert_eq!(
            serde_json::from_str::<Config>("{}").unwrap(),
            Config::new(),
            "every field is optional"
        );
        for method in [
            Recycling::Fast,
            Recycling::Verified,
            Recycling::Clean,
            Recycling::Custom("RESET ALL".into()),
        ] {
            let json = serde_json::to_string(&method).unwrap();
            assert_eq!(serde_json::from_str::<Recycling>(&json).unwrap(), method);
        }
        let pool = PoolConfig {
            queue_mode: QueueMode::Fifo,
            ..PoolConfig::new(3)
        };
        let json = serde_json::to_string(&pool).unwrap();
        assert_eq!(serde_json::from_str::<PoolConfig>(&json).unwrap(), pool);
    }

    #[test]
    fn the_encodings_are_deadpools() {
        let timeouts = Timeouts {
            wait: Some(Duration::from_millis(2500)),
            ..Timeouts::new()
        };
        assert_eq!(
            serde_json::to_string(&timeouts).unwrap(),
            r#"{"wait":{"secs":2,"nanos":500000000},"create":null,"recycle":null}"#
        );
        assert_eq!(
            serde_json::to_string(&Recycling::Custom("SELECT 1".into())).unwrap(),
            r#"{"Custom":"SELECT 1"}"#
        );
        assert_eq!(
            serde_json::to_string(&Recycling::Clean).unwrap(),
            r#""Clean""#
        );
        assert_eq!(
            serde_json::to_string(&SslMode::Require).unwrap(),
            r#""Require""#
        );
        let lifo: QueueMode = serde_json::from_str(r#""Lifo""#).unwrap();
        assert_eq!(
            lifo,
            QueueMode::Lifo,
            "deadpool's Lifo is the lowest-slot order"
        );
        let fifo: QueueMode = serde_json::from_str(r#""Fifo""#).unwrap();
        assert_eq!(fifo, QueueMode::Fifo);
    }

    #[test]
    fn left_out_sections_and_fields_take_deadpools_defaults() {
        let config: Config =
            serde_json::from_str(r#"{ "dbname": "app", "pool": { "max_size": 4 } }"#).unwrap();
        let pool = config.get_pool_config();
        assert_eq!(pool, PoolConfig::new(4));
        assert_eq!(pool.queue_mode, QueueMode::Fifo, "deadpool's default order");
        assert_eq!(config.get_manager_config(), ManagerConfig::default());

        let config: Config = serde_json::from_str(
            r#"{ "pool": { "timeouts": { "wait": { "secs": 1, "nanos": 0 } } } }"#,
        )
        .unwrap();
        let pool = config.get_pool_config();
        assert_eq!(pool.max_size, PoolConfig::default().max_size);
        assert_eq!(pool.timeouts, Timeouts::wait_millis(1000));
    }

    #[test]
    fn a_value_of_the_wrong_kind_is_a_serde_error_at_its_field() {
        let error = serde_json::from_str::<Config>(r#"{ "port": 70000 }"#).unwrap_err();
        assert!(error.to_string().contains("u16"), "{error}");
        let error = serde_json::from_str::<Config>(r#"{ "ssl_mode": "Allow" }"#).unwrap_err();
        assert!(
            error.to_string().contains("unknown variant `Allow`"),
            "{error}"
        );
    }
}

// --- Against a server --------------------------------------------------------------------

/// The server's settings as a `Config` with `application_name` set to `name`, or `None`
/// (after saying why) when no server was given and none is required.
fn server(name: &str) -> Option<Config> {
    let Ok(settings) = std::env::var("SLOTPOOL_PG") else {
        assert!(
            std::env::var_os("SLOTPOOL_PG_REQUIRED").is_none(),
            "SLOTPOOL_PG_REQUIRED is set but SLOTPOOL_PG is not: start a server with \
             bench/postgres/start.sh and source its env file"
        );
        eprintln!(
            "skipped {name}: SLOTPOOL_PG is not set (bench/postgres/start.sh starts a server and \
             writes it to target/postgres/env)"
        );
        return None;
    };
    let mut config = Config::new();
    config.url = Some(settings);
    config.application_name = Some(name.into());
    Some(config)
}

macro_rules! server_or_skip {
    ($name:expr) => {
        match server($name) {
            Some(config) => config,
            None => return,
        }
    };
}

/// One setting of the session, as the server reports it.
async fn show(db: &impl GenericClient, setting: &str) -> String {
    db.query_one(&format!("SHOW {setting}"), &[])
        .await
        .expect("SHOW")
        .get(0)
}

/// Statements with this text prepared on the session, as the server counts them.
async fn prepared(db: &impl GenericClient, query: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1",
        &[&query],
    )
    .await
    .expect("pg_prepared_statements")
    .get(0)
}

/// Code written once over `GenericClient`: every method of the trait, on a temporary table
/// `items`. Returns the number of items it sees at the end.
async fn exercise<C: GenericClient>(db: &C, name: &str) -> Result<i64, tokio_postgres::Error> {
    db.batch_execute("CREATE TEMP TABLE IF NOT EXISTS items (name text)")
        .await?;
    let insert = db.prepare_cached("INSERT INTO items VALUES ($1)").await?;
    assert_eq!(db.execute(&insert, &[&name]).await?, 1);
    let typed = db
        .prepare_typed_cached(
            "INSERT INTO items VALUES ($1)",
            &[tokio_postgres::types::Type::TEXT],
        )
        .await?;
    assert_eq!(db.execute_raw(&typed, [format!("{name}-raw")]).await?, 1);

    let count = db.prepare("SELECT count(*) FROM items").await?;
    let by_name = db
        .prepare_typed(
            "SELECT name FROM items WHERE name = $1",
            &[tokio_postgres::types::Type::TEXT],
        )
        .await?;
    let found = db.query_opt(&by_name, &[&name]).await?;
    assert_eq!(
        found.map(|row| row.get::<_, String>(0)),
        Some(name.to_owned())
    );
    assert!(db.query_opt(&by_name, &[&"absent"]).await?.is_none());
    let all = db.query("SELECT name FROM items", &[]).await?;
    let mut streamed = 0;
    // Borrowed parameters: the spawned task below pins that the future stays `Send`.
    let mut rows = pin!(db.query_raw(&by_name, [name]).await?);
    while let Some(row) =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(rows.as_mut(), cx)).await
    {
        row?;
        streamed += 1;
    }
    assert_eq!(streamed, 1);
    assert!(!db.client().is_closed());
    let counted: i64 = db.query_one(&count, &[]).await?.get(0);
    assert_eq!(counted, all.len() as i64);
    Ok(counted)
}

#[tokio::test]
async fn generic_code_runs_on_a_pooled_client_a_transaction_and_in_a_spawned_task() {
    let mut config = server_or_skip!("slotpool-dropin-generic");
    config.pool = Some(PoolConfig::new(1));
    let pool = config.create_pool(NoTls).expect("a valid config");

    let mut client: Client = pool.get().await.unwrap();
    assert_eq!(exercise(&client, "pooled").await.unwrap(), 2);
    assert_eq!(
        exercise(&*client, "deref").await.unwrap(),
        4,
        "the PgClient too"
    );

    let transaction: Transaction<'_> = client.transaction().await.unwrap();
    assert_eq!(exercise(&transaction, "rolled-back").await.unwrap(), 6);
    drop(transaction);
    let transaction = GenericClient::transaction(&mut client).await.unwrap();
    assert_eq!(exercise(&transaction, "kept").await.unwrap(), 6);
    transaction.commit().await.unwrap();
    drop(client);

    // The futures are `Send`: generic code moves into a task with its pooled connection.
    let task = tokio::spawn({
        let pool = pool.clone();
        async move {
            let client = pool.get().await.expect("the connection");
            exercise(&client, "spawned").await
        }
    });
    assert_eq!(
        task.await.unwrap().unwrap(),
        8,
        "the dropped transaction rolled back"
    );
    let client = pool.get().await.unwrap();
    assert_eq!(
        client.statement_cache().len(),
        2,
        "the cached prepares of the client, the transactions and the task: one per query"
    );
}

/// Nested transactions through the trait: a savepoint rolled back keeps its parent's work.
async fn nested<C: GenericClient>(db: &mut C) -> Result<i64, tokio_postgres::Error> {
    db.batch_execute("CREATE TEMP TABLE IF NOT EXISTS nested (x int)")
        .await?;
    let mut outer = db.transaction().await?;
    let insert = outer
        .prepare_cached("INSERT INTO nested VALUES ($1)")
        .await?;
    outer.execute(&insert, &[&1i32]).await?;
    let inner = GenericClient::transaction(&mut outer).await?;
    inner.execute(&insert, &[&2i32]).await?;
    inner.rollback().await?;
    let named = outer.savepoint("named").await?;
    named.execute(&insert, &[&3i32]).await?;
    named.commit().await?;
    outer.commit().await?;
    let total: i64 = db.query_one("SELECT sum(x) FROM nested", &[]).await?.get(0);
    Ok(total)
}

#[tokio::test]
async fn a_transaction_nests_through_the_trait() {
    let mut config = server_or_skip!("slotpool-dropin-nested");
    config.pool = Some(PoolConfig::new(1));
    let pool = config.create_pool(NoTls).unwrap();
    let mut client = pool.get().await.unwrap();
    assert_eq!(
        nested(&mut client).await.unwrap(),
        4,
        "1 and 3; 2 rolled back"
    );
}

#[tokio::test]
async fn build_transaction_settings_are_the_servers() {
    let mut config = server_or_skip!("slotpool-dropin-build-transaction");
    config.pool = Some(PoolConfig::new(1));
    let pool = config.create_pool(NoTls).unwrap();
    let mut client = pool.get().await.unwrap();

    let transaction: PgTransaction<'_> = client
        .build_transaction()
        .isolation_level(IsolationLevel::Serializable)
        .read_only(true)
        .deferrable(true)
        .start()
        .await
        .unwrap();
    assert_eq!(
        show(&transaction, "transaction_isolation").await,
        "serializable"
    );
    assert_eq!(show(&transaction, "transaction_read_only").await, "on");
    assert_eq!(show(&transaction, "transaction_deferrable").await, "on");
    let statement = transaction.prepare_cached("SELECT 41 + 1").await.unwrap();
    let write = transaction
        .batch_execute("CREATE TEMP TABLE refused (x int)")
        .await
        .expect_err("a read-only transaction refuses a write");
    assert_eq!(
        write.code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
    );
    drop(transaction);
    assert_eq!(
        client.statement_cache().len(),
        1,
        "the built transaction prepared through the connection's cache"
    );
    let row = client.query_one(&statement, &[]).await.unwrap();
    assert_eq!(
        row.get::<_, i32>(0),
        42,
        "the statement outlives its transaction"
    );

    let transaction = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    assert_eq!(
        show(&transaction, "transaction_isolation").await,
        "repeatable read"
    );
    assert_eq!(show(&transaction, "transaction_read_only").await, "off");
    transaction.rollback().await.unwrap();

    let transaction = client.build_transaction().start().await.unwrap();
    assert_eq!(
        show(&transaction, "transaction_isolation").await,
        show(&transaction, "default_transaction_isolation").await,
        "unset, the session default holds"
    );
}

#[tokio::test]
async fn a_connection_and_its_transactions_share_cached_statements() {
    let mut config = server_or_skip!("slotpool-dropin-shared-cache");
    config.pool = Some(PoolConfig::new(1));
    let pool = config.create_pool(NoTls).unwrap();
    let mut client = pool.get().await.unwrap();
    let query = "SELECT $1::int * 2";

    let on_client = GenericClient::prepare_cached(&client, query).await.unwrap();
    let transaction = client.transaction().await.unwrap();
    let in_transaction = GenericClient::prepare_cached(&transaction, query)
        .await
        .unwrap();
    let row = transaction
        .query_one(&in_transaction, &[&21i32])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    assert_eq!(
        prepared(&transaction, query).await,
        1,
        "prepared once, on the client"
    );
    transaction.commit().await.unwrap();

    let built = client.build_transaction().start().await.unwrap();
    let typed = built
        .prepare_typed_cached(query, &[tokio_postgres::types::Type::INT4])
        .await
        .unwrap();
    built.commit().await.unwrap();
    let again = client.prepare_cached(query).await.unwrap();
    assert_eq!(
        client.statement_cache().len(),
        2,
        "one statement untyped (client and transaction), one typed"
    );
    assert_eq!(prepared(&client, query).await, 2);
    for statement in [on_client, again, typed] {
        let row = client.query_one(&statement, &[&1i32]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 2);
    }
}

#[test]
fn a_pool_made_outside_a_runtime_is_used_inside_one() {
    let mut config = server_or_skip!("slotpool-dropin-outside");
    config.pool = Some(PoolConfig::new(2));
    let pool = config.create_pool(NoTls).expect("no runtime needed");
    assert_eq!(pool.status().size, 0, "nothing connected yet");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name: String = runtime.block_on(async {
        let client = pool.get().await.expect("connects inside the runtime");
        client
            .query_one("SELECT current_setting('application_name')", &[])
            .await
            .unwrap()
            .get(0)
    });
    assert_eq!(
        name, "slotpool-dropin-outside",
        "the config's application_name"
    );
    assert_eq!(pool.status().size, 1);
}

#[tokio::test]
async fn a_json_configs_manager_and_pool_sections_take_effect() {
    let Some(server) = server("slotpool-dropin-json") else {
        return;
    };
    let json = serde_json_or_skip(&format!(
        r#"{{
            "url": {url:?},
            "application_name": "slotpool-dropin-json",
            "manager": {{ "recycling_method": "Clean" }},
            "pool": {{ "max_size": 1, "timeouts": {{ "wait": {{ "secs": 0, "nanos": 200000000 }} }} }}
        }}"#,
        url = server.url.as_deref().unwrap_or_default()
    ));
    let Some(config) = json else {
        return;
    };
    let pool = config.create_pool(NoTls).unwrap();

    let client = pool.get().await.unwrap();
    client
        .batch_execute("SET application_name = 'changed'")
        .await
        .unwrap();
    // `max_size` 1 and a 200 ms wait: a second `get` times out while the first is out.
    let waited = pool.get().await;
    assert!(
        matches!(waited, Err(slotpool::managed::PoolError::Timeout { .. })),
        "{waited:?}"
    );
    drop(client);
    let client = pool.get().await.unwrap();
    assert_eq!(
        show(&client, "application_name").await,
        "slotpool-dropin-json",
        "Clean recycling reset the session"
    );
}

/// The config parsed from `json`, or `None` (after saying so) without the `serde` feature.
#[cfg(feature = "serde")]
fn serde_json_or_skip(json: &str) -> Option<Config> {
    Some(serde_json::from_str(json).expect("a valid config"))
}

#[cfg(not(feature = "serde"))]
fn serde_json_or_skip(_: &str) -> Option<Config> {
    eprintln!("skipped a JSON config test: the `serde` feature is off");
    None
}

/// Every name a `deadpool_postgres` import uses is in `slotpool::managed::postgres`, so an
/// import line ports by its crate name alone: the pool's types and aliases (`Object`,
/// `Client`, `Hook`, `HookError`, `Timeouts`, `TimeoutType`, `PoolConfig`, `QueueMode`,
/// `Status`), and bb8-postgres's `new_from_stringlike`.
#[test]
fn a_deadpool_postgres_import_names_only_this_module() {
    use slotpool::managed::postgres::Timeouts as PgTimeouts;
    use slotpool::managed::postgres::{
        Hook, HookError, Object, PgError, PgManager, Pool, PoolError, Status, TimeoutType,
    };
    use slotpool::managed::postgres::{PoolConfig as PgPoolConfig, QueueMode as PgQueueMode};

    let timeouts: PgTimeouts = Timeouts::wait_millis(100);
    let config = PgPoolConfig {
        timeouts,
        queue_mode: PgQueueMode::Fifo,
        ..PgPoolConfig::new(4)
    };
    assert_eq!(config.max_size, 4);
    let error: PoolError = PoolError::Timeout {
        step: TimeoutType::Wait,
        after: Duration::from_millis(100),
    };
    assert!(matches!(
        error,
        PoolError::Timeout {
            step: TimeoutType::Wait,
            ..
        }
    ));
    let _: Option<HookError> = None;
    let _: Option<Hook> = None;
    let _: Option<Object> = None;
    let _: Option<Status> = None;
    let _: Option<PgError> = None;

    let manager = PgManager::new_from_stringlike("host=127.0.0.1 user=app dbname=appdb", NoTls)
        .expect("a connection string parses");
    let pool: Pool = Pool::builder(manager).max_size(1).build().unwrap();
    assert_eq!(pool.status().max_size, 1);
    assert!(PgManager::new_from_stringlike("host=x port=notaport", NoTls).is_err());
}
