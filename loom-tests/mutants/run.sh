#!/usr/bin/env bash
# The mutation suite: plants each bug in loom-tests/mutants/*.patch, one at a time, in a
# scratch copy of the committed tree, runs the checks the mutant names, and prints a table.
# A mutant is caught when at least one of its checks fails (or times out); the unmutated
# tree must pass every check first, or nothing is run.
#
#   bash loom-tests/mutants/run.sh [FILTER...]   # mutants whose file name contains a FILTER
#
# Environment: BOUND (loom preemption bound, default 3), CHECK_TIMEOUT (seconds per check,
# default 900), KEEP_GOING=1 (run every check of a mutant even after one caught it).
#
# Each mutant file is a header, a line `---`, then a git diff against the tree:
#
#   Mutant: the gate's release skips the WAITING bit check
#   Checks: loom:gate test:slotpool:stream
#   Expect: caught                     (or: equivalent)
#   Why: a plausible edit ... (for an equivalent mutant: why no check can tell it apart)
#   ---
#   diff --git a/core/src/protocol/gate.rs b/core/src/protocol/gate.rs
#
# Checks:
#   loom:FILE[:FILTER]           loom model file loom-tests/tests/FILE.rs at bound $BOUND
#   loom-lib:PKG[:FILTER]        PKG's own lib tests under loom at bound $BOUND (e.g. the
#                                counters' stripe model: loom-lib:slotpool:sync)
#   shuttle:FILE[:FILTER]        shuttle test file loom-tests/tests/FILE.rs (--cfg slotpool_shuttle)
#   test:PKG:FILE[:FILTER]       cargo test -p PKG --test FILE FILTER (e.g. test:slotpool:stream,
#                                or test:slotpool:stream:stream_hang:: for one module of it)
#   lib:PKG[:FILTER]             cargo test -p PKG --lib
#   lin:FILE[:FILTER]            a recorded linearizability check, core/tests/FILE.rs, optimised
#                                (cargo test --profile lin -p slotpool --test FILE, ignored
#                                tests included)
#   fuzz:TARGET                  replays fuzz/corpus/TARGET through the cargo-fuzz target (needs
#                                cargo-fuzz; test:slotpool:slots_fuzz_replay replays the same
#                                corpus without it)
#   asan:FILE, tsan:FILE         test binary FILE (or BINARY/MODULE, or `lib`) under AddressSanitizer or
#                                ThreadSanitizer, as .ci/sanitizers runs it (needs nightly)
#
# A check that fails because the mutated tree does not compile catches nothing: the mutant is
# reported BROKEN. The table ends with a summary line per mutant family (the part of the name
# before the first dash), and the run fails if any mutant survived, no longer applies, or is
# broken.
set -uo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
filters=("$@")
[ ${#filters[@]} -gt 0 ] || filters=("")
bound=${BOUND:-3}
limit=${CHECK_TIMEOUT:-900}
work="$top/target/mutants"
tree="$work/tree"
mkdir -p "$work"

if [ ! -d "$tree/.git" ] && [ ! -f "$tree/.git" ]; then
  git worktree add -q --detach "$tree" HEAD
fi
git -C "$tree" checkout -q --detach HEAD 2>/dev/null
git -C "$tree" reset -q --hard "$(git rev-parse HEAD)"
git -C "$tree" clean -qfdx -e target

run_check() { # $1 = check; runs in $tree; returns the command's status (124 = timeout)
  local check=$1 kind rest file filt pkg
  kind=${check%%:*}; rest=${check#*:}
  case $kind in
    loom|shuttle)
      file=${rest%%:*}; filt=""; [ "$rest" != "$file" ] && filt=${rest#*:}
      local cfg=slotpool_loom; [ "$kind" = shuttle ] && cfg=slotpool_shuttle
      (cd "$tree" && RUSTFLAGS="--cfg $cfg" LOOM_MAX_PREEMPTIONS=$bound timeout "$limit" \
        cargo test -q --release -p slotpool-loom-tests --target-dir "$work/target-$kind" \
        --test "$file" -- $filt) ;;
    # (loom-lib shares target-loom with loom: the same cfg, so the dependencies build once.)
    test)
      pkg=${rest%%:*}; rest=${rest#*:}; file=${rest%%:*}; filt=""; [ "$rest" != "$file" ] && filt=${rest#*:}
      (cd "$tree" && timeout "$limit" cargo test -q -p "$pkg" --all-features \
        --target-dir "$work/target-test" --test "$file" -- $filt) ;;
    lin)
      file=${rest%%:*}; filt=""; [ "$rest" != "$file" ] && filt=${rest#*:}
      (cd "$tree" && LIN_RUNS=full timeout "$limit" cargo test -q --profile lin -p slotpool \
        --target-dir "$work/target-test" --test "$file" -- --include-ignored $filt) ;;
    lib)
      pkg=${rest%%:*}; filt=""; [ "$rest" != "$pkg" ] && filt=${rest#*:}
      (cd "$tree" && timeout "$limit" cargo test -q -p "$pkg" --all-features \
        --target-dir "$work/target-test" --lib -- $filt) ;;
    loom-lib)
      pkg=${rest%%:*}; filt=""; [ "$rest" != "$pkg" ] && filt=${rest#*:}
      (cd "$tree" && RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=$bound \
        timeout "$limit" cargo test -q --release -p "$pkg" --target-dir "$work/target-loom" \
        --lib -- $filt) ;;
    fuzz)
      (cd "$tree/fuzz" && timeout "$limit" cargo fuzz run -s none --release "$rest" \
        "corpus/$rest" -- -runs=0) ;;
    asan|tsan)
      local san=address; [ "$kind" = tsan ] && san=thread
      (cd "$tree" && timeout "$limit" .ci/sanitizers "$san" --test "$rest") ;;
    *) echo "unknown check kind: $check" >&2; return 2 ;;
  esac
}

