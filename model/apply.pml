/*
 * apply.pml: staged jobs applied into one table, the one-phase transaction step by step.
 *
 * One table T with its first content, reached through two spellings (name 0 and name 1:
 * `t` and `public.t` on PostgreSQL, `t` and `db.t` on MySQL) that the server resolves to one
 * table. Three staged overwrites of T:
 *   - P[0] and P[1]: one-phase jobs (a small frame written by the driver in ONE local
 *     transaction, executor/branch.py write_one_phase -> Journal.commit_in_branch), P[0]
 *     spelling T by name 0, P[1] by name 1;
 *   - Q: a two-phase job spelled as P[1] (not as P[0]), running at the start: its driver D
 *     decides it (Journal.decide_commit), then finishes it (Journal.finish: the apply),
 *     while its heartbeat H beats.
 * The one-phase transaction runs in the code's order, with its lock waits:
 *   lock_apply -> job row INSERT -> lock_apply_order (JobOrderError while an older decided
 *   staged job on the table is unfinished) -> sinkmarks.advance -> winner INSERT -> check
 *   -> apply (DELETE + INSERT) -> DROP the temporary stage -> COMMIT,
 * and after a JobOrderError the driver finishes the blocker (resolve_in_doubt(job=...)) and
 * runs the transaction again under the same job id, up to HELP_ROUNDS times
 * (driver/one_phase.py _written). Any actor may crash between two steps (a crash rolls
 * its open transaction back). Once everything stopped, a fault-free recovery finishes Q.
 *
 * The apply lock and every target_table comparison are keyed by the table's identity as
 * the server resolves it, so both spellings take one lock (KEY below). An overwrite's
 * DELETE reads with its statement's snapshot and then waits on the row locks of another
 * transaction's uncommitted changes: rows that transaction deleted are skipped, rows it
 * inserted are not seen (PostgreSQL at READ COMMITTED). Two overwrites not serialised by
 * the apply lock therefore leave the union of their inputs.
 *
 * -DDIRECT (without -DSINK, where P[1] runs): P[1] is instead a transaction whose held small
 * writes are all appends, loaded DIRECTLY into T (no temporary stage, no apply), in the
 * order of the other staged jobs (executor/one_phase.py write_one_phase ->
 * single_branch.commit_in_branch):
 *   lock_apply (before any row is loaded) -> Load.run: its rows INSERTed into T, uncommitted
 *   (their row locks, as an apply's) -> job row INSERT -> jobtables.record + lock_apply_order
 *   (JobOrderError: rolled back, the blocker finished, the whole transaction run again under
 *   the same job id, as above) -> winner INSERT -> COMMIT (no check, no apply, no DROP):
 *   T keeps its content and gains P[1]'s rows.
 *
 * Asserted at the end: the table holds exactly one job's input (or its first content),
 * never a union (with -DDIRECT, plus P[1]'s appended rows); it is what applying every
 * committed job in decision order gives: the input of the committed job decided last
 * (with -DDIRECT: an overwrite sets the content to its input, an append adds its input)
 * (staged jobs apply in decision order; a one-phase job's decision is its transaction,
 * from its order check on);
 * every answer is true ("written" only by a committed job, "nothing written" only by one
 * that did not commit); with -DSINK a batch is decided once (unless an operator reset the
 * sink in between) and the mark names a committed job. With -DPROGRESS: when nothing
 * crashed, every job is written (or skipped/refused by the sink's mark, as it should be).
 *
 * -DSINK: P[0] and Q (if it is of the sink) write batch B of one sink. The sink has no mark
 * row yet (its first batch) or a mark below B. P[0]'s Job.begin reads the mark and
 * registers the row if there is none (sinkmarks.register); Q's decide_commit registers it
 * too. advance finding no row (reset meanwhile) or the mark at B raises BatchTaken: rolled
 * back, SinkConflictError ("was reset", or "committed by job X"). -DRESET adds an operator's
 * `xasink reset-sink` at any moment (refused while a job of the sink is running or
 * deciding: a one-phase job has no row to see).
 *
 * -DSNAPSHOT: a lock wait may end in failure: every wait, once granted, may instead fail
 * the transaction (rolled back), and `finish` fails when a heartbeat landed between its
 * first read and its UPDATE. This is MariaDB >= 11.6.2 (innodb_snapshot_isolation=ON) at
 * REPEATABLE READ, or PostgreSQL at REPEATABLE READ (40001). xasink's sessions run at READ
 * COMMITTED, where a lock wait ends in proceeding on the latest committed state (the
 * default configurations). Safety must hold either way; the progress check shows the cost.
 *
 * Mutants: -DMUTANT_NAME_KEY (the apply lock and the order check keyed by the spelling),
 * -DMUTANT_NO_ORDER (no lock_apply_order), -DMUTANT_NO_HELP (the retry after JobOrderError
 * without finishing the blocker), -DSINK -DMUTANT_NO_REGISTER (a one-phase job's Job.begin
 * does not register the sink's first mark row), -DSNAPSHOT -DPROGRESS (the cost of a lock
 * wait that fails: the sessions' isolation before READ COMMITTED), -DDIRECT
 * -DMUTANT_DIRECT_UNORDERED (the direct appends loaded without the apply lock and
 * lock_apply_order), -DDIRECT -DMUTANT_DIRECT_LOCK_LATE (the apply lock taken after the
 * rows are loaded: a circular wait with an apply into T).
 */

