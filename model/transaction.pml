/*
 * transaction.pml: xasink.transaction, one job writing two tables of one database.
 *
 * Two tables A and B of one database, each with its first content. Jobs:
 *   - X: a transaction (spark/transaction.py, driver/transaction.py) writing A, then B. Its
 *     row is born RUNNING with target_table A and the plan of its first write (begin_job);
 *     its second write grows the plan by B (Journal.store_plan, conditional on RUNNING)
 *     before B's staging table exists; leaving the block decides once for every write's
 *     branches, commits them (phase 2: xasink.pml's), then finishes the job. Its block may
 *     also raise before the decision (Job.running aborts);
 *   - Q: a staged write_xa overwrite of B, running at the start, decided and finished by
 *     its driver (-DNO_Q: absent);
 *   - P (-DONE_PHASE): a one-phase staged overwrite of B (write_one_phase ->
 *     Journal.commit_in_branch), decided by its own transaction (apply.pml has its steps);
 *   - Y (-DTWO_TX): a second transaction, writing B, then A (target_table B).
 * A recovery run R resolves the open jobs concurrently: a running job it may abort (its
 * heartbeat looked older than the grace, the driver alive or not), a decided one it finishes.
 *
 * Journal.finish (by a driver, by a driver finishing a blocker first, by R) is one local
 * transaction, step by step with its lock waits: the plan's plain read (stored_plan), the
 * apply lock of every table of the plan in sorted key order (lock_apply), the conditional
 * COMMITTING -> COMMITTED (_end: waits on the row's lock), the order check over every table
 * of the plan (check_apply_order: JobOrderError while an older decided job sharing a table
 * is unfinished), the apply of every table (apply_all), the markers' DELETE, COMMIT. After
 * JobOrderError a driver finishes the blocker (resolve_in_doubt(job=...)) and tries again,
 * up to HELP_ROUNDS times (phase_two._finish_in_order); R leaves the job.
 *
 * An apply's statements take no lock that someone else could hold: every apply into a table
 * holds its apply lock first (apply.pml checks that lock and the statements' row locks),
 * and the staging tables are the job's own. So they are one step with the COMMIT; a crash
 * before it rolls the whole transaction back.
 *
 * Any actor may crash between two steps (a crash rolls its open transaction back). Once
 * everything stopped, a fault-free recovery resolves every job. Asserted:
 *   - visibility, at every state (process V): a reader sees a transaction's apply of A
 *     exactly when it sees its apply of B;
 *   - all or nothing, exactly once: a committed job's every table applied once (asserted at
 *     each apply's COMMIT), an uncommitted job's none; a committed transaction, both tables;
 *   - decision order, per table: the table holds the input of the committed job that was
 *     decided last among those writing it (P's decision is its order check);
 *   - no circular lock wait (spin's invalid end states);
 *   - honest answers; with -DPROGRESS, when nothing crashed and no live job was aborted by
 *     recovery (nor by its block's own error), every job is written.
 *
 * Mutants: -DMUTANT_TWO_APPLIES (a transaction's tables applied in two local transactions,
 * a COMMIT between them), -DMUTANT_FIRST_TABLE_ORDER (the order checks see another job only
 * through its row's target_table, its first table, not through every table of its plan),
 * -DTWO_TX -DMUTANT_PLAN_ORDER_LOCKS (a job's apply locks taken in its plan's order, not
 * sorted: X and Y wait on each other in a circle, an invalid end state).
 * model/check.sh lists the configurations that `make model` verifies.
 */

#define NOBODY 255
#define TA 0                      /* table A (X's first write, its row's target_table) */
#define TB 1                      /* table B */
#define NT 2
#define BIT(t) (1 << (t))
#define BOTH 3                    /* BIT(TA) | BIT(TB) */