header() { sed -n "/^---\$/q;s/^$2: *//p" "$1" | head -1; }

mutants=()
for m in "$top"/loom-tests/mutants/*.patch; do
  [ -e "$m" ] || continue
  for filter in "${filters[@]}"; do
    case $(basename "$m") in *"$filter"*) mutants+=("$m"); break ;; esac
  done
done
[ ${#mutants[@]} -gt 0 ] || { echo "no mutants match '${filters[*]}'"; exit 2; }

# The unmutated tree must pass every check that the chosen mutants name.
declare -A seen=()
for m in "${mutants[@]}"; do
  for c in $(header "$m" Checks); do seen[$c]=1; done
done
echo "baseline: ${#seen[@]} checks on the unmutated tree (bound $bound)"
for c in "${!seen[@]}"; do
  if ! run_check "$c" >"$work/baseline.log" 2>&1; then
    echo "baseline check $c FAILS on the unmutated tree; see $work/baseline.log"
    exit 1
  fi
done

table="$work/table.md"
{
  echo "| mutant | what it plants | checks | result |"
  echo "| --- | --- | --- | --- |"
} >"$table"
caught=0 survived=0 equivalent=0 stale=0 broken=0
declare -A family_total=() family_caught=()
for m in "${mutants[@]}"; do
  name=$(basename "$m" .patch)
  what=$(header "$m" Mutant)
  checks=$(header "$m" Checks)
  expect=$(header "$m" Expect)
  git -C "$tree" reset -q --hard && git -C "$tree" clean -qfd -e target
  if ! sed '1,/^---$/d' "$m" | git -C "$tree" apply - 2>"$work/apply.log"; then
    result="STALE (patch no longer applies)"; stale=$((stale + 1))
  else
    result=""
    for c in $checks; do
      start=$(date +%s)
      run_check "$c" >"$work/$name.$c.log" 2>&1
      status=$?
      secs=$(( $(date +%s) - start ))
      if [ $status -ne 0 ] && grep -q "^error: could not compile" "$work/$name.$c.log"; then
        # A mutant the compiler rejects proves nothing about the check.
        result="BROKEN (does not compile under \`$c\`)"; broken=$((broken + 1))
        break
      elif [ $status -ne 0 ]; then
        why="fails"; [ $status -eq 124 ] && why="times out"
        result="${result:+$result; }caught by \`$c\` ($why, ${secs} s)"
        [ "${KEEP_GOING:-0}" = 1 ] || break
      fi
    done
    if [[ $result == BROKEN* ]]; then
      :
    elif [ -n "$result" ]; then
      caught=$((caught + 1))
      [ "$expect" = equivalent ] && result="$result (expected equivalent!)"
    elif [ "$expect" = equivalent ]; then
      result="equivalent: $(header "$m" Why)"; equivalent=$((equivalent + 1))
    else
      result="**SURVIVED**"; survived=$((survived + 1))
    fi
  fi
  printf '| %s | %s | %s | %s |\n' "$name" "$what" "$checks" "$result" | tee -a "$table"
  family=${name%%-*}
  family_total[$family]=$(( ${family_total[$family]:-0} + 1 ))
  case $result in caught*|equivalent*) family_caught[$family]=$(( ${family_caught[$family]:-0} + 1 )) ;; esac
done
{
  echo
  echo "| family | mutants | caught or equivalent |"
  echo "| --- | --- | --- |"
  for family in $(printf '%s\n' "${!family_total[@]}" | sort); do
    echo "| $family | ${family_total[$family]} | ${family_caught[$family]:-0} |"
  done
} | tee -a "$table"
git -C "$tree" reset -q --hard
echo
echo "caught $caught, survived $survived, equivalent $equivalent, stale $stale, broken $broken (table: $table)"
[ $survived -eq 0 ] && [ $stale -eq 0 ] && [ $broken -eq 0 ]