#define NOBODY 255
#define QJ  2                     /* Q's index (and its driver D's id as a lock holder) */
#define NJ  3
#define FIN 3                     /* the final recovery, as a lock holder */
#ifndef SNAPSHOT
#define HELP_ROUNDS 3             /* driver/phase_two.py */
#else
#define HELP_ROUNDS 1             /* (the same rounds again, each able to fail: kept small) */
#endif

#define J_NONE       0
#define J_RUNNING    1
#define J_COMMITTING 2
#define J_COMMITTED  3
#define J_ABORTED    4

#define A_NONE     0              /* crashed, or an error that claims nothing */
#define A_WRITTEN  1              /* the job is committed (its input is the table's) */
#define A_SKIPPED  2              /* the batch was decided and is in */
#define A_CONFLICT 3              /* SinkConflictError: this job committed nothing */
#define A_FAILED   4              /* "nothing written" / "target unchanged" */

#define M_BELOW 0                 /* the sink's mark: below B (NO_BATCH, or B-1) */
#define M_AT    1                 /* at B */
#define M_NOROW 2                 /* no row: the sink's first batch, or reset */

#define S_INIT 1                  /* the table's first content */
#define S(j) (2 << (j))           /* job j's input */
#ifdef DIRECT
#define APPENDS(j) ((j) == 1)     /* job j appends (P[1], loaded directly) */
#define APPENDED S(1)             /* the only input that may sit beside another's */
#endif

byte job[NJ];                     /* xasink_jobs.state (J_NONE: no row) */
byte answer[NJ];
byte name[NJ];                    /* how job j spells T */
byte alock[2] = NOBODY;           /* the apply lock's holder, per key */
byte tw = NOBODY;                 /* holder of uncommitted changes to T's rows */
byte qrow = NOBODY;               /* holder of Q's job row lock (finish's UPDATE) */
byte mlock = NOBODY;              /* holder of the sink mark's row lock */
byte tbl = S_INIT;                /* T's committed content */
byte beats;                       /* Q's heartbeat count */
byte mark = M_BELOW;
byte mark_job = NOBODY;
bit qsink;                        /* Q writes the sink's batch B (-DSINK) */
byte dseq;                        /* ghost: decision order */
byte dec[NJ];                     /* ghost: when job j was decided */
bit crashed;                      /* ghost: some actor crashed */
bit final_phase;
byte resets;                      /* ghost: reset-sink forgot a mark */