#define X   0                     /* the transaction's job (and its driver, as a lock holder) */
#define Q   1                     /* a write_xa staged overwrite of B */
#define P   2                     /* -DONE_PHASE: a one-phase staged overwrite of B */
#define Y   3                     /* -DTWO_TX: a second transaction, writing B, then A */
#define NJ  4
#define RR  4                     /* the concurrent recovery run, as a lock holder */
#define FIN 5                     /* the final recovery, as a lock holder */
#define TX(j) ((j) == X || (j) == Y)
#define HELP_ROUNDS 3             /* driver/phase_two.py, driver/one_phase.py */

#define J_NONE       0
#define J_RUNNING    1
#define J_COMMITTING 2
#define J_COMMITTED  3
#define J_ABORTED    4

#define A_NONE    0               /* crashed, or an error that claims nothing (CommitError) */
#define A_WRITTEN 1               /* the job is committed and applied */
#define A_FAILED  2               /* "nothing committed" (JobAbortedError, a write failed) */

#define S_INIT 1                  /* a table's first content */
#define S(j) (2 << (j))           /* job j's input */

byte job[NJ];                     /* xasink_jobs.state (J_NONE: no row) */
byte first[NJ];                   /* xasink_jobs.target_table: the job's first table */
byte second[NJ];                  /* a transaction's second table */
byte ptabs[NJ];                   /* the tables of xasink_jobs.apply_plan */
byte answer[NJ];
byte alock[NT] = NOBODY;          /* the apply lock's holder, per table */
byte rlock[NJ] = NOBODY;          /* holder of job j's row lock (finish's UPDATE) */
byte tbl[NT] = S_INIT;            /* each table's committed content */
byte seen[NJ];                    /* ghost: the tables whose apply by job j is committed */
byte jobs;                        /* the jobs with a row recovery can meet open (not P) */
byte dseq;                        /* ghost: decision order */
byte dec[NJ];                     /* ghost: when job j was decided */
bit crashed;                      /* ghost: some actor crashed */
bit aborted;                      /* ghost: a live job aborted (recovery, or its block) */
bit final_phase;

/* The tables by which an order check finds another job's row: its target_table, or every
   table of a plan holding several writes (SEVERAL_WRITES, then _raise_first_sharing). */
#ifdef MUTANT_FIRST_TABLE_ORDER
#define ROWTABS(k) BIT(first[k])
#else
#define ROWTABS(k) ptabs[k]
#endif

#define CRASH  if :: !final_phase -> crashed = 1; goto dead :: skip fi
/* a crash inside a transaction: the session is gone, the transaction rolled back */
#define TCRASH(w) if :: !final_phase -> crashed = 1; release(w); goto dead :: skip fi

/* The transaction of `w` ends (COMMIT, or ROLLBACK): its locks go. */
inline release(w) {
  d_step {
    if :: alock[TA] == w -> alock[TA] = NOBODY :: else fi;
    if :: alock[TB] == w -> alock[TB] = NOBODY :: else fi;
    if :: rlock[X] == w -> rlock[X] = NOBODY :: else fi;
    if :: rlock[Q] == w -> rlock[Q] = NOBODY :: else fi;
    if :: rlock[Y] == w -> rlock[Y] = NOBODY :: else fi
  }
}

/* Wait for table t's apply lock and take it. */
#define LOCK(t, w) atomic { alock[t] == NOBODY -> alock[t] = w }

/* applying.lock_apply for job j's plan: the apply lock of every table, in sorted key order
   (A before B). */
inline lock_apply(j, tabs, w) {
#ifndef MUTANT_PLAN_ORDER_LOCKS
  if :: (tabs) & BIT(TA) -> LOCK(TA, w); TCRASH(w) :: else fi;
  if :: (tabs) & BIT(TB) -> LOCK(TB, w); TCRASH(w) :: else fi
#else
  LOCK(first[j], w); TCRASH(w);                      /* in the plan's order */
  if :: (tabs) == BOTH -> LOCK(second[j], w); TCRASH(w) :: else fi
#endif
}

#define SHARES(k, j, tabs, before) \
  (k != j && job[k] == J_COMMITTING && (ROWTABS(k) & (tabs)) && (!(before) || dec[k] < dec[j]))

