//! The bench library's own pieces, tested from outside it (the library builds no test harness
//! of its own): the keyed cases and R2's reference, and the report's tables.

use slotpool_bench::report::Record;

/// A one-run record of `case` by `impl_name` at `ns_per_op`.
fn record(case: &str, impl_name: &str, ns_per_op: f64) -> Record {
    Record {
        case: case.to_string(),
        impl_name: impl_name.to_string(),
        ns_per_op,
        p50_ns: None,
        p99_ns: None,
        p999_ns: None,
        max_ns: None,
        ops: 1,
        repeats: 1,
    }
}

mod keyed_cases {
    use slotpool_bench::cases::keyed::{slotpool_keyed, CASES};
    use slotpool_bench::reference::keyed::{alias, FAMILIES, SHARES};
    use slotpool_bench::report::Settings;

    /// The reference and slotpool agree on R2's census: 19 families, 9 shares, sum 68.
    #[test]
    fn both_designs_see_r2s_census() {
        let keyed = slotpool_keyed();
        assert_eq!(keyed.stats().len(), FAMILIES.len());
        assert_eq!(keyed.shares().len(), SHARES.len());
        assert_eq!(keyed.total_shares(), 68);
        for family in FAMILIES {
            assert_eq!(keyed.share_of(&family), Some(alias(family)));
            assert!(SHARES.contains(&alias(family)));
        }
    }

    /// Every case runs at smoke scale and reports slotpool and the reference.
    #[test]
    fn smoke() {
        let records = slotpool_bench::report::run_cases(CASES, &Settings::smoke(), |_| true);
        for &(case, _) in CASES {
            for name in ["slotpool", "reference"] {
                assert!(
                    records
                        .iter()
                        .any(|r| r.case == case && r.impl_name == name),
                    "{case} {name}"
                );
            }
        }
    }
}

mod keyed_reference {
    use std::time::Duration;

    use slotpool_bench::reference::keyed::{RefError, RefKeyed, RefReach, REPLAY_SLOTS};

    /// The reference refuses with `NoDurableEffect` and counts per caller family.
    #[test]
    fn reference_refuses_and_counts() {
        let rt = slotpool_bench::fixtures::current_thread();
        let reference = RefKeyed::new();
        rt.block_on(async {
            let _held: Vec<_> = {
                let mut held = Vec::new();
                for _ in 0..REPLAY_SLOTS {
                    held.push(
                        reference
                            .admit("replay", Duration::from_secs(5))
                            .await
                            .expect("room"),
                    );
                }
                held
            };
            let refused = reference.admit("catch-up", Duration::ZERO).await;
            assert_eq!(
                refused.err(),
                Some(RefError::Unavailable {
                    family: "catch-up",
                    reach: RefReach::NoDurableEffect
                })
            );
            assert_eq!(reference.refusals("catch-up"), 1);
        });
    }
}

mod publish {
    use slotpool_bench::report::publish::{full_table, readme_table, splice, Published};

    use super::record;

    fn published() -> Published {
        Published {
            commit: "0123456789abcdef".into(),
            date: "2026-12-07".into(),
            machine: "2 cores".into(),
            mode: "full".into(),
            records: vec![
                record("stream/uncontended", "slotpool", 24.0),
                record("stream/uncontended", "reference", 207.0),
                record("stream/uncontended", "floor", 21.6),
                record("managed/uncontended", "slotpool", 60.0),
                record("managed/uncontended", "deadpool", 240.0),
            ],
        }
    }

    #[test]
    fn the_readme_table_shows_each_chosen_case_and_its_provenance() {
        let table = readme_table(&published());
        assert!(
            table.contains(
                "| stream/uncontended | 24.0 | reference 207, floor 21.6 | 8.62×, 0.90× |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| managed/uncontended | 60.0 | deadpool 240 | 4.00× |"),
            "{table}"
        );
        assert!(table.contains("commit `0123456789ab`"), "{table}");
    }

    #[test]
    fn a_part_is_spliced_between_its_markers_and_nothing_else_moves() {
        let text =
            "before\n<!-- results:readme:start -->\nold\n<!-- results:readme:end -->\nafter\n";
        let spliced = splice(text, "readme", "new\n").unwrap();
        assert_eq!(
            spliced,
            "before\n<!-- results:readme:start -->\nnew\n<!-- results:readme:end -->\nafter\n"
        );
        assert_eq!(
            splice(&spliced, "readme", "new\n").unwrap(),
            spliced,
            "idempotent"
        );
        assert!(splice("no markers", "readme", "x").is_err());
    }

    #[test]
    fn the_full_table_has_every_implementation_with_its_ratio() {
        let table = full_table(&published());
        assert!(
            table.contains("| stream/uncontended | reference (reference) | 207 | 8.62× |"),
            "{table}"
        );
        assert!(
            table.contains("| stream/uncontended | slotpool | 24.0 | 1× |"),
            "{table}"
        );
    }
}

mod table {
    use slotpool_bench::report::summary;

    use super::record;

    #[test]
    fn the_summary_gives_each_case_the_ratio_that_matters() {
        let records = [
            record("stream/uncontended", "slotpool", 12.0),
            record("stream/uncontended", "reference", 150.0),
            record("stream/uncontended", "floor", 10.0),
            record("managed/uncontended", "slotpool", 60.0),
            record("managed/uncontended", "deadpool", 180.0),
            record("managed/uncontended", "tokio-semaphore", 40.0),
            record("managed/uncontended", "bb8", 200.0),
            record("e2e/concurrency-1", "reference", 80.0),
        ];
        let summary = summary(&records);
        let lines: Vec<&str> = summary.lines().skip(1).collect();
        assert_eq!(
            lines.len(),
            2,
            "a case without slotpool has no line: {summary}"
        );
        assert!(lines[0].starts_with("  stream/uncontended"), "{summary}");
        assert!(
            lines[0].ends_with("reference/slotpool 12.50×; slotpool/floor 1.20×"),
            "{summary}"
        );
        assert!(
            lines[1]
                .ends_with("fastest peer deadpool/slotpool 3.00×; slotpool/tokio-semaphore 1.50×"),
            "{summary}"
        );
    }
}
