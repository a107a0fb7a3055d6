//! [`GenericClient`]: one trait over a pooled connection and a transaction on one, so that a
//! function written once runs inside or outside a transaction (deadpool-postgres's trait of
//! that name, with its method set plus tokio-postgres's `client`).
//!
//! This file owns the trait and its three implementations, each a delegation: to the
//! driver's method of that name, or to the connection's statement cache for the `_cached`
//! prepares. It adds no behaviour of its own.

use std::future::Future;

use tokio_postgres::types::{BorrowToSql, ToSql, Type};
use tokio_postgres::{Error, Row, RowStream, Statement, ToStatement};

use super::{PgClient, PgManager, PgTransaction};
use crate::pool::managed::{Manager, Object};

mod sealed {
    /// Only this crate's connection types implement [`GenericClient`](super::GenericClient).
    pub trait Sealed {}
}

/// What a pooled connection ([`Client`](super::Client), a [`PgClient`]) and a
/// [`PgTransaction`] have in common: the driver's query methods, the cached prepares of the
/// connection's [`StatementCache`](super::StatementCache), and a nested transaction.
///
/// Every method's future is `Send` (for statements and parameters that are `Send + Sync`), so
/// generic code over the trait can run in a spawned task. The trait is sealed, as
/// deadpool-postgres's is. One difference in the signatures: `execute_raw` and `query_raw`
/// name the parameters' type `I::Item`, not a type parameter `P` of its own (deadpool's
/// `<T, P, I>`): with a separate `P`, the compiler cannot show a spawned task's future `Send`
/// when the parameters borrow (`[name]` with `name: &str`), and fails with "one type is more
/// general than the other". Only a call that names the type parameters changes.
///
/// ```no_run
/// use slotpool::managed::postgres::{Config, GenericClient};
/// use tokio_postgres::NoTls;
///
/// /// Runs on a connection, or inside a transaction: the caller decides.
/// async fn rename<C: GenericClient>(db: &C, id: i64, name: &str) -> Result<u64, tokio_postgres::Error> {
///     let update = db.prepare_cached("UPDATE items SET name = $2 WHERE id = $1").await?;
///     db.execute(&update, &[&id, &name]).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = Config { dbname: Some("app".into()), ..Config::new() }.create_pool(NoTls)?;
/// let mut client = pool.get().await?;
/// rename(&client, 1, "one").await?;
///
/// let transaction = client.transaction().await?;
/// rename(&transaction, 2, "two").await?;            // the statement comes from the cache
/// transaction.commit().await?;
/// # Ok(()) }
/// ```
pub trait GenericClient: Sync + sealed::Sealed {
    /// The driver's `execute`: the rows a statement changed.
    fn execute<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send;

    /// The driver's `execute_raw`: `execute` with the parameters as an iterator.
    fn execute_raw<S, I>(
        &self,
        statement: &S,
        params: I,
    ) -> impl Future<Output = Result<u64, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator;

    /// The driver's `query`: every row, collected.
    fn query<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send;

    /// The driver's `query_one`: exactly one row, or an error.
    fn query_one<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Row, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send;

    /// The driver's `query_opt`: at most one row.
    fn query_opt<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send;

    /// The driver's `query_raw`: the rows as a stream, the parameters as an iterator.
    fn query_raw<S, I>(
        &self,
        statement: &S,
        params: I,
    ) -> impl Future<Output = Result<RowStream, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator;

    /// The driver's `prepare` (a new statement each call).
    fn prepare(&self, query: &str) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// The driver's `prepare_typed` (a new statement each call).
    fn prepare_typed(
        &self,
        query: &str,
        parameter_types: &[Type],
    ) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// `prepare`, once per connection: through the connection's statement cache, which a
    /// connection and its transactions share.
    fn prepare_cached(&self, query: &str) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// `prepare_typed`, once per connection and parameter types (the statement cache).
    fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// A transaction (on a transaction: a nested one, as a savepoint), whose cached prepares
    /// use the connection's statement cache.
    fn transaction(&mut self) -> impl Future<Output = Result<PgTransaction<'_>, Error>> + Send;

    /// The driver's `batch_execute`: `;`-separated statements as one simple query.
    fn batch_execute(&self, query: &str) -> impl Future<Output = Result<(), Error>> + Send;

    /// The driver's client underneath (tokio-postgres's `GenericClient::client`).
    fn client(&self) -> &tokio_postgres::Client;
}

impl sealed::Sealed for PgClient {}

impl GenericClient for PgClient {
    async fn execute<S>(&self, statement: &S, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.client.execute(statement, params).await
    }

    async fn execute_raw<S, I>(&self, statement: &S, params: I) -> Result<u64, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator,
    {
        self.client.execute_raw(statement, params).await
    }