#ifdef MUTANT_NAME_KEY
#define KEY(j) name[j]            /* the old key: the caller's spelling */
#else
#define KEY(j) 0                  /* the table's identity: both names resolve to T */
#endif

#define CRASH  if :: !final_phase -> crashed = 1; goto dead :: skip fi
/* a crash inside a transaction: the session is gone, the transaction rolled back */
#ifndef SNAPSHOT
#define TCRASH(w) if :: !final_phase -> crashed = 1; release(w); goto dead :: skip fi
#else
#define TCRASH(w) skip          /* (a failure after a lock wait rolls it back instead) */
#endif

/* The transaction of `w` ends (COMMIT, or ROLLBACK): its locks go. */
inline release(w) {
  atomic {
    if :: alock[0] == w -> alock[0] = NOBODY :: else fi;
    if :: alock[1] == w -> alock[1] = NOBODY :: else fi;
    if :: tw == w -> tw = NOBODY :: else fi;
    if :: qrow == w -> qrow = NOBODY :: else fi;
    if :: mlock == w -> mlock = NOBODY :: else fi
  }
}

/* Wait for lock `l` and take it (ok = 1). With -DSNAPSHOT a wait, once granted, may fail
 * the transaction instead (ok = 0: error 1020 / 40001, rolled back by the caller). */
inline lockwait(l, w) {
  ok = 1;
  if
  :: atomic { l == NOBODY -> l = w }
#ifdef SNAPSHOT
  :: atomic { l != NOBODY && l != w -> skip };       /* it waits */
     if
     :: atomic { l == NOBODY -> l = w }
     :: atomic { l == NOBODY -> ok = 0 }
     fi
#endif
  fi
}

/* Journal.finish of Q by `w` (its driver, a one-phase job's resolve_in_doubt, the final
 * recovery): fr = 1 finished by this call, 0 found it finished or ended, 2 failed (rolled
 * back: Q stays committing). */
inline finish_q(w) {
  b0 = beats;                                        /* stored_plan: a plain read of the row */
  TCRASH(w);
  lockwait(alock[KEY(QJ)], w);                       /* lock_apply */
  if
  :: ok ->
       TCRASH(w);
       atomic {                                      /* _end: the conditional UPDATE */
         qrow == NOBODY;
#ifdef SNAPSHOT
         if :: beats != b0 -> ok = 0 :: else fi;     /* a beat since the read: 1020 */
#endif
         if
         :: ok && job[QJ] == J_COMMITTING -> qrow = w; fr = 1
         :: ok && job[QJ] != J_COMMITTING -> fr = 0
         :: !ok -> fr = 2
         fi
       }
       if
       :: fr == 1 ->
            TCRASH(w);
            snap = tbl;                              /* check_apply_order, check; the apply's
                                                        DELETE: its statement's snapshot */
            lockwait(tw, w);                         /* ... then the rows' locks */
            if
            :: ok ->
                 nt = (tbl & ~snap) | S(QJ);
                 TCRASH(w);
                 atomic { job[QJ] = J_COMMITTED; tbl = nt; release(w) }  /* markers, COMMIT */
            :: else -> fr = 2; release(w)
            fi
       :: else -> release(w)
       fi
  :: else -> fr = 2; release(w)
  fi
}

