/// Models that must show they reached what they are named for: [`explore`] runs a model under
/// `loom::model`, counting (outside loom's state) the executions it explored and the times
/// each path was taken, and fails if it explored only one execution or never took a path.
#[cfg(slotpool_loom)]
pub mod coverage {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Paths a model must take in at least one execution, and the executions it explored;
    /// plain std atomics, so they add up across loom's executions.
    #[derive(Debug, Default)]
    pub struct Coverage {
        executions: AtomicUsize,
        paths: [AtomicUsize; 4],
    }

    impl Coverage {
        /// Path `n` (below 4) was taken in this execution.
        pub fn reached(&self, n: usize) {
            self.paths[n].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Runs `body` under `loom::model`, then checks that more than one execution was explored
    /// and that each of the first `paths` paths was reached in at least one.
    pub fn explore(name: &str, paths: usize, body: impl Fn(&Coverage) + Send + Sync + 'static) {
        let coverage = Arc::new(Coverage::default());
        let inner = Arc::clone(&coverage);
        loom::model(move || {
            inner.executions.fetch_add(1, Ordering::Relaxed);
            body(&inner);
        });
        let executions = coverage.executions.load(Ordering::Relaxed);
        assert!(executions > 1, "{name}: explored {executions} execution(s)");
        for n in 0..paths {
            let taken = coverage.paths[n].load(Ordering::Relaxed);
            assert!(
                taken > 0,
                "{name}: path {n} never taken in {executions} executions"
            );
        }
    }
}