    async fn query<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.client.query(statement, params).await
    }

    async fn query_one<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.client.query_one(statement, params).await
    }

    async fn query_opt<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.client.query_opt(statement, params).await
    }

    async fn query_raw<S, I>(&self, statement: &S, params: I) -> Result<RowStream, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator,
    {
        self.client.query_raw(statement, params).await
    }

    async fn prepare(&self, query: &str) -> Result<Statement, Error> {
        self.client.prepare(query).await
    }

    async fn prepare_typed(
        &self,
        query: &str,
        parameter_types: &[Type],
    ) -> Result<Statement, Error> {
        self.client.prepare_typed(query, parameter_types).await
    }

    async fn prepare_cached(&self, query: &str) -> Result<Statement, Error> {
        PgClient::prepare_cached(self, query).await
    }

    async fn prepare_typed_cached(&self, query: &str, types: &[Type]) -> Result<Statement, Error> {
        PgClient::prepare_typed_cached(self, query, types).await
    }

    async fn transaction(&mut self) -> Result<PgTransaction<'_>, Error> {
        PgClient::transaction(self).await
    }

    async fn batch_execute(&self, query: &str) -> Result<(), Error> {
        self.client.batch_execute(query).await
    }

    fn client(&self) -> &tokio_postgres::Client {
        PgClient::client(self)
    }
}

impl<T> sealed::Sealed for Object<PgManager<T>> where PgManager<T>: Manager<Type = PgClient> {}

/// A pooled connection ([`Client`](super::Client)): the [`PgClient`] it holds.
impl<T> GenericClient for Object<PgManager<T>>
where
    PgManager<T>: Manager<Type = PgClient>,
{
    fn execute<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        GenericClient::execute(&**self, statement, params)
    }

    fn execute_raw<S, I>(
        &self,
        statement: &S,
        params: I,
    ) -> impl Future<Output = Result<u64, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator,
    {
        GenericClient::execute_raw(&**self, statement, params)
    }

    fn query<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        GenericClient::query(&**self, statement, params)
    }

    fn query_one<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Row, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        GenericClient::query_one(&**self, statement, params)
    }

    fn query_opt<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        GenericClient::query_opt(&**self, statement, params)
    }

    fn query_raw<S, I>(
        &self,
        statement: &S,
        params: I,
    ) -> impl Future<Output = Result<RowStream, Error>> + Send
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator,
    {
        GenericClient::query_raw(&**self, statement, params)
    }

    fn prepare(&self, query: &str) -> impl Future<Output = Result<Statement, Error>> + Send {
        GenericClient::prepare(&**self, query)
    }

    fn prepare_typed(
        &self,
        query: &str,
        parameter_types: &[Type],
    ) -> impl Future<Output = Result<Statement, Error>> + Send {
        GenericClient::prepare_typed(&**self, query, parameter_types)
    }

    fn prepare_cached(&self, query: &str) -> impl Future<Output = Result<Statement, Error>> + Send {
        GenericClient::prepare_cached(&**self, query)
    }

    fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Statement, Error>> + Send {
        GenericClient::prepare_typed_cached(&**self, query, types)
    }

    fn transaction(&mut self) -> impl Future<Output = Result<PgTransaction<'_>, Error>> + Send {
        GenericClient::transaction(&mut **self)
    }

    fn batch_execute(&self, query: &str) -> impl Future<Output = Result<(), Error>> + Send {
        GenericClient::batch_execute(&**self, query)
    }

    fn client(&self) -> &tokio_postgres::Client {
        GenericClient::client(&**self)
    }
}

impl sealed::Sealed for PgTransaction<'_> {}

impl GenericClient for PgTransaction<'_> {
    async fn execute<S>(&self, statement: &S, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.transaction.execute(statement, params).await
    }

    async fn execute_raw<S, I>(&self, statement: &S, params: I) -> Result<u64, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator,
    {
        self.transaction.execute_raw(statement, params).await
    }

    async fn query<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.transaction.query(statement, params).await
    }

    async fn query_one<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.transaction.query_one(statement, params).await
    }

    async fn query_opt<S>(
        &self,
        statement: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
    {
        self.transaction.query_opt(statement, params).await
    }

    async fn query_raw<S, I>(&self, statement: &S, params: I) -> Result<RowStream, Error>
    where
        S: ?Sized + ToStatement + Sync + Send,
        I: IntoIterator + Sync + Send,
        I::Item: BorrowToSql,
        I::IntoIter: ExactSizeIterator,
    {
        self.transaction.query_raw(statement, params).await
    }

    async fn prepare(&self, query: &str) -> Result<Statement, Error> {
        self.transaction.prepare(query).await
    }

    async fn prepare_typed(
        &self,
        query: &str,
        parameter_types: &[Type],
    ) -> Result<Statement, Error> {
        self.transaction.prepare_typed(query, parameter_types).await
    }

    async fn prepare_cached(&self, query: &str) -> Result<Statement, Error> {
        PgTransaction::prepare_cached(self, query).await
    }

    async fn prepare_typed_cached(&self, query: &str, types: &[Type]) -> Result<Statement, Error> {
        PgTransaction::prepare_typed_cached(self, query, types).await
    }

    async fn transaction(&mut self) -> Result<PgTransaction<'_>, Error> {
        PgTransaction::transaction(self).await
    }

    async fn batch_execute(&self, query: &str) -> Result<(), Error> {
        self.transaction.batch_execute(query).await
    }

    fn client(&self) -> &tokio_postgres::Client {
        self.transaction.client()
    }
}