/* Q's driver: decide, then (phase 2, xasink.pml's) finish. */
proctype D() {
  byte b0, snap, nt, fr, st;
  bit ok;
  CRASH;
#ifdef SINK
  if
  :: qsink ->                                        /* decide_commit: register (autocommit) */
       atomic { if :: mark == M_NOROW -> mark = M_BELOW :: else fi };
       CRASH;
       lockwait(mlock, QJ);                          /* advance's SELECT ... FOR UPDATE */
       if :: !ok -> goto undecided :: else fi
  :: else
  fi;
#endif
  atomic {                                           /* the decision's transaction */
    if
    :: !qsink || mark == M_BELOW ->
         if :: qsink -> mark = M_AT; mark_job = QJ :: else fi;
         job[QJ] = J_COMMITTING; dseq++; dec[QJ] = dseq; st = 1
    :: else -> st = 2                                /* BatchTaken: rolled back */
    fi;
    release(QJ)
  }
  if
  :: st == 2 ->
       CRASH;
       atomic { if :: job[QJ] == J_RUNNING -> job[QJ] = J_ABORTED :: else fi };  /* Job.abort */
       answer[QJ] = A_CONFLICT;
       goto dead
  :: else
  fi;
  CRASH;
  finish_q(QJ);                                      /* phase_two._finish */
  if
  :: fr == 2 -> answer[QJ] = A_NONE                  /* CommitError: run xasink recover */
  :: else ->
       CRASH;
       if
       :: job[QJ] == J_COMMITTED -> answer[QJ] = A_WRITTEN
       :: else -> answer[QJ] = A_NONE
       fi
  fi;
  goto dead;
#ifdef SINK
undecided:                                           /* the decision failed, rolled back */
  release(QJ);
  CRASH;
  atomic { if :: job[QJ] == J_RUNNING -> job[QJ] = J_ABORTED :: else fi };
  answer[QJ] = A_FAILED;
#endif
dead:
  skip
}

/* Q's heartbeat (Journal.heartbeat): its UPDATE waits on the row's lock. */
proctype H() {
  do
  :: atomic { (beats < 1 && qrow == NOBODY
               && (job[QJ] == J_RUNNING || job[QJ] == J_COMMITTING)) -> beats++ }
  :: break
  od
}

/* A one-phase staged overwrite: Job.begin, then write_one_phase's transaction, retried
 * under the same job id after JobOrderError. With -DDIRECT, P[1] is a transaction of
 * appends loaded directly into T, in that same transaction and with those same retries. */
