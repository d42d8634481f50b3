/*
 * decisions.pml: two transactions of one coordinator C that stage into one table of C and
 * one table of one participant P (upsert or overwrite: each table ends with the rows of the
 * last one applied there).
 *
 * Each transaction T0, T1 has enlisted P (its job row running in C and in P, C's link to P
 * pending). Its driver D(i) then:
 *   1. decides in C, in one local transaction of two steps (`deciding.decide_commit`): the
 *      stamp (its job running -> committing, C's clock stamps decided_at), taken once it
 *      holds the journal's order lock (a decision with participants), then, after its
 *      other statements, the COMMIT, which makes the decision visible to every other
 *      session and releases the lock. A crash between the two rolls the decision back;
 *   2. copies every earlier decision of C still pending in P into P, oldest first
 *      (`driver/participants.py` `_settle_before` -> `protocol/participants.py`
 *      `settle_earlier(..., before=J, copy_only=True)` -> `_Carrier.earlier`), and fails
 *      (CommitError, its own copy not made) if one of them cannot be copied;
 *   3. copies its own decision into P (`copy_decisions`), commits its branches in C and
 *      applies it there (`Job.commit`: its finish applies an earlier-stamped staged job on
 *      the table first), then commits its branches in P and applies it there (`commit_all`,
 *      the same order rule in P);
 *   4. finishes the earlier decisions still pending (`_settle_after`, as recovery does; a
 *      failure is left to recovery), then marks its own link done.
 * A decision is seen by others (`links.decided_before`, recovery's reads, C's order check)
 * only once committed. A recovery from C with P (RC: `xasink recover --url C --participant
 * P`) runs concurrently, and once everything has stopped a fault-free one finishes what is
 * left: C's own recovery first (its decided jobs applied in decision order; one whose
 * earlier job is not applied waits), then the pending links and, for each decided job J,
 * every pending decision decided before J copied first (`_Carrier.earlier`), then J
 * carried; then once more the links it could not finish (`finish`'s second pass). The final
 * one also aborts a job still undecided (its driver is gone): C's recovery aborts it, and
 * the abort carried to P rolls its branches back.
 *
 * Carrying a decided job J to P (`_finish_one`): P's row of J running -> committing, stamped
 * with P's own clock (the copy order; a copy is one step: a second copy of the same job
 * waits on the first one's row lock and then finds it made); then P's recovery of J
 * commits its branches and applies it, unless a staged job committing in P with an earlier
 * P stamp is not applied yet (P's own order check, `check_apply_order`, verified in
 * apply.pml: J waits, left for the next pass); then C's link of J done. Every actor may
 * crash between any two steps; a crashed carrier leaves its work to the next.
 *
 * -DPER_BRANCH: T1 writes P's table with per-branch appends (`per_branch_appends=True`): its
 * branches hold their rows (and locks) in P from before its decision until they commit, and
 * it has no apply; T0 stages an upsert of those keys, whose apply waits on T1's held rows
 * (a lock wait timeout: the apply fails, the job stays committing in P).
 *
 * Asserted at the end: every decided job is committed in P (no dead end), its link done, and
 * (without PER_BRANCH, where T1's rows land at its prepare) C's table and P's table both hold
 * the rows of the job stamped last in C.
 *
 * Mutants (model/check.sh):
 *   -DMUTANT_ID_ORDER        recovery carries the pending links in job-id order, none first
 *                            (review 4, R1: `ORDER BY job_id`);
 *   -DMUTANT_NO_SETTLE       the driver copies its own decision without carrying earlier ones;
 *   -DMUTANT_SETTLE_APPLIES  (-DPER_BRANCH) an earlier decision is carried whole (copied and
 *                            applied) before a later one, by the driver and by recovery, and
 *                            the later one waits until it is final (the code before this rule);
 *   -DMUTANT_NO_ORDER_LOCK   a decision stamps without the order lock: one stamped first may
 *                            commit after a later one (review 5, D1).
 */

#define RUNNING    1
#define COMMITTING 2
#define COMMITTED  3
#define ABORTED    4
#define PENDING 0
#define DONE    1
#define NONE 2                     /* no job's rows in P's table yet */
#define OTHER(i) (1 - (i))

byte cj[2];                        /* C's job rows: RUNNING, or COMMITTING once stamped */
byte cdec[2];                      /* C's decided_at (0: not stamped) */
bit cvis[2];                       /* the decision committed in C: seen by every session */
byte cclock;
byte olock;                        /* C's order lock: 0 free, else held by D(i) as i + 1 */
bit capp[2];                       /* applied in C */
byte lastC = NONE;                 /* whose rows C's table holds */
byte pj[2];                        /* P's job rows */
byte pdec[2];                      /* P's decided_at: the copy's stamp */
byte pclock;
bit link[2];                       /* C's link of each job to P */
byte lastP = NONE;                 /* whose rows P's table holds */
bit idlow;                         /* which of the two job ids sorts first */
bit held[2];                       /* -DPER_BRANCH: a job's branch rows in P, uncommitted */
bit final_phase;