/* blk = the oldest decided job other than j whose row shares a table with `tabs` (NOBODY:
   none); `before`: only those decided before j (check_apply_order), else all of them
   (lock_apply_order, for a job decided by its own transaction). */
inline first_sharing(j, tabs, before) {
  blk = NOBODY; k = 0;
  do
  :: k < NJ ->
       if
       :: SHARES(k, j, tabs, before) && (blk == NOBODY || dec[k] < dec[blk]) -> blk = k
       :: else
       fi;
       k++
  :: else -> break
  od;
  k = 0
}

/* The COMMIT of job j's apply of the tables `tabs` (the markers' DELETE before it). */
inline applied(j, tabs) {
  assert((seen[j] & (tabs)) == 0);                   /* exactly once */
  if :: (tabs) & BIT(TA) -> tbl[TA] = S(j) :: else fi;
  if :: (tabs) & BIT(TB) -> tbl[TB] = S(j) :: else fi;
  seen[j] = seen[j] | (tabs)
}

/* Journal.finish of job j by `w`: fr = 1 finished by this call, 0 found it not committing
   (finished or ended elsewhere), 3 JobOrderError (rolled back; blk is the blocker). */
inline finish_job(j, w) {
  pl = ptabs[j];                                     /* applying.stored_plan */
  CRASH;
  lock_apply(j, pl, w);                              /* applying.lock_apply */
  atomic {                                           /* Journal._end */
    rlock[j] == NOBODY;
    if
    :: job[j] == J_COMMITTING -> rlock[j] = w; fr = 1
    :: else -> fr = 0
    fi
  }
  if
  :: fr == 1 ->
       TCRASH(w);
       d_step { first_sharing(j, pl, 1) };          /* applying.check_apply_order */
       if
       :: blk != NOBODY -> fr = 3; release(w)        /* JobOrderError: rolled back */
       :: else ->
            TCRASH(w);                               /* check, apply_all (uncommitted) */
#ifndef MUTANT_TWO_APPLIES
            atomic { applied(j, pl); job[j] = J_COMMITTED; release(w) }  /* markers, COMMIT */
#else
            if
            :: pl == BOTH ->                         /* its first table committed alone */
                 atomic { applied(j, BIT(first[j])); job[j] = J_COMMITTED; release(w) };
                 CRASH;
                 LOCK(second[j], w);
                 TCRASH(w);
                 atomic { applied(j, BIT(second[j])); release(w) }
            :: else -> atomic { applied(j, pl); job[j] = J_COMMITTED; release(w) }
            fi
#endif
       fi
  :: else -> release(w)
  fi
}

/* _Resolver.resolve of job j by `w`: the row read; a running job aborted if silent (always,
   in the final run: everything stopped), and the row read again if that abort failed (a
   decision since the read); a decided job finished (JobOrderError: left). */
inline resolve(j, w) {
  st = job[j];                                       /* JournalReader.job */
  CRASH;
  if
  :: st == J_RUNNING ->
       if
       :: atomic {                                   /* Journal.abort(beats=...) */
            if
            :: job[j] == J_RUNNING -> job[j] = J_ABORTED; aborted = !final_phase; st = J_ABORTED
            :: else
            fi
          };
          if :: st == J_RUNNING -> st = job[j] :: else fi  /* failed: the row again */
       :: !final_phase -> st = J_NONE                /* alive: left alone */
       fi
  :: else
  fi;
  if
  :: st == J_COMMITTING -> finish_job(j, w)          /* _roll_forward, _finish */
  :: else
  fi
}

/* A driver: a transaction's block (its two writes) or Q's write_xa; one decision; phase 2;
   finish. */