proctype P(byte me) {
  byte seen, tries, b0, snap, nt, fr, ret;
  bit ok, blocked;
#ifdef SINK
  if
  :: me == 0 ->
       seen = mark;                                  /* Job.begin: the mark's read */
       if
       :: seen == M_AT ->                            /* a replay: finish its job, skip if in */
            CRASH;
            ret = 1; goto resolve;
back1:
            CRASH;
            if
            :: job[QJ] == J_COMMITTED -> answer[me] = A_SKIPPED
            :: else -> answer[me] = A_NONE
            fi;
            goto dead
       :: else
       fi;
       CRASH;
       if                                            /* sinkmarks.register: no row yet */
#ifndef MUTANT_NO_REGISTER
       :: seen == M_NOROW ->
            atomic { if :: mark == M_NOROW -> mark = M_BELOW :: else fi };
            CRASH
#endif
       :: else
       fi
  :: else
  fi;
#endif
again:
#ifndef DIRECT
  lockwait(alock[KEY(me)], me);                      /* applying.lock_apply */
  if :: !ok -> goto failed :: else fi;
  TCRASH(me);
#else
  if
  :: me == 1 ->                                      /* a direct append (-DDIRECT):
                                                        write_one_phase, commit_in_branch */
#if !defined(MUTANT_DIRECT_UNORDERED) && !defined(MUTANT_DIRECT_LOCK_LATE)
       lockwait(alock[KEY(me)], me);                 /* applying.lock_apply: before any row */
       if :: !ok -> goto failed :: else fi;
       TCRASH(me);
#endif
       lockwait(tw, me);                             /* Load.run: its rows INSERTed into T
                                                        itself, uncommitted */
       if :: !ok -> goto failed :: else fi;
       TCRASH(me);
#ifdef MUTANT_DIRECT_LOCK_LATE
       lockwait(alock[KEY(me)], me);                 /* applying.lock_apply, only now */
       if :: !ok -> goto failed :: else fi;
       TCRASH(me)
#endif
  :: else ->
       lockwait(alock[KEY(me)], me);                 /* applying.lock_apply */
       if :: !ok -> goto failed :: else fi;
       TCRASH(me)
  fi;
#endif
  /* the job row INSERT, born committed (its key lock: waited on only by a fence, which is
     sink.pml's), then jobtables.record and lock_apply_order: a FOR UPDATE read of the
     table's decided jobs (the same for a direct append) */
  lockwait(qrow, me);
  if :: !ok -> goto failed :: else fi;
  atomic {
#ifndef MUTANT_NO_ORDER
    if
#ifdef MUTANT_DIRECT_UNORDERED
    :: me == 1 -> blocked = 0; dseq++; dec[me] = dseq   /* no lock_apply_order */
    :: me != 1 && job[QJ] == J_COMMITTING && KEY(QJ) == KEY(me) -> blocked = 1
#else
    :: job[QJ] == J_COMMITTING && KEY(QJ) == KEY(me) -> blocked = 1
#endif
    :: else -> blocked = 0; dseq++; dec[me] = dseq
    fi;
#else
    blocked = 0; dseq++; dec[me] = dseq;
#endif
    qrow = NOBODY
  }
  if
  :: blocked ->                                      /* JobOrderError: rolled back */
       release(me);
       if
       :: tries == HELP_ROUNDS -> answer[me] = A_FAILED; goto dead  /* CommitError */
       :: else
       fi;
       CRASH;
#ifndef MUTANT_NO_HELP
       ret = 2; goto resolve;                        /* resolve_in_doubt(job=blocker) */
#endif
back2:
       tries++;
       goto again
  :: else
  fi;
  TCRASH(me);
#ifdef SINK
  if
  :: me == 0 ->
       lockwait(mlock, me);                          /* sinkmarks.advance: FOR UPDATE */
       if :: !ok -> goto failed :: else fi;
       if
       :: mark != M_BELOW ->                         /* at B, or no row: BatchTaken */
            release(me);
            CRASH;
            answer[me] = A_CONFLICT;                 /* conflict_at_decision */
            goto dead
       :: else
       fi;
       TCRASH(me)
  :: else
  fi;
#endif
#ifdef DIRECT
  if
  :: me == 1 ->                                      /* the direct append: the winner
                                                        INSERT (no check, no apply, no stage
                                                        to DROP); COMMIT (write_one_phase):
                                                        T keeps its content and gains the
                                                        appended rows */
       atomic { job[me] = J_COMMITTED; tbl = tbl | S(me); release(me) }
       CRASH;
       answer[me] = A_WRITTEN;
       goto dead
  :: else
  fi;
#endif
  snap = tbl;                                        /* winner INSERT, check; the apply's
                                                        DELETE: its statement's snapshot */
  lockwait(tw, me);                                  /* ... then the rows' locks */
  if :: !ok -> goto failed :: else fi;
  nt = (tbl & ~snap) | S(me);
  TCRASH(me);
  atomic {                                           /* DROP the stage; COMMIT */
    job[me] = J_COMMITTED; tbl = nt;
#ifdef SINK
    if :: mlock == me -> mark = M_AT; mark_job = me :: else fi;
#endif
    release(me)
  }
  CRASH;
  answer[me] = A_WRITTEN;
  goto dead;
failed:                                              /* rolled back: WriteError */
  release(me);
  answer[me] = A_FAILED;
  goto dead;
resolve:
  finish_q(me);
#ifdef SINK
  if :: ret == 1 -> goto back1 :: else fi;
#endif
  goto back2;
dead:
  skip
}

#ifdef RESET
/* `xasink reset-sink` (sinkmarks.reset), at any moment or not at all. */
proctype O() {
  if
  :: atomic {
       mlock == NOBODY;                              /* the mark's SELECT ... FOR UPDATE */
       if
       :: mark != M_NOROW && !(qsink && (job[QJ] == J_RUNNING || job[QJ] == J_COMMITTING)) ->
            mark = M_NOROW; mark_job = NOBODY; resets++
       :: else                                       /* refused, or nothing to forget */
       fi
     }
  :: skip
  fi
}
#endif