#ifdef PER_BRANCH
#define STAGED(k) ((k) == 0)        /* T1 appends per branch: no apply */
#else
#define STAGED(k) 1
#endif
/* a staged apply waits on the other job's held rows: a lock wait timeout */
#define BLOCKED(k) (STAGED(k) && held[OTHER(k)])

#define CRASH if :: !final_phase -> goto dead :: skip fi

/* P's finish of job j, after its branches committed: its apply. A staged job committing in
   P with an earlier stamp on the table comes first: the driver's finish applies it first
   (`helps`: `_finish_in_order`), recovery's leaves j waiting (JobOrderError). ok = 0 when j
   is not applied: it waits, or an apply waits on held rows (the job stays committing). */
inline apply_upto(j, helps) {
  d_step {
    ok = 1;
    if
    :: pj[j] == COMMITTING ->
         if
         :: STAGED(j) && STAGED(OTHER(j)) && pj[OTHER(j)] == COMMITTING &&
            pdec[OTHER(j)] < pdec[j] ->
              if :: !helps || BLOCKED(OTHER(j)) -> ok = 0
              :: else -> pj[OTHER(j)] = COMMITTED; lastP = OTHER(j)
              fi
         :: else
         fi;
         if :: ok && BLOCKED(j) -> ok = 0 :: else fi;
         if :: ok -> pj[j] = COMMITTED; if :: STAGED(j) -> lastP = j :: else fi :: else fi
    :: else -> ok = (pj[j] == COMMITTED)
    fi
  }
}

/* _finish_one's copy: P's row of j running -> committing, stamped with P's clock */
inline copy_one(j) {
  atomic { if :: pj[j] == RUNNING -> pj[j] = COMMITTING; pclock++; pdec[j] = pclock :: else fi }
}

/* _finish_one for a decided job j (recovery's, and the driver's `_settle_after`): the copy,
   P's recovery of it (its branches committed, then its apply), then the link done; fin = 1
   once it is */
inline carry_one(j) {
  fin = 0;
  copy_one(j);
  CRASH;
  held[j] = 0;                               /* phase 2 in P: its branches commit */
  CRASH;
  apply_upto(j, 0);
  CRASH;
  if :: ok -> link[j] = DONE; fin = 1 :: else fi
}

/* the pending decision taken before j's, if any, as another session sees it: committed
   (`links.decided_before`) */
#define EARLIER(j) (link[OTHER(j)] == PENDING && cvis[OTHER(j)] && cdec[OTHER(j)] < cdec[j])

/* C's finish of job j, after its branches committed: its apply. A decided job stamped
   earlier on the table and not applied yet comes first (`check_apply_order`, which sees
   committed decisions only): the driver's finish applies it first (`helps`), recovery's
   leaves j waiting. ok = 0 when j is not applied. */
inline c_apply(j, helps) {
  d_step {
    ok = 1;
    if
    :: !capp[j] && cvis[OTHER(j)] && !capp[OTHER(j)] && cdec[OTHER(j)] < cdec[j] ->
         if :: helps -> capp[OTHER(j)] = 1; lastC = OTHER(j) :: else -> ok = 0 fi
    :: else
    fi;
    if :: ok && !capp[j] -> capp[j] = 1; lastC = j :: else fi
  }
}

/* C's own recovery (`resolve_in_doubt` on C): its decided jobs finished in decision order */
inline c_recover() {
  atomic { k = (cvis[0] && (!cvis[1] || cdec[0] < cdec[1]) -> 0 : 1) };
  if :: cvis[k] -> c_apply(k, 0) :: else fi;
  CRASH;
  if :: cvis[OTHER(k)] -> c_apply(OTHER(k), 0) :: else fi;
  CRASH
}

/* _carry: the pending decision taken before j's copied first (carried whole, and j left
   while it is not final, in the old code), then j carried */
inline carry(j) {
  atomic { take = EARLIER(j) };
  CRASH;
#ifndef MUTANT_SETTLE_APPLIES
  if :: take -> copy_one(OTHER(j)); CRASH :: else fi;
  carry_one(j)
#else
  fin = 1;
  if :: take -> carry_one(OTHER(j)); CRASH :: else fi;
  if :: fin -> carry_one(j) :: else fi
#endif
}

