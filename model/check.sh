#!/bin/sh
# Exhaustive spin runs of the models in model/ (used by `make model` and `make model-mutants`).
#   check.sh model     every configuration of the fixed protocol must verify (no error)
#   check.sh mutants   every mutant must yield a counterexample (an assertion violated, a
#                      circular wait (an invalid end state), or for liveness.pml an
#                      acceptance cycle under weak fairness)
# Generated files go to model/build/ (a trail of a failed run stays there).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build="$here/build"
mkdir -p "$build"

# name | spin -D switches (see the header of xasink.pml)
CONFIGS='append      | -DNO_R2 -DNO_LOSER3
staged      | -DSTAGED -DNO_R2 -DNO_LOSER1
append-mdb  | -DMARIADB -DREPLY_LOST -DRESTART -DNO_R2 -DNO_LOSER1 -DNO_LOSER3
staged-mdb  | -DSTAGED -DMARIADB -DREPLY_LOST -DRESTART -DNO_R2 -DNO_LOSER1 -DNO_LOSER3
append-adm  | -DADMIN -DNO_R2 -DNO_LOSER1 -DNO_LOSER3
staged-adm  | -DSTAGED -DADMIN -DNO_R2 -DNO_LOSER1 -DNO_LOSER3
staged-2R   | -DSTAGED -DD_STOPS_AT_DECISION -DNO_AMBIGUOUS -DNO_LOSER1 -DNO_LOSER3
append-busy | -DBUSY -DNO_R2 -DNO_LOSER1 -DNO_LOSER3
staged-busy | -DSTAGED -DBUSY -DD_STOPS_AT_DECISION -DNO_AMBIGUOUS -DNO_LOSER1 -DNO_LOSER3
sink        | 
sink-format | -DCHECK_AFTER_BEGIN
sink-prune  | -DPRUNE
sink-1p     | -DONE_PHASE
sink-1p-prune | -DONE_PHASE -DPRUNE
sink-1p-format | -DONE_PHASE -DCHECK_AFTER_BEGIN
sink-1p-operator | -DONE_PHASE -DOPERATOR
sink-shipped | -DSHIPPED -DCHECK_AFTER_BEGIN
sink-format-prune | -DCHECK_AFTER_BEGIN -DPRUNE
sink-shipped-prune | -DSHIPPED -DCHECK_AFTER_BEGIN -DPRUNE
streams     | 
streams-noid | -DNO_QUERY_ID
apply       | -DPROGRESS
apply-sink  | -DSINK -DRESET -DPROGRESS
apply-snapshot | -DSNAPSHOT
apply-snapshot-sink | -DSNAPSHOT -DSINK -DRESET
apply-direct | -DDIRECT -DPROGRESS
apply-direct-snapshot | -DDIRECT -DSNAPSHOT
tx          | -DPROGRESS
tx-1p       | -DONE_PHASE -DNO_Q -DPROGRESS
tx-2        | -DTWO_TX -DNO_Q -DPROGRESS
mdb         | 
mdb-loser   | -DLOSER
mdb-2rc     | -DTWO_RC -DNO_RP
mdb-prune   | -DPRUNE
mdb-lost    | -DLOST_C
decisions   | 
decisions-pb | -DPER_BRANCH
liveness    | '