proctype D(byte me) {
  byte pl, fr, blk, k, hb, st, tries;
  CRASH;                                             /* the (first) write's branches prepare */
  if
  :: TX(me) ->
       if
       :: atomic {                                   /* the block raises: Job.running aborts */
            if :: job[me] == J_RUNNING -> job[me] = J_ABORTED; aborted = 1 :: else fi
          };
          answer[me] = A_FAILED; goto dead
       :: skip
       fi;
       atomic {                                      /* add_write: Journal.store_plan */
         if
         :: job[me] == J_RUNNING -> ptabs[me] = BOTH; st = 1
         :: else -> st = 0
         fi
       };
       if :: !st -> answer[me] = A_FAILED; goto dead :: else fi;  /* JobAbortedError */
       CRASH                                         /* B's stage; its branches prepare */
  :: else
  fi;
  atomic {                                           /* Journal.decide_commit */
    if
    :: job[me] == J_RUNNING -> job[me] = J_COMMITTING; dseq++; dec[me] = dseq; st = 1
    :: else -> st = 0                                /* JOB_ENDED: aborted by a recovery */
    fi
  };
  if :: !st -> answer[me] = A_FAILED; goto dead :: else fi;
  CRASH;                                             /* phase 2: every winner committed */
again:
  finish_job(me, me);                                /* phase_two._finish_in_order */
  if
  :: fr == 3 && tries < HELP_ROUNDS ->
       CRASH;
       hb = blk;
       resolve(hb, me);                              /* resolve_in_doubt(job=blocker) */
       tries++;
       goto again
  :: fr == 3 && tries == HELP_ROUNDS -> answer[me] = A_NONE  /* CommitError */
  :: fr == 1 -> CRASH; answer[me] = A_WRITTEN
  :: fr == 0 ->                                      /* phase_two._finish: the state read */
       CRASH;
       if
       :: job[me] == J_COMMITTED -> answer[me] = A_WRITTEN
       :: else -> answer[me] = A_NONE
       fi
  fi;
dead:
  skip
}

/* resolve_in_doubt by `w`: it lists the decided jobs (jobs_in_state(COMMITTING)), resolves
   every other open job first, then the decided ones, oldest decision first. */
inline recover(w) {
  d_step {
    cm = 0; k = 0;
    do
    :: k < NJ -> if :: job[k] == J_COMMITTING -> cm = cm | BIT(k) :: else fi; k++
    :: else -> break
    od;
    k = 0
  };
  n = 0;
  do
  :: n < NJ && (jobs & ~cm & BIT(n)) -> resolve(n, w); n++
  :: n < NJ && !(jobs & ~cm & BIT(n)) -> n++
  :: n == NJ -> break
  od;
  do
  :: cm != 0 ->
       d_step {                                      /* the oldest decision left */
         n = NOBODY; k = 0;
         do
         :: k < NJ ->
              if :: (cm & BIT(k)) && (n == NOBODY || dec[k] < dec[n]) -> n = k :: else fi; k++
         :: else -> break
         od;
         k = 0; cm = cm & ~BIT(n)
       };
       resolve(n, w)
  :: else -> break
  od
}

/* A recovery run (xasink recover, or a write's startup recovery) concurrent with the rest. */
proctype R() {
  byte pl, fr, blk, k, st, cm, n;
  recover(RR);
dead:
  skip
}

#ifdef ONE_PHASE
/* A row a FOR UPDATE read of the decided jobs sharing B waits on (rows of other states or
   tables do not match its WHERE). */
#define ROWFREE(k) (job[k] != J_COMMITTING || !(ROWTABS(k) & BIT(TB)) || rlock[k] == NOBODY)

/* A one-phase staged overwrite of B: write_one_phase's transaction, retried under the same
   job id after JobOrderError. */
