/*
 * decisions.pml: two transactions of one coordinator C that stage into one table of one
 * participant P (upsert or overwrite: the table ends with the rows of the last one applied).
 *
 * Each transaction T0, T1 has enlisted P (its job row running in C and in P, C's link to P
 * pending). Its driver D(i) then:
 *   1. decides in C (its job running -> committing, C's decision clock stamps decided_at);
 *   2. carries every earlier decision of C still pending in P, oldest first
 *      (`driver/participants.py` `_settle_before` -> `protocol/participants.py` `finish(...,
 *      before=J)`), and fails (CommitError, its own copy not made) if one of them fails;
 *   3. copies its own decision into P, applies it there and marks its link done
 *      (`copy_decisions`, `commit_all`).
 * A recovery from C with P (RC: `xasink recover --url C --participant P`) runs concurrently,
 * and once everything has stopped a fault-free one finishes what is left: it lists the pending
 * links and, for each decided job J, first carries every pending decision decided before J
 * (`_carry`), then J.
 *
 * Carrying a decided job J to P (`_finish_one`): P's row of J running -> committing, stamped
 * with P's own clock (the copy order); then P's recovery of J applies it, and P's own order
 * check (`check_apply_order`, verified in apply.pml) applies every job committing in P with
 * an earlier P stamp first; then C's link of J done. Every actor may crash between any two
 * steps; a crashed carrier leaves its work to the next.
 *
 * Asserted at the end: every decided job is committed in P, and P's table holds the rows of
 * the job decided last in C (C's own table does: its applies run in decision order).
 *
 * Mutants (model/check.sh):
 *   -DMUTANT_ID_ORDER   recovery carries the pending links in job-id order, none first
 *                       (review 4, R1: `ORDER BY job_id`);
 *   -DMUTANT_NO_SETTLE  the driver copies its own decision without carrying earlier ones.
 */

#define RUNNING    1
#define COMMITTING 2
#define COMMITTED  3
#define PENDING 0
#define DONE    1
#define NONE 2                     /* no job's rows in P's table yet */
#define OTHER(i) (1 - (i))

byte cj[2];                        /* C's job rows: RUNNING, or COMMITTING once decided */
byte cdec[2];                      /* C's decided_at (0: not decided) */
byte cclock;
byte pj[2];                        /* P's job rows */
byte pdec[2];                      /* P's decided_at: the copy's stamp */
byte pclock;
bit link[2];                       /* C's link of each job to P */
byte lastP = NONE;                 /* whose rows P's table holds */
bit idlow;                         /* which of the two job ids sorts first */
bit final_phase;

#define CRASH if :: !final_phase -> goto dead :: skip fi

/* P's recovery of job j: every job committing in P with a stamp up to j's, oldest first */
inline apply_upto(j) {
  d_step {
    if
    :: pj[j] == COMMITTING ->
         if
         :: pj[OTHER(j)] == COMMITTING && pdec[OTHER(j)] < pdec[j] ->
              pj[OTHER(j)] = COMMITTED; lastP = OTHER(j)
         :: else
         fi;
         pj[j] = COMMITTED; lastP = j
    :: else
    fi
  }
}

/* _finish_one for a decided job j: the copy, P's recovery of it, then the link done */
inline carry_one(j) {
  atomic { if :: pj[j] == RUNNING -> pj[j] = COMMITTING; pclock++; pdec[j] = pclock :: else fi };
  CRASH;
  apply_upto(j);
  CRASH;
  link[j] = DONE
}

/* _carry: the pending decisions taken before j's, then j's */
inline carry(j) {
  atomic { take = (link[OTHER(j)] == PENDING && cdec[OTHER(j)] != 0 && cdec[OTHER(j)] < cdec[j]) };
  CRASH;
  if :: take -> carry_one(OTHER(j)); CRASH :: else fi;
  carry_one(j)
}

proctype D(bit i) {
  bit take;
  CRASH;
  atomic { cj[i] = COMMITTING; cclock++; cdec[i] = cclock };   /* the decision in C */
  CRASH;
#ifndef MUTANT_NO_SETTLE
  carry(i);
#else
  carry_one(i);
#endif
dead:
  take = 0
}

/* recovery from C with P: the pending links, each decided one carried */
proctype RC() {
  bit take, first, j;
  byte n;
  first = idlow;                             /* links listed; the first, by job id */
  n = 0;
  do
  :: n == 2 -> break
  :: else ->
       j = (n == 0 -> first : 1 - first);
       CRASH;
       if
       :: link[j] == PENDING && cdec[j] != 0 ->   /* its coordinator's state: decided */
#ifndef MUTANT_ID_ORDER
            carry(j)
#else
            carry_one(j)
#endif
       :: else
       fi;
       n++
  od;
dead:
  take = 0; first = 0; j = 0; n = 0
}

init {
  atomic {
    cj[0] = RUNNING; cj[1] = RUNNING; pj[0] = RUNNING; pj[1] = RUNNING;
    if :: idlow = 0 :: idlow = 1 fi;
    run D(0); run D(1); run RC()
  }
  _nr_pr == 1;                               /* everything has stopped */
  final_phase = 1;
  run RC();                                  /* the final recovery from C with P */
  _nr_pr == 1;
  d_step {
    assert(cdec[0] == 0 || pj[0] == COMMITTED);
    assert(cdec[1] == 0 || pj[1] == COMMITTED);
    /* P's table holds the rows of the job decided last */
    if
    :: cdec[0] == 0 && cdec[1] == 0 -> assert(lastP == NONE)
    :: cdec[0] > cdec[1] -> assert(lastP == 0)
    :: cdec[1] > cdec[0] -> assert(lastP == 1)
    :: else -> assert(0)
    fi
  }
}