# each mutant of xasink.pml runs in the "append" configuration (plus its own switches);
# sink-*, streams-*, apply-*, tx-*, mdb-* and live-* mutants in sink.pml, streams.pml,
# apply.pml, transaction.pml, participants.pml and liveness.pml
MUTANTS='A | -DMUTANT_A | recovery lists XA RECOVER before reading the job row
B | -DMUTANT_B | NOTA + not listed + no marker = LOST, without reading the job state
C | -DMUTANT_C | a failed journal existence check presumes abort at once
F | -DMUTANT_F | ambiguous decision commit settled by a plain read, not the fence
busy | -DBUSY -DNO_LOSER1 -DMUTANT_BUSY | a COMMIT answered busy (a second finisher) is a failure
sink-cond | -DMUTANT_NO_CONDITION | a streaming decision ignores the sink mark
sink-restore | -DMUTANT_NO_RESTORE | a decided batch that aborts keeps the sink mark
sink-skip | -DMUTANT_SKIP_UNFINISHED | a replay skips a decided batch without finishing it
sink-path | -DMUTANT_PATH_SINK | the sink id is the checkpoint path text, spelled anew on restart
sink-prune | -DPRUNE -DMUTANT_PRUNE_MARK | prune deletes the job the mark names; its replay then fails
sink-1p-mark | -DONE_PHASE -DMUTANT_MARK_OUTSIDE | one-phase: the mark moves in its own transaction after the commit
sink-1p-fence | -DONE_PHASE -DMUTANT_FENCE_READ | one-phase: a lost commit reply settled by a plain read, not the fence insert
sink-1p-lock | -DONE_PHASE -DMUTANT_PLAIN_MARK | one-phase: the mark read without FOR UPDATE, then moved unconditionally
sink-1p-taken | -DONE_PHASE -DMUTANT_TAKEN_SKIPPED | one-phase: a mark found at the batch in the transaction reported as skipped
sink-1p-commit | -DONE_PHASE -DMUTANT_TAKEN_COMMITS | one-phase: BATCH_TAKEN, and the transaction is committed anyway
sink-1p-after | -DONE_PHASE -DMUTANT_ERROR_AFTER_COMMIT | one-phase: an error after the commit reply reported as nothing written
sink-1p-operator | -DONE_PHASE -DOPERATOR -DMUTANT_OPERATOR_READ | one-phase: the operator settles an unknown commit by a plain read, not the fence
sink-ship-cond | -DSHIPPED -DCHECK_AFTER_BEGIN -DMUTANT_SHIPPED_UNCONDITIONAL | shipped batch: the job row moved to committed whatever its state
sink-ship-read | -DSHIPPED -DCHECK_AFTER_BEGIN -DMUTANT_SHIPPED_READ | shipped batch: a lost commit reply settled by a plain read, not the fence
streams-old | -DMUTANT_SKIP_OLD | no query id, and a batch at or below the mark is skipped
streams-qid | -DMUTANT_NO_QUERY_CHECK | below-mark batches refused, the query id not compared
streams-noid | -DNO_QUERY_ID -DMUTANT_SKIP_OLD | without query ids, a batch below the mark skipped
apply-name | -DMUTANT_NAME_KEY | the apply lock and the apply order keyed by how the caller spelled the table, not by its identity
apply-order | -DMUTANT_NO_ORDER | a one-phase staged job applies without lock_apply_order
apply-help | -DMUTANT_NO_HELP -DPROGRESS | after JobOrderError, the same job id retried without finishing the blocker
apply-register | -DSINK -DPROGRESS -DMUTANT_NO_REGISTER | a one-phase job does not register the mark row of its sink (first batch)
apply-snapshot | -DSNAPSHOT -DPROGRESS | sessions at REPEATABLE READ with snapshot isolation: a writer that waited for a lock fails
apply-direct-order | -DDIRECT -DMUTANT_DIRECT_UNORDERED | the appends of a transaction loaded directly without the apply locks and lock_apply_order
apply-direct-late | -DDIRECT -DMUTANT_DIRECT_LOCK_LATE | the direct appends of a transaction take the apply locks after loading their rows
tx-two-applies | -DMUTANT_TWO_APPLIES | the tables of a transaction applied in two local transactions, a COMMIT between them
tx-first-table | -DMUTANT_FIRST_TABLE_ORDER | the order checks find the row of a transaction by its target_table (its first table) only
tx-lock-order | -DTWO_TX -DNO_Q -DMUTANT_PLAN_ORDER_LOCKS | the apply locks of a job taken in the order of its plan, not sorted
mdb-early | -DMUTANT_PARTICIPANT_EARLY | the driver commits the branch in the participant before the coordinator records the decision
mdb-alone | -DMUTANT_PARTICIPANT_ALONE | recovery of the participant alone aborts a silent running job that has its coordinator link
mdb-abort-p | -DMUTANT_ABORT_P_FIRST_AFTER_DECISION | a failure after the decision aborts the participant first, then tries the coordinator
mdb-stale-winners | -DMUTANT_STALE_WINNERS | recovery copies the winners of the participant read with the pending links, before the state in the coordinator
mdb-no-fence | -DMUTANT_NO_FENCE | recovery of an aborted job takes a participant without its job row as final, the link done
mdb-links-only | -DMUTANT_LINKS_ONLY | the final recovery reaches the participant only through pending links, not its own resolution
mdb-row-first | -DMUTANT_ROW_BEFORE_LINK | the job row in the participant written before its coordinator link
mdb-marker | -DMUTANT_MARKER_ACROSS | XAER_NOTA in the participant settled by the job state in the coordinator, not its own
mdb-prune-fence | -DPRUNE -DMUTANT_PRUNE_FENCE | the retention in the participant deletes an aborted job that has its coordinator link (the fence)
decisions-id-order | -DMUTANT_ID_ORDER | recovery carries the pending decisions of a participant in job-id order, none first
decisions-no-settle | -DMUTANT_NO_SETTLE | a driver copies its decision to a participant without carrying earlier pending ones first
decisions-settle-applies | -DPER_BRANCH -DMUTANT_SETTLE_APPLIES | an earlier decision is carried whole (applied) before a later one whose prepared branches hold the rows its apply needs, and the later one waits for it
decisions-no-order-lock | -DMUTANT_NO_ORDER_LOCK | a decision with participants stamps without the order lock: one stamped first commits after a later one, which reaches the participant first
mdb-withdraw | -DMUTANT_WITHDRAW_UNFENCED | a participant whose first write failed is withdrawn (its link done) without fencing or aborting its row
mdb-linked-abort | -DLOST_C -DMUTANT_LINKED_ABORT | an operator ending a decided job in the coordinator alone after its branch there was lost aborts it, turning the decision over for the participant
live-late-beat | -DMUTANT_LATE_BEAT | tasks beat from their first row, no start lease: a live job aborted
live-silent-ship | -DMUTANT_SILENT_SHIP | quick shipping tasks never beat: a run of them after a branch task beat stays silent past the running lease'
MUTANT_BASE='-DNO_R2 -DNO_LOSER3'