init {
  byte j, b0, snap, nt, fr, last, committed;
#ifdef DIRECT
  byte d, want;
#endif
  bit ok;
  atomic {
    name[0] = 0; name[1] = 1;
    name[QJ] = 1;                                    /* Q spelled as P[1], not as P[0] */
    job[QJ] = J_RUNNING;
#ifdef SINK
    if :: qsink = 1 :: qsink = 0 fi;
    if :: mark = M_NOROW :: mark = M_BELOW fi;       /* the sink's first batch, or not */
#endif
    run P(0);
#ifndef SINK
    run P(1);                                        /* (-DSINK: the sink's own races) */
#endif
    run D(); run H();
#ifdef RESET
    run O();
#endif
  }
  (_nr_pr == 1);
  final_phase = 1;
  /* the final recovery: a decided job is finished, a running one aborted */
  if
  :: job[QJ] == J_COMMITTING -> finish_q(FIN); assert(fr == 1)
  :: job[QJ] == J_RUNNING -> job[QJ] = J_ABORTED
  :: else
  fi;
  /* never a union: the table holds one job's input, or its first content */
#ifndef DIRECT
  assert(tbl == S_INIT || tbl == S(0) || tbl == S(1) || tbl == S(QJ));
#else
  /* (plus P[1]'s appended rows, if any: only an append adds to what is there) */
  assert((tbl & ~APPENDED) == S_INIT || (tbl & ~APPENDED) == S(0)
         || (tbl & ~APPENDED) == S(QJ));
#endif
  /* in decision order: the input of the committed job decided last */
  last = NOBODY; j = 0;
  do
  :: j < NJ ->
       if
       :: job[j] == J_COMMITTED && (last == NOBODY || dec[j] > dec[last]) -> last = j
       :: else
       fi;
       /* honest answers */
       assert(answer[j] != A_WRITTEN || job[j] == J_COMMITTED);
       assert(answer[j] != A_FAILED || job[j] != J_COMMITTED);
       assert(answer[j] != A_CONFLICT || job[j] != J_COMMITTED);
       assert(job[j] != J_RUNNING && job[j] != J_COMMITTING);
       j++
  :: else -> break
  od;
#ifndef DIRECT
  assert((last == NOBODY && tbl == S_INIT) || (last != NOBODY && tbl == S(last)));
#else
  /* every committed job applied in decision order: an overwrite sets T's content to its
     input, an append adds its input to what is there */
  want = S_INIT; d = 1;
  d_step {
    do
    :: d <= dseq ->
         j = 0;
         do
         :: j < NJ ->
              if
              :: job[j] == J_COMMITTED && dec[j] == d ->
                   if :: APPENDS(j) -> want = want | S(j) :: else -> want = S(j) fi
              :: else
              fi;
              j++
         :: else -> break
         od;
         d++
    :: else -> break
    od
  };
  assert(tbl == want);
#endif
  assert(answer[0] != A_SKIPPED || job[QJ] == J_COMMITTED);
#ifdef SINK
  /* batch B decided once (unless an operator reset the sink between); the mark names it */
  committed = (job[0] == J_COMMITTED) + (qsink && job[QJ] == J_COMMITTED);
  assert(committed <= 1 + resets);
  assert(mark != M_AT || job[mark_job] == J_COMMITTED);
  assert(resets > 0 || committed == 0 || mark == M_AT);
#endif
#ifdef PROGRESS
  /* nothing crashed: every job is written, or skipped or refused by the sink's mark */
  if
  :: !crashed ->
       assert(answer[0] == A_WRITTEN || answer[0] == A_SKIPPED || answer[0] == A_CONFLICT);
       /* refused by the mark only when another job took B, or the sink was reset */
       assert(answer[0] != A_CONFLICT || resets > 0 || (qsink && job[QJ] == J_COMMITTED));
#ifndef SINK
       assert(answer[1] == A_WRITTEN);
#endif
       assert(answer[QJ] == A_WRITTEN || answer[QJ] == A_CONFLICT)
  :: else
  fi;
#endif
dead:
  skip
}