/* The driver of T(i), from its decision (copy_decisions, commit_all). */
proctype D(bit i) {
  bit take, ok, fin;
  CRASH;
  /* the decision in C: the order lock and the stamp, ... */
#ifndef MUTANT_NO_ORDER_LOCK
  atomic { olock == 0 -> olock = i + 1; cj[i] = COMMITTING; cclock++; cdec[i] = cclock };
#else
  atomic { cj[i] = COMMITTING; cclock++; cdec[i] = cclock };
#endif
  /* ... a crash before the COMMIT rolls it back (the server ends the session) ... */
  if
  :: !final_phase ->
       atomic { cj[i] = RUNNING; cdec[i] = 0; if :: olock == i + 1 -> olock = 0 :: else fi };
       goto dead
  :: skip
  fi;
  /* ... the COMMIT: seen by every session, the lock released */
  atomic { cvis[i] = 1; if :: olock == i + 1 -> olock = 0 :: else fi };
  CRASH;
#ifndef MUTANT_NO_SETTLE
  atomic { take = EARLIER(i) };              /* _settle_before */
  CRASH;
#ifndef MUTANT_SETTLE_APPLIES
  if :: take -> copy_one(OTHER(i)); CRASH :: else fi;
#else
  fin = 1;
  if :: take -> carry_one(OTHER(i)); CRASH :: else fi;
  if :: !fin -> goto dead :: else fi;        /* CommitError, its own copy not made */
#endif
#endif
  copy_one(i);                               /* its own copy */
  CRASH;
  c_apply(i, 1);                             /* Job.commit in C: its finish */
  CRASH;
  held[i] = 0;                               /* Job.commit in P: phase 2 */
  CRASH;
  apply_upto(i, 1);                          /* its finish (`_finish_in_order`) */
  if :: !ok -> goto dead :: else fi;         /* CommitError: recovery finishes it */
  CRASH;
#ifndef MUTANT_SETTLE_APPLIES
  atomic { take = EARLIER(i) };              /* _settle_after */
  CRASH;
  if :: take -> carry_one(OTHER(i)); CRASH :: else fi;
#endif
  link[i] = DONE;                            /* links.mark_done */
dead:
  take = 0; ok = 0; fin = 0
}

/* recovery from C with P: the pending links, each decided one carried */
proctype RC() {
  bit take, first, j, k, ok, fin;
  byte n;
  c_recover();                               /* the coordinator's own recovery first */
  first = idlow;                             /* links listed: either first (the code lists them in
                                                decision order; MUTANT_ID_ORDER by job id) */
  n = 0;
  do
  :: n == 4 -> break                         /* two passes: the second retries */
  :: else ->
       j = ((n % 2) == 0 -> first : 1 - first);
       CRASH;
       if
       :: link[j] == PENDING && cvis[j] ->   /* its coordinator's state: decided */
#ifndef MUTANT_ID_ORDER
            carry(j)
#else
            carry_one(j)
#endif
       :: link[j] == PENDING && !cvis[j] && final_phase ->
            /* silent and undecided: aborted in C, the abort carried (P's branches back) */
            atomic { cj[j] = ABORTED; pj[j] = ABORTED; held[j] = 0; link[j] = DONE }
       :: else
       fi;
       n++
  od;
dead:
  take = 0; first = 0; j = 0; k = 0; n = 0; ok = 0; fin = 0
}

init {
  atomic {
    cj[0] = RUNNING; cj[1] = RUNNING; pj[0] = RUNNING; pj[1] = RUNNING;
    if :: idlow = 0 :: idlow = 1 fi;
#ifdef PER_BRANCH
    held[1] = 1;                             /* T1's branches prepared in P */
#endif
    run D(0); run D(1); run RC()
  }
  _nr_pr == 1;                               /* everything has stopped */
  final_phase = 1;
  run RC();                                  /* the final recovery from C with P */
  _nr_pr == 1;
  d_step {
    assert(cdec[0] == 0 || (cvis[0] && capp[0] && pj[0] == COMMITTED && link[0] == DONE));
    assert(cdec[1] == 0 || (cvis[1] && capp[1] && pj[1] == COMMITTED && link[1] == DONE));
#ifndef PER_BRANCH
    /* C's table and P's table both hold the rows of the job stamped last */
    if
    :: cdec[0] == 0 && cdec[1] == 0 -> assert(lastP == NONE && lastC == NONE)
    :: cdec[0] > cdec[1] -> assert(lastP == 0 && lastC == 0)
    :: cdec[1] > cdec[0] -> assert(lastP == 1 && lastC == 1)
    :: else -> assert(0)
    fi
#endif
  }
}