# model_of NAME: which model a configuration or mutant checks (by its name's prefix)
model_of() {
  case "$1" in
    sink*|mutant-sink*) echo "$here/sink.pml" ;;
    streams*|mutant-streams*) echo "$here/streams.pml" ;;
    apply*|mutant-apply*) echo "$here/apply.pml" ;;
    tx*|mutant-tx*) echo "$here/transaction.pml" ;;
    mdb*|mutant-mdb*) echo "$here/participants.pml" ;;
    decisions*|mutant-decisions*) echo "$here/decisions.pml" ;;
    live*|mutant-live*) echo "$here/liveness.pml" ;;
    *) echo "$here/xasink.pml" ;;
  esac
}

# liveness NAME: whether NAME checks liveness (acceptance cycles under weak fairness)
liveness() { case "$1" in live*|mutant-live*) return 0 ;; *) return 1 ;; esac; }

# build NAME FLAGS: generate and compile the verifier in build/NAME
build() {
  dir="$build/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  safety=-DSAFETY
  liveness "$1" && safety=
  # shellcheck disable=SC2086
  (cd "$dir" && spin -a $2 "$(model_of "$1")" >spin.out 2>&1 &&
    gcc -w -O1 $safety -DCOLLAPSE -DMEMLIM=8000 -o pan pan.c >gcc.out 2>&1) || {
    echo "model: building $1 failed:"; cat "$dir/spin.out" "$dir/gcc.out" 2>/dev/null; return 2; }
}

# build_all LIST: every "name | flags ..." line of LIST (prefix $2), two compilers at a time
build_all() {
  pids="" n=0
  while IFS='|' read -r name flags _; do
    name=$(echo $name)
    build "$2$name" "$3 $flags" &
    pids="$pids $!" n=$((n + 1))
    if [ $((n % 2)) = 0 ]; then for p in $pids; do wait "$p" || exit 2; done; pids=""; fi
  done <<EOF_LIST
$1
EOF_LIST
  for p in $pids; do wait "$p" || exit 2; done
}

# search NAME: run pan exhaustively, its output in build/NAME/pan.out
search() {
  flags=
  liveness "$1" && flags="-a -f"
  # shellcheck disable=SC2086
  (cd "$build/$1" && ./pan -m200000 -w25 $flags >pan.out 2>&1)
}

# search_all LIST PREFIX: `search` every name of LIST, two at a time (one per core), each
# as soon as a core is free (`xargs -P 2`: one long search does not hold up the rest)
search_all() {
  echo "$1" | while IFS='|' read -r name _; do echo "$2$(echo $name)"; done |
    xargs -P 2 -I NAME sh "$here/check.sh" search NAME
}

# verify NAME: read the search's result; sets $errors $states $secs $log
verify() {
  log="$build/$1/pan.out"
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log")
  states=$(sed -n 's/^ *\([0-9][0-9.e+]*\) states, stored.*/\1/p' "$log")
  secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$log")
  if [ -z "$errors" ] || grep -q "max search depth too small\|out of memory" "$log"; then
    echo "model: $1: incomplete or failed search (see $log)"; exit 2
  fi
}

start=$(date +%s)
case "${1:-}" in
search)  # one search, for search_all
  search "$2"
  ;;
model)
  build_all "$CONFIGS" "" "" || exit 2
  search_all "$CONFIGS" ""
  echo "$CONFIGS" | while IFS='|' read -r name flags; do
    name=$(echo $name)
    verify "$name"
    if [ "$errors" != 0 ]; then
      grep "pan:.*violated\|invalid end state\|pan:1:" "$log" | head -3
      m=$(basename "$(model_of "$name")")
      echo "model: $name: $errors error(s); trail in $build/$name (spin -t -p -k $m.trail$flags ../../$m)"
      exit 1
    fi
    printf 'model %-14s ok  %10s states  %6ss  (%s)\n' "$name" "$states" "$secs" "$(echo $flags)"
  done || exit 1
  echo "model: all configurations verified, no errors ($(($(date +%s) - start))s in all)"
  ;;
mutants)
  caught='assertion violated\|pan:1: invalid end state\|acceptance cycle'
  build_all "$MUTANTS" "mutant-" "$MUTANT_BASE" || exit 2
  search_all "$MUTANTS" "mutant-"
  echo "$MUTANTS" | while IFS='|' read -r name flags what; do
    name=$(echo $name)
    verify "mutant-$name"
    if [ "$errors" = 0 ] || ! grep -q "$caught" "$log"; then
      echo "mutant $name NOT caught: $(echo $what)"; exit 1
    fi
    printf 'mutant %s caught (%s states, %ss): %s\n    %s\n' "$name" "$states" "$secs" \
      "$(echo $what)" "$(grep -m1 "$caught" "$log" | cut -c1-150)"
  done || exit 1
  echo "model-mutants: every mutant caught ($(($(date +%s) - start))s in all)"
  ;;
*)
  echo "usage: $0 model|mutants" >&2; exit 2 ;;
esac