proctype P1() {
  byte pl, fr, blk, k, hb, st, tries;
again:
  LOCK(TB, P);                                       /* applying.lock_apply */
  TCRASH(P);
  atomic {                                           /* job row INSERT, lock_apply_order */
    ROWFREE(X) && ROWFREE(Q) && ROWFREE(Y) ->
    first_sharing(P, BIT(TB), 0);
    if :: blk == NOBODY -> dseq++; dec[P] = dseq :: else fi
  };
  if
  :: blk != NOBODY ->                                /* JobOrderError: rolled back */
       release(P);
       if :: tries == HELP_ROUNDS -> answer[P] = A_FAILED; goto dead :: else fi;
       CRASH;
       hb = blk;
       resolve(hb, P);                               /* resolve_in_doubt(job=blocker) */
       tries++;
       goto again
  :: else
  fi;
  TCRASH(P);                                         /* winner row, check, apply */
  atomic { applied(P, BIT(TB)); job[P] = J_COMMITTED; release(P) }  /* DROP stage, COMMIT */
  CRASH;
  answer[P] = A_WRITTEN;
dead:
  skip
}
#endif

/* Visibility, at every state: a transaction's change to A is seen exactly when its change
   to B is. */
#define VISIBLE ((seen[X] == 0 || seen[X] == BOTH) && (seen[Y] == 0 || seen[Y] == BOTH))
proctype V() {
end:
  atomic { !VISIBLE -> assert(VISIBLE) }
}

init {
  byte pl, fr, blk, k, st, cm, n, j, t, last;
  atomic {
    job[X] = J_RUNNING; first[X] = TA; second[X] = TB; ptabs[X] = BIT(TA);  /* begin_job */
    first[Q] = TB; ptabs[Q] = BIT(TB);
    first[P] = TB; ptabs[P] = BIT(TB);               /* P's row is born in its transaction */
    first[Y] = TB; second[Y] = TA; ptabs[Y] = BIT(TB);
    jobs = BIT(X);
    run V(); run D(X); run R();
#ifndef NO_Q
    job[Q] = J_RUNNING; jobs = jobs | BIT(Q); run D(Q);
#endif
#ifdef TWO_TX
    job[Y] = J_RUNNING; jobs = jobs | BIT(Y); run D(Y);
#endif
#ifdef ONE_PHASE
    run P1();
#endif
  }
  (_nr_pr == 2);                                     /* everything but V stopped */
  final_phase = 1;
  recover(FIN);
  j = 0;
  do
  :: j < NJ ->
       assert(job[j] != J_RUNNING && job[j] != J_COMMITTING);
       /* all or nothing: a committed job applied every table of its plan, another none */
       assert((job[j] == J_COMMITTED && seen[j] == ptabs[j]) || (job[j] != J_COMMITTED && seen[j] == 0));
       /* honest answers */
       assert(answer[j] != A_WRITTEN || job[j] == J_COMMITTED);
       assert(answer[j] != A_FAILED || job[j] != J_COMMITTED);
       j++
  :: else -> break
  od;
  /* a transaction: both tables */
  assert((job[X] != J_COMMITTED || ptabs[X] == BOTH) && (job[Y] != J_COMMITTED || ptabs[Y] == BOTH));
  /* decision order, per table: the input of the committed job decided last */
  t = 0;
  do
  :: t < NT ->
       last = NOBODY; j = 0;
       do
       :: j < NJ ->
            if
            :: job[j] == J_COMMITTED && (ptabs[j] & BIT(t)) && (last == NOBODY || dec[j] > dec[last]) ->
                 last = j
            :: else
            fi;
            j++
       :: else -> break
       od;
       assert((last == NOBODY && tbl[t] == S_INIT) || (last != NOBODY && tbl[t] == S(last)));
       t++
  :: else -> break
  od;
#ifdef PROGRESS
  /* nothing crashed and no live job was aborted: every job is written */
  if
  :: !crashed && !aborted ->
       assert(answer[X] == A_WRITTEN);
#ifndef NO_Q
       assert(answer[Q] == A_WRITTEN);
#endif
#ifdef TWO_TX
       assert(answer[Y] == A_WRITTEN);
#endif
#ifdef ONE_PHASE
       assert(answer[P] == A_WRITTEN);
#endif
       skip
  :: else
  fi;
#endif
dead:
  skip
}
